// `sweep run --slurm` against a real slurmctld + slurmd: the throw-away one-host cluster
// that ctest's slurm_cluster fixture starts (tests/slurm/cluster.sh; two fake GPUs). Each
// test submits the tiny CPU models, waits (bounded) for the array and its merge job to leave
// the queue, and reads what landed in the output directory.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "reports/results/rows.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using reports::read_results;
using schema::column;
using Clock = std::chrono::steady_clock;

// A shell command's exit code and output (stdout + stderr).
testing::CommandResult sh(const std::string& cmd) {
  testing::CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Submission {
  std::string array, merge;
};

// The job ids `sweep run --slurm` printed; empty when it did not submit.
Submission submitted(const std::string& output) {
  std::smatch m;
  static const std::regex re(R"(submitted array job (\d+) .* and merge job (\d+))");
  if (!std::regex_search(output, m, re)) return {};
  return {m[1], m[2]};
}

// Array tasks RUNNING now, by job id ("123_4").
std::set<std::string> running(const std::string& array) {
  std::set<std::string> ids;
  std::stringstream out(sh("squeue -h -r -t RUNNING -j " + array + " -o %i").output);
  for (std::string line; std::getline(out, line);)
    if (line.rfind(array + "_", 0) == 0) ids.insert(line);
  return ids;
}

// Rows per point id in DIR/results.csv, and their statuses.
std::map<std::string, std::vector<std::string>> statuses(const std::string& dir) {
  std::map<std::string, std::vector<std::string>> m;
  for (const auto& r : read_results(dir).rows) m[r.at(column("point_id"))].push_back(r.at(column("status")));
  return m;
}

std::string config(const fs::path& dir, const std::string& name, const std::string& grid,
                   const std::string& extra = "") {
  return testing::write_file(dir / (name + ".yaml"), "name: " + name + R"(
device: cpu
steps: 1
warmup_steps: 1
repetitions: 1
timeout_s: 120
models: [gpt2-test]
grid: )" + grid + "\n" + extra);
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("SWEEP_SLURM_DIR");
    ASSERT_TRUE(dir && *dir) << "SWEEP_SLURM_DIR is not set: run these tests through ctest (its "
                                "slurm_cluster fixture starts the cluster), or start one with "
                                "tests/slurm/cluster.sh start DIR and set SWEEP_SLURM_DIR=DIR";
    // scripts/setup.sh installs Slurm: its absence is a broken set-up, not a reason to pass.
    ASSERT_FALSE(fs::exists(fs::path(dir) / "absent"))
        << "no Slurm here: " << read_text(fs::path(dir) / "absent");
    ASSERT_TRUE(fs::exists(fs::path(dir) / "slurm.conf"))
        << "the slurm_cluster fixture did not start a cluster in " << dir;
    setenv("SLURM_CONF", (fs::path(dir) / "slurm.conf").c_str(), 1);
    cluster_ = dir;
    const auto idle = sh("sinfo -h -N -o %T");
    ASSERT_EQ(idle.output, "idle\n") << "the test cluster's node is not idle: " << idle.output;
  }
  // Nothing a failed test left queued may reach the next test.
  void TearDown() override {
    if (cluster_.empty()) return;
    sh("scancel --user=$(id -un)");
    wait_for([] { return sh("squeue -h").output.empty(); }, 30, "the queue to empty");
  }

  // Polls `done` every 200 ms for at most `seconds`; false (and a failure naming `what`) on
  // timeout, with the controller's and the node's log tails to say why.
  bool wait_for(const std::function<bool()>& done, int seconds, const std::string& what) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "timed out after " << seconds << " s waiting for " << what << "\nsqueue:\n"
                  << sh("squeue -r").output << "slurmctld.log:\n"
                  << sh("tail -n 15 " + cluster_ + "/log/slurmctld.log").output << "slurmd.log:\n"
                  << sh("tail -n 15 " + cluster_ + "/log/slurmd.log").output;
    return false;
  }
  // Waits until neither job of `s` is queued; returns the most array tasks seen running at once.
  std::size_t wait_done(const Submission& s, int seconds) {
    std::size_t most = 0;
    wait_for([&] {
      most = std::max(most, running(s.array).size());
      // Empty once both ended; "Invalid job id" once the controller forgot them.
      const std::string q = sh("squeue -h -j " + s.array + "," + s.merge).output;
      return q.empty() || q.find("Invalid job id") != std::string::npos;
    }, seconds, "array " + s.array + " and merge " + s.merge + " to finish");
    return most;
  }

  // A fresh folder for one test inside the cluster's (which is per build tree, so two
  // checkouts testing at once never share one).
  fs::path temp_dir(const std::string& name) {
    const fs::path dir = fs::path(cluster_) / "tests" / name;
    sweep::remove_tree(dir);
    fs::create_directories(dir);
    return dir;
  }

  std::string cluster_;
};

