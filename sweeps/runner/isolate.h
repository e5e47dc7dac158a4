// Process isolation: run one point in a fresh `sweep worker` subprocess, so an OOM, a
// crash or a leak can never poison the next point, and classify how it ended. Knows
// nothing of models: it moves a Point in and a JSON record out.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sweeps/runner/zygote.h"
#include "sweeps/worker/point.h"

namespace sweep {

struct IsolateOptions {
  std::string exe;       // the sweep binary (this one)
  std::string log_path;  // worker stdout+stderr go here
  std::map<std::string, std::string> env;  // set in the worker (empty value = unset)
  Zygote* zygote = nullptr;  // fork the worker from this pre-loaded one; null: exec it
  // How long a worker may take to start (its first byte on the result pipe, kWorkerStarted)
  // before it is killed as one that never ran: not the point's time_s, which counts from its
  // start. LibTorch's load of an exec'd worker, as a zygote's ready wait (ZygoteDeadlines).
  double start_limit_s = 60;
};

// What a worker writes on its result pipe as it starts (worker_main), before its record: the
// point's time limit counts from it, so a worker that never ran (stopped, or starved, before
// it started) is no timeout but a row that says it did not start (issue 57).
inline constexpr char kWorkerStarted = '\n';

struct WorkerResult {
  Status status = Status::kCrash;  // ok | oom | crash | timeout
  nlohmann::json record;      // what the worker reported (may be empty)
  std::optional<int> exit_code, signal;
  std::string message;        // for crash/timeout: the record's message or the log's tail
  double wall_s = 0;          // from the worker's start (not the runner's waits on a zygote)
  // False when no worker ran (it could not be exec'd, or did not start within start_limit_s):
  // the row says so (reason kNotStartedReason, results_store.h) and is no result, so a resumed
  // run runs the point again.
  bool started = true;
};

WorkerResult run_isolated(const Point& p, const IsolateOptions& opt);

// Path of the running executable (/proc/self/exe), as it was when first asked.
std::string self_exe();
// What to exec to run `exe`: /proc/self/exe where `exe` is this binary (still the run's own
// code after a rebuild replaced or removed the file), else `exe`.
std::string exec_path(const std::string& exe);

// A helper command (sbatch, squeue, the GPU probe): not a point, so no result pipe and no row.
struct CommandOutput {
  int exit_code = -1;      // -1: could not start, killed by a signal, or timed out
  std::string output;      // stdout, and stderr too unless keep_stderr
  bool timed_out = false;  // killed at the deadline (with everything it started)
};
struct CommandOptions {
  double timeout_s = 0;      // 0: wait as long as it runs
  bool keep_stderr = false;  // stderr to this process's stderr, not into `output`
  std::map<std::string, std::string> env;  // set in the command (empty value = unset)
  // Where argv[0] is this zygote's executable (`sweep worker --probe-device`): fork the
  // command from it instead of exec'ing the binary again.
  Zygote* zygote = nullptr;
};
// Runs argv[0] (looked up on the PATH) without a shell, in a process group of its own, so that
// a timeout kills what it started too; it dies with this process (PR_SET_PDEATHSIG).
CommandOutput run_command(const std::vector<std::string>& argv, const CommandOptions& options = {});

}  // namespace sweep
