// Max-batch search: for one combination of the other axes, the largest batch that fits, found
// the way PyTorch Lightning's batch-size finder does it (double until out of memory, then
// bisect), each probe an isolated worker. The probes' measured peaks steer the jumps: memory
// grows close to linearly in the batch, so once two probes fit, the batch at which the peak
// would reach the budget is predicted and probed next (and its neighbour, to confirm). A wrong
// prediction costs a probe; the next step is plain doubling or bisection, and a new
// prediction needs a new fitting probe (at most three predictions in all).
// Seeded: with the largest batch another device predicts (the emulated card, or the emulator
// configured as the CPU), the search first probes that batch, then, when it fits, the next
// one: 2 probes when the prediction is exact. When the predicted batch does not fit (too
// high), it is today's search from lo with every batch from the predicted one up taken as out
// of memory without a probe: never more than one probe more than the search without a
// prediction, by construction. When the next one fits too (too low), the two peaks steer the
// next jump, or without a slope between them (one allocator block) it steps up by 1, 2, 4...,
// then bisects: measured on synthetic memory curves (tests/search_test.cc), a miss by up to
// eight batches costs at most one probe more than no prediction where a sample costs a block
// or more, two more below that; a miss by half or more is not bounded.
// The longest context (search max_seq) is the same search over the tokens per sample, in steps
// of kSeqStep tokens, stopped once the answer is within 1% (searched_axis below).
// A pure function over a probe callback, so the strategy is tested without workers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reports/results/vocab.h"

namespace sweep {

struct Point;

// A max_seq search's step: it probes multiples of 64 tokens (the granularity `fit --seq max`
// states, with 1% of the answer where that is larger).
constexpr int64_t kSeqStep = 64;
// The resolution of a max_seq search: it stops once the longest length that fits is within
// this percentage of the first that does not (never finer than one step).
constexpr int64_t kSeqWithinPercent = 1;

// What a search varies, by the config's `search`: "max_batch" the batch, "max_seq" the tokens
// per sample (in kSeqStep steps); "" (a grid) the batch, as combinations are ordered.
struct SearchedAxis {
  std::string_view search = "max_batch";  // the rows' `search` cell
  std::string_view column = "batch";      // the point's axis it varies
  int64_t step = 1;                       // one step of the search, in the axis's unit
  int64_t within_percent = 0;             // stop within this share of the answer (0: exact)

  // The point's value in steps (a seq rounded up to a whole step), and the point at a value.
  int64_t value_of(const Point& p) const;
  void set(Point& p, int64_t steps) const;
  // "batch 8", "seq 4096"
  std::string words(int64_t steps) const;
};
// The axis of a config's `search` ("" is the batch's).
SearchedAxis searched_axis(std::string_view search);

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
// predicted: the largest batch predicted to fit (below lo: none), probed first; nullopt:
// no prediction, the search starts at lo. `axis`: what the values are (in its steps), its
// within_percent where the search stops short of the next value, its words in `stopped`.
SearchResult search_max_batch(int64_t lo, int64_t hi, double budget_bytes,
                              const std::function<ProbeOutcome(int64_t)>& probe,
                              std::optional<int64_t> predicted = std::nullopt,
                              const SearchedAxis& axis = {});

// How many probes the searches took, for a line under an answer or a table's header: "2.0
// probes per search (24 in 12 searches), each seeded by a prediction (70 emulated runs, not
// counted as probes)"; predictions 0: not seeded.
std::string probes_text(int probes, int searches, int predictions);

}  // namespace sweep
