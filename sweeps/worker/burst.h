// One training burst: build the model, run warm-up steps, then timed steps through Google
// Benchmark, measuring memory by phase. Knows nothing of processes or files: the worker
// calls it and turns the Measurement into a results row.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sweeps/worker/point.h"
#include "sweeps/measure/trackers.h"

namespace sweep {

struct Measurement {
  Status status = Status::kOk;  // ok | oom
  std::string phase;          // phase of an OOM: load | build | forward | backward | optimizer
  std::string message;
  // An OOM outside the caching allocator: the library that ran out (cublas-alloc-failed,
  // cudnn-alloc-failed, cuda-out-of-memory); empty for the allocator's own.
  std::string reason;
  // Sizes: parameters after the build, .grad tensors after the first backward, optimizer
  // state after the first step, and the most a micro-batch held above what persists.
  int64_t weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0, device_used_bytes = 0;
  std::string peak_phase;
  // What memory held at the moment of peak_allocated_bytes; the four add up to it exactly.
  // "activations" is the rest: activations, inputs and temporaries.
  int64_t at_peak_weights_bytes = 0, at_peak_grads_bytes = 0, at_peak_optimizer_bytes = 0,
          at_peak_activations_bytes = 0;
  // The peak of each phase, over every step.
  std::optional<int64_t> forward_peak_bytes, backward_peak_bytes, optimizer_peak_bytes;
  // A quantised model's from_pretrained (and prepare_model_for_kbit_training): the phase
  // "load", before the rest of the build; none for full weights.
  std::optional<int64_t> load_peak_bytes;
  std::optional<int64_t> leak_bytes_per_step;
  std::optional<int64_t> oom_retries;
  std::optional<int64_t> oom_gap_bytes;  // unknown (none) where the allocator's observer never fired
  std::vector<double> step_ms_samples;  // one per repetition: mean step time in it
  std::optional<double> step_ms, step_ms_mean, step_ms_stddev, step_ms_cv;
  std::optional<double> tokens_per_s, samples_per_s, tflops;
  // offload: optimizer: host memory the optimizer held at most, and the mean time per step of
  // its transfers (gradients to the host, parameters back) over the timed steps.
  std::optional<int64_t> host_peak_bytes;
  std::optional<double> offload_transfer_ms;
  // Paged optimizers: the state in CUDA unified memory after the first step (schema.h).
  std::optional<int64_t> paged_bytes;
  int64_t skipped_steps = 0;  // fp16-amp steps skipped for inf/nan gradients
  double loss = 0;            // last loss, read once after the timed steps (sanity)
};

// Where the burst lets its caller in, outside the measurement: on entering each phase (the
// test fault seam), and after the warm-up steps (the worker ends snapshot recording there,
// so that recording never slows the timed steps).
struct BurstHooks {
  std::function<void(const std::string& phase, MemoryTracker& mem)> on_phase;
  std::function<void()> after_warmup;
};

Measurement run_burst(const Point& p, MemoryTracker& mem, StepTimer& timer,
                      const BurstHooks& hooks = {});

}  // namespace sweep
