// The one recommendation: given the configurations that fit a card (each at one micro-batch x
// accumulation, with what was measured or predicted for it) and the one rule (fit_rule.h),
// which one is recommended and why. `sweep fit` (its probes), `sweep recommend` and `report`'s
// summary (a group's rows) and the per-card tables (fit's answer) all print what pick()
// returns, so one question gets one answer whichever command asks it.
//
// The order, in full:
//   1. Under the recommended ceiling when any candidate is; else every candidate, and the pick
//      says it is above the ceiling (it fits the cap with less than the margin kept free).
//   2. By speed where speed is known: measured tokens/s on a GPU, or predicted tokens/s whose
//      lead over the runner-up is larger than the prediction's measured error. Ties: measured
//      on the target card first, then measured before inferred, the lower peak, the fewer
//      changes from plain training, the label. Where the fastest's step time varied by more
//      than its lead and the runner-up's less, the steadier runner-up (prefer_runner_up).
//   3. By memory otherwise (the CPU, whose step times say nothing about a GPU; an emulated
//      card with no predicted speed; predicted speeds too close to call): the fewest changes
//      from plain training, then the largest micro-batch (the fewest accumulation steps), then
//      the lower peak.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reports/common/fit_rule.h"
#include "reports/results/cost_rules.h"

namespace sweep::reports {

// One configuration at one micro-batch x accumulation, as a caller found it in its rows.
struct Candidate {
  std::string technique;  // "bf16-amp, block checkpointing, adamw": every axis but the batch
  int techniques = 0;     // changes from plain training (fp32, no checkpointing, AdamW, ...)
  int64_t batch = 0, accumulation = 1;
  double tokens_per_s = 0;  // 0: not timed (and not predicted)
  double step_ms_cv = 0;    // how much the step time varied between repetitions
  double peak_reserved = 0;
  bool predicted = false;  // device emulated: memory (and tokens/s, where set) predicted
  bool inferred = false;   // the accumulation applied to the accumulation-1 row's measurement
  bool on_target = true;   // measured on the card recommended for
  std::string where;       // "results.csv:12": the last tie-break, a stable order

  // "bf16-amp, block checkpointing, adamw, batch 8 x 4"
  std::string label() const;
};

// What the pick is chosen under.
struct PickRules {
  FitRule rule;  // the ceiling; rule.cuda false: the CPU, ranked by memory
  // The measured error of predicted tokens/s, as a fraction (docs/fidelity.md): a predicted
  // lead smaller than this is too close to call.
  double predicted_speed_error = cost::kStepTimeError;
};

enum class Ranked { kBySpeed, kByMemory };

struct Picked {
  std::size_t index = 0;  // into the candidates
  Ranked ranked = Ranked::kByMemory;
  bool above_ceiling = false;  // nothing stayed under the recommended ceiling
  // Why not simply the first by the ranking ("" when it is): the steadier runner-up, or
  // predicted speeds too close to call.
  std::string note;
};

// The recommendation among `candidates` (each already known to fit the cap); nullopt when
// there are none.
std::optional<Picked> pick(const std::vector<Candidate>& candidates, const PickRules& rules);

// The orders of steps 2 and 3, for callers that list candidates as pick() ranks them (the
// largest batch per technique, the cross-GPU cells).
bool ranks_by_speed(const Candidate& a, const Candidate& b);
bool ranks_by_memory(const Candidate& a, const Candidate& b);

}  // namespace sweep::reports
