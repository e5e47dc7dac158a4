// recommend: what fits a card and which of it is fastest, on hand-made fixtures
// (tests/data/recommend_*.csv; invented numbers, not measurements). Expected budgets are
// computed here from the definition (reports/common/fit_rule.h): cap = memory - context for "fits", recommended
// ceiling = floor(memory x (1 - margin)) - context for the recommendation.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reports/common/gpus.h"
#include "reports/recommend/recommend.h"
#include "temp_tree.h"

namespace sweep::reports {
namespace {

constexpr int64_t kGiBBytes = int64_t{1} << 30;
constexpr int64_t kMiBBytes = int64_t{1} << 20;

std::string data(const std::string& name) { return std::string(SWEEP_TEST_DATA) + "/" + name; }

// A fresh directory under /tmp, removed at the end of the test.
struct TempDirForTest {
  std::filesystem::path path;
  explicit TempDirForTest(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("sweep_recommend_" + name + "_" + std::to_string(::getpid()))) {
    sweep::remove_tree(path);
    std::filesystem::create_directories(path);
  }
  ~TempDirForTest() { sweep::remove_tree(path); }
};

Recommendation run(std::vector<std::string> files, RecommendOptions o = {}) {
  std::vector<Results> results;
  for (const auto& f : files) results.push_back(read_results(data(f)));
  return recommend(results, o);
}

const GroupRecommendation& group(const Recommendation& r, const std::string& model,
                                 const std::string& seq) {
  for (const auto& g : r.groups)
    if (g.model == model && g.seq == seq) return g;
  throw std::runtime_error("no group " + model + " seq " + seq);
}

TEST(Recommend, TiesGoToLowerPeakThenFewerTechniques) {
  auto r = run({"recommend_ties.csv"});
  // Three bf16-amp batch-16 rows at 41000 tokens/s: the checkpointed one peaks lowest.
  const auto& a = group(r, "gpt2", "512");
  ASSERT_TRUE(a.fastest);
  EXPECT_EQ(a.fastest->checkpointing, Checkpointing::kBlock);
  EXPECT_EQ(a.fastest->peak_reserved_bytes, 6 * kGiBBytes);
  // Same throughput and peak: plain AdamW beats the fused one (one technique fewer).
  const auto& b = group(r, "gpt2", "1024");
  ASSERT_TRUE(b.fastest);
  EXPECT_EQ(b.fastest->optimizer, OptimizerKind::kAdamW);
  EXPECT_EQ(b.fastest->precision, Precision::kBf16Amp);
  EXPECT_FALSE(r.other_card);
}

TEST(Recommend, DefaultTargetIsTheMeasuringCardWithMeasuredContext) {
  auto r = run({"recommend_ties.csv"});
  EXPECT_EQ(r.target.name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(r.target.memory_bytes, 24564 * kMiBBytes);
  // device_used - peak_reserved is 420 MiB in most rows, 300 and 900 MiB in two.
  EXPECT_EQ(r.target.context_bytes, 420 * kMiBBytes);
  EXPECT_EQ(r.target.ceiling_bytes(), 24564 * kMiBBytes * 9 / 10 - 420 * kMiBBytes);
  ASSERT_TRUE(r.target.gpu);
  EXPECT_EQ(r.target.gpu->key, "rtx4090");
}

TEST(Recommend, LargestMicroBatchPerTechniqueFitsTheCap) {
  RecommendOptions o;
  o.memory_gib = 16;
  o.context_gib = 0;
  auto r = run({"recommend_ties.csv"}, o);
  const auto& g = group(r, "gpt2", "512");
  ASSERT_GE(g.max_batch.size(), 2u);
  EXPECT_EQ(g.max_batch[0].precision, Precision::kFp32);
  EXPECT_EQ(g.max_batch[0].batch, 8);  // batch 16 needs 18 GiB > the 16 GiB cap
  for (const auto& c : g.max_batch) EXPECT_LE(c.peak_reserved_bytes, r.target.cap_bytes());
  EXPECT_EQ(g.max_batch[1].precision, Precision::kBf16Amp);
  EXPECT_EQ(g.max_batch[1].batch, 16);
}

TEST(Recommend, PointExactlyAtTheLimitFitsOneByteOverDoesNot) {
  RecommendOptions o;
  o.memory_gib = 10;
  o.margin = 0.25;
  o.context_gib = 0;
  auto r = run({"recommend_margin.csv"}, o);
  ASSERT_EQ(r.target.ceiling_bytes(), 10 * kGiBBytes / 4 * 3);
  const auto& g = group(r, "gpt2-medium", "512");
  ASSERT_TRUE(g.fastest);
  // The faster row peaks one byte above usable; the checkpointed one exactly at it.
  EXPECT_EQ(g.fastest->checkpointing, Checkpointing::kBlock);
  EXPECT_EQ(g.fastest->peak_reserved_bytes, r.target.ceiling_bytes());

  // Two more bytes of memory make 0.75 x memory one byte larger: now the faster one fits.
  o.memory_gib = static_cast<double>(10 * kGiBBytes + 2) / kGiB;
  r = run({"recommend_margin.csv"}, o);
  ASSERT_EQ(r.target.ceiling_bytes(), 10 * kGiBBytes / 4 * 3 + 1);
  const auto& h = group(r, "gpt2-medium", "512");
  ASSERT_TRUE(h.fastest);
  EXPECT_EQ(h.fastest->checkpointing, Checkpointing::kNone);
  EXPECT_EQ(h.fastest->tokens_per_s, 30000);
}

TEST(Recommend, NothingFitsNamesTheClosestChangeAndTheGap) {
  RecommendOptions o;
  o.gpu = "RTX 3060";
  auto r = run({"recommend_nofit.csv"}, o);
  // No device_used in these rows: the CUDA default context applies.
  EXPECT_EQ(r.target.context_bytes, kDefaultCudaContextBytes);
  // The RTX 3060 as CUDA reports it (11.75 GiB, configs/rtx3060.yaml), x 0.9, less 768 MiB.
  const int64_t usable = static_cast<int64_t>(std::floor(11.75 * kGiB * 0.9)) - 768 * kMiBBytes;
  ASSERT_EQ(r.target.ceiling_bytes(), usable);
  const auto& g = group(r, "gpt2-xl", "1024");
  EXPECT_FALSE(g.fastest);
  ASSERT_EQ(g.steps.size(), 5u);  // as measured + four changes (no allocator rows)
  std::vector<int64_t> peaks;
  for (const auto& s : g.steps) peaks.push_back(s.best ? s.best->peak_reserved_bytes : -1);
  EXPECT_EQ(peaks, (std::vector<int64_t>{70 * kGiBBytes, 52 * kGiBBytes, 34 * kGiBBytes,
                                         21 * kGiBBytes, 25 * kGiBBytes / 2}));
  ASSERT_EQ(g.closest_step, 4);
  EXPECT_EQ(g.steps[4].change, "+ lighter optimizer");
  EXPECT_EQ(g.steps[4].best->optimizer, OptimizerKind::kSgd);
  EXPECT_EQ(g.steps[4].best->peak_reserved_bytes - usable, 25 * kGiBBytes / 2 - usable);
  const auto md = recommendations_markdown(r);
  EXPECT_NE(md.find("## Nothing fits: gpt2-xl (seq 1024)"), std::string::npos) << md;
  // Over the cap, 11.75 - 0.75 = 11.00 GiB: 12.5 GiB is 1.50 GiB over.
  EXPECT_NE(md.find("Closest: bf16-amp, block checkpointing, batch 1, sgd (+ lighter optimizer), "
                    "1.50 GiB over"),
            std::string::npos)
      << md;
}

TEST(Recommend, OtherCardIsSaidAndSameCardIsNot) {
  RecommendOptions o;
  o.gpu = "rtx3060";
  auto other = run({"recommend_nofit.csv"}, o);
  EXPECT_TRUE(other.other_card);
  EXPECT_NE(recommendations_markdown(other).find("throughput does not"), std::string::npos);
  o.gpu = "h100-80gb";  // the rows' "NVIDIA H100 80GB HBM3"
  auto same = run({"recommend_nofit.csv"}, o);
  EXPECT_FALSE(same.other_card);
  EXPECT_EQ(recommendations_markdown(same).find("throughput does not"), std::string::npos);
  // By memory: the same card when the size matches what the device reports.
  RecommendOptions m;
  m.memory_gib = 12;
  EXPECT_FALSE(run({"recommend_accum.csv"}, m).other_card);
  m.memory_gib = 10;
  EXPECT_TRUE(run({"recommend_accum.csv"}, m).other_card);
}

TEST(Recommend, EffectiveBatchThroughAccumulation) {
  RecommendOptions o;
  o.effective_batch = 32;
  auto r = run({"recommend_accum.csv"}, o);
  // Usable 10.5 GiB: batch 16 fits (9.5 GiB), so 16 x 2 inferred from it is fastest.
  ASSERT_EQ(r.target.ceiling_bytes(), 12 * kGiBBytes * 9 / 10 - static_cast<int64_t>(0.3 * kGiB));
  const auto& g = group(r, "gpt2", "512");
  ASSERT_TRUE(g.effective);
  EXPECT_EQ(g.effective->batch, 16);
  EXPECT_EQ(g.effective->accumulation, 2);
  EXPECT_TRUE(g.effective->inferred);

  // A 10 GiB card: batch 16 no longer fits; the measured 8 x 4 beats 4 x 8 inferred.
  o.memory_gib = 10;
  r = run({"recommend_accum.csv"}, o);
  const auto& h = group(r, "gpt2", "512");
  ASSERT_TRUE(h.effective);
  EXPECT_EQ(h.effective->batch, 8);
  EXPECT_EQ(h.effective->accumulation, 4);
  EXPECT_FALSE(h.effective->inferred);

  o.effective_batch = 6;  // no fitting micro-batch divides it
  EXPECT_FALSE(group(run({"recommend_accum.csv"}, o), "gpt2", "512").effective);
}

TEST(Recommend, EvalBatchAndTheTrainConfigsEvalCounterpart) {
  auto r = run({"recommend_accum.csv"});
  ASSERT_TRUE(r.has_eval);
  const auto& g = group(r, "gpt2", "512");
  ASSERT_TRUE(g.eval_max_batch);
  EXPECT_EQ(g.eval_max_batch->batch, 64);  // 9 GiB of 10.5; 128 ran out of memory
  ASSERT_TRUE(g.fastest);
  EXPECT_EQ(g.fastest->batch, 16);
  EXPECT_EQ(g.eval_check, "fits");
  ASSERT_TRUE(g.eval_counterpart);
  EXPECT_EQ(g.eval_counterpart->batch, 16);
  EXPECT_EQ(g.eval_counterpart->mode, Mode::kEval);

  RecommendOptions o;
  o.memory_gib = 10;  // cap 9.7 GiB (the 0.3 GiB context): the 9 GiB eval batch 64 fits
  auto s = run({"recommend_accum.csv"}, o);
  EXPECT_EQ(group(s, "gpt2", "512").eval_max_batch->batch, 64);
}

TEST(Recommend, CpuRowsHaveNoContextAllowance) {
  auto r = run({"recommend_cpu.csv"});
  EXPECT_FALSE(r.target.cuda);
  EXPECT_EQ(r.target.context_bytes, 0);
  EXPECT_EQ(r.target.ceiling_bytes(), 16 * kGiBBytes * 9 / 10);  // 15461882265.6, floored
  EXPECT_EQ(group(r, "gpt2", "128").fastest->batch, 4);
}

TEST(Recommend, CpuRowsAreNeverPresentedAsGpuAnswers) {
  auto cpu_note = [](const Recommendation& r) {
    return std::any_of(r.notes.begin(), r.notes.end(),
                       [](const auto& n) { return n.find("measured on the CPU") != std::string::npos; });
  };
  RecommendOptions o;
  o.gpu = "rtx3060";
  EXPECT_TRUE(cpu_note(run({"recommend_cpu.csv"}, o)));
  EXPECT_FALSE(cpu_note(run({"recommend_cpu.csv"})));  // for the CPU itself: nothing to say
}

// recommend_cpu.csv's two rows in a directory of their own with `columns` added after that
// file was written (at the end), the first row's cells `first`, the second's `second`.
std::filesystem::path recommend_cpu_with(const std::string& name, const std::string& columns,
                                         const std::string& first, const std::string& second) {
  std::ifstream in(data("recommend_cpu.csv"));
  std::string header, row1, row2;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("sweep_recommend_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "results.csv") << header << "," << columns << "\n"
                                     << row1 << "," << first << "\n" << row2 << "," << second << "\n";
  return dir;
}

TEST(Recommend, ALoraRowIsNamedAsLoraNotAsFullFineTuning) {
  // recommend_cpu.csv with its fastest row (batch 4) made a LoRA row: adapter and rank are
  // columns added after that file was written, so they go at the end.
  const auto dir = recommend_cpu_with("lora", "adapter,lora_r", "none,", "lora,8");
  const auto r = recommend({read_results((dir / "results.csv").string())}, {});
  // On the CPU the recommendation goes by memory (plain fp32 batch 1); the LoRA row is its
  // own technique's largest batch.
  const auto& max = group(r, "gpt2", "128").max_batch;
  const auto lora = std::find_if(max.begin(), max.end(), [](const Choice& c) { return !c.adapter.empty(); });
  ASSERT_NE(lora, max.end());
  const std::optional<Choice> fastest = *lora;
  EXPECT_EQ(fastest->batch, 4);
  EXPECT_EQ(fastest->adapter, "lora r8");
  EXPECT_NE(fastest->label().find("lora r8"), std::string::npos) << fastest->label();
  EXPECT_EQ(fastest->techniques(), 1);
  sweep::remove_tree(dir);
}

TEST(Recommend, AnSftRowIsAnsweredInSftTrainersWords) {
  // recommend_cpu.csv with its rows run by TRL's SFTTrainer (a column added after that file).
  const auto dir = recommend_cpu_with("sft", "trainer", "sft", "sft");
  const auto r = recommend({read_results((dir / "results.csv").string())}, {});
  const auto& g = group(r, "gpt2", "128");
  ASSERT_TRUE(g.fastest);
  EXPECT_NE(g.fastest->label().find("trainer sft"), std::string::npos) << g.fastest->label();
  const auto md = recommendations_markdown(r);
  EXPECT_NE(md.find("or TRL's `SFTConfig` and `SFTTrainer` where the row ran SFTTrainer"), std::string::npos) << md;
  EXPECT_NE(md.find("args = SFTConfig(\n"), std::string::npos) << md;
  EXPECT_NE(md.find("trainer = SFTTrainer(model=model, args=args, train_dataset=dataset)\n"), std::string::npos) << md;
  sweep::remove_tree(dir);
}

TEST(Recommend, CrossGpuColumnsStartAtTheSmallestMeasuredPeak) {
  RecommendOptions o;
  o.gpu = "rtx3060";
  auto r = run({"recommend_nofit.csv"}, o);
  // The smallest peak is 12.5 GiB: the 11.75 GiB RTX 3060 is left out. The T4 reports
  // 14.56 GiB, the A10 and A10G 21.99 (one column): two columns.
  ASSERT_GE(r.columns.size(), 2u);
  EXPECT_EQ(r.columns[0].rule.memory_bytes, memory_bytes(*find_gpu("t4")));
  EXPECT_EQ(r.columns[0].name, "T4");
  EXPECT_EQ(r.columns[1].rule.memory_bytes, 2199 * kGiBBytes / 100);
  EXPECT_EQ(r.columns[1].name, "A10 / A10G");
  ASSERT_TRUE(r.cells[0][0]);  // 12.60 GiB usable: SGD (12.5) fits, Adafactor (13) does not
  EXPECT_EQ(r.cells[0][0]->optimizer, OptimizerKind::kSgd);
  EXPECT_TRUE(r.covered[0][0]);
  ASSERT_TRUE(r.cells[0][1]);  // 19.0 GiB usable: SGD (12.5) and Adafactor (13) both fit
  EXPECT_EQ(r.cells[0][1]->optimizer, OptimizerKind::kSgd);  // 1800 tokens/s against 1700
  // The H200's 126 GiB usable is beyond every row: the largest peak is 70 GiB and the one OOM
  // ran into the H100's 79.6 GiB, so what is fastest on an H200 was never measured.
  EXPECT_EQ(r.columns.back().name, "H200");
  EXPECT_FALSE(r.covered[0].back());
  EXPECT_FALSE(r.cells[0].back());
  const std::string md = recommendations_markdown(r);
  EXPECT_NE(md.find("not measured"), std::string::npos) << md;
}

TEST(Recommend, ALargestBatchNoOomBoundedIsTheLargestMeasuredWithAPrediction) {
  RecommendOptions o;
  o.context_gib = 0;
  o.memory_gib = 23;  // cap 23 GiB: fp32 batch 32 ran out of memory on a 24 GiB card
  auto g = group(run({"recommend_ties.csv"}, o), "gpt2", "512");
  ASSERT_EQ(g.max_batch[0].precision, Precision::kFp32);
  EXPECT_EQ(g.max_batch[0].batch, 16);
  EXPECT_TRUE(g.max_batch[0].bounded);
  EXPECT_FALSE(g.max_batch[0].predicted_batch);
  EXPECT_TRUE(g.limit_reached);

  o.memory_gib = 40;  // cap 40 GiB: that OOM (under 24 GiB) bounds nothing here
  const auto r = run({"recommend_ties.csv"}, o);
  g = group(r, "gpt2", "512");
  EXPECT_EQ(g.max_batch[0].batch, 16);
  EXPECT_FALSE(g.max_batch[0].bounded);
  // Peaks 10.5 GiB at batch 8, 18 at 16: 3 + 0.9375 x batch meets the 40 GiB cap at 39.5.
  ASSERT_TRUE(g.max_batch[0].predicted_batch);
  EXPECT_EQ(*g.max_batch[0].predicted_batch, 39);
  EXPECT_FALSE(g.max_batch[1].bounded);  // bf16-amp: one batch measured, no line to draw
  EXPECT_FALSE(g.max_batch[1].predicted_batch);
  EXPECT_FALSE(g.limit_reached);
  EXPECT_EQ(g.measure_command, "sweep fit gpt2 --memory-gib 40 --seq 512");
  const std::string md = recommendations_markdown(r);
  EXPECT_NE(md.find("largest measured, limit not reached; predicted to fit up to batch 39"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("limit not reached: every measured configuration fits"), std::string::npos);
  EXPECT_NE(recommendations_csv(r).find(",predicted_batch,"), std::string::npos);
}

TEST(Recommend, ANoisyWinnerIsFlagged) {
  // gpt2-medium: bf16-amp batch 4 leads by 33% with a 12% step CV; the lead is larger than
  // the noise, so it stays the headline, flagged.
  const auto r = run({"recommend_noise.csv"});
  const auto& fastest = group(r, "gpt2-medium", "512").fastest;
  ASSERT_TRUE(fastest);
  EXPECT_EQ(fastest->checkpointing, Checkpointing::kNone);
  EXPECT_TRUE(fastest->noisy());
  EXPECT_TRUE(group(r, "gpt2-medium", "512").headline_note.empty());
  const std::string md = recommendations_markdown(r);
  EXPECT_NE(md.find("noisy: its step time varied 12% between repetitions"), std::string::npos) << md;
  EXPECT_NE(recommendations_csv(r).find(",0.120,"), std::string::npos);
}

TEST(Recommend, NoiseLargerThanTheLeadNeverPicksTheHeadline) {
  // gpt2: bf16-amp batch 8 measured 20000 tokens/s, 5% ahead of checkpointed batch 16
  // (19000), but its step time varied 15%: the steadier one (2%) is recommended, and why.
  const auto r = run({"recommend_noise.csv"});
  const auto& g = group(r, "gpt2", "512");
  ASSERT_TRUE(g.fastest);
  EXPECT_EQ(g.fastest->checkpointing, Checkpointing::kBlock);
  EXPECT_EQ(g.fastest->batch, 16);
  EXPECT_NE(g.headline_note.find("more than that gap: the steadier"), std::string::npos)
      << g.headline_note;
  EXPECT_NE(recommendations_markdown(r).find("5.0% faster but its step time varied 15%"),
            std::string::npos);
}

TEST(Recommend, OnTheCpuRanksByMemoryAndSaysWhy) {
  // bf16 batch 1 measured 21424 tokens/s where bf16 batch 2 measured 306: a CPU timing says
  // nothing about a GPU and swings with the host. Ranked by memory: the fewest changes (fp32).
  const auto r = run({"recommend_cpu_noise.csv"});
  const auto& g = group(r, "gpt2", "128");
  ASSERT_TRUE(g.fastest);
  EXPECT_EQ(g.fastest->precision, Precision::kFp32);
  EXPECT_EQ(g.fastest->batch, 2);
  EXPECT_NE(g.headline_note.find("ranked by memory, not throughput: on the CPU"), std::string::npos);
  const std::string md = recommendations_markdown(r);
  EXPECT_NE(md.find("CPU rows: ranked by memory"), std::string::npos) << md;
  EXPECT_EQ(md.find("CUDA context"), std::string::npos) << md;  // the CPU has none
}

TEST(Recommend, CpuRowsForAnotherMemorySizeSayNothingOfGpus) {
  RecommendOptions o;
  o.memory_gib = 8;
  const auto r = run({"recommend_cpu_noise.csv"}, o);
  EXPECT_FALSE(r.target.cuda);
  const std::string md = recommendations_markdown(r);
  EXPECT_EQ(md.find("between GPUs"), std::string::npos) << md;
  EXPECT_EQ(md.find("Across GPUs"), std::string::npos) << md;
  EXPECT_EQ(md.find("card"), std::string::npos) << md;
  EXPECT_NE(md.find("of CPU memory"), std::string::npos) << md;
}

TEST(Recommend, ACardsMemoryIsWhatCudaReportsNeverAsSold) {
  EXPECT_EQ(memory_bytes(*find_gpu("h100-80gb")), 85017493504);  // measured, 2026-11-22
  EXPECT_EQ(memory_bytes(*find_gpu("rtx3060")), 1175 * kGiBBytes / 100);  // as configs/rtx3060.yaml
  EXPECT_EQ(memory_bytes(*find_gpu("l4")), 2203 * kGiBBytes / 100);  // ArcInstitute/evo2#190
  RecommendOptions o;
  o.gpu = "l4";
  auto r = run({"recommend_cpu.csv"}, o);
  EXPECT_EQ(r.target.memory_bytes, 2203 * kGiBBytes / 100);
  EXPECT_EQ(recommendations_markdown(r).find("as sold"), std::string::npos);
  o.gpu = "h100-80gb";
  r = run({"recommend_cpu.csv"}, o);
  EXPECT_EQ(r.target.memory_bytes, 85017493504);
}

TEST(Recommend, UserErrors) {
  RecommendOptions o;
  o.gpu = "H100";  // which one?
  EXPECT_THROW(run({"recommend_ties.csv"}, o), UserError);
  // Two devices and no card named: ambiguous.
  EXPECT_THROW(run({"recommend_ties.csv", "recommend_cpu.csv"}), UserError);
  EXPECT_THROW(run({"recommend_bad.csv"}), UserError);
}

TEST(Recommend, EmulatedBudgetIsNoted) {
  auto r = run({"recommend_margin.csv"});
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("emulated budget (10.00 GiB)"), std::string::npos) << r.notes.back();
}

// The command, in process: exit codes, stderr, files.
struct Cli {
  int code = -1;
  std::string out, err;
};

Cli cli(std::vector<std::string> args) {
  CLI::App app;
  Cli c;
  register_recommend_command(app, c.code);
  args.insert(args.begin(), {"sweep", "recommend"});
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  app.parse(static_cast<int>(argv.size()), argv.data());
  c.out = testing::internal::GetCapturedStdout();
  c.err = testing::internal::GetCapturedStderr();
  return c;
}

// No usable memory: the error names the flag that made it so, and the hint only flags that
// were given (it said "give a larger --memory-gib, or a smaller --margin or --context-gib"
// whatever was typed).
TEST(RecommendCli, NoUsableMemoryNamesOnlyTheFlagsGiven) {
  // 1 GiB x (1 - 0.95) = 51 MiB, under the 307 MiB context the rows measured.
  auto margin = cli({data("recommend_accum.csv"), "--memory-gib", "1", "--margin", "0.95"});
  EXPECT_EQ(margin.code, 2) << margin.err;
  EXPECT_NE(margin.err.find("--margin: no usable memory"), std::string::npos) << margin.err;
  EXPECT_NE(margin.err.find("hint: give a larger --memory-gib, or a smaller --margin\n"),
            std::string::npos)
      << margin.err;
  auto context = cli({data("recommend_accum.csv"), "--memory-gib", "1", "--context-gib", "2"});
  EXPECT_EQ(context.code, 2) << context.err;
  EXPECT_NE(context.err.find("--context-gib: no usable memory"), std::string::npos) << context.err;
  EXPECT_NE(context.err.find("hint: give a larger --memory-gib, or a smaller --context-gib\n"), std::string::npos)
      << context.err;
  EXPECT_EQ(context.err.find("--margin"), std::string::npos) << context.err;
}

TEST(RecommendCli, WritesMarkdownAndCsv) {
  auto dir = std::filesystem::temp_directory_path() / "sweep_recommend_test";
  sweep::remove_tree(dir);
  auto c = cli({data("recommend_accum.csv"), "--effective-batch", "32", "--out", dir.string()});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("# Recommendations for NVIDIA GeForce RTX 3060"), std::string::npos);
  EXPECT_NE(c.out.find("## Effective batch 32"), std::string::npos);
  std::ifstream md(dir / "recommendations.md"), csv(dir / "recommendations.csv");
  ASSERT_TRUE(md && csv);
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("target,cap_gib,ceiling_gib,kind,model,seq,", 0), 0u) << header;
  int effective = 0;
  while (std::getline(csv, line)) effective += line.find(",effective-batch,") != std::string::npos;
  EXPECT_EQ(effective, 1);
}

// Issue 38: rows measured on the CPU and rows predicted for an RTX 3060 in one file are
// recommended from one device at a time, a section each, in every format: never pooled under
// a "predicted by emulation" title. A part that cannot answer says why in its own section.
TEST(RecommendCli, RowsMeasuredAndPredictedAnswerInASectionEach) {
  auto dir = std::filesystem::temp_directory_path() / "sweep_recommend_mixed";
  sweep::remove_tree(dir);
  auto c = cli({data("mixed_cpu_emulated.csv"), "--out", dir.string()});
  ASSERT_EQ(c.code, 0) << c.err;
  const std::string predicted = "predicted by emulation of RTX 3060, not measured";
  EXPECT_EQ(c.out.rfind("# Recommendations from 2 devices, one section each\n", 0), 0u) << c.out;
  const auto cpu = c.out.find(
      "\n## Recommendations for the emulated budget of 11.75 GiB (11.75 GiB of CPU memory): "
      "measured on AMD EPYC\n");
  const auto card = c.out.find("\n## Recommendations for RTX 3060 (emulated) (11.75 GiB): " +
                               predicted + "\n");
  ASSERT_NE(cpu, std::string::npos) << c.out;
  ASSERT_NE(card, std::string::npos) << c.out;
  EXPECT_LT(cpu, card);
  EXPECT_EQ(c.out.find("devices are pooled"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("\n### Recommended configuration (CPU rows: ranked by memory)"), std::string::npos);
  // Comments of the training-script code stay comments (no heading is made of them).
  EXPECT_NE(c.out.find("\n# optim="), std::string::npos) << c.out;
  std::ifstream csv(dir / "recommendations.csv");
  std::string line;
  int headers = 0, cpu_rows = 0, card_rows = 0;
  while (std::getline(csv, line)) {
    headers += line.rfind("target,", 0) == 0;
    cpu_rows += line.rfind("the emulated budget of 11.75 GiB,", 0) == 0;
    card_rows += line.rfind("RTX 3060 (emulated),", 0) == 0;
  }
  EXPECT_EQ(headers, 1);
  EXPECT_GT(cpu_rows, 0);
  EXPECT_GT(card_rows, 0);

  auto j = cli({data("mixed_cpu_emulated.csv"), "--out", dir.string(), "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const auto parsed = nlohmann::json::parse(j.out);
  ASSERT_EQ(parsed.at("sections").size(), 2u);
  EXPECT_EQ(parsed["sections"][0].at("device"), "measured on AMD EPYC");
  EXPECT_EQ(parsed["sections"][1].at("device"), predicted);
  EXPECT_EQ(parsed["sections"][1].at("predicted_by"), predicted);
  sweep::remove_tree(dir);
}

TEST(RecommendCli, BadInputExitsTwoWithLocationAndHint) {
  auto missing = cli({data("no_such_results.csv")});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("\nhint: "), std::string::npos);

  auto bad = cli({data("recommend_bad.csv")});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err.rfind("error: " + data("recommend_bad.csv") + ":3: ", 0), 0u) << bad.err;

  auto gpu = cli({data("recommend_ties.csv"), "--gpu", "rtx9999"});
  EXPECT_EQ(gpu.code, 2);
  EXPECT_NE(gpu.err.find("unknown card 'rtx9999'"), std::string::npos) << gpu.err;
  EXPECT_NE(gpu.err.find("hint: known GPUs: rtx3060, t4"), std::string::npos) << gpu.err;
}

// `recommend --json`: the analysis, every field, parsed back and checked against the
// Recommendation the same options give.
void expect_choice(const nlohmann::json& j, const Choice& c, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(j.at("label"), c.label());
  EXPECT_EQ(j.at("mode"), name_of(c.mode));
  EXPECT_EQ(j.at("precision"), name_of(c.precision));
  EXPECT_EQ(j.at("checkpointing"), name_of(c.checkpointing));
  EXPECT_EQ(j.at("optimizer"), to_string(c.optimizer));  // "" when unknown
  EXPECT_EQ(j.at("alloc_conf"), c.alloc_conf);
  EXPECT_EQ(j.at("adapter"), c.adapter);
  EXPECT_EQ(j.at("use_cache"), c.use_cache);
  EXPECT_EQ(j.at("batch"), c.batch);
  EXPECT_EQ(j.at("accumulation"), c.accumulation);
  EXPECT_EQ(j.at("effective_batch"), c.batch * c.accumulation);
  EXPECT_EQ(j.at("techniques"), c.techniques());
  EXPECT_EQ(j.at("tokens_per_s"), c.tokens_per_s);
  EXPECT_EQ(j.at("peak_reserved_bytes"), c.peak_reserved_bytes);
  EXPECT_EQ(j.at("status"), name_of(c.status));
  EXPECT_EQ(j.at("measured_on"), c.measured_on);
  EXPECT_EQ(j.at("where"), c.where);
  EXPECT_EQ(j.at("inferred"), c.inferred);
  EXPECT_EQ(j.at("on_target"), c.on_target);
  // "" when none, as before the enum.
  EXPECT_EQ(j.at("offload"), c.offload == Offload::kNone ? "" : name_of(c.offload));
  EXPECT_EQ(j.at("step_ms_cv"), c.step_ms_cv);
  EXPECT_EQ(j.at("noisy"), c.noisy());
  EXPECT_EQ(j.at("bounded"), c.bounded);
  EXPECT_EQ(j.at("predicted_batch").is_null(), !c.predicted_batch);
  if (c.predicted_batch) EXPECT_EQ(j.at("predicted_batch"), *c.predicted_batch);
}

void expect_optional(const nlohmann::json& j, const std::optional<Choice>& c, const std::string& where) {
  ASSERT_EQ(j.is_null(), !c.has_value()) << where;
  if (c) expect_choice(j, *c, where);
}

void expect_recommendation(const nlohmann::json& j, const Recommendation& r) {
  EXPECT_EQ(j.at("recommend_json_version"), 3);  // 2: cap_bytes and ceiling_bytes; 3: no memory_as_sold
  const auto& t = j.at("target");
  EXPECT_EQ(t.at("name"), r.target.name);
  EXPECT_EQ(t.at("gpu").is_null(), r.target.gpu == nullptr);
  if (r.target.gpu) EXPECT_EQ(t.at("gpu"), std::string(r.target.gpu->key));
  EXPECT_EQ(t.at("memory_bytes"), r.target.memory_bytes);
  EXPECT_EQ(t.at("margin"), r.target.margin);
  EXPECT_EQ(t.at("context_bytes"), r.target.context_bytes);
  EXPECT_EQ(t.at("context_source"), r.target.context_source);
  EXPECT_EQ(t.at("ceiling_bytes"), r.target.ceiling_bytes());
  EXPECT_EQ(t.at("cuda"), r.target.cuda);
  EXPECT_EQ(j.at("effective_batch").is_null(), !r.effective_batch);
  EXPECT_EQ(j.at("notes").get<std::vector<std::string>>(), r.notes);
  EXPECT_EQ(j.at("measured_on").get<std::vector<std::string>>(), r.measured_on);
  EXPECT_EQ(j.at("other_card"), r.other_card);
  EXPECT_EQ(j.at("has_eval"), r.has_eval);
  ASSERT_EQ(j.at("groups").size(), r.groups.size());
  for (std::size_t i = 0; i < r.groups.size(); ++i) {
    const auto& g = r.groups[i];
    const auto& jg = j.at("groups")[i];
    EXPECT_EQ(jg.at("label"), g.label());
    EXPECT_EQ(jg.at("model"), g.model);
    EXPECT_EQ(jg.at("seq"), g.seq);
    EXPECT_EQ(jg.at("target_seq"), g.target_seq);
    EXPECT_EQ(jg.at("audio_s"), g.audio_s);
    expect_optional(jg.at("fastest"), g.fastest, g.label() + " fastest");
    ASSERT_EQ(jg.at("max_batch").size(), g.max_batch.size());
    for (std::size_t k = 0; k < g.max_batch.size(); ++k)
      expect_choice(jg.at("max_batch")[k], g.max_batch[k], g.label() + " max_batch");
    expect_optional(jg.at("effective"), g.effective, g.label() + " effective");
    expect_optional(jg.at("eval_max_batch"), g.eval_max_batch, g.label() + " eval_max_batch");
    expect_optional(jg.at("eval_counterpart"), g.eval_counterpart, g.label() + " eval_counterpart");
    EXPECT_EQ(jg.at("eval_check"), g.eval_check);
    EXPECT_EQ(jg.at("closest_step"), g.closest_step);
    ASSERT_EQ(jg.at("closest_steps").size(), g.steps.size());
    for (std::size_t k = 0; k < g.steps.size(); ++k) {
      EXPECT_EQ(jg.at("closest_steps")[k].at("change"), g.steps[k].change);
      expect_optional(jg.at("closest_steps")[k].at("best"), g.steps[k].best, g.steps[k].change);
    }
    EXPECT_EQ(jg.at("train_rows"), g.train_rows);
    EXPECT_EQ(jg.at("train_ok"), g.train_ok);
    EXPECT_EQ(jg.at("limit_reached"), g.limit_reached);
    EXPECT_EQ(jg.at("measure_command"), g.measure_command);
  }
  const auto& x = j.at("cross_gpu");
  EXPECT_EQ(x.at("context_bytes"), r.column_context_bytes);
  ASSERT_EQ(x.at("columns").size(), r.columns.size());
  for (std::size_t c = 0; c < r.columns.size(); ++c) {
    EXPECT_EQ(x.at("columns")[c].at("name"), r.columns[c].name);
    EXPECT_EQ(x.at("columns")[c].at("memory_bytes"), r.columns[c].rule.memory_bytes);
    EXPECT_EQ(x.at("columns")[c].at("ceiling_bytes"), r.columns[c].rule.ceiling_bytes());
    ASSERT_EQ(x.at("columns")[c].at("gpus").size(), r.columns[c].gpus.size());
    for (std::size_t k = 0; k < r.columns[c].gpus.size(); ++k)
      EXPECT_EQ(x.at("columns")[c].at("gpus")[k], std::string(r.columns[c].gpus[k]->key));
  }
  ASSERT_EQ(x.at("cells").size(), r.cells.size());
  for (std::size_t g = 0; g < r.cells.size(); ++g) {
    ASSERT_EQ(x.at("cells")[g].size(), r.cells[g].size());
    for (std::size_t c = 0; c < r.cells[g].size(); ++c) {
      expect_optional(x.at("cells")[g][c], r.cells[g][c], "cell " + r.columns[c].name);
      EXPECT_EQ(x.at("covered")[g][c], static_cast<bool>(r.covered[g][c]));
    }
  }
}

TEST(RecommendJson, TheCommandPrintsEveryFieldOfTheAnalysis) {
  auto dir = std::filesystem::temp_directory_path() / ("sweep_recommend_json_" + std::to_string(::getpid()));
  sweep::remove_tree(dir);
  // Effective batch (inferred and measured), eval rows, a card of the table, the cross-GPU table.
  auto c = cli({data("recommend_accum.csv"), "--gpu", "rtx3060", "--effective-batch", "32", "--json",
                "--out", dir.string()});
  ASSERT_EQ(c.code, 0) << c.err;
  const auto j = nlohmann::json::parse(c.out);  // stdout holds the JSON and nothing else
  RecommendOptions o;
  o.gpu = "rtx3060";
  o.effective_batch = 32;
  const auto r = run({"recommend_accum.csv"}, o);
  ASSERT_TRUE(r.has_eval);
  ASSERT_FALSE(r.columns.empty());
  ASSERT_TRUE(group(r, "gpt2", "512").effective);
  expect_recommendation(j, r);
  EXPECT_EQ(j.at("effective_batch"), 32);
  // The files are written as without --json.
  EXPECT_TRUE(std::filesystem::exists(dir / "recommendations.md"));
  EXPECT_TRUE(std::filesystem::exists(dir / "recommendations.csv"));
  sweep::remove_tree(dir);
}

TEST(RecommendJson, NothingFitsCarriesTheClosestStepsAndCpuRowsTheirNote) {
  RecommendOptions o;
  o.gpu = "RTX 3060";
  const auto nofit = run({"recommend_nofit.csv"}, o);
  const auto j = recommendations_json(nofit);
  expect_recommendation(j, nofit);
  const auto it = std::find_if(j.at("groups").begin(), j.at("groups").end(),
                               [](const nlohmann::json& e) { return e.at("model") == "gpt2-xl"; });
  ASSERT_NE(it, j.at("groups").end());
  const auto& g = *it;
  EXPECT_TRUE(g.at("fastest").is_null());
  EXPECT_EQ(g.at("closest_steps").size(), 5u);
  EXPECT_EQ(g.at("closest_steps")[4].at("best").at("optimizer"), "sgd");

  const auto cpu = run({"recommend_cpu.csv"}, o);
  const auto k = recommendations_json(cpu);
  expect_recommendation(k, cpu);
  EXPECT_FALSE(k.at("notes").empty());
  // A dump that parses back to itself: no NaN or infinity slipped in.
  EXPECT_EQ(nlohmann::json::parse(k.dump()), k);
}

TEST(GpuTable, FindsCardsByKeyNameAndDeviceName) {
  auto key = [](std::string_view n) {
    const GpuSpec* g = find_gpu(n);
    return g ? std::string(g->key) : std::string("none");
  };
  EXPECT_EQ(key("RTX 3060"), "rtx3060");
  EXPECT_EQ(key("a100-80gb"), "a100-80gb");
  EXPECT_EQ(key("NVIDIA GeForce RTX 3060"), "rtx3060");
  EXPECT_EQ(key("NVIDIA GeForce RTX 3060 Ti"), "none");  // another card
  EXPECT_EQ(key("NVIDIA GeForce RTX 3060 Laptop GPU"), "none");
  EXPECT_EQ(key("Tesla T4"), "t4");
  EXPECT_EQ(key("NVIDIA A100-SXM4-40GB"), "a100-40gb");
  EXPECT_EQ(key("NVIDIA A100 80GB PCIe"), "a100-80gb");
  EXPECT_EQ(key("NVIDIA H100 80GB HBM3"), "h100-80gb");
  EXPECT_EQ(key("NVIDIA H100 PCIe"), "h100-pcie");
  EXPECT_EQ(key("NVIDIA A10"), "a10");
  EXPECT_EQ(key("NVIDIA A10G"), "a10g");             // AWS's A10 variant: a card of its own
  EXPECT_EQ(key("RTX 3060 (emulated)"), "rtx3060");  // an emulated row's device name
  EXPECT_EQ(key("H100"), "none");  // ambiguous: PCIe or SXM
}

TEST(GpuTable, PeaksByPrecisionAndAscendingMemory) {
  const GpuSpec& t4 = *find_gpu("t4");
  EXPECT_EQ(peak_tflops(t4, Precision::kFp16Amp), 65);
  EXPECT_FALSE(peak_tflops(t4, Precision::kBf16Amp));  // Turing has no BF16 tensor cores
  EXPECT_EQ(peak_tflops(*find_gpu("a100-40gb"), Precision::kBf16), 312);
  EXPECT_EQ(peak_tflops(*find_gpu("a100-40gb"), Precision::kBf16Amp), 312);
  for (std::size_t i = 1; i < gpus().size(); ++i)
    EXPECT_LE(gpus()[i - 1].memory_gib, gpus()[i].memory_gib) << gpus()[i].key;
}

}  // namespace
}  // namespace sweep::reports
