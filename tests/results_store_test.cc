// The results file on a full disk: a failed append leaves the file exactly as it was (no
// half row that every reader then refuses), and `sweep run` stops with a clear message.
// The disk is made "full" with RLIMIT_FSIZE (SIGXFSZ ignored, so write(2) fails with
// EFBIG), which needs no mount and works for any user.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "reports/results/rows.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/runner/results_store.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

nlohmann::json row(const std::string& id, const std::string& message) {
  return {{"schema_version", 1}, {"point_id", id},   {"model", "gpt2-test"},
          {"status", "ok"},      {"batch", 1},       {"peak_allocated_bytes", 1024},
          {"peak_reserved_bytes", 2048},              {"message", message}};
}

// A sweep of gpt2-test points, one step each.
std::string one_step_config(const fs::path& dir, const std::string& device, const std::string& axes) {
  return testing::write_file(dir / "tiny.yaml", "device: " + device +
                                                    "\nsteps: 1\nwarmup_steps: 0\nrepetitions: 1\n"
                                                    "models: [gpt2-test]\ngrid: {seq: 8, " + axes + "}\n");
}

// Lowers the file-size limit for the scope, with SIGXFSZ ignored.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &r), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

// A results file an older sweep wrote (fewer columns: those added since) is rewritten under
// this header when a run opens it, each row's cells where they were and the new ones empty,
// the file as it was kept beside it; its points count as recorded, and new rows follow. A file
// with a column this sweep does not know is refused and left alone.
TEST(ResultsStore, AnOlderSweepsFileTakesThisHeaderAndIsKeptAsItWas) {
  const auto dir = testing::temp_dir("results-older");
  // Some of this schema's columns, in its order: what an older sweep's file has of them.
  const std::string older_header =
      "schema_version,point_id,model,batch,status,message,peak_allocated_bytes,peak_reserved_bytes";
  const std::string older_row = "1,a1,gpt2-test,1,ok,\"x, y\",1024,2048";
  const std::string older = older_header + "\n" + older_row + "\n";
  testing::write_file(dir / "results.csv", older);
  {
    ResultsStore store(dir.string());
    EXPECT_EQ(store.rows(), 1u);
    ASSERT_NE(store.outcome("a1"), nullptr);
    store.append(row("b2", "new"));
  }
  std::ifstream kept(dir / "results.csv.schema-1");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), older);
  const auto results = reports::read_results((dir / "results.csv").string());
  ASSERT_EQ(results.rows.size(), 2u);
  EXPECT_EQ(results.rows[0].at(schema::column("message")), "x, y");
  EXPECT_EQ(results.rows[0].at(schema::column("padding_free")), "");
  EXPECT_EQ(results.rows[1].at(schema::column("point_id")), "b2");
  std::ifstream now(dir / "results.csv");
  std::string first;
  std::getline(now, first);
  EXPECT_EQ(first, ResultsStore::header());

  const auto other = testing::temp_dir("results-newer");
  const std::string newer = ResultsStore::header() + ",a_later_column\n";
  testing::write_file(other / "results.csv", newer);
  try {
    ResultsStore store(other.string());
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 1);
    EXPECT_NE(std::string(e.what()).find("another schema"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(other / "results.csv.schema-1"));
}

