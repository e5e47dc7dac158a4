// A sweep config (YAML): models, grid axes, exclusions, budgets, run settings.
// Every error names the file, the line and the key, and carries a hint.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sweep {

// User error in a config or on the command line: printed as
// "file:line: key: message" + "hint: ..." and exit code 2.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, int line, std::string key, const std::string& message,
              std::string hint = "");
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& key() const { return key_; }
  const std::string& hint() const { return hint_; }
  std::string located() const;  // "file:line: key: message"

 private:
  std::string file_, key_, hint_;
  int line_;
};

// One axis as written: canonical string values and the line they came from.
struct AxisValues {
  std::vector<std::string> values;
  int line = 0;
};

// Axis name -> values; only the axes a config set.
using GridSpec = std::map<std::string, AxisValues>;

struct ExcludeRule {
  std::map<std::string, std::string> match;  // axis -> canonical value
  int line = 0;
};

struct SweepGroup {
  std::vector<std::string> models;
  GridSpec grid;  // overrides of the top-level grid
  std::vector<ExcludeRule> exclude;
  int line = 0;
};

struct GpuTarget {
  std::string name;
  double memory_gib = 0;
  std::optional<double> context_gib;  // CUDA context allowance; measured when absent
  int line = 0;
};

struct Config {
  std::string path;
  std::string name;
  std::string device = "auto";  // auto | cuda | cpu
  std::string out;              // output directory ("" = results/<name>)
  std::optional<GpuTarget> gpu;
  double budget_gib = 0;  // explicit per-point memory budget (0 = none)
  int budget_line = 0;    // where budget_gib was set
  double timeout_s = 600;
  int steps = 3;
  int warmup_steps = 1;
  int repetitions = 3;
  bool prune_oom = true;
  std::string search;  // "" | "max_batch"
  int64_t search_max_batch = 1024;
  double lr = 1e-3;
  double weight_decay = 0.01;
  uint64_t seed = 0;
  GridSpec grid;
  std::vector<ExcludeRule> exclude;
  std::vector<SweepGroup> sweeps;  // from `sweeps:`, or one group from top-level `models:`
};

// The axes a grid may set, in expansion order (outermost first; batch innermost so that
// larger batches follow smaller ones).
extern const std::vector<std::string> kAxes;

Config load_config(const std::string& path);
// Checks one value of an axis and returns it in canonical form; throws ConfigError.
std::string canonical_axis_value(const std::string& axis, const std::string& value,
                                 const std::string& file, int line, const std::string& key);

}  // namespace sweep