TEST_F(Slurm, ArrayOfTheTinyModelsGivesTheLocalRunsPointsEachOnceAndAReport) {
  auto dir = temp_dir("slurm_array");
  // Four combinations (checkpointing x optimizer), batches 1-8 under a budget that runs
  // out at some batch: OOM pruning inside a task must match the local run's.
  const auto cfg = config(dir, "slurm-array",
                          "{seq: 64, batch: [1, 2, 4, 8], checkpointing: [none, block], optimizer: [adamw, sgd]}",
                          "budget_gib: 0.0068\n");
  const std::string out = (dir / "slurm").string(), local = (dir / "local").string();
  auto r = testing::run_sweep_cli("run " + cfg + " --slurm --max-parallel 2 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Submission s = submitted(r.output);
  ASSERT_FALSE(s.array.empty()) << r.output;
  EXPECT_NE(r.output.find("--array=0-3%2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scancel " + s.array + " " + s.merge), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out + "/slurm/sweep.sbatch"));
  const std::size_t most = wait_done(s, 600);
  EXPECT_LE(most, 2u) << "more tasks than --max-parallel 2 ran at once";

  auto l = testing::run_sweep_cli("run " + cfg + " -q --out " + local);
  ASSERT_EQ(l.exit_code, 0) << l.output;
  const auto on_slurm = statuses(out), here = statuses(local);
  EXPECT_EQ(on_slurm.size(), 16u);
  std::set<std::string> kinds;
  for (const auto& [id, rows] : here) {
    ASSERT_TRUE(on_slurm.count(id)) << "point " << id << " is missing from the merged results";
    EXPECT_EQ(on_slurm.at(id).size(), 1u) << "point " << id << " merged more than once";
    EXPECT_EQ(on_slurm.at(id).front(), rows.front()) << "point " << id;
    kinds.insert(rows.front());
  }
  EXPECT_EQ(on_slurm.size(), here.size());
  EXPECT_TRUE(kinds.count("oom") && kinds.count("skipped")) << "the budget should prune something";
  // Every row says which array task measured it, and each task wrote its own shard.
  std::set<std::string> jobs;
  for (const auto& row : read_results(out).rows) jobs.insert(row.at(column("slurm_job")));
  EXPECT_EQ(jobs, (std::set<std::string>{s.array + "_0", s.array + "_1", s.array + "_2", s.array + "_3"}));
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(fs::exists(out + "/shards/task-" + std::to_string(t) + ".csv")) << t;
  EXPECT_NE(read_text(out + "/report.md").find("gpt2-test"), std::string::npos);
  auto st = testing::run_sweep_cli("status " + out);
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("total: 16/16 points recorded"), std::string::npos) << st.output;
  // A local run into the same output takes the shards in first and measures nothing again.
  fs::remove(out + "/results.csv");
  auto resumed = testing::run_sweep_cli("run " + cfg + " --out " + out);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("merged 16 rows from"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("] ok "), std::string::npos) << "a recorded point ran again:\n" << resumed.output;
  EXPECT_EQ(statuses(out), on_slurm);
  // Submitting again finds every point recorded and submits nothing.
  auto again = testing::run_sweep_cli("run " + cfg + " --slurm --out " + out);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to submit"), std::string::npos) << again.output;
}

TEST_F(Slurm, WithTwoGpusAndGresGpu1AtMostTwoTasksRunAndEachRecordsItsGpu) {
  auto dir = temp_dir("slurm_gres");
  const auto cfg = config(dir, "slurm-gres", "{seq: 64, batch: 2, checkpointing: [none, block], "
                                             "optimizer: [adamw, sgd], precision: fp32}");
  const std::string out = (dir / "out").string();
  auto r = testing::run_sweep_cli("run " + cfg + " --slurm --gres gpu:1 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Submission s = submitted(r.output);
  ASSERT_FALSE(s.array.empty()) << r.output;
  EXPECT_NE(read_text(out + "/slurm/sweep.sbatch").find("#SBATCH --gres=gpu:1"), std::string::npos);
  const std::size_t most = wait_done(s, 600);
  // No %N: only the node's two GPUs hold the four tasks back.
  EXPECT_LE(most, 2u) << "more tasks ran at once than there are GPUs";
  EXPECT_EQ(most, 2u) << "the two GPUs were never used at once";
  std::map<std::string, std::string> gpu_of_task;
  const auto rows = read_results(out).rows;
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.at(column("status")), "ok") << row.at(column("message"));
    const std::string gpus = row.at(column("slurm_gpus"));
    EXPECT_TRUE(gpus == "0" || gpus == "1") << "task " << row.at(column("slurm_job")) << " recorded GPUs '"
                                            << gpus << "': one of the two, as Slurm gave it";
    gpu_of_task[row.at(column("slurm_job"))] = gpus;
  }
  EXPECT_EQ(gpu_of_task.size(), 4u);
  std::set<std::string> used;
  for (const auto& [task, gpu] : gpu_of_task) used.insert(gpu);
  EXPECT_EQ(used, (std::set<std::string>{"0", "1"}));
}

