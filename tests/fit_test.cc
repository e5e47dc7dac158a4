// `sweep fit` against the grid: for each test model, the command the issue names
// (`sweep fit MODEL --memory-gib 0.05 --device cpu --json`) must give, for every technique,
// the largest batch that the grid under the same budget gives (each burst measured here with
// the CPU tracker), with a probe count and a measured recommendation; and the budget must be the one rule's
// cap (reports/common/fit_rule.h). Then the consistency rules: a second fit measures nothing new,
// an effective batch is reached by a pick measured at its accumulation, bad input exits 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "reports/recommend/recommend.h"
#include "reports/results/rows.h"
#include "sweeps/worker/burst.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "sweeps/measure/trackers.h"
#include "test_util.h"

namespace sweep {
namespace {

using reports::kGiB;

nlohmann::json fit_json(const std::string& args, const std::filesystem::path& out) {
  // stdout only: progress goes to stderr, which the CLI helper would mix in.
  const auto r = testing::run_sweep_cli("fit " + args + " --json --out " + out.string() + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output.substr(r.output.find('{')));
}

std::string key(const std::string& precision, const std::string& ckpt, const std::string& opt, bool cache) {
  return precision + "/" + ckpt + "/" + opt + (cache ? "" : "/no-cache");
}

class FitEqualsExhaustiveGrid : public ::testing::TestWithParam<std::string> {};

TEST_P(FitEqualsExhaustiveGrid, OnTheCpuUnderAFiftyMibCard) {
  const std::string model = GetParam();
  const auto dir = testing::temp_dir("fit_" + model);
  const auto j = fit_json(model + " --memory-gib 0.05 --device cpu", dir / "out");

  // The budget is the one rule's cap for a 0.05 GiB card: all of it, no context on the CPU;
  // the pick stays under the recommended ceiling.
  const auto card = static_cast<int64_t>(std::llround(0.05 * kGiB));
  const reports::FitRule rule{card, 0, 0.1, false, ""};
  EXPECT_EQ(j["card"]["cap_bytes"].get<int64_t>(), card);
  EXPECT_EQ(j["card"]["ceiling_bytes"].get<int64_t>(), rule.ceiling_bytes());
  EXPECT_TRUE(j["cpu_measured"].get<bool>());
  const int64_t budget = j["card"]["budget_bytes"].get<int64_t>();
  EXPECT_EQ(budget, j["card"]["cap_bytes"].get<int64_t>());

  std::map<std::string, int64_t> largest;
  int probes = 0;
  for (const auto& t : j["techniques"]) {
    ASSERT_FALSE(t["largest_batch"].is_null()) << t.dump();
    ASSERT_TRUE(t["limit_reached"].get<bool>()) << t.dump();
    EXPECT_EQ(t["first_oom"].get<int64_t>(), t["largest_batch"].get<int64_t>() + 1);
    EXPECT_GT(t["probes"].get<int>(), 0);
    EXPECT_LE(t["peak_reserved_bytes"].get<double>(), static_cast<double>(budget));
    probes += t["probes"].get<int>();
    largest[key(t["precision"], t["checkpointing"], t["optimizer"], t["use_cache"])] =
        t["largest_batch"].get<int64_t>();
  }
  EXPECT_EQ(j["probes"].get<int>(), probes);
  ASSERT_FALSE(j["recommendation"].is_null());
  EXPECT_FALSE(j["recommendation"]["reason"].get<std::string>().empty());
  if (!j["recommendation"]["above_ceiling"].get<bool>())
    EXPECT_LE(j["recommendation"]["peak_reserved_bytes"].get<double>(),
              static_cast<double>(rule.ceiling_bytes()));

  // Against the grid, each burst measured here with the CPU tracker on the points of the
  // config fit ran (same budget, inputs and steps but the repetitions, below). The plain
  // technique (fp32, no checkpointing, AdamW) exhaustively: every batch from 1 until the first that runs out of memory. Every
  // other technique at its boundary: fit's largest batch fits and the next one does not (an
  // exhaustive grid of all of them, up to batch 129 on whisper-test, would take CI an hour).
  Config cfg = load_config((dir / "out" / "fit.yaml").string());
  RunSettings run;
  run.budget_bytes = budget;
  auto points = expand_grid(cfg, run);
  std::set<std::string> seen;
  auto mem = make_cpu_tracker();
  auto timer = make_cpu_timer();
  // One measured step after the warmup, where fit's probes repeat it three times: the peak is
  // the second step's (the first with the optimizer's state and the gradients both alive), and
  // a repetition adds no new allocation; half the steps of CI's longest test.
  auto status_at = [&](Point p, int64_t batch) {
    p.batch = batch;
    p.repetitions = 1;
    const auto m = run_burst(p, *mem, *timer);
    EXPECT_TRUE(m.status == Status::kOk || m.status == Status::kOom) << p.label() << ": " << m.message;
    return m.status;
  };
  int bursts = 0;
  for (const auto& base : points) {
    const std::string k = key(to_string(base.precision), to_string(base.checkpointing),
                              to_string(base.optimizer), base.use_cache);
    if (!seen.insert(k).second) continue;
    ASSERT_TRUE(largest.count(k)) << "fit did not report " << k;
    const bool plain = base.precision == Precision::kFp32 && base.checkpointing == Checkpointing::kNone && base.optimizer == OptimizerKind::kAdamW;
    if (plain) {
      int64_t exhaustive = 0;
      for (int64_t b = 1; b <= 1024; ++b, ++bursts) {
        if (status_at(base, b) != Status::kOk) break;
        exhaustive = b;
      }
      EXPECT_EQ(largest[k], exhaustive) << model << " " << k << ": exhaustive grid";
    } else {
      bursts += 2;
      EXPECT_EQ(status_at(base, largest[k]), Status::kOk) << model << " " << k;
      EXPECT_EQ(status_at(base, largest[k] + 1), Status::kOom) << model << " " << k;
    }
  }
  EXPECT_EQ(seen.size(), largest.size());
  std::printf("%s: %zu techniques, %d probes by fit, %d bursts to check them\n", model.c_str(),
              largest.size(), probes, bursts);
}

INSTANTIATE_TEST_SUITE_P(TestModels, FitEqualsExhaustiveGrid,
                         ::testing::Values("gpt2-test", "t5-test", "whisper-test"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Fit, ASecondFitReusesEveryProbeAndAnEffectiveBatchIsMeasuredAtItsAccumulation) {
  const auto dir = testing::temp_dir("fit_again");
  const std::string args =
      "whisper-test --memory-gib 0.03 --device cpu --precision fp32 --optimizer adamw --checkpointing none";
  const auto first = fit_json(args, dir / "out");
  const auto rows = reports::read_results((dir / "out").string()).rows.size();
  const auto again = fit_json(args, dir / "out");
  EXPECT_EQ(reports::read_results((dir / "out").string()).rows.size(), rows);  // nothing re-measured
  EXPECT_EQ(first["techniques"], again["techniques"]);

  // An effective batch above the largest fitting batch: reached with accumulation, and the
  // pick was run as such (one more row, a plain grid point at that accumulation).
  const int64_t largest = first["techniques"][0]["largest_batch"].get<int64_t>();
  const int64_t effective = 4 * largest;
  const auto acc = fit_json(args + " --effective-batch " + std::to_string(effective), dir / "out");
  const auto& pick = acc["recommendation"];
  ASSERT_FALSE(pick.is_null());
  EXPECT_EQ(pick["batch"].get<int64_t>() * pick["accumulation"].get<int64_t>(), effective);
  EXPECT_GT(pick["accumulation"].get<int64_t>(), 1);
  EXPECT_LE(pick["batch"].get<int64_t>(), largest);
  bool measured = false;
  for (const auto& r : reports::read_results((dir / "out").string()).rows)
    if (r.at(schema::column("search")).empty() &&
        r.number(schema::column("accumulation")) == pick["accumulation"].get<double>() &&
        r.number(schema::column("batch")) == pick["batch"].get<double>() && r.status == reports::Status::kOk)
      measured = true;
  EXPECT_TRUE(measured) << "the pick at its accumulation has no ok row";
}

TEST(Fit, LoraIsATechniqueOfItsOwnWithALowerPeak) {
  // With the base frozen there are no gradients or AdamW moments for it: under the same
  // card LoRA reaches at least full fine-tuning's batch, with a lower peak at the same batch
  // (on the tiny GPT-2 activations dominate: both stop at batch 5 under 30 MiB, LoRA ~4 MiB
  // lower), and the answer says it is LoRA. With --weights full,int8, LoRA on 8-bit weights
  // is a technique of its own, searched too (never int8 without LoRA).
  const auto dir = testing::temp_dir("fit_lora");
  const auto j = fit_json(
      "gpt2-test --memory-gib 0.03 --device cpu --precision fp32 --optimizer adamw --checkpointing none "
      "--adapter none,lora --weights full,int8",
      dir / "out");
  std::map<std::string, int64_t> largest;  // adapter/weights -> largest batch (use_cache on)
  std::map<std::string, double> peak;      // adapter/weights -> its peak there
  for (const auto& t : j["techniques"])
    if (t["use_cache"].get<bool>() && !t["largest_batch"].is_null()) {
      const auto key = t["adapter"].get<std::string>() + "/" + t["weights"].get<std::string>();
      largest[key] = t["largest_batch"].get<int64_t>();
      peak[key] = t["peak_reserved_bytes"].get<double>();
    }
  ASSERT_EQ(largest.size(), 3u) << j.dump(2);
  EXPECT_GE(largest["lora/full"], largest["none/full"]) << j.dump(2);
  if (largest["lora/full"] == largest["none/full"])
    EXPECT_LT(peak["lora/full"], peak["none/full"]) << j.dump(2);
  EXPECT_GE(largest["lora/int8"], 1) << j.dump(2);
  EXPECT_EQ(j["techniques"].size(), 6u);  // {none, lora, lora on int8} x use_cache
}

// --lora-* set LoraConfig as a config's lora_* keys do: the rows record them, and the script
// the answer prints names them, PEFT's all-linear as its string.
TEST(Fit, LoraFlagsReachTheRowsAndTheScript) {
  const auto dir = testing::temp_dir("fit_lora_flags");
  const auto r = testing::run_sweep_cli_split(
      "fit gpt2-test --memory-gib 0.03 --device cpu --precision fp32 --optimizer adamw --checkpointing none "
      "--adapter lora --lora-r 4 --lora-alpha 16 --lora-dropout 0.05 --lora-targets all-linear --max-batch 4 --out " +
      (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("LoraConfig(r=4, lora_alpha=16.0, lora_dropout=0.05, target_modules=\"all-linear\")"),
            std::string::npos) << r.out;
  int rows = 0;
  for (const auto& row : reports::read_results((dir / "out").string()).rows) {
    ++rows;
    EXPECT_EQ(row.at(schema::column("lora_targets")), "all-linear");
    EXPECT_EQ(row.number(schema::column("lora_r")), 4);
  }
  EXPECT_GT(rows, 0);
}

// Issue 34 item 3: the Hub id names the whole Whisper (WhisperForConditionalGeneration), at
// 30 s of audio and its longest labels by default, and the pick loads it as a seq2seq model.
TEST(Fit, TheWhisperHubIdIsTheWholeModelAtItsLongestLabels) {
  const auto dir = testing::temp_dir("fit_whisper");
  const std::string args = "openai/whisper-small --gpu rtx3060 --device emulated --precision bf16-amp "
                           "--checkpointing block --optimizer adamw";
  const auto run = testing::run_sweep_cli_split("fit " + args + " --out " + (dir / "out").string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("whisper-small, 30 s audio -> 448, on RTX 3060. ", 0), 0u) << run.out;
  const auto j = fit_json(args, dir / "out");  // every probe reused
  EXPECT_EQ(j["target_seq"], 448);
  EXPECT_EQ(j["audio_s"], 30.0);
  ASSERT_FALSE(j["recommendation"].is_null()) << j.dump(1);
  // The encoder-classifier is there under its own name, and takes no labels.
  const auto cls = testing::run_sweep_cli("fit whisper-small-cls --gpu rtx3060 --target-seq 64");
  EXPECT_EQ(cls.exit_code, 2);
  EXPECT_NE(cls.output.find("whisper-small-cls takes no target_seq"), std::string::npos) << cls.output;
}

// Issue 37 items 2 and 3: the headline names the model, the input length and the card, and
// GPT-2's default length is 512 tokens (what people train it at, the tables' first length),
// not the grid's 128; the pick comes with the Hugging Face TrainingArguments that run it, in
// the text to paste and in --json's trainer_args (reports/common/trainer_args.h).
TEST(Fit, TheAnswerNamesItsLengthAndThePicksTrainerArguments) {
  const auto dir = testing::temp_dir("fit_words");
  const std::string args =
      "gpt2 --gpu rtx3060 --device emulated --precision bf16-amp --checkpointing block --optimizer adamw";
  const auto run = testing::run_sweep_cli_split("fit " + args + " --out " + (dir / "out").string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  struct {
    const std::string& output;
  } text{run.out};  // stdout: the answer
  EXPECT_EQ(text.output.rfind("gpt2, seq 512, on RTX 3060. The rule, ", 0), 0u) << text.output;
  EXPECT_NE(text.output.find("Precision: bf16 autocast (Trainer bf16=True).\n"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("In your training script (Hugging Face transformers):\n"
                             "    args = TrainingArguments(\n"
                             "        per_device_train_batch_size="),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("        bf16=True,\n"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("        gradient_checkpointing=True,\n"), std::string::npos) << text.output;

  const auto j = fit_json(args, dir / "out");  // every probe reused
  EXPECT_EQ(j["length"], "seq 512");
  EXPECT_EQ(j["seq"], 512);
  const auto& pick = j["recommendation"];
  ASSERT_FALSE(pick.is_null());
  const auto& ta = pick["trainer_args"]["training_arguments"];
  EXPECT_EQ(ta["per_device_train_batch_size"], pick["batch"]) << pick.dump(1);
  EXPECT_EQ(ta["gradient_accumulation_steps"], pick["accumulation"]) << pick.dump(1);
  EXPECT_EQ(ta["bf16"], true) << pick.dump(1);
  EXPECT_EQ(ta["gradient_checkpointing"], true) << pick.dump(1);
  EXPECT_EQ(ta["optim"], "adamw_torch") << pick.dump(1);
  EXPECT_NE(pick["trainer_args"]["text"].get<std::string>().find("args = TrainingArguments(\n"), std::string::npos);

  // A length given is the one named.
  const auto short_seq = fit_json(args + " --seq 256", dir / "out256");
  EXPECT_EQ(short_seq["length"], "seq 256");
}

TEST(Fit, BadInputExitsTwoWithAHint) {
  const auto dir = testing::temp_dir("fit_bad");
  for (const std::string args :
       {"gpt2-test --device cpu", "gpt2-test --memory-gib 1 --gpu rtx3060 --device cpu",
        "nosuch --memory-gib 1 --device cpu", "gpt2-test --gpu nosuchcard --device cpu",
        "gpt2-test --memory-gib -1 --device cpu", "gpt2-test --memory-gib nan --device cpu",
        "gpt2-test --memory-gib 1 --precision fp8 --device cpu",
        "gpt2-test --memory-gib 1 --weights int8 --device cpu",
        "gpt2-test --memory-gib 1 --adapter lora --weights int4 --device cpu"}) {
    const auto r = testing::run_sweep_cli("fit " + args + " --out " + (dir / "out").string());
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("hint:"), std::string::npos) << args << "\n" << r.output;
  }
}

// Issue 57 cause H: a pick's accumulation above 32 is confirmed at accumulation 2 and 3 and its
// peak extrapolated, where 4099 micro-batches a step took 70 s. The extrapolation is exact: a
// step holds every micro-batch's inputs from its start and each one past the second adds only
// its own (checked here against the burst at 37 with the CPU tracker), and the answer's peak is
// the one the rows at 2 and 3 give for 4099.
TEST(FitPick, ALargeAccumulationIsConfirmedAtTwoAndThree) {
  Point p;
  p.model = "gpt2-test";
  p.family = "gpt2";
  p.batch = 1;
  p.seq = 16;
  p.device = Device::kCpu;
  p.steps = 1;
  p.warmup_steps = 1;
  p.repetitions = 1;
  auto mem = make_cpu_tracker();
  auto timer = make_cpu_timer();
  std::map<int64_t, Measurement> at;
  for (const int64_t k : {2, 3, 37}) {
    p.accumulation = k;
    at[k] = run_burst(p, *mem, *timer);
    ASSERT_EQ(at[k].status, Status::kOk) << at[k].message;
  }
  const int64_t inputs = at[3].peak_allocated_bytes - at[2].peak_allocated_bytes;
  EXPECT_GT(inputs, 0);
  EXPECT_EQ(at[37].peak_allocated_bytes, at[2].peak_allocated_bytes + 35 * inputs);
  EXPECT_EQ(at[37].peak_reserved_bytes,
            at[2].peak_reserved_bytes + 35 * (at[3].peak_reserved_bytes - at[2].peak_reserved_bytes));

  const auto dir = testing::temp_dir("fit_prime_effective");
  const auto start = std::chrono::steady_clock::now();
  const auto j = fit_json("gpt2-test --memory-gib 0.05 --device cpu --seq 16 --precision fp32 "
                          "--checkpointing none --optimizer adamw --no-prediction "
                          "--effective-batch 4099",
                          dir / "out");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& pick = j["recommendation"];
  ASSERT_FALSE(pick.is_null()) << j.dump();
  EXPECT_EQ(pick["batch"].get<int64_t>(), 1);
  EXPECT_EQ(pick["accumulation"].get<int64_t>(), 4099);
  EXPECT_NE(pick["reason"].get<std::string>().find("measured at accumulation 2 and 3, its peak extrapolated"),
            std::string::npos) << pick["reason"];
  std::map<int64_t, double> reserved;  // accumulation -> peak of the pick's rows
  for (const auto& r : reports::read_results((dir / "out").string()).rows) {
    const int64_t acc = static_cast<int64_t>(*r.number(schema::column("accumulation")));
    EXPECT_LE(acc, 3) << "a confirmation ran " << acc << " micro-batches a step";
    if (acc > 1) reserved[acc] = *r.number(schema::column("peak_reserved_bytes"));
  }
  ASSERT_EQ(reserved.size(), 2u);
  EXPECT_EQ(pick["peak_reserved_bytes"].get<double>(), reserved[2] + 4097 * (reserved[3] - reserved[2]));
  // Bounded by the rows' accumulations above (time on a shared VM would be a flaky bound).
  std::printf("fit --effective-batch 4099: %.1f s (70 s before, on a quiet VM)\n", took);
}

}  // namespace
}  // namespace sweep