TEST(ResultsStore, AFailedAppendLeavesTheFileAsItWas) {
  auto dir = testing::temp_dir("store_full");
  ResultsStore store(dir.string());
  store.append(row("00000000000000a1", "first"));
  const auto size = fs::file_size(store.path());
  {
    // Room for part of the next row only: the write is short, then fails.
    FileSizeLimit limit(size + 20);
    try {
      store.append(row("00000000000000a2", std::string(200, 'x')));
      ADD_FAILURE() << "the append did not fail";
    } catch (const UserError& e) {
      EXPECT_EQ(e.file(), store.path());
      EXPECT_NE(std::string(e.what()).find("cannot append a row: File too large"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("the file is left as it was"), std::string::npos);
      EXPECT_NE(e.hint().find("free space"), std::string::npos);
    }
  }
  EXPECT_EQ(fs::file_size(store.path()), size);
  const auto rows = reports::read_results(store.path()).rows;
  ASSERT_EQ(rows.size(), 1u);
  // With space again, the next row lands whole after the first.
  store.append(row("00000000000000a3", "third"));
  EXPECT_EQ(reports::read_results(store.path()).rows.size(), 2u);
}

// A crash and a timeout are kept (the report shows them) but are no result on resume: their
// cause may be gone (the answer of a fit they stopped says to fix it and run again), so a
// resumed run measures them again; within the run that recorded them they are not retried.
// An OOM and a skip are answers and stay.
TEST(ResultsStore, ACrashOrATimeoutIsMeasuredAgainOnResume) {
  const auto dir = testing::temp_dir("results_failed_again");
  const std::map<std::string, std::string> statuses = {{"00000000000000b1", "ok"},
                                                       {"00000000000000b2", "oom"},
                                                       {"00000000000000b3", "skipped"},
                                                       {"00000000000000b4", "crash"},
                                                       {"00000000000000b5", "timeout"}};
  {
    ResultsStore store(dir.string());
    for (const auto& [id, status] : statuses) {
      auto r = row(id, status);
      r["status"] = status;
      store.append(r);
      EXPECT_NE(store.outcome(id), nullptr) << status;  // this run does not retry it
    }
  }
  ResultsStore resumed(dir.string());
  for (const auto& [id, status] : statuses)
    EXPECT_EQ(resumed.outcome(id) != nullptr, status != "crash" && status != "timeout") << status;
  // The latest row counts, as in every reader: a re-run (--force) that crashed after an answer
  // runs again; one that answered after a crash is the result.
  {
    ResultsStore store(dir.string());
    auto forced = row("00000000000000b1", "forced");
    forced["status"] = "crash";
    store.append(forced);
    auto again = row("00000000000000b4", "again");
    again["status"] = "oom";
    store.append(again);
  }
  ResultsStore last(dir.string());
  EXPECT_EQ(last.outcome("00000000000000b1"), nullptr);
  ASSERT_NE(last.outcome("00000000000000b4"), nullptr);
  EXPECT_EQ(last.outcome("00000000000000b4")->status, Status::kOom);
}

// A row whose worker never ran is kept (the failure is seen) but is no result: a resumed
// run runs that point again; other rows are recalled as before.
TEST(ResultsStore, ARowWhoseWorkerNeverRanIsNoResultOnResume) {
  const auto dir = testing::temp_dir("results_not_started");
  {
    ResultsStore store(dir.string());
    store.append(row("00000000000000a1", "ran"));
    auto never = row("00000000000000a2", "could not start the worker: /nonexistent");
    never["status"] = "crash";
    never["reason"] = kNotStartedReason;
    store.append(never);
    EXPECT_NE(store.outcome("00000000000000a2"), nullptr);  // this run does not retry it
  }
  ResultsStore resumed(dir.string());
  EXPECT_NE(resumed.outcome("00000000000000a1"), nullptr);
  EXPECT_EQ(resumed.outcome("00000000000000a2"), nullptr);
  // And the isolation says so of a worker that could not be exec'd.
  Point p;
  p.model = "gpt2-test";
  p.timeout_s = 30;
  IsolateOptions iso;
  iso.exe = (dir / "no-such-sweep").string();
  iso.log_path = (dir / "point.log").string();
  const WorkerResult r = run_isolated(p, iso);
  EXPECT_EQ(r.status, Status::kCrash);
  EXPECT_FALSE(r.started) << r.message;
}

// A results.csv that is a FIFO is refused by name ("cannot get file size: Operation not
// supported" before), without waiting for a writer.
TEST(ResultsStore, AFifoResultsFileIsRefusedByName) {
  const auto dir = testing::temp_dir("results_fifo");
  ASSERT_EQ(::mkfifo((dir / "results.csv").c_str(), 0644), 0);
  try {
    ResultsStore store(dir.string());
    ADD_FAILURE() << "a FIFO was taken for a results file";
  } catch (const UserError& e) {
    EXPECT_EQ(e.file(), (dir / "results.csv").string());
    EXPECT_NE(std::string(e.what()).find("not a regular file (a FIFO)"), std::string::npos) << e.what();
  }
}

TEST(ResultsStore, AKeyThatIsNoColumnIsAnInternalError) {
  EXPECT_EQ(ResultsStore::format_row({{"model", "gpt2"}, {"status", "ok"}}).find("gpt2"), 3u);
  EXPECT_DEATH(ResultsStore::format_row({{"model", "gpt2"}, {"peak_alocated_bytes", 1}}),
               "internal check failed: .*'peak_alocated_bytes' is not a results column");
}

TEST(ResultsStore, ARunOnAFullDiskStopsWithAMessageAndKeepsWholeRows) {
  auto dir = testing::temp_dir("store_full_cli");
  auto cfg = one_step_config(dir, "cpu", "batch: [1, 2, 3]");
  // The limit: the header and the first row fit, the second row does not (sweep ignores
  // SIGXFSZ itself, so the limit shows as EFBIG). Taken from an unlimited run of the same
  // config, so that it holds whatever the columns are.
  auto probe = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "probe").string());
  ASSERT_EQ(probe.exit_code, 0) << probe.output;
  std::ifstream probe_csv(dir / "probe" / "results.csv");
  std::string header, first, second;
  std::getline(probe_csv, header);
  std::getline(probe_csv, first);
  std::getline(probe_csv, second);
  const std::size_t limit = header.size() + first.size() + 2 + second.size() / 2;
  auto r = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "out").string(),
                                  "prlimit --fsize=" + std::to_string(limit) + ":");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot append a row: File too large; the file is left as it was"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("hint: free space"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  // Every row there is whole: the file reads, and a re-run with space finishes it.
  const auto kept = reports::read_results((dir / "out").string()).rows.size();
  EXPECT_EQ(kept, 1u);
  auto again = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "out").string());
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(reports::read_results((dir / "out").string()).rows.size(), 3u);
}