TEST_F(Slurm, CancelledTaskLosesOnlyItsPointInFlightAndResubmissionCompletesEachPointOnce) {
  auto dir = temp_dir("slurm_cancel");
  const auto cfg = config(dir, "slurm-cancel", "{seq: 64, batch: [1, 2, 3, 4, 5], checkpointing: [none, block]}");
  const std::string out = (dir / "out").string();
  const std::string command = "run " + cfg + " --slurm --max-parallel 2 --out " + out;
  auto r = testing::run_sweep_cli(command);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Submission s = submitted(r.output);
  ASSERT_FALSE(s.array.empty()) << r.output;
  // Cancel task 0 once it has recorded a point and is measuring the next.
  const fs::path shard = fs::path(out) / "shards" / "task-0.csv";
  auto rows_in = [](const fs::path& f) {
    std::ifstream in(f);
    int n = -1;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  ASSERT_TRUE(wait_for([&] { return rows_in(shard) >= 1; }, 300, "task 0's first row"));
  ASSERT_TRUE(running(s.array).count(s.array + "_0")) << "task 0 is not running";
  ASSERT_EQ(sh("scancel " + s.array + "_0").exit_code, 0);
  wait_done(s, 600);
  const int kept = rows_in(shard);
  EXPECT_LT(kept, 5) << "task 0 finished before it was cancelled: nothing was tested";
  EXPECT_GE(kept, 1);

  // The merge job ran after the cancelled task and named what is missing.
  std::string merge_log;
  for (const auto& e : fs::directory_iterator(fs::path(out) / "slurm" / "logs"))
    if (e.path().filename().string().rfind("merge-", 0) == 0) merge_log = read_text(e.path());
  EXPECT_NE(merge_log.find("points are missing"), std::string::npos) << merge_log;
  EXPECT_NE(merge_log.find("task 0: gpt2-test"), std::string::npos) << merge_log;
  EXPECT_EQ(read_results(out).rows.size(), static_cast<std::size_t>(5 + kept));
  auto st = testing::run_sweep_cli("status " + out);
  EXPECT_NE(st.output.find(std::to_string(kept) + "/5"), std::string::npos) << st.output;

  // Submitting the same again runs task 0 only, and only its points not yet recorded.
  auto again = testing::run_sweep_cli(command);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("(1 tasks, --array=0%2)"), std::string::npos) << again.output;
  wait_done(submitted(again.output), 600);
  const auto merged = statuses(out);
  EXPECT_EQ(merged.size(), 10u);
  for (const auto& [id, rows] : merged) {
    EXPECT_EQ(rows.size(), 1u) << "point " << id << " merged more than once";
    EXPECT_EQ(rows.front(), "ok") << id;
  }
  EXPECT_EQ(rows_in(shard), 5) << "task 0 measured a point it had already recorded";
  EXPECT_TRUE(fs::exists(out + "/report.md"));
}

