// `sweep fit` against hostile use (issue 23, items 2 to 4): an answer comes only from rows of
// its own question (model, every input length, budget, card, device, technique, settings),
// whatever else its directory holds; a refused fit (bad flags, a locked directory) leaves the
// previous fit.yaml byte for byte, and its errors name the flag the user typed; fit.yaml is
// YAML that reads back as given, whatever --out holds.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include "models/zoo.h"
#include "reports/results/rows.h"
#include "sweeps/cli/fit_analysis.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/results_store.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using reports::kGiB;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- the analysis reads only the rows of its question ----------------------------------

// The point a fit of `model` on the CPU under 40 MiB searches (its batch is the probe's).
Point question_point(const std::string& model) {
  Point p = tiny_point(model, Device::kCpu, Precision::kFp32, OptimizerKind::kAdamW);
  p.budget_bytes = int64_t{40} << 20;
  p.repetitions = 3;
  return p;
}

// A max-batch probe of `p` at `batch`, as the runner writes it.
nlohmann::json probe(Point p, int64_t batch, Status status, bool search = true) {
  p.batch = batch;
  nlohmann::json row = axis_cells(p);
  row["schema_version"] = schema::kSchemaVersion;
  row["point_id"] = p.id();
  if (search) row["search"] = "max_batch";
  row["status"] = to_string(status);
  const double peak = static_cast<double>(batch) * (1 << 20);
  row["peak_allocated_bytes"] = peak;
  row["peak_reserved_bytes"] = peak;
  row["tokens_per_s"] = 100.0 * static_cast<double>(batch);
  return row;
}

FitTechnique technique_of(const Point& p) {
  return {p.precision, p.checkpointing, p.optimizer, p.use_cache, p.adapter, p.offload, p.weights};
}

// One way a row can belong to another question: the question's point and the other's.
struct Mismatch {
  std::string name;
  std::string model;                        // the question's model
  std::function<void(Point&)> question;     // sets the question apart from the defaults
  std::function<void(Point&)> other;        // what the foreign rows differ in
  bool search = true;                       // the foreign rows are search probes
  // The foreign rows share the question's ids (a grid row of its own point, a row of another
  // device: the id leaves the device out). A foreign row at batch 1 would then be that point's
  // latest row, so only the batch-8 one is written.
  bool same_ids = false;
};

void PrintTo(const Mismatch& m, std::ostream* os) { *os << m.name; }

class FitAnswersOnlyItsQuestion : public ::testing::TestWithParam<Mismatch> {};

// The question's probes say: batch 1 and 2 fit, 3 runs out of memory. A foreign batch 8 that
// fit, or a foreign batch 1 out of memory, would change the answer if it were read.
TEST_P(FitAnswersOnlyItsQuestion, RowsOfAnotherQuestionAreNotRead) {
  const Mismatch& m = GetParam();
  Point q = question_point(m.model);
  m.question(q);
  Point other = q;
  m.other(other);
  const auto dir = testing::temp_dir("fit_question_" + m.name);
  {
    ResultsStore store(dir.string());
    store.append(probe(q, 1, Status::kOk));
    store.append(probe(other, 8, Status::kOk, m.search));
    store.append(probe(q, 2, Status::kOk));
    if (!m.same_ids) store.append(probe(other, 1, Status::kOom, m.search));
    store.append(probe(q, 3, Status::kOom));
  }
  const auto results = reports::read_results(dir.string());
  std::vector<FitTechnique> wanted = {technique_of(q)};
  if (technique_of(other).label() != technique_of(q).label()) wanted.push_back(technique_of(other));
  const Analysis a = analyse(results, {q}, wanted);
  ASSERT_EQ(a.techniques.size(), wanted.size());
  const FitTechnique& t = a.techniques.front();
  EXPECT_EQ(t.largest, 2) << m.name;
  EXPECT_EQ(t.first_oom, 3) << m.name;
  EXPECT_EQ(t.probes, 3) << m.name;
  EXPECT_EQ(a.budget_bytes, q.budget_bytes);
  for (std::size_t i = 1; i < a.techniques.size(); ++i) EXPECT_EQ(a.techniques[i].probes, 0);
}

const auto kNothing = [](Point&) {};

