// `sweep fit` and the time it takes (issues 25 and 26): the search seeded by the emulated
// prediction (2 probes a technique when exact, counted on the CPU with the emulator
// configured as the CPU), the progress lines (k/N, each probe's time, an ETA from the first
// probe on), the estimate of a second run (nothing left to run), the CPU only when asked, and
// Ctrl-C (the probes kept, the command to resume, exit 130, and the resume reusing them).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "reports/results/rows.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

// Two techniques (use_cache on and off) on a small card: a few probes of small batches.
const std::string kTiny =
    "gpt2-test --memory-gib 0.03 --device cpu --precision fp32 --optimizer adamw --checkpointing none";

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int data_rows(const fs::path& csv) {
  std::ifstream in(csv);
  int n = -1;  // the header
  for (std::string line; std::getline(in, line);) ++n;
  return std::max(n, 0);
}

TEST(SeededFit, AnExactPredictionOnTheCpuTakesTwoProbesATechnique) {
  const auto dir = testing::temp_dir("fit_seeded");
  const auto seeded = testing::run_sweep_cli_split("fit " + kTiny + " --json --out " + (dir / "seeded").string());
  ASSERT_EQ(seeded.exit_code, 0) << seeded.err;
  const auto plain = testing::run_sweep_cli_split("fit " + kTiny + " --no-prediction --json --out " +
                                                  (dir / "plain").string());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto s = nlohmann::json::parse(seeded.out), p = nlohmann::json::parse(plain.out);
  ASSERT_EQ(s["techniques"].size(), 2u);
  for (std::size_t i = 0; i < s["techniques"].size(); ++i) {
    const auto& t = s["techniques"][i];
    EXPECT_EQ(t["largest_batch"], p["techniques"][i]["largest_batch"]) << t.dump();
    EXPECT_EQ(t["first_oom"], p["techniques"][i]["first_oom"]) << t.dump();
    EXPECT_EQ(t["probes"].get<int>(), 2) << "the prediction is exact here: " << t.dump();
    EXPECT_GT(p["techniques"][i]["probes"].get<int>(), 2) << p["techniques"][i].dump();
  }
  // The predictions are reported, in their own file, and not counted as probes.
  EXPECT_EQ(s["probes"].get<int>(), 4);
  EXPECT_GT(s["predictions"].get<int>(), 0);
  EXPECT_EQ(p["predictions"].get<int>(), 0);
  EXPECT_EQ(data_rows(dir / "seeded" / "results.csv"), 4);
  EXPECT_EQ(data_rows(dir / "seeded" / "predictions.csv"), s["predictions"].get<int>());
  EXPECT_NE(s["probes_text"].get<std::string>().find("2.0 probes per search (4 in 2 searches), each seeded"),
            std::string::npos) << s["probes_text"];
  std::printf("seeded: %d probes (+%d emulated predictions); unseeded: %d probes\n",
              s["probes"].get<int>(), s["predictions"].get<int>(), p["probes"].get<int>());

  // Progress: k/~N from the start, each probe's time, an ETA from the first probe on, the
  // last line without one; the estimate before the first probe.
  const std::string& err = seeded.err;
  EXPECT_NE(err.find("2 techniques; about 4 probes to run (2 a search where the prediction is exact)"),
            std::string::npos) << err;
  EXPECT_NE(err.find("note: on the CPU each probe trains gpt2-test for real"), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(\n\[1/~4\] search 1/2: ok +gpt2-test b=\d+ .*, \d+\.\d\d s \| ETA \d+ s\n)")))
      << err;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(\n\[4/4\] search 2/2: oom \(backward, [0-9.]+ MiB asked\) gpt2-test .*, \d+\.\d\d s\n)"))) << err;
  EXPECT_NE(err.find("predicted " + s["techniques"][0]["largest_batch"].dump() +
                     " by the emulator configured as the CPU in "),
            std::string::npos) << err;

  // Again: everything is on record, so nothing is left to run (it used to estimate minutes).
  const auto again = testing::run_sweep_cli_split("fit " + kTiny + " --json --out " + (dir / "seeded").string());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("2 techniques; nothing to run: 2 of the 2 searches already answered in"),
            std::string::npos) << again.err;
  EXPECT_EQ(data_rows(dir / "seeded" / "results.csv"), 4);

  // A first fit into a new directory is estimated from the rows measured beside it on this
  // machine, on its device (before: no estimate on a first run).
  const auto first = testing::run_sweep_cli_split("fit " + kTiny + " --max-batch 2 --json --out " +
                                                  (dir / "third").string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_TRUE(std::regex_search(first.err, std::regex(R"(about 4 probes to run \(2 a search where the prediction is exact\); about \d+ s for them \(from \d+ rows measured in .*/seeded/results.csv)")))
      << first.err;
}

TEST(FitDevice, WithoutAGpuTheCpuMeasuresOnlyWhenAsked) {
  const auto dir = testing::temp_dir("fit_cpu_asked");
  // CUDA_VISIBLE_DEVICES= hides any GPU: this is the machine without one.
  const auto r = testing::run_sweep_cli("fit gpt2-test --memory-gib 0.05 --out " + (dir / "o").string(),
                                        "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("error: --memory-gib: no GPU here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint: name the card with --gpu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "o"));
}

// Ctrl-C: issue 25 found a header-only results.csv and nothing said. Batch 1 finishes, batch 2
// hangs (the test-only fault) until SIGINT.
TEST(FitInterrupt, CtrlCKeepsTheProbesSaysHowToResumeAndTheResumeReusesThem) {
  const auto dir = testing::temp_dir("fit_sigint");
  const fs::path out = dir / "out", err = dir / "stderr";
  const std::string args = "whisper-test --memory-gib 0.012 --device cpu --precision fp32 --optimizer adamw "
                           "--checkpointing none --no-prediction --out " + out.string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(e, 2);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    setenv("SWEEP_TEST_FAULT", "hang@2", 1);
    execl("/bin/sh", "sh", "-c", ("exec " + std::string(SWEEP_BINARY) + " fit " + args).c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (data_rows(out / "results.csv") < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(data_rows(out / "results.csv"), 1) << slurp(err);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // batch 2 is in flight
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string text = slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 130) << text;
  EXPECT_NE(text.find("\ninterrupted: 1 probe kept in " + (out / "results.csv").string()),
            std::string::npos) << text;
  EXPECT_NE(text.find("hint: resume with the same command, which reuses them:\n  " +
                      std::string(SWEEP_BINARY) + " fit " + args + "\n"),
            std::string::npos) << text;
  EXPECT_EQ(data_rows(out / "results.csv"), 1) << "the probe in flight left a row";

  // The command it printed, without the fault: batch 1 is reused, the search finishes.
  const auto resumed = testing::run_sweep_cli("fit " + args);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(std::regex_search(resumed.output,
                                std::regex(R"(\[1/~\d+\] search 1/1: done +whisper-test b=1 .*already in)")))
      << resumed.output;
  const auto results = reports::read_results(out.string());
  int batch_one = 0;
  for (const auto& r : results.rows)
    batch_one += r.number(schema::column("batch")) == 1.0;
  EXPECT_EQ(batch_one, 1) << "batch 1 was measured again";
}

}  // namespace
}  // namespace sweep
