// fit's last stage, the answer: the rule and its figures, each technique's largest batch, the
// probes it took and the recommendation with its reason, as text (a Markdown table) or as the
// JSON `--json` prints and `sweep tables` reads (fit_json_version).
#pragma once

#include <nlohmann/json.hpp>

#include "sweeps/cli/fit_analysis.h"
#include "sweeps/cli/fit_pick.h"
#include "sweeps/cli/fit_question.h"
#include "sweeps/cli/fit_search.h"

namespace sweep {

// Stage 6, as JSON.
nlohmann::json answer_json(const FitQuestion& q, const FitSearch& s, const FitRows& rows,
                           const FitPick& pick);
// Stage 6, as text on stdout.
void print_answer(const FitQuestion& q, const FitPlan& p, const FitSearch& s, const FitRows& rows,
                  const FitPick& pick);

}  // namespace sweep