// Issue 23, 1: values with quotes, $(), backticks, '#', a backslash and spaces reach Slurm as
// they were given (sbatch's #SBATCH parser reads the quoting back), and run nothing.
TEST_F(Slurm, HostileValuesReachSlurmUnchangedAndRunNothing) {
  auto dir = temp_dir("slurm_hostile");
  const std::string marker = (dir / "PWNED").string();
  // A name is one folder name (no '/'): its commands touch PWNED in the working directory.
  const std::string name = "it's $(touch PWNED) `touch PWNED` a  b #c ü";
  const auto cfg = testing::write_file(dir / "c.yaml", "name: \"" + name + "\"\ndevice: cpu\n"
                                       "models: [gpt2-test]\ngrid: {seq: 8, batch: 1}\n");
  const std::string comment = "back\\slash \"dq\" 'sq' $(touch " + marker + ") #hash";
  // The comment through the shell: single-quoted for sh, its own quotes closed and escaped.
  std::string quoted = "'--comment=";
  for (char c : comment) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string out = (dir / "o ut").string();
  auto r = testing::run_sweep_cli("run " + cfg + " --slurm --sbatch-arg=--hold --sbatch-arg " + quoted +
                                  " --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Submission s = submitted(r.output);
  ASSERT_FALSE(s.array.empty()) << r.output;
  for (const auto& [job, job_name] : {std::pair{s.array, "sweep-" + name}, {s.merge, "sweep-" + name + "-merge"}}) {
    const std::string shown = sh("scontrol show job " + job).output;
    EXPECT_NE(shown.find("JobName=" + job_name + "\n"), std::string::npos) << shown;
    EXPECT_NE(shown.find("Comment=" + comment), std::string::npos) << shown;
  }
  sh("scancel " + s.array + " " + s.merge);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_FALSE(fs::exists("PWNED"));
}

TEST_F(Slurm, MissingSbatchRejectedSubmissionAndUnwritableOutputExitTwoHavingSubmittedNothing) {
  auto dir = temp_dir("slurm_errors");
  const auto cfg = config(dir, "slurm-errors", "{seq: 64, batch: 1, checkpointing: [none, block]}");
  const std::string out = (dir / "out").string();
  auto queued = [] { return sh("squeue -h -n sweep-slurm-errors,sweep-slurm-errors-merge").output; };

  // --dry-run writes the scripts and submits nothing.
  auto dry = testing::run_sweep_cli("run " + cfg + " --slurm --dry-run --max-parallel 3 --time 00:05:00 "
                                    "--sbatch-arg=--comment=dry --out " + out);
  EXPECT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("nothing submitted"), std::string::npos) << dry.output;
  const std::string script = read_text(out + "/slurm/sweep.sbatch");
  for (const char* line : {"#SBATCH --array=0-1%3\n", "#SBATCH --time=00:05:00\n", "#SBATCH --comment=dry\n",
                           "--slurm-task \"$SLURM_ARRAY_TASK_ID\""})
    EXPECT_NE(script.find(line), std::string::npos) << line << " not in\n" << script;
  EXPECT_NE(read_text(out + "/slurm/merge.sbatch").find(" merge " + out + "\n"), std::string::npos);
  EXPECT_EQ(queued(), "");

  auto no_sbatch = testing::run_sweep_cli("run " + cfg + " --slurm --out " + out, "PATH=/nonexistent");
  EXPECT_EQ(no_sbatch.exit_code, 2) << no_sbatch.output;
  EXPECT_NE(no_sbatch.output.find("sbatch is not on the PATH"), std::string::npos) << no_sbatch.output;
  EXPECT_NE(no_sbatch.output.find("hint: "), std::string::npos) << no_sbatch.output;
  EXPECT_EQ(queued(), "");

  auto rejected = testing::run_sweep_cli("run " + cfg + " --slurm --partition no-such-partition --out " + out);
  EXPECT_EQ(rejected.exit_code, 2) << rejected.output;
  EXPECT_NE(rejected.output.find("submission was rejected"), std::string::npos) << rejected.output;
  EXPECT_NE(rejected.output.find("invalid partition"), std::string::npos) << rejected.output;
  EXPECT_EQ(queued(), "");

  // The array is accepted, the merge job is not (an sbatch in front of the real one refuses
  // dependent jobs): the array is cancelled again and nothing stays queued.
  const std::string real = sh("command -v sbatch").output;
  fs::create_directories(dir / "bin");
  testing::write_file(dir / "bin" / "sbatch", "#!/bin/sh\ncase \"$*\" in *--dependency=*) echo 'sbatch: error: "
                      "Batch job submission failed: refused by the test' >&2; exit 1;; esac\nexec " +
                      real.substr(0, real.find('\n')) + " \"$@\"\n");
  fs::permissions(dir / "bin" / "sbatch", fs::perms::owner_all);
  auto half = testing::run_sweep_cli("run " + cfg + " --slurm --out " + out,
                                     "PATH=" + (dir / "bin").string() + ":$PATH");
  EXPECT_EQ(half.exit_code, 2) << half.output;
  EXPECT_NE(half.output.find("refused by the test"), std::string::npos) << half.output;
  wait_for([&] { return queued().empty(); }, 30, "the half-submitted array to be cancelled");

  auto unwritable = testing::run_sweep_cli("run " + cfg + " --slurm --out /dev/null/out");
  EXPECT_EQ(unwritable.exit_code, 2) << unwritable.output;
  EXPECT_NE(unwritable.output.find("cannot create or write"), std::string::npos) << unwritable.output;
  EXPECT_EQ(queued(), "");
}

}  // namespace
}  // namespace sweep