// A fit on CUDA into a directory of CPU probes of the same points: the runner would take them
// as measured (the id leaves the device out) and the analysis would not read them, so fit
// refuses the directory before it runs; rows of other points or of the same device do not.
TEST(FitQuestion, ProbesOfTheSamePointsOnAnotherDeviceAreFound) {
  const Point q = question_point("gpt2-test");
  Point cuda = q;
  cuda.device = Device::kCuda;
  Point other = q;
  other.seq = 64;
  const auto dir = testing::temp_dir("fit_elsewhere");
  {
    ResultsStore store(dir.string());
    store.append(probe(q, 1, Status::kOk));
    store.append(probe(other, 2, Status::kOk));
  }
  const auto results = reports::read_results(dir.string());
  EXPECT_EQ(measured_elsewhere(results, {q}), nullptr);
  const auto* r = measured_elsewhere(results, {cuda});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->line, 2u);
  EXPECT_EQ(measured_elsewhere(results, {[&] { Point p = cuda; p.seq = 16; return p; }()}), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    EveryDimension, FitAnswersOnlyItsQuestion,
    ::testing::Values(
        Mismatch{"model", "gpt2-test", kNothing, [](Point& p) { p.model = "gpt2"; }},
        Mismatch{"seq", "gpt2-test", kNothing, [](Point& p) { p.seq = 64; }},
        Mismatch{"target_seq", "t5-test", kNothing, [](Point& p) { p.target_seq = 32; }},
        Mismatch{"audio_s", "whisper-test", kNothing, [](Point& p) { p.audio_s = 3; }},
        Mismatch{"budget", "gpt2-test", kNothing, [](Point& p) { p.budget_bytes = int64_t{30} << 20; }},
        Mismatch{"card", "gpt2-test",
                 [](Point& p) {
                   p.device = Device::kEmulated;
                   p.card = facts_of(*find_card("rtx3060"));
                 },
                 [](Point& p) { p.card = facts_of(*find_card("t4")); }},
        // The point id leaves the device out: a CPU row and a CUDA row of one point share it.
        Mismatch{"device", "gpt2-test", kNothing, [](Point& p) { p.device = Device::kCuda; },
                 /*search=*/true, /*same_ids=*/true},
        Mismatch{"technique", "gpt2-test", kNothing,
                 [](Point& p) { p.precision = Precision::kBf16Amp; }},
        Mismatch{"lora_rank", "gpt2-test", [](Point& p) { p.adapter = Adapter::kLora; },
                 [](Point& p) { p.lora_r = 16; }},
        Mismatch{"repetitions", "gpt2-test", kNothing, [](Point& p) { p.repetitions = 9; }},
        Mismatch{"accumulation", "gpt2-test", kNothing, [](Point& p) { p.accumulation = 2; }},
        Mismatch{"grid_point", "gpt2-test", kNothing, kNothing, /*search=*/false,
                 /*same_ids=*/true}),
    [](const auto& info) { return info.param.name; });

// ---- the same through the command ------------------------------------------------------

nlohmann::json fit_json(const std::string& args, const fs::path& out) {
  const auto r = testing::run_sweep_cli_split("fit " + args + " --json --out '" + out.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.out);
}

std::map<std::string, nlohmann::json> by_label(const nlohmann::json& j) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& t : j["techniques"]) out[t.dump()] = t;
  return out;
}

// Issue 23's repro (0.05, 0.03, then 0.05 GiB into one --out; here smaller cards, for
// speed): the third answers from the rows of its own budget, not from the smaller card's,
// which came last in the file.
TEST(FitQuestion, ThreeBudgetsIntoOneOutEachAnswerItsOwn) {
  const auto dir = testing::temp_dir("fit_three_budgets");
  const std::string args =
      "whisper-test --device cpu --precision fp32 --optimizer adamw --checkpointing none";
  const auto first = fit_json(args + " --memory-gib 0.012", dir / "out");
  const auto smaller = fit_json(args + " --memory-gib 0.008", dir / "out");
  const auto third = fit_json(args + " --memory-gib 0.012", dir / "out");
  ASSERT_FALSE(third.is_null());
  const auto largest = [](const nlohmann::json& j) { return j["techniques"][0]["largest_batch"]; };
  ASSERT_NE(largest(first), largest(smaller)) << "the two budgets must give different answers";
  EXPECT_EQ(third["techniques"], first["techniques"]) << third.dump(2);
  EXPECT_EQ(third["card"]["cap_bytes"], first["card"]["cap_bytes"]);
  EXPECT_EQ(third["card"]["budget_bytes"], third["card"]["cap_bytes"]);
  EXPECT_EQ(smaller["card"]["budget_bytes"], smaller["card"]["cap_bytes"]);
}

