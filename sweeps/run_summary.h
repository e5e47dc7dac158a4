// What `sweep run` says at the end, and what `--dry-run` says instead of running: each once
// as text and once as one JSON object on stdout (`--json`, progress staying on stderr), the
// text and the JSON built from the same values. The JSON's keys are documented in the README;
// kRunJsonVersion is bumped when a key changes meaning or goes away (new keys do not bump it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results.h"
#include "sweeps/estimate.h"
#include "sweeps/point.h"

namespace sweep {

inline constexpr int kRunJsonVersion = 1;
// The noisy-machine warning needs this many noisy points (or every ok point, when there are
// fewer): one noisy point among many is a hiccup, several are the machine.
inline constexpr int kNoisyPointsToWarn = 3;

// The closing summary of a run into `out`, from what its results file holds now (the last
// row of each point): counts by status, the fastest ok train row, the noisy-machine check,
// where the results and the report are, the next command. `results` must outlive it.
struct RunSummary {
  std::string out, results_path;
  std::vector<std::pair<std::string, int>> counts;  // every status, in schema order
  const reports::Row* fastest = nullptr;            // highest tokens/s among ok train rows
  int ok_train = 0;
  std::vector<const reports::Row*> noisy;           // ok train rows above kNoisyStepCv
  const reports::Row* noisiest = nullptr;
  bool warn_noisy() const;

  nlohmann::json json() const;
  std::string text() const;  // the lines written to stderr
};
RunSummary summarize_run(const reports::Results& results, const std::string& out);

// What --dry-run prints: the points (or, for a search, one per combination searched: the
// estimate's units) and the estimate. `config_path`, `device` and `out` are the run's.
struct DryRun {
  std::string config_path, device, out;
  bool search = false;
  int64_t search_max_batch = 0;
  PlanEstimate estimate;

  nlohmann::json json() const;
  std::string text() const;
};

}  // namespace sweep
