// fit's fifth stage, the pick: the one recommendation (reports/common/pick.h) among this
// question's probes, measured at its accumulation. A pick that needs accumulation runs once
// more as a plain point (OUT/fit-pick.yaml); one that runs out of memory once gradients
// accumulate is passed over, with every larger micro-batch of its technique, and the next one
// tried (the next smaller divisor of the effective batch among them); one measured again is
// ranked again with that measurement.
#pragma once

#include <optional>
#include <string>

#include "sweeps/cli/fit_analysis.h"
#include "sweeps/cli/fit_plan.h"
#include "sweeps/cli/fit_question.h"

namespace sweep {

struct FitPick {
  std::optional<Pick> choice;  // none: nothing fits
  std::string reason;          // why this one, as the answer prints it
  int exit_code = 0;           // a confirmation run's, when it failed
  // No pick because searches stopped on crashes (fit_analysis.h stopped_searches): no answer,
  // never "nothing fits".
  std::string no_answer;
};

// Stage 5.
FitPick pick_confirmed(const FitQuestion& q, const FitPlan& p, const FitRows& rows);
// Stage 5 of --seq max: the technique with the longest seq (ties: the fewest changes from
// plain training, then the faster, then the lower peak), at the question's batch; nothing to
// confirm, each search's answer being a measured (or predicted) row. Full fine-tuning in bf16
// weights changes the training's numerics: picked only when asked alone (--precision bf16),
// else passed over, and the reason says how far it would reach and why not.
FitPick pick_longest(const FitQuestion& q, const FitRows& rows);

}  // namespace sweep
