// fit's third stage, the search: OUT/fit.yaml locked and written, the estimate said, then a
// max-batch search per technique, each seeded by an emulated prediction (OUT/predictions.csv)
// and each probe an isolated worker; a second fit of the same question reuses every probe
// already in OUT/results.csv.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "sweeps/cli/fit_plan.h"
#include "sweeps/cli/fit_question.h"
#include "sweeps/runner/sweep.h"
#include "sweeps/worker/point.h"

namespace sweep {

struct FitSearch {
  std::filesystem::path config;   // OUT/fit.yaml
  std::filesystem::path results;  // OUT/results.csv
  // The question: one point per search, as the runner expanded fit.yaml. Their budget, card,
  // device and inputs are what the rows of the answer must have been measured with.
  std::vector<Point> question;
  int exit_code = 0;  // the run's; nonzero: fit stops with it
};

// How fit runs a config of its own in OUT (fit.yaml, then fit-pick.yaml).
RunOptions fit_run_options(const FitQuestion& q, const std::string& out, const std::string& config);

// Stage 3. UserError where OUT holds probes of the same points measured on another device.
FitSearch search(const FitQuestion& q, const FitPlan& p);

}  // namespace sweep
