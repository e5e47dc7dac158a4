// One training burst: build the model, run warm-up steps, then timed steps through Google
// Benchmark, measuring memory by phase. Knows nothing of processes or files: the worker
// calls it and turns the Measurement into a results row.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sweeps/point.h"
#include "sweeps/trackers.h"

namespace sweep {

struct Measurement {
  std::string status = "ok";  // ok | oom
  std::string phase;          // phase of an OOM: build | forward | backward | optimizer
  std::string message;
  int64_t weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0, device_used_bytes = 0;
  std::string peak_phase;
  std::optional<int64_t> leak_bytes_per_step;
  std::optional<int64_t> oom_retries, oom_gap_bytes;
  std::vector<double> step_ms_samples;  // one per repetition: mean step time in it
  std::optional<double> step_ms, step_ms_mean, step_ms_stddev, step_ms_cv;
  std::optional<double> tokens_per_s, samples_per_s, tflops;
  int64_t skipped_steps = 0;  // fp16-amp steps skipped for inf/nan gradients
  double loss = 0;            // last loss (sanity)
};

// Test-only fault injection, read by the worker from SWEEP_TEST_FAULT; never from a config.
//   "crash[@B]"        SIGSEGV at the forward phase (points with batch B only)
//   "hang[@B]"         sleep forever at the forward phase
//   "oom:PHASE[@B]"    out of memory on entering PHASE (build|forward|backward|optimizer)
struct Fault {
  std::string kind;   // "" | crash | hang | oom
  std::string phase;  // for oom
  static Fault parse(const std::string& spec, const Point& p);
};

Measurement run_burst(const Point& p, MemoryTracker& mem, StepTimer& timer, const Fault& fault);

}  // namespace sweep
