// Every subcommand against bad input: a missing, unreadable, empty, binary or truncated
// file, a directory where a file belongs, an output it cannot write, another run holding
// the lock, a worker handed bad JSON. Each must end with exit code 0, 1 or 2 and (unless
// 0) a message on stderr; never a signal, `terminate called` or a stack trace.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "sweeps/runner/config.h"
#include "sweeps/worker/point.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  bool exited = false;
  int code = -1, signal = 0;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `sweep ARGS` through the shell, stdout and stderr kept apart.
Outcome run(const fs::path& dir, const std::string& args, const std::string& env = "") {
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = env + std::string(SWEEP_BINARY) + " " + args + " </dev/null >" +
                          out.string() + " 2>" + err.string();
  const int st = std::system(cmd.c_str());
  Outcome o;
  o.exited = WIFEXITED(st);
  o.code = o.exited ? WEXITSTATUS(st) : -1;
  // The shell reports a child killed by a signal as 128 + the signal.
  if (o.exited && o.code > 128) o.signal = o.code - 128;
  if (WIFSIGNALED(st)) o.signal = WTERMSIG(st);
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

void expect_clean(const Outcome& o, const std::string& args, std::initializer_list<int> codes = {2}) {
  SCOPED_TRACE("sweep " + args + "\nstderr: " + o.err);
  EXPECT_TRUE(o.exited);
  EXPECT_EQ(o.signal, 0);
  EXPECT_NE(std::find(codes.begin(), codes.end(), o.code), codes.end()) << "exit " << o.code;
  if (o.code != 0) {
    EXPECT_FALSE(o.err.empty());
    EXPECT_NE(o.err.find("error"), std::string::npos);
  }
  for (const char* bad : {"terminate called", "Aborted", "Segmentation", "core dumped",
                          "Exception raised from", "frame #", "what():"})
    EXPECT_EQ(o.err.find(bad), std::string::npos) << bad;
}

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs them in parallel.
    dir_ = testing::temp_dir(std::string("hostile_") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    missing_ = (dir_ / "no-such-file").string();
    directory_ = (dir_ / "a-directory").string();
    fs::create_directories(directory_);
    empty_ = testing::write_file(dir_ / "empty.csv", "");
    std::string bytes;
    for (int i = 0; i < 4096; ++i) bytes += static_cast<char>((i * 131 + 7) % 256);
    binary_ = testing::write_file(dir_ / "binary.csv", bytes);
    const std::string good = slurp(std::string(SWEEP_TEST_DATA) + "/recommend_ties.csv");
    results_ = testing::write_file(dir_ / "results.csv", good);
    truncated_ = testing::write_file(dir_ / "truncated.csv", good.substr(0, good.size() - 120));
    // Unreadable for a normal user; root reads it, and then its content is garbage.
    unreadable_ = testing::write_file(dir_ / "unreadable.csv", "\x01\x02garbage,\"\n");
    fs::permissions(unreadable_, fs::perms::none);
    config_ = testing::write_file(dir_ / "tiny.yaml",
                                  "device: cpu\nmodels: [gpt2-test]\ngrid: {seq: 8, batch: 1}\n");
    truncated_config_ = testing::write_file(dir_ / "cut.yaml", "device: cpu\nmodels: [gpt2-te");
    binary_config_ = testing::write_file(dir_ / "binary.yaml", bytes);
  }
  void TearDown() override { fs::permissions(unreadable_, fs::perms::owner_all); }

  std::vector<std::string> bad_files() const {
    return {missing_, directory_, empty_, binary_, truncated_, unreadable_};
  }
  Outcome sweep(const std::string& args) const { return run(dir_, args); }
  Outcome sweep_env(const std::string& env, const std::string& args) const { return run(dir_, args, env); }

  fs::path dir_;
  std::string missing_, directory_, empty_, binary_, results_, truncated_, unreadable_, config_,
      truncated_config_, binary_config_;
};

