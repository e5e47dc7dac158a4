// Grid expansion: config -> ordered points. A pure function (no I/O, no devices), so its
// order is pinned by a test.
#pragma once

#include <vector>

#include "sweeps/runner/config.h"
#include "sweeps/worker/point.h"

namespace sweep {

namespace models {
struct ModelSpec;
}

// How every point of a run is executed; filled by the runner from the config and host.
struct RunSettings {
  Device device = Device::kCpu;  // resolved, never auto
  int64_t budget_bytes = 0;
  bool budget_emulated = false;
  EmulatedCard card;  // device emulated: the card every point predicts
  std::size_t max_points = 10000;  // larger grids are refused before they are expanded
};

// Points the grid names before duplicates and exclusions are dropped (saturating).
std::size_t count_grid(const Config& cfg);

// Points in order: sweep groups, then models, then kAxes nesting (batch innermost).
// Axes a model does not take are left at 0; eval points ignore training-only axes
// (checkpointing none, accumulation 1, optimizer "none"). Duplicates are dropped.
// Throws UserError when count_grid() exceeds run.max_points, and when the exclude rules
// remove every point.
std::vector<Point> expand_grid(const Config& cfg, const RunSettings& run);

// A sequence the model cannot take (`axis` seq beyond its positions, audio_s beyond its
// window) is an input error, not a crashed worker: UserError naming file, line and key
// (a config's grid axis, or the flag that gave it).
void check_fits(const models::ModelSpec& spec, const Point& p, const std::string& axis,
                const std::string& file, int line, const std::string& key);

// Whether `p` matches every key of `rule`.
bool matches(const ExcludeRule& rule, const Point& p);

}  // namespace sweep
