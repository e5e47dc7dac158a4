// `sweep run`: config -> points -> isolated workers -> rows appended to results.csv.
#pragma once

#include <cstddef>
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
  std::string search;  // "max-batch" | "none" overrides the config's `search`; "" keeps it
  std::string gpus;    // "0,1": one worker per GPU at a time, points spread over them
  std::size_t max_points = 10000;  // a larger grid is refused before it is expanded
  bool snapshot = false;  // CUDA allocator history per point: OUT/snapshots/<point_id>.pickle
};

// Returns the process exit code. Throws UserError for bad input (caller prints, exit 2).
int run_sweep(const RunOptions& opt);

}  // namespace sweep
