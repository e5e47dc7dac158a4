// The pre-loaded worker (sweeps/runner/zygote.h) changes nothing but time: a child starts
// as an exec'd worker starts, a point's outcome and measurement are the exec'd worker's, a
// crash, a hang or a point's memory leave the zygote and the next point alone, and a dead
// zygote or a changed environment gets a fresh one.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <thread>

#include "reports/results/rows.h"
#include "sweeps/runner/budget.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/runner/zygote.h"
#include "test_util.h"

namespace sweep {
namespace {

Point tiny_point(int64_t batch = 1) {
  Point p;
  p.model = "gpt2-test";
  p.family = "gpt2";
  p.batch = batch;
  p.seq = 16;
  p.device = Device::kCpu;
  p.steps = 1;
  p.warmup_steps = 0;
  p.repetitions = 1;
  p.timeout_s = 120;
  return p;
}

IsolateOptions options(const std::filesystem::path& dir, Zygote* zygote,
                       std::map<std::string, std::string> env = {}) {
  IsolateOptions o;
  o.exe = SWEEP_BINARY;
  o.log_path = (dir / "point.log").string();
  o.env = std::move(env);
  o.zygote = zygote;
  return o;
}

int64_t resident_bytes(pid_t pid) {
  long pages = 0, resident = 0;
  std::ifstream("/proc/" + std::to_string(pid) + "/statm") >> pages >> resident;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

int threads_of(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// The columns a point measures about memory (everything but time).
const char* kMemoryColumns[] = {"status", "peak_allocated_bytes", "peak_reserved_bytes",
                                "weights_bytes", "grads_bytes", "optimizer_bytes",
                                "activations_bytes", "peak_phase", "forward_peak_bytes",
                                "backward_peak_bytes", "optimizer_peak_bytes", "at_peak_weights_bytes",
                                "at_peak_grads_bytes", "at_peak_optimizer_bytes", "leak_bytes_per_step",
                                "allocator_settings"};

TEST(Zygote, ChildStartsAsAnExecdWorker) {
  const auto dir = testing::temp_dir("zygote_state");
  // The allocator configuration is read lazily from the point's environment, as in an exec'd
  // worker (the zygote read none of it).
  const std::map<std::string, std::string> env = {
      {"SWEEP_TEST_FAULT", "state"}, {"PYTORCH_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:64"}};
  const WorkerResult execd = run_isolated(tiny_point(), options(dir, nullptr, env));
  Zygote zygote(SWEEP_BINARY);
  const WorkerResult forked = run_isolated(tiny_point(), options(dir, &zygote, env));
  ASSERT_GT(zygote.pid(), 0) << "the zygote did not start";
  ASSERT_EQ(execd.status, Status::kOk) << execd.message;
  ASSERT_EQ(forked.status, Status::kOk) << forked.message;
  nlohmann::json a = execd.record, b = forked.record;
  EXPECT_EQ(a["threads"], 1);
  EXPECT_EQ(a["alloc_conf"]["expandable_segments"], true);
  EXPECT_EQ(a["cpu_allocator_is_default"], true);
  // Resident bytes: LibTorch's pages, re-mapped in the child (zygote.cc, populate_pages).
  const double ra = a["resident_bytes"].get<double>(), rb = b["resident_bytes"].get<double>();
  EXPECT_NEAR(rb / ra, 1.0, 0.01) << "resident at entry: exec'd " << ra << " B, forked " << rb << " B";
  // The CPU generator seeds itself from the OS when first used: in the child, not the
  // zygote (else every child would draw the same numbers), so two children differ.
  const WorkerResult forked2 = run_isolated(tiny_point(), options(dir, &zygote, env));
  EXPECT_NE(forked2.record["cpu_generator_seed"], b["cpu_generator_seed"]);
  for (auto* r : {&a, &b})
    for (const char* key : {"resident_bytes", "cpu_generator_seed", "cpu_generator_draw"}) r->erase(key);
  for (const auto& [key, value] : a.items())
    EXPECT_EQ(value, b[key]) << key << ": exec'd " << value.dump() << ", forked " << b[key].dump();
  EXPECT_EQ(a.size(), b.size());
}

TEST(Zygote, CrashHangAndMemoryLeaveTheZygoteAndTheNextPointAlone) {
  const auto dir = testing::temp_dir("zygote_isolation");
  Zygote zygote(SWEEP_BINARY);
  const WorkerResult first = run_isolated(tiny_point(2), options(dir, &zygote));
  ASSERT_EQ(first.status, Status::kOk) << first.message;
  const pid_t zpid = zygote.pid();
  ASSERT_GT(zpid, 0);
  const int64_t zygote_resident = resident_bytes(zpid);

  const WorkerResult crash = run_isolated(tiny_point(), options(dir, &zygote, {{"SWEEP_TEST_FAULT", "crash"}}));
  EXPECT_EQ(crash.status, Status::kCrash);
  EXPECT_EQ(crash.signal, SIGSEGV);
  Point hang = tiny_point();
  hang.timeout_s = 2;
  const WorkerResult hung = run_isolated(hang, options(dir, &zygote, {{"SWEEP_TEST_FAULT", "hang"}}));
  EXPECT_EQ(hung.status, Status::kTimeout);
  const WorkerResult big = run_isolated(tiny_point(8), options(dir, &zygote));
  EXPECT_EQ(big.status, Status::kOk) << big.message;

  // The same point again, forked and exec'd: the same measurement.
  const WorkerResult again = run_isolated(tiny_point(2), options(dir, &zygote));
  const WorkerResult execd = run_isolated(tiny_point(2), options(dir, nullptr));
  ASSERT_EQ(again.status, Status::kOk) << again.message;
  ASSERT_EQ(execd.status, Status::kOk) << execd.message;
  for (const char* column : kMemoryColumns) {
    EXPECT_EQ(again.record.value(column, nlohmann::json()), execd.record.value(column, nlohmann::json()))
        << column;
    EXPECT_EQ(again.record.value(column, nlohmann::json()), first.record.value(column, nlohmann::json()))
        << column;
  }
  EXPECT_NEAR(again.record["device_used_bytes"].get<double>() / execd.record["device_used_bytes"].get<double>(),
              1.0, 0.01);
  // One zygote throughout, still one thread (no OpenMP pool, no CUDA), its memory unchanged
  // by what its children allocated.
  EXPECT_EQ(zygote.pid(), zpid);
  EXPECT_EQ(threads_of(zpid), 1);
  EXPECT_LE(std::abs(resident_bytes(zpid) - zygote_resident), 256 << 10)
      << "zygote resident " << zygote_resident << " B before, " << resident_bytes(zpid) << " B after";
}

TEST(Zygote, ADeadZygoteOrAChangedEnvironmentGetsAFreshOne) {
  const auto dir = testing::temp_dir("zygote_restart");
  Zygote zygote(SWEEP_BINARY);
  ASSERT_EQ(run_isolated(tiny_point(), options(dir, &zygote)).status, Status::kOk);
  const pid_t first = zygote.pid();
  ASSERT_GT(first, 0);
  kill(first, SIGKILL);
  const WorkerResult after_kill = run_isolated(tiny_point(), options(dir, &zygote));
  EXPECT_EQ(after_kill.status, Status::kOk) << after_kill.message;
  const pid_t second = zygote.pid();
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);

  // A variable set in the runner after the zygote started reaches the next child, through a
  // new zygote (libgomp reads OMP_* when LibTorch loads, so a child cannot only setenv it).
  setenv("SWEEP_ZYGOTE_TEST", "1", 1);
  const WorkerResult state = run_isolated(tiny_point(), options(dir, &zygote, {{"SWEEP_TEST_FAULT", "state"}}));
  unsetenv("SWEEP_ZYGOTE_TEST");
  ASSERT_EQ(state.status, Status::kOk) << state.message;
  const auto env = state.record["environ"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "SWEEP_ZYGOTE_TEST=1"), env.end());
  EXPECT_NE(zygote.pid(), second);

  // A zygote killed while its child runs: the point runs again, exec'd, and still ends.
  Point slow = tiny_point();
  slow.timeout_s = 3;
  std::thread killer([&zygote] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(zygote.pid(), SIGKILL);
  });
  const WorkerResult under_kill = run_isolated(slow, options(dir, &zygote, {{"SWEEP_TEST_FAULT", "hang"}}));
  killer.join();
  EXPECT_EQ(under_kill.status, Status::kTimeout);
  EXPECT_GE(under_kill.wall_s, 2.5) << "the exec'd rerun has its own time limit";
}

// The zygote's first child, once it has one (/proc/PID/task/PID/children); -1 after `wait_s`.
pid_t first_child(pid_t zygote, double wait_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  const std::string path = "/proc/" + std::to_string(zygote) + "/task/" + std::to_string(zygote) + "/children";
  while (std::chrono::steady_clock::now() < until) {
    pid_t child = -1;
    if (std::ifstream(path) >> child) return child;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return -1;
}

// run_isolated in a thread, given `limit_s` to return: a run that waits forever fails the
// test (the zygote is then killed, so that the thread ends) instead of hanging it.
WorkerResult run_within(double limit_s, const Point& p, const IsolateOptions& o, Zygote& zygote,
                        const std::function<void()>& meanwhile = {}) {
  auto result = std::async(std::launch::async, [&] { return run_isolated(p, o); });
  if (meanwhile) meanwhile();
  if (result.wait_for(std::chrono::duration<double>(limit_s)) != std::future_status::ready) {
    ADD_FAILURE() << "the run still waits on the zygote after " << limit_s << " s";
    kill(zygote.pid(), SIGKILL);
  }
  return result.get();
}

// A zygote stopped (kill -STOP) while its worker runs: once the worker has ended, the runner
// waits reply_ms for the zygote's answer, then kills it and takes the status the kernel
// kept for the worker; the next point gets a fresh zygote. Before, the run waited forever.
TEST(Zygote, AStoppedZygoteIsKilledAndReplacedAndTheRunGoesOn) {
  const auto dir = testing::temp_dir("zygote_stopped");
  Zygote zygote(SWEEP_BINARY, {.reply_ms = 1000});
  ASSERT_EQ(run_isolated(tiny_point(), options(dir, &zygote)).status, Status::kOk);
  const pid_t first = zygote.pid();
  ASSERT_GT(first, 0);

  // Stopped as soon as its child exists: the worker ends on its own, its row is its own.
  Point longer = tiny_point();
  longer.steps = 20;  // time to stop the zygote while its child runs
  const WorkerResult ok = run_within(60, longer, options(dir, &zygote), zygote, [&] {
    EXPECT_GT(first_child(first, 30), 0);
    kill(first, SIGSTOP);
  });
  EXPECT_EQ(ok.status, Status::kOk) << ok.message;
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_TRUE(ok.record.contains("peak_allocated_bytes")) << ok.record.dump();
  EXPECT_EQ(kill(first, 0), -1) << "the stopped zygote was left running";

  // Stopped while its worker hangs: the worker is killed at the point's limit, and the run
  // goes on within the limit and reply_ms (the issue's repro, with timeout_s 3).
  const WorkerResult warm = run_isolated(tiny_point(), options(dir, &zygote));
  ASSERT_EQ(warm.status, Status::kOk);
  const pid_t second = zygote.pid();
  ASSERT_GT(second, 0);
  EXPECT_NE(second, first);
  Point hang = tiny_point();
  hang.timeout_s = 3;
  const WorkerResult hung = run_within(30, hang, options(dir, &zygote, {{"SWEEP_TEST_FAULT", "hang"}}), zygote, [&] {
    EXPECT_GT(first_child(second, 30), 0);
    kill(second, SIGSTOP);
  });
  EXPECT_EQ(hung.status, Status::kTimeout) << hung.message;
  EXPECT_EQ(kill(second, 0), -1);
  const WorkerResult next = run_isolated(tiny_point(), options(dir, &zygote));
  EXPECT_EQ(next.status, Status::kOk) << next.message;
  EXPECT_GT(zygote.pid(), 0);
  EXPECT_NE(zygote.pid(), second);
}

// A zygote that stops as it starts (here a script that stops itself) costs the runner its
// ready waits, not the point its time: the point is timed from its exec'd worker's start.
// Before, the clock started before the zygote was asked, and the point was recorded
// "killed after the point's time limit" though its worker had barely run.
TEST(Zygote, AZygoteStalledAtItsStartCostsThePointNoTime) {
  const auto dir = testing::temp_dir("zygote_stalled_start");
  const std::string script = testing::write_file(dir / "stalls.sh", "#!/bin/sh\nkill -STOP $$\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  Zygote zygote(script, {.ready_ms = 4500, .reply_ms = 1000});
  Point p = tiny_point();
  p.timeout_s = 4;  // less than the ready wait
  const auto start = std::chrono::steady_clock::now();
  const WorkerResult r = run_within(60, p, options(dir, &zygote), zygote);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, Status::kOk) << r.message;
  EXPECT_GE(elapsed, 4.5);
  EXPECT_LT(r.wall_s, elapsed - 4.0) << "the zygote's wait was counted in the point's time";
  EXPECT_EQ(zygote.pid(), -1);  // the stalled zygote killed
}

// Issue 57: a worker stopped before it ran is no timeout. Before, with a zygote stopped at
// start, the first point was recorded "timeout 5.26 s" (timeout_s 5) though its worker never
// ran. The point's time now counts from the worker's start (its first byte on the result pipe,
// kWorkerStarted); one silent for start_limit_s is killed and its row says it did not start (no
// result: a resumed run runs it again). The test-only `stopped` fault stops the worker as it
// starts; forked from a zygote (which serves on) and exec'd.
TEST(Zygote, AWorkerThatNeverStartsIsNoTimeout) {
  const auto dir = testing::temp_dir("zygote_never_started");
  Zygote zygote(SWEEP_BINARY);
  for (Zygote* z : {&zygote, static_cast<Zygote*>(nullptr)}) {
    Point p = tiny_point();
    p.timeout_s = 1;  // less than the start limit: before, the timeout fired first
    IsolateOptions o = options(dir, z, {{"SWEEP_TEST_FAULT", "stopped"}});
    o.start_limit_s = 3;
    const WorkerResult r = run_isolated(p, o);
    const char* how = z ? "forked" : "exec'd";
    EXPECT_EQ(r.status, Status::kCrash) << how << ": " << r.message;
    EXPECT_FALSE(r.started) << how;
    EXPECT_NE(r.message.find("the worker did not start within 3 s"), std::string::npos) << how << ": " << r.message;
    EXPECT_GE(r.wall_s, 3.0) << how;
  }
  // The zygote serves the next point, and a point that started is timed from its start.
  const WorkerResult next = run_isolated(tiny_point(), options(dir, &zygote));
  EXPECT_EQ(next.status, Status::kOk) << next.message;
  EXPECT_TRUE(next.started);
  Point hang = tiny_point();
  hang.timeout_s = 2;
  const WorkerResult hung = run_isolated(hang, options(dir, &zygote, {{"SWEEP_TEST_FAULT", "hang"}}));
  EXPECT_EQ(hung.status, Status::kTimeout) << hung.message;
  EXPECT_TRUE(hung.started);
}

// An environment too large for a request (over 96 KiB) is exec'd without starting a zygote
// for it, and the lane's zygote serves on. Before, each such point started two zygotes that
// refused it (20 s instead of 2.6 s for 10 points). Starts are counted by a wrapper script.
TEST(Zygote, AnEnvironmentTooLargeForAZygoteStartsNone) {
  const auto dir = testing::temp_dir("zygote_big_env");
  const std::string starts = (dir / "starts").string();
  const std::string script = testing::write_file(
      dir / "counted.sh", "#!/bin/sh\necho start >> " + starts + "\nexec " + std::string(SWEEP_BINARY) + " \"$@\"\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto count = [&] {
    std::ifstream in(starts);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  Zygote zygote(script);
  IsolateOptions o = options(dir, &zygote);
  ASSERT_EQ(run_isolated(tiny_point(), o).status, Status::kOk);
  ASSERT_EQ(count(), 1);
  const pid_t served = zygote.pid();
  o.env["SWEEP_ZYGOTE_BIG"] = std::string(100 << 10, 'x');
  const WorkerResult big = run_isolated(tiny_point(), o);
  EXPECT_EQ(big.status, Status::kOk) << big.message;
  EXPECT_EQ(count(), 1) << "zygotes were started for a request they refuse";
  EXPECT_EQ(zygote.pid(), served);
  o.env.erase("SWEEP_ZYGOTE_BIG");
  EXPECT_EQ(run_isolated(tiny_point(), o).status, Status::kOk);
  EXPECT_EQ(count(), 1);
  EXPECT_EQ(zygote.pid(), served);
}

// The hidden `sweep zygote` on a descriptor that is no socket says so, exit 2 (it exited 1
// without a word).
TEST(Zygote, TheHiddenCommandOnABadDescriptorSaysSo) {
  const auto r = testing::run_sweep_cli("zygote --control-fd 57");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--control-fd: fd 57 is not an open socket"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint: "), std::string::npos) << r.output;
}

// On a GPU: the zygote never initialised CUDA (it has one thread), so its child creates its
// own context as an exec'd worker does, and the caching allocator's numbers are the same.
// Only compiled here; run by scripts/gpu-check.sh cuda.
TEST(Zygote, CudaPointMeasuresAsExecd_CUDA) {
  const auto dir = testing::temp_dir("zygote_cuda");
  Point p = tiny_point(2);
  p.device = Device::kCuda;
  Zygote zygote(SWEEP_BINARY);
  const WorkerResult forked = run_isolated(p, options(dir, &zygote));
  const WorkerResult execd = run_isolated(p, options(dir, nullptr));
  ASSERT_GT(zygote.pid(), 0);
  ASSERT_EQ(forked.status, Status::kOk) << forked.message;
  ASSERT_EQ(execd.status, Status::kOk) << execd.message;
  for (const char* column : kMemoryColumns)
    EXPECT_EQ(forked.record.value(column, nlohmann::json()), execd.record.value(column, nlohmann::json()))
        << column;
  // The device's use (context and kernels loaded) within 2 MiB: the same libraries, loaded by
  // the same binary.
  EXPECT_NEAR(forked.record["device_used_bytes"].get<double>(), execd.record["device_used_bytes"].get<double>(),
              2 << 20);
  EXPECT_EQ(threads_of(zygote.pid()), 1);
}

// Only compiled here; run by scripts/gpu-check.sh cuda. The context probe forked from the
// zygote (its second bare context exec'd from the probe) measures what the exec'd probe
// measures: the same libraries, loaded by the same binary, so the same context.
TEST(Zygote, CudaContextProbeMeasuresAsExecd_CUDA) {
  Zygote zygote(SWEEP_BINARY);
  const HostGpu execd = probe_gpus(SWEEP_BINARY, {"0"}, true, 900, nullptr).at(0);
  const HostGpu forked = probe_gpus(SWEEP_BINARY, {"0"}, true, 900, &zygote).at(0);
  ASSERT_GT(zygote.pid(), 0);
  EXPECT_EQ(forked.name, execd.name);
  EXPECT_EQ(forked.total_bytes, execd.total_bytes);
  EXPECT_NEAR(static_cast<double>(forked.context_bytes), static_cast<double>(execd.context_bytes), 2 << 20);
  // Other processes' use (and the driver's, 3.2-3.4 MiB on the H200 with nothing else
  // running) is read at each probe's time: within 2 MiB too (on the H200 lease, with Python
  // processes starting beside it, 3,538,944 and 3,407,872).
  EXPECT_NEAR(static_cast<double>(forked.other_bytes), static_cast<double>(execd.other_bytes), 2 << 20);
  EXPECT_EQ(threads_of(zygote.pid()), 1);
}

// End to end: `sweep run` with its zygote and with --no-zygote writes the same rows but for
// time (and the resident set within 1%).
TEST(Zygote, RunWritesTheRowsOfAnExecdRun) {
  const auto dir = testing::temp_dir("zygote_run");
  const std::string config = testing::write_file(dir / "tiny.yaml", R"(name: tiny
device: cpu
steps: 1
warmup_steps: 0
repetitions: 1
models: [gpt2-test, t5-test, whisper-test]
grid:
  batch: [1, 3]
)");
  const auto z = testing::run_sweep_cli("run " + config + " -q --out " + (dir / "z").string());
  ASSERT_EQ(z.exit_code, 0) << z.output;
  const auto e = testing::run_sweep_cli("run " + config + " -q --no-zygote --out " + (dir / "e").string());
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto zf = reports::read_results((dir / "z").string()), ef = reports::read_results((dir / "e").string());
  ASSERT_EQ(zf.rows.size(), 6u);
  ASSERT_EQ(ef.rows.size(), 6u);
  std::map<std::string, const reports::Row*> er;
  for (const auto& r : ef.rows) er[r.at(schema::column("point_id"))] = &r;
  const std::set<std::string> timing = {"timestamp", "wall_s", "step_ms", "step_ms_mean",
                                        "step_ms_stddev", "step_ms_cv", "step_ms_samples",
                                        "tokens_per_s", "samples_per_s", "tflops", "device_used_bytes"};
  for (const auto& row : zf.rows) {
    const std::string id = row.at(schema::column("point_id"));
    ASSERT_TRUE(er.count(id)) << id;
    EXPECT_EQ(row.status, Status::kOk) << id;
    for (std::size_t c = 0; c < schema::kColumnCount; ++c)
      if (!timing.count(std::string(schema::kColumns[c])))
        EXPECT_EQ(row.at(c), er[id]->at(c)) << id << " " << schema::kColumns[c];
    const std::size_t used = schema::column("device_used_bytes");
    // The process's resident memory on the CPU: a forked worker also holds the pages of the
    // zygote it touched, an exec'd one its own loader's; 1.7% apart on one point here
    // (2026-11-27, the 2-core VM under load), so held to 3%.
    EXPECT_NEAR(*row.number(used) / *er[id]->number(used), 1.0, 0.03) << id;
  }
}

// The GPU probe (`worker --probe-device`) is forked from the zygote like a point: the
// command's environment is the runner's plus its own, its output and exit code are the exec'd
// command's, a hang is killed at the deadline, and the zygote serves on.
TEST(Zygote, CommandsLikeTheGpuProbeAreForkedFromIt) {
  Zygote zygote(SWEEP_BINARY);
  const std::vector<std::string> state = {SWEEP_BINARY, "worker", "--point",
                                          nlohmann::json(tiny_point()).dump(), "--result-fd", "1"};
  const std::map<std::string, std::string> env = {{"SWEEP_TEST_FAULT", "state"},
                                                  {"CUDA_VISIBLE_DEVICES", "7"}};
  const CommandOutput execd = run_command(state, {.timeout_s = 60, .env = env});
  const CommandOutput forked = run_command(state, {.timeout_s = 60, .env = env, .zygote = &zygote});
  ASSERT_GT(zygote.pid(), 0) << "the zygote did not serve the command";
  ASSERT_EQ(execd.exit_code, 0) << execd.output;
  ASSERT_EQ(forked.exit_code, 0) << forked.output;
  const auto a = nlohmann::json::parse(execd.output.substr(0, execd.output.find('\n')));
  const auto b = nlohmann::json::parse(forked.output.substr(0, forked.output.find('\n')));
  EXPECT_EQ(a["environ"], b["environ"]);
  const auto environ = b["environ"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(environ.begin(), environ.end(), "CUDA_VISIBLE_DEVICES=7"), environ.end());
  EXPECT_EQ(a["own_process_group"], true);
  EXPECT_EQ(b["own_process_group"], true);
  EXPECT_EQ(b["threads"], 1);

  const pid_t served_by = zygote.pid();
  const CommandOutput hung = run_command(
      state, {.timeout_s = 2, .env = {{"SWEEP_TEST_FAULT", "hang"}}, .zygote = &zygote});
  EXPECT_TRUE(hung.timed_out);
  EXPECT_EQ(hung.exit_code, -1);
  EXPECT_EQ(zygote.pid(), served_by) << "a command killed at its deadline took the zygote with it";
  EXPECT_EQ(threads_of(served_by), 1);

  // The probe itself: the same answer either way (this GPU's name and memory on a GPU host;
  // on a host without one, the same refusal).
  auto probe = [](Zygote* z) {
    try {
      const HostGpu g = probe_gpus(SWEEP_BINARY, {"0"}, false, 300, z).at(0);
      return g.name + " " + std::to_string(g.total_bytes);
    } catch (const std::runtime_error& e) {
      return std::string("refused: ") + e.what();
    }
  };
  const std::string probed_execd = probe(nullptr), probed_forked = probe(&zygote);
  EXPECT_EQ(probed_execd, probed_forked);
  EXPECT_FALSE(probed_forked.empty());
  EXPECT_EQ(zygote.pid(), served_by);
}

// A rebuild during a long run replaces the binary under it: the run's later workers and
// zygotes (fit's confirmation run starts a fresh one) still start, from the binary the run
// started with, instead of failing as "could not start the worker".
TEST(Zygote, ARunOutlivesItsBinaryBeingReplaced) {
  namespace fs = std::filesystem;
  const auto dir = testing::temp_dir("zygote_deleted_binary");
  const fs::path copy = dir / "sweep-copy";
  fs::copy_file(SWEEP_BINARY, copy, fs::copy_options::overwrite_existing);
  const fs::path out = dir / "fit";
  const std::string cmd = copy.string() + " fit gpt2-test --memory-gib 0.05 --device cpu --precision fp32 "
                          "--optimizer adamw --checkpointing none --effective-batch 4 --no-prediction -q --out " +
                          out.string() + " > " + (dir / "fit.log").string() + " 2>&1 &"
                          " pid=$!; while [ ! -s " + (out / "results.csv").string() + " ]; do sleep 0.05; done;"
                          " rm -f " + copy.string() + "; wait $pid";
  const int rc = std::system(("sh -c '" + cmd + "'").c_str());
  std::ifstream log(dir / "fit.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << text;
  EXPECT_FALSE(fs::exists(copy));
  const auto rows = reports::read_results((out / "results.csv").string());
  ASSERT_GE(rows.rows.size(), 3u) << text;
  for (const auto& r : rows.rows)
    EXPECT_TRUE(r.status == Status::kOk || r.status == Status::kOom) << r.at(schema::column("message"));
}

}  // namespace
}  // namespace sweep