TEST_F(HostileInput, RunWithBadConfigs) {
  for (const auto& f : bad_files()) {
    const std::string args = "run " + f + " --dry-run";
    expect_clean(sweep(args), args);
  }
  for (const auto& f : {truncated_config_, binary_config_}) {
    const std::string args = "run " + f + " --dry-run";
    const Outcome o = sweep(args);
    expect_clean(o, args);
    EXPECT_NE(o.err.find("hint: "), std::string::npos) << o.err;
  }
}

TEST_F(HostileInput, RunWithBadOutputs) {
  for (const std::string& out : std::vector<std::string>{"/proc/nope/out", "/proc", empty_, results_}) {
    const std::string args = "run " + config_ + " --out " + out;
    const Outcome o = sweep(args);
    expect_clean(o, args);
    EXPECT_NE(o.err.find("hint: "), std::string::npos) << o.err;
  }
  // An output directory whose results.csv is garbage: refused, and left as it was.
  const fs::path out = dir_ / "garbage-out";
  fs::create_directories(out);
  fs::copy_file(binary_, out / "results.csv");
  const std::string args = "run " + config_ + " --out " + out.string();
  expect_clean(sweep(args), args);
  EXPECT_EQ(slurp(out / "results.csv"), slurp(binary_));
}

TEST_F(HostileInput, RunWhileAnotherRunHoldsTheLock) {
  const fs::path out = dir_ / "locked";
  fs::create_directories(out);
  const int fd = open((out / ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string args = "run " + config_ + " --out " + out.string();
  const Outcome o = sweep(args);
  close(fd);
  expect_clean(o, args);
  EXPECT_NE(o.err.find("another sweep is writing"), std::string::npos) << o.err;
}

TEST_F(HostileInput, ReportRecommendCompareWithBadResults) {
  for (const auto& f : bad_files()) {
    for (const std::string& args :
         {"report " + f + " --out " + (dir_ / "r").string(),
          "recommend " + f + " --memory-gib 24 --out " + (dir_ / "r").string(),
          "compare " + results_ + " " + f, "compare " + f + " " + results_}) {
      const Outcome o = sweep(args);
      expect_clean(o, args);
      EXPECT_NE(o.err.find("hint: "), std::string::npos) << args << "\n" << o.err;
    }
  }
}

TEST_F(HostileInput, ReportRecommendCompareWithUnwritableOutputs) {
  for (const std::string& args :
       {"report " + results_ + " --out /proc/nope", "recommend " + results_ + " --out /proc/nope",
        "compare " + results_ + " " + results_ + " --export /proc/nope"}) {
    const Outcome o = sweep(args);
    expect_clean(o, args);
    EXPECT_NE(o.err.find("/proc/nope"), std::string::npos) << o.err;
  }
}

TEST_F(HostileInput, BadFlagValues) {
  for (const std::string& args : std::vector<std::string>{
           "recommend " + results_ + " --memory-gib nan", "recommend " + results_ + " --memory-gib 1e308",
        "recommend " + results_ + " --memory-gib 9e9", "recommend " + results_ + " --memory-gib -3",
        "recommend " + results_ + " --margin 2", "compare " + results_ + " " + results_ +
        " --memory-threshold lots", "run " + config_ + " --max-points 0", "run " + config_ +
        " --gpus 0", "run " + config_ + " --device tpu", "models extra", "no-such-command"}) {
    const Outcome o = sweep(args);
    expect_clean(o, args);
  }
}

TEST_F(HostileInput, WorkerWithBadJson) {
  for (const std::string& point : {"'not json'", "'[1, 2]'", "'{\"batch\": \"many\"}'", "''",
                                   "'{\"model\": \"no-such-model\", \"device\": \"cpu\"}'"}) {
    const std::string args = "worker --point " + point + " --result-fd 1";
    Outcome o = sweep(args);
    // A worker reports on its result fd (here stdout): exit 1 is a `crash` record with the
    // message, which the runner turns into a row; exit 2 is a message on stderr.
    if (o.code == 1) {
      EXPECT_NE(o.out.find("\"status\":\"crash\""), std::string::npos) << args << "\n" << o.out;
      EXPECT_NE(o.out.find("\"message\":\""), std::string::npos) << args << "\n" << o.out;
      o.err = "error: (on the result fd) " + o.out + o.err;
    }
    expect_clean(o, args, {1, 2});
  }
}

TEST_F(HostileInput, GoodInputStillWorks) {
  expect_clean(sweep("models"), "models", {0});
  expect_clean(sweep("run " + config_ + " --dry-run"), "run --dry-run", {0});
  expect_clean(sweep("compare " + results_ + " " + results_), "compare", {0});
}

// The UserError that loading `cfg` (with `overrides`) throws; a failure when none.
UserError load_error(const std::string& cfg, const std::vector<std::string>& overrides = {}) {
  try {
    load_config(cfg, overrides);
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << cfg << " loaded";
  return UserError("", 0, "", "");
}

// Issue 23, 1: a newline (or another control character) in any value that reaches the Slurm
// scripts is refused, naming the flag or the field, before anything is written.
TEST_F(HostileInput, SlurmValuesWithControlCharactersAreRefused) {
  const std::string marker = (dir_ / "PWNED").string();
  const std::string payload = "\"$(printf 'gpu\\ntouch${IFS}" + marker + "')\"";
  const std::string out = (dir_ / "o").string();
  for (const std::string flag : {"--partition", "--time", "--account", "--gres", "--sbatch-arg"}) {
    const std::string args = "run " + config_ + " --slurm --dry-run --out " + out + " " + flag + " " + payload;
    const Outcome o = sweep(args);
    expect_clean(o, args);
    EXPECT_NE(o.err.find(flag + ": contains a newline"), std::string::npos) << o.err;
  }
  const std::string args = "run " + config_ + " --slurm --dry-run --out " + out + "\"$(printf '\\r\\033x')\"";
  const Outcome o = sweep(args);
  expect_clean(o, args);
  EXPECT_NE(o.err.find("--out: the directory's name holds a carriage return"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(marker));
  // The config's name (and any other value), as YAML escapes put them there: its file and line.
  for (const std::string name : {"a\\nb", "a\\rb", "a\\0b", "a\\tb", "a\\x7fb", "a\\eb"}) {
    const auto cfg = testing::write_file(dir_ / "named.yaml", "device: cpu\nmodels: [gpt2-test]\n"
                                         "grid: {seq: 8, batch: 1}\nname: \"" + name + "\"\n");
    const UserError e = load_error(cfg);
    EXPECT_EQ(e.line(), 4) << name;
    EXPECT_EQ(e.key(), "name") << name;
    EXPECT_EQ(std::string(e.what()).rfind("contains ", 0), 0u) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
  // Good values still pass, quoted in the script.
  const std::string good = "run " + config_ + " --slurm --dry-run --out " + out + " --partition 'gpu a'";
  expect_clean(sweep(good), good, {0});
  EXPECT_NE(slurp(out + "/slurm/sweep.sbatch").find("#SBATCH --partition='gpu a'\n"), std::string::npos);
}

// `name:` names the folder results/NAME: one that leaves results/ is refused.
TEST_F(HostileInput, ConfigNameThatLeavesResultsIsRefused) {
  for (const std::string name : {"../../../../etc", "a/b", "..", ".", "a\\\\b", "''"}) {
    const auto cfg = testing::write_file(dir_ / "n.yaml", "device: cpu\nname: " + name +
                                         "\nmodels: [gpt2-test]\ngrid: {seq: 8, batch: 1}\n");
    const UserError e = load_error(cfg);
    EXPECT_EQ(e.file() + ":" + std::to_string(e.line()) + ":" + e.key(), cfg + ":2:name") << name;
    EXPECT_FALSE(e.hint().empty());
  }
  const auto cfg = testing::write_file(dir_ / "n.yaml", "device: cpu\nname: ../../../../etc\n"
                                       "models: [gpt2-test]\ngrid: {seq: 8, batch: 1}\n");
  const std::string args = "run " + cfg + " -q";
  const Outcome o = sweep(args);
  expect_clean(o, args);
  EXPECT_NE(o.err.find(cfg + ":2: name: '../../../../etc' is not a plain name"), std::string::npos) << o.err;
}

// Issue 23, 6: alloc_conf is parsed as torch 2.11 parses it, at config load (and overrides).
TEST_F(HostileInput, AllocConfIsCheckedWhenTheConfigIsLoaded) {
  for (const std::string conf : {"expandable_segments:True,foo", "expandable_segments:true",
                                 "max_split_size_mb:10", "expandable_segments", "foo:1",
                                 "roundup_power2_divisions:[256:2", "expandable_segments:True\\0",
                                 "expandable_segments:True\\n"}) {
    const auto cfg = testing::write_file(dir_ / "a.yaml", "device: cpu\nmodels: [gpt2-test]\n"
                                         "grid:\n  seq: 8\n  alloc_conf: [\"\", \"" + conf + "\"]\n");
    const UserError e = load_error(cfg);
    EXPECT_EQ(e.file() + ":" + std::to_string(e.line()) + ":" + e.key(), cfg + ":5:grid.alloc_conf") << conf;
    EXPECT_FALSE(e.hint().empty());
  }
  for (const std::string good : {"expandable_segments:True", "max_split_size_mb:64,garbage_collection_threshold:0.6",
                                 "backend:cudaMallocAsync", "''"})
    EXPECT_NO_THROW(load_config(config_, {"grid.alloc_conf=" + good})) << good;
  // An override names itself as typed, not a generated file.
  const std::string args = "run " + config_ + " --dry-run grid.alloc_conf=expandable_segments:True,foo";
  const Outcome o = sweep(args);
  expect_clean(o, args);
  EXPECT_NE(o.err.find("error: command line: grid.alloc_conf=expandable_segments:True,foo: "
                       "PYTORCH_CUDA_ALLOC_CONF=\"expandable_segments:True,foo\": Unrecognized key 'foo'"),
            std::string::npos) << o.err;
  EXPECT_NE(o.err.find("hint: "), std::string::npos) << o.err;
}

// Issue 23, 7: overrides are applied in memory: nothing is written to the temporary directory
// (a link planted at the old predictable name is left alone), and errors name the override.
TEST_F(HostileInput, OverridesWriteNoTemporaryFile) {
  const fs::path tmp = dir_ / "tmp", victim = dir_ / "victim.txt";
  fs::create_directories(tmp);
  testing::write_file(victim, "precious\n");
  const std::vector<std::string> overrides = {"grid.batch=2", "steps=1", "repetitions=1", "warmup_steps=0"};
  std::string given;
  for (const auto& o : overrides) given += " " + o;
  const std::string old_name = "sweep-config-" + fnv1a_hex(apply_overrides(config_, overrides)) + ".yaml";
  fs::create_symlink(victim, tmp / old_name);
  const std::string env = "TMPDIR=" + tmp.string() + " ";
  const fs::path out = dir_ / "out";
  for (const std::string args : {"run " + config_ + " --dry-run --out " + out.string() + given,
                                 "run " + config_ + " -q --out " + out.string() + given}) {
    const Outcome o = sweep_env(env, args);
    expect_clean(o, args, {0});
    EXPECT_EQ(std::distance(fs::directory_iterator(tmp), fs::directory_iterator{}), 1) << args;
    EXPECT_EQ(slurp(victim), "precious\n") << args;
  }
  // The run keeps the config it ran beside its results.
  ASSERT_TRUE(fs::is_directory(out / "configs"));
  EXPECT_EQ(slurp(*fs::directory_iterator(out / "configs")), apply_overrides(config_, overrides));
  // Errors name the override as typed: its value, a key it adds, a mapping it gives.
  for (const auto& [bad, field] : {std::pair{"grid.batch=0", ""}, {"nosuch=1", ""}, {"grid={batch: x}", "grid.batch: "},
                                   {"steps=1e12", ""}, {"models=[=cmd]", ""}, {"gpu.name==1+1", ""}}) {
    const UserError e = load_error(config_, {"steps=2", bad});
    EXPECT_EQ(e.file() + ":" + std::to_string(e.line()) + ":" + e.key(), "command line:0:" + std::string(bad))
        << e.located();
    EXPECT_EQ(std::string(e.what()).rfind(field, 0), 0u) << e.located();
  }
  const Outcome o = sweep_env(env, "run " + config_ + " --dry-run grid.seq=0");
  EXPECT_NE(o.err.find("error: command line: grid.seq=0: must be at least 1, got 0"), std::string::npos) << o.err;
  // An error in the file itself keeps naming the file's line.
  const auto cfg = testing::write_file(dir_ / "l.yaml", "device: cpu\nmodels: [gpt2-test]\ngrid: {seq: 8, batch: 1}\nexclude: [{batch: x}]\n");
  const UserError e = load_error(cfg, {"steps=2"});
  EXPECT_EQ(e.file() + ":" + std::to_string(e.line()) + ":" + e.key(), cfg + ":4:exclude.batch");
}

// Issue 23, 8: no cell of a CSV written for spreadsheets is a formula, whatever the model
// names in the results; compare's mark is a word.
TEST_F(HostileInput, SpreadsheetCsvsHoldNoFormula) {
  auto rename = [&](const std::string& fixture, const std::string& name) {
    std::string text = slurp(std::string(SWEEP_TEST_DATA) + "/" + fixture);
    for (const auto& [from, to] : {std::pair{std::string(",gpt2,gpt2,"), ",=1+1,gpt2,"},
                                   {",gpt2-medium,gpt2,", ",@SUM(A1),gpt2,"},
                                   {",t5-small,t5,", ",-2+3+cmd|' /C calc'!A0,t5,"}})
      for (std::size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
    return testing::write_file(dir_ / name, text);
  };
  const auto base = rename("compare_base.csv", "base.csv"), slow = rename("compare_slow.csv", "slow.csv");
  const auto ties = rename("recommend_ties.csv", "ties.csv");
  const fs::path exported = dir_ / "export";
  EXPECT_EQ(sweep("compare " + base + " " + slow + " --export " + exported.string()).code, 1);  // a regression
  expect_clean(sweep("recommend " + ties + " --memory-gib 24 --out " + exported.string()), "recommend", {0});
  for (const char* file : {"compare.csv", "recommendations.csv"}) {
    const std::string text = slurp(exported / file);
    ASSERT_FALSE(text.empty()) << file;
    std::size_t neutralised = 0;
    std::stringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      // Cells: split at commas outside quotes, quotes removed.
      std::vector<std::string> cells(1);
      bool quoted = false;
      for (char c : line) {
        if (c == '"') quoted = !quoted;
        else if (c == ',' && !quoted) cells.emplace_back();
        else cells.back() += c;
      }
      for (const auto& cell : cells) {
        if (cell.empty() || std::string("=+-@\t\r").find(cell[0]) == std::string::npos) {
          neutralised += cell.size() > 1 && cell[0] == '\'';
          continue;
        }
        char* end = nullptr;
        std::strtod(cell.c_str(), &end);
        EXPECT_EQ(*end, '\0') << file << ": a formula cell '" << cell << "' in\n" << line;
      }
    }
    EXPECT_GT(neutralised, 0u) << file << ":\n" << text;
  }
  const std::string compare = slurp(exported / "compare.csv");
  EXPECT_NE(compare.find("\nworse,regression,"), std::string::npos) << compare;
  EXPECT_NE(compare.find("'=1+1"), std::string::npos) << compare;
}

// A torn line in one shard loses that line only: the shard's other rows are merged, and the
// warning names the file and the line.
TEST_F(HostileInput, MergeKeepsTheGoodLinesOfATornShard) {
  const fs::path out = dir_ / "merged";
  fs::create_directories(out / "shards");
  const std::string good = slurp(results_);
  std::stringstream lines(good);
  std::vector<std::string> all;
  for (std::string l; std::getline(lines, l);) all.push_back(l);
  ASSERT_GE(all.size(), 4u);
  // header, row 1, a row cut in half, the other rows (a task killed, then run again).
  std::string torn = all[0] + "\n" + all[1] + "\n" + all[2].substr(0, all[2].size() / 2) + "\n";
  for (std::size_t i = 3; i < all.size(); ++i) torn += all[i] + "\n";
  testing::write_file(out / "shards" / "task-0.csv", torn);
  const std::string args = "merge " + out.string();
  const Outcome o = sweep(args);
  expect_clean(o, args, {0, 1});
  EXPECT_NE(o.err.find("warning: " + (out / "shards" / "task-0.csv").string() + ":3: "), std::string::npos)
      << o.err;
  std::stringstream merged(slurp(out / "results.csv"));
  std::size_t rows = 0;
  for (std::string l; std::getline(merged, l);) ++rows;
  EXPECT_EQ(rows, all.size() - 1) << "header + every row but the torn one";
}

// A plan.json with a field of the wrong type names the file and the field.
TEST_F(HostileInput, MalformedPlanNamesItsPathAndField) {
  const fs::path out = dir_ / "planned";
  fs::create_directories(out / "slurm");
  for (const auto& [plan, command] : {std::pair{R"({"tasks": 3, "fingerprint": "x"})", "status "},
                                      {R"({"tasks": [["a"]], "fingerprint": 7})", "merge "},
                                      {R"({"tasks": [[1]], "fingerprint": "x", "search": "yes"})", "status "},
                                      {"[1, 2]", "merge "}}) {
    testing::write_file(out / "slurm" / "plan.json", plan);
    for (const std::string args : {command + out.string()}) {
      const Outcome o = sweep(args);
      expect_clean(o, args);
      EXPECT_NE(o.err.find((out / "slurm" / "plan.json").string() + ": "), std::string::npos) << plan << "\n" << o.err;
      EXPECT_EQ(o.err.find("unexpected failure"), std::string::npos) << o.err;
    }
  }
}

// A gnuplot that fails, or exits 0 having written an empty image: the report says so (exit
// 2) and leaves no empty image behind.
TEST_F(HostileInput, FailedGnuplotLeavesNoEmptyImage) {
  const auto fake = testing::write_file(dir_ / "gnuplot", "#!/bin/sh\n: > \"${1%.gp}.png\"; : > \"${1%.gp}.svg\"; exit 0\n");
  fs::permissions(fake, fs::perms::owner_all);
  const fs::path out = dir_ / "report";
  const std::string args = "report " + results_ + " --out " + out.string();
  const Outcome o = sweep_env("SWEEP_GNUPLOT=" + fake + " ", args);
  expect_clean(o, args);
  EXPECT_NE(o.err.find("plots failed"), std::string::npos) << o.err;
  EXPECT_TRUE(fs::exists(out / "report.md"));
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".png" || e.path().extension() == ".svg")
      ADD_FAILURE() << "left behind: " << e.path();
}

// Floating flags: NaN, infinities and out-of-range values are refused on every command, with
// a readable message (no 309-digit number).
TEST_F(HostileInput, FloatingFlagsMustBeFiniteAndInRange) {
  const std::string fit = "fit gpt2-test --device cpu --out " + (dir_ / "f").string();
  for (const std::string args :
       {"recommend " + results_ + " --gpu rtx3060 --margin nan", "recommend " + results_ + " --gpu rtx3060 --context-gib -1",
        "report " + results_ + " --out " + (dir_ / "r").string() + " --gpu rtx3060 --margin inf",
        fit + " --memory-gib 0.05 --margin nan", fit + " --memory-gib 0.05 --context-gib nan",
        fit + " --memory-gib 0.05 --context-gib -1", fit + " --memory-gib 1e308",
        "fit whisper-test --device cpu --memory-gib 0.05 --audio-s nan --out " + (dir_ / "f").string()}) {
    const Outcome o = sweep(args);
    expect_clean(o, args);
    EXPECT_LT(o.err.size(), 400u) << o.err;
  }
  EXPECT_FALSE(fs::exists(dir_ / "f"));
  EXPECT_FALSE(fs::exists(dir_ / "r"));
}

}  // namespace
}  // namespace sweep
