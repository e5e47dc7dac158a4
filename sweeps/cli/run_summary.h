// What `sweep run` says at the end (its dry run: DryRun, sweeps/runner/estimate.h): once as
// text and once as one JSON object on stdout (`--json`, progress staying on stderr), the text
// and the JSON built from the same values. The JSON's keys are documented in the README.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results/rows.h"
#include "sweeps/runner/estimate.h"
#include "sweeps/runner/sweep.h"
#include "sweeps/worker/point.h"

namespace sweep {

// The noisy-machine warning needs this many noisy points (or every ok point, when there are
// fewer): one noisy point among many is a hiccup, several are the machine.
inline constexpr int kNoisyPointsToWarn = 3;

// The closing summary of a run into `out`, from what its results file holds now (the last
// row of each point): counts by status, the fastest ok train row, the noisy-machine check,
// where the results and the report are, the next command. `results` must outlive it.
struct RunSummary {
  std::string out, results_path;
  std::vector<std::pair<Status, int>> counts;  // every status, in vocabulary order
  const reports::Row* fastest = nullptr;            // highest tokens/s among ok train rows
  // Rows of device emulated (their throughput predicted: never the fastest) and their cards.
  int predicted = 0;
  std::vector<std::string> predicted_cards;
  // "3 rows predicted by emulation of RTX 3060, not measured: tokens/s, where a row has it,
  // from the step-time model (docs/fidelity.md), never the fastest measured"
  std::string predicted_line() const;
  int ok_train = 0;
  std::vector<const reports::Row*> noisy;           // ok train rows above kNoisyStepCv
  const reports::Row* noisiest = nullptr;
  bool warn_noisy() const;

  nlohmann::json json() const;
  std::string text() const;  // the lines written to stderr
};
RunSummary summarize_run(const reports::Results& results, const std::string& out);

}  // namespace sweep