// Issue 23's repro: --seq 16 then --seq 64 into one --out: the seq-64 answer counts only the
// seq-64 probes.
TEST(FitQuestion, ASeqSixtyFourAnswerReadsOnlySeqSixtyFourRows) {
  const auto dir = testing::temp_dir("fit_two_seqs");
  const std::string args =
      "gpt2-test --memory-gib 0.012 --device cpu --precision fp32 --optimizer adamw "
      "--checkpointing block --max-batch 16";
  const auto short_seq = fit_json(args + " --seq 16", dir / "out");
  const auto long_seq = fit_json(args + " --seq 64", dir / "out");
  ASSERT_FALSE(long_seq.is_null());
  int64_t probes = 0, largest = 0, first_oom = 0;
  for (const auto* r : reports::latest_per_point(reports::read_results((dir / "out").string())).rows) {
    if (r->at(schema::column("seq")) != "64" || r->at(schema::column("search")) != "max_batch") continue;
    ++probes;
    const auto batch = static_cast<int64_t>(*r->number(schema::column("batch")));
    if (r->status == Status::kOk) largest = std::max(largest, batch);
    if (r->status == Status::kOom && (first_oom == 0 || batch < first_oom)) first_oom = batch;
  }
  const auto& t = long_seq["techniques"][0];
  EXPECT_EQ(t["probes"].get<int64_t>(), probes) << long_seq.dump(2);
  EXPECT_EQ(t["largest_batch"].get<int64_t>(), largest) << long_seq.dump(2);
  EXPECT_EQ(t["first_oom"].get<int64_t>(), first_oom) << long_seq.dump(2);
  EXPECT_GT(short_seq["techniques"][0]["largest_batch"].get<int64_t>(), largest);
}

// ---- a refused fit leaves the previous one whole ---------------------------------------

// A small real fit: one technique, batches 1 and 2.
const std::string kSmallFit =
    "gpt2-test --memory-gib 0.05 --device cpu --precision fp32 --optimizer adamw "
    "--checkpointing block --max-batch 2";

