// Every subcommand against bad input: a missing, unreadable, empty, binary or truncated
// file, a directory where a file belongs, an output it cannot write, another run holding
// the lock, a worker handed bad JSON. Each must end with exit code 0, 1 or 2 and (unless
// 0) a message on stderr; never a signal, `terminate called` or a stack trace.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

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
Outcome run(const fs::path& dir, const std::string& args) {
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = std::string(SWEEP_BINARY) + " " + args + " </dev/null >" +
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

}  // namespace
}  // namespace sweep