TEST(ResultsStore, OpenFailureAndHeldLockAreToldApart) {
  auto dir = testing::temp_dir("store_lock");
  auto cfg = testing::write_file(dir / "tiny.yaml",
                                 "device: cpu\nmodels: [gpt2-test]\ngrid: {seq: 8, batch: 1}\n");
  // /proc exists but nothing can be created in it, whoever runs the test (root included).
  auto ro = testing::run_sweep_cli("run " + cfg + " --out /proc");
  EXPECT_EQ(ro.exit_code, 2) << ro.output;
  EXPECT_NE(ro.output.find("error: /proc/.lock: out: cannot open the lock file"), std::string::npos)
      << ro.output;
  EXPECT_EQ(ro.output.find("another sweep"), std::string::npos) << ro.output;

  fs::create_directories(dir / "out");
  const int fd = open((dir / "out" / ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  auto held = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "out").string());
  close(fd);
  EXPECT_EQ(held.exit_code, 2) << held.output;
  EXPECT_NE(held.output.find("another sweep is writing to"), std::string::npos) << held.output;
}

TEST(RunBoundary, AnUncreatableOutputDirectoryNamesThePathAndTheCause) {
  auto dir = testing::temp_dir("boundary");
  auto cfg = testing::write_file(dir / "tiny.yaml",
                                 "device: cpu\nmodels: [gpt2-test]\ngrid: {seq: 8, batch: 1}\n");
  auto r = testing::run_sweep_cli("run " + cfg + " --out /proc/nope/out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("error: /proc/nope/out: --out: cannot create the directory: No such file or directory"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("hint: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

// With several lanes (--gpus, and an emulated card's one lane per core) a failure in one
// runner thread (here the full disk) used to end the process with `terminate called`; now every
// thread stops and the run ends with the message. The emulated card's lanes are the same
// threads as --gpus's (run_lanes), so this runs without a GPU: --gpus 0,0, which it took on a
// one-GPU host, is refused since two lanes on one GPU measure each other.
TEST(RunBoundary, AFailureInALaneThreadEndsTheRunWithAMessage) {
  auto dir = testing::temp_dir("boundary_lanes");
  auto cfg = testing::write_file(dir / "tiny.yaml",
                                 "device: emulated\ngpu: rtx3060\nsteps: 1\nwarmup_steps: 0\n"
                                 "repetitions: 1\nmodels: [gpt2-test]\n"
                                 "grid: {seq: 8, batch: [1, 2, 3, 4], precision: [fp32, bf16]}\n");
  auto probe = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "probe").string());
  ASSERT_EQ(probe.exit_code, 0) << probe.output;
  std::ifstream probe_csv(dir / "probe" / "results.csv");
  std::string header, first;
  std::getline(probe_csv, header);
  std::getline(probe_csv, first);
  const std::size_t limit = header.size() + first.size() + 2 + first.size() / 2;
  auto r = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "out").string(),
                                  "prlimit --fsize=" + std::to_string(limit) + ":");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot append a row"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_NO_THROW(reports::read_results((dir / "out").string()));
}

}  // namespace
}  // namespace sweep