TEST(FitOutput, ARefusedFitLeavesThePreviousFitYamlByteForByte) {
  const auto dir = testing::temp_dir("fit_refused");
  const fs::path out = dir / "out";
  ASSERT_FALSE(fit_json(kSmallFit, out).is_null());
  const std::string good = slurp(out / "fit.yaml");
  const std::string rows = slurp(out / "results.csv");
  ASSERT_NE(good.find("search: max_batch"), std::string::npos) << good;

  // Flags refused before anything is written, each naming the flag typed, never fit.yaml.
  for (const std::string& bad :
       {std::string(" --seq 100000"), std::string(" --effective-batch 99999999999"),
        std::string(" --max-batch 99999999999"), std::string(" --context-gib nan")}) {
    const auto r = testing::run_sweep_cli("fit " + kSmallFit + bad + " --out '" + out.string() + "'");
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find(bad.substr(1, bad.find(' ', 1) - 1)), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("fit.yaml"), std::string::npos) << r.output;
    EXPECT_EQ(slurp(out / "fit.yaml"), good) << bad;
  }

  // A directory another fit holds: refused at the lock (OUT/.lock, flock), nothing written.
  const int fd = ::open((out / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const auto locked = testing::run_sweep_cli("fit " + kSmallFit + " --seq 64 --out '" + out.string() + "'");
  ::close(fd);
  EXPECT_EQ(locked.exit_code, 2) << locked.output;
  EXPECT_NE(locked.output.find("another sweep is writing to"), std::string::npos) << locked.output;
  EXPECT_EQ(slurp(out / "fit.yaml"), good);
  EXPECT_EQ(slurp(out / "results.csv"), rows);
  for (const auto& e : fs::directory_iterator(out))  // no temporary config left behind
    EXPECT_EQ(e.path().filename().string().rfind(".fit.yaml.", 0), std::string::npos) << e.path();

  // The re-run command of its comment still runs the good config (nothing new to measure).
  const auto again = testing::run_sweep_cli("run '" + (out / "fit.yaml").string() + "' --dry-run");
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

// Errors name the flag and print numbers readably (no 301-digit bound or value), before any
// directory or file is made.
TEST(FitOutput, FlagErrorsNameTheFlagBeforeAnythingIsWritten) {
  const auto dir = testing::temp_dir("fit_flags");
  const std::string cpu = " --device cpu";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpt2-test --memory-gib 0.05 --seq 100000", "--seq: seq 100000 is longer than gpt2-test's 256"},
      {"whisper-test --memory-gib 0.05 --seq 16", "--seq: whisper-test takes no seq"},
      {"whisper-test --memory-gib 0.05 --audio-s 1e300",
       "--audio-s: '1e300' is not a number of seconds above 0, up to 30"},
      {"whisper-test --memory-gib 0.05 --audio-s 0", "--audio-s: '0' is not a number of seconds above 0, up to 30"},
      {"gpt2-test --memory-gib 0.05 --effective-batch 99999999999",
       "--effective-batch: '99999999999' is not a number of samples from 1 to 1048576"},
      // 2^63: CLI11 read it as 2^63 - 1 and echoed that.
      {"gpt2-test --memory-gib 0.05 --effective-batch 9223372036854775808",
       "--effective-batch: '9223372036854775808' is not a number of samples from 1 to 1048576"},
      {"gpt2-test --memory-gib 0.05 --max-batch 99999999999",
       "--max-batch: '99999999999' is not a batch from 1 to 1073741824"},
      {"gpt2-test --memory-gib 0.05 --seq 0", "--seq: '0' is not a number of tokens from 1 to 1048576"},
      {"gpt2-test --memory-gib 0.05 --seq 9223372036854775808",
       "--seq: '9223372036854775808' is not a number of tokens from 1 to 1048576"},
      {"gpt2-test --memory-gib 0.05 --context-gib nan", "--context-gib: 'nan' is not a number of GiB from 0"},
      {"gpt2-test --memory-gib 0.05 --context-gib -1", "--context-gib: '-1' is not a number of GiB from 0"},
      {"gpt2-test --memory-gib 0.05 --context-gib inf", "--context-gib: 'inf' is not a number of GiB from 0"},
      {"gpt2-test --memory-gib 0.05 --margin nan", "--margin: 'nan' is not a fraction from 0 to 0.95"},
      {"gpt2-test --memory-gib 1e300", "--memory-gib: '1e300' is not a number of GiB from 0 to 1048576"},
      {"gpt2-test --memory-gib 0", "--memory-gib: must be a number of GiB above 0"},
      {"gpt2-test --memory-gib 0.05 --lora-r 16", "--lora-r: sets LoRA, which this fit does not try"},
      {"gpt2-test --memory-gib 0.05 --adapter lora --lora-r 0", "--lora-r: '0' is not a rank from 1 to 65536"},
      {"gpt2-test --memory-gib 0.05 --adapter lora --lora-dropout 1", "--lora-dropout: must be less than 1"},
      {"gpt2-test --memory-gib 0.05 --adapter lora --lora-targets q_proj", "--lora-targets: 'q_proj' names no layer of gpt2-test"},
      {"gpt2-test --memory-gib 0.05 --adapter lora --lora-targets c_attn,all-linear",
       "--lora-targets: 'all-linear' is PEFT's shorthand"},
  };
  for (const auto& [args, message] : cases) {
    const fs::path out = dir / "out";
    const auto r = testing::run_sweep_cli("fit " + args + cpu + " --out '" + out.string() + "'");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("error: " + message), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("\nhint: "), std::string::npos) << r.output;
    EXPECT_FALSE(std::regex_search(r.output, std::regex("[0-9]{30}"))) << r.output;
    EXPECT_EQ(r.output.find("9223372036854775807"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << args;
  }
  // A margin that leaves nothing usable is the margin's fault, not the card's (it was
  // blamed on --gpu), and the hint names only flags that were given.
  const auto margin = testing::run_sweep_cli("fit gpt2-test --gpu rtx3060 --device emulated --margin 0.95 --out '" +
                                             (dir / "out").string() + "'");
  EXPECT_EQ(margin.exit_code, 2) << margin.output;
  EXPECT_NE(margin.output.find("error: --margin: RTX 3060 leaves nothing usable"), std::string::npos)
      << margin.output;
  EXPECT_NE(margin.output.find("hint: give a larger card, or a smaller --margin\n"), std::string::npos)
      << margin.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// An --out holding a control character is refused before anything is made (it was "a bug in
// sweep fit", after the directory was created); a link whose target does not exist is said
// so (it was "File exists").
TEST(FitOutput, AnOutWithANewlineOrADanglingLinkIsRefusedByName) {
  const auto dir = testing::temp_dir("fit_out_odd");
  for (const char* control : {"\\n", "\\r"}) {
    const auto r = testing::run_sweep_cli("fit " + kSmallFit + " --out \"" + (dir / "a").string() +
                                          "$(printf '" + control + "b')\"");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--out: the directory's name holds a"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("a bug in sweep"), std::string::npos) << r.output;
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 0) << control;
  }
  fs::create_symlink(dir / "missing", dir / "link");
  const auto r = testing::run_sweep_cli("fit " + kSmallFit + " --out '" + (dir / "link").string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "link").string() + ": --out: a link to " + (dir / "missing").string() +
                          ", which does not exist"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("File exists"), std::string::npos) << r.output;
}

// --out 'o #x' used to re-run into `o`, and 'o: x' to be a YAML error in fit.yaml.
TEST(FitOutput, AnOutWithAHashOrAColonReadsBackAsGiven) {
  const auto dir = testing::temp_dir("fit_out_yaml");
  const std::string one_probe =
      "gpt2-test --memory-gib 0.05 --device cpu --precision fp32 --optimizer adamw "
      "--checkpointing block --max-batch 1";
  for (const std::string name : {"o #x", "o: x", "- o, [x]"}) {
    const fs::path out = dir / name;
    const auto j = fit_json(one_probe, out);
    ASSERT_FALSE(j.is_null()) << name;
    const Config cfg = load_config((out / "fit.yaml").string());
    EXPECT_EQ(cfg.out, out.string());
    EXPECT_EQ(cfg.name, "fit-gpt2-test-0.05gib");
    EXPECT_EQ(cfg.search, "max_batch");
    EXPECT_EQ(cfg.search_max_batch, 1);
    EXPECT_EQ(static_cast<int64_t>(cfg.budget_gib * kGiB), j["card"]["cap_bytes"].get<int64_t>());
    ASSERT_EQ(cfg.sweeps.size(), 1u);
    EXPECT_EQ(cfg.sweeps[0].models, std::vector<std::string>{"gpt2-test"});
    EXPECT_EQ(cfg.grid.at("precision").values, std::vector<std::string>{"fp32"});
    EXPECT_EQ(cfg.grid.at("checkpointing").values, std::vector<std::string>{"block"});
    EXPECT_TRUE(fs::exists(out / "results.csv")) << name;
    // The comment's re-run command names the directory as given.
    EXPECT_NE(slurp(out / "fit.yaml").find("# Written by `sweep fit gpt2-test`"), std::string::npos);
  }
}

}  // namespace
}  // namespace sweep

