// `sweep run`: config -> points -> isolated workers -> rows appended to results.csv.
#pragma once

#include <string>

namespace sweep {

struct RunOptions {
  std::string config;
  std::string out;              // overrides the config's `out`
  std::string device = "auto";  // overrides the config's device unless "auto"... see run.cc
  bool device_given = false;
  bool dry_run = false;
  bool quiet = false;
  bool force = false;  // re-run points already recorded
};

// Returns the process exit code. Throws ConfigError for bad input (caller prints, exit 2).
int run_sweep(const RunOptions& opt);

}  // namespace sweep
