// Max-batch search: for one combination of the other axes, the largest batch that fits, found
// the way PyTorch Lightning's batch-size finder does it (double until out of memory, then
// bisect), each probe an isolated worker. The probes' measured peaks steer the jumps: memory
// grows close to linearly in the batch, so once two probes fit, the batch at which the peak
// would reach the budget is predicted and probed next (and its neighbour, to confirm). A wrong
// prediction costs a probe; the next step is plain doubling or bisection, and a new
// prediction needs a new fitting probe (at most three predictions in all).
// A pure function over a probe callback, so the strategy is tested without workers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reports/results/vocab.h"

namespace sweep {

struct ProbeOutcome {
  Status status = Status::kCrash;  // ok | oom | crash | timeout
  double peak_bytes = 0;  // the peak the cap applies to (reserved on CUDA, allocated on the CPU)
};

struct SearchResult {
  std::optional<int64_t> largest_fit;  // none: even `lo` did not fit
  std::optional<int64_t> first_oom;    // smallest batch seen out of memory
  std::vector<int64_t> probed;         // batches in the order they were probed
  std::string stopped;                 // a probe that crashed or timed out ends the search
};

// Searches [lo, hi]. budget_bytes: the memory a point may use (0 = unknown: no prediction).
SearchResult search_max_batch(int64_t lo, int64_t hi, double budget_bytes,
                              const std::function<ProbeOutcome(int64_t)>& probe);

}  // namespace sweep