namespace sweep {
namespace {

// Issue 38 cause 1: an input the model cannot take is refused at load, naming the flag and the
// model's minimum; nothing runs.
TEST(FitOutput, AudioTooShortForOneFrameIsRefusedBeforeAnythingRuns) {
  const auto out = testing::temp_dir("fit_audio_short") / "out";
  const auto r = testing::run_sweep_cli_split("fit whisper-test --gpu rtx3060 --audio-s 0.001 --out " +
                                              out.string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--audio-s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at least 0.005"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "results.csv"));
}

// Issue 38 cause 1: searches stopped by crashes are no answer, said once with what crashed, and
// fit exits non-zero; never "Nothing fits".
TEST(FitOutput, SearchesStoppedByCrashesAreNoAnswerNeverNothingFits) {
  const auto out = testing::temp_dir("fit_crashed") / "out";
  const std::string args =
      "fit gpt2-test --memory-gib 0.05 --device cpu --seq 16 --precision fp32 --checkpointing "
      "none --optimizer adamw,sgd --no-prediction --out " + out.string();
  const auto r = testing::run_sweep_cli_split(args, "SWEEP_TEST_FAULT=crash@1");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.find("Nothing fits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No answer: 4 of 4 searches stopped before finding a batch that fits"),
            std::string::npos)
      << r.out;
  const auto j = testing::run_sweep_cli_split(args + " --json", "SWEEP_TEST_FAULT=crash@1");
  EXPECT_EQ(j.exit_code, 1) << j.err;
  const auto answer = nlohmann::json::parse(j.out);
  EXPECT_TRUE(answer.at("recommendation").is_null());
  EXPECT_NE(answer.at("no_answer").get<std::string>().find("crash"), std::string::npos);
}

}  // namespace
}  // namespace sweep
