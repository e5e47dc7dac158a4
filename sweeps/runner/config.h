// A sweep config (YAML): models, grid axes, exclusions, budgets, run settings.
// Every error names the file, the line and the key, and carries a hint.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "reports/results/error.h"
#include "reports/results/rows.h"  // number_text

namespace sweep {

using reports::number_text;  // the text form of config numbers (reports/results/rows.h)

// Config errors are user errors (reports/results/error.h): one type, one printer.

// The values a numeric key accepts. Every numeric key of a config has one.
struct Range {
  double min = 0, max = 0;
  bool whole = false;  // an integer key
  std::string hint() const;  // "expected a whole number from 1 to 1000000"
};

// Parses `text` as a number inside `r`, exactly: "1000000" is one million, "1e12" a
// trillion (and out of range for an integer key, not 1). Throws std::invalid_argument with
// the reason ("'1.5' is not a whole number", "must be at most 86400, got 1e300").
double parse_number(const std::string& text, const Range& r);
int64_t parse_integer(const std::string& text, const Range& r);
// The one of `choices` that `value` spells, '-' and '_' taken as the same character
// ("max-batch" and "max_batch"; "bf16_amp" and "bf16-amp"); "" when it spells none. Every
// named value a user writes (config, override, flag) is read through it.
std::string spelled_as(const std::string& value, const std::vector<std::string>& choices);

// The first control character of `text` (C0 or DEL), described for a message ("a newline
// (character 4)"); "" when there is none. No value of a config or a flag may hold one: it
// would end a line of a script or of a CSV file, or cut an environment variable short (NUL).
std::string control_character(std::string_view text);

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

// The card a config targets (`gpu:`): a card of the table by its key (`gpu: rtx3060`, or
// `gpu: {name: "RTX 3060"}`), or written out (`gpu: {name, memory_gib, context_gib,
// compute_capability, sms}`). A real GPU larger than it has its memory emulated (the
// allocator capped); device emulated predicts it, which needs its compute capability and SMs.
struct GpuTarget {
  std::string name;
  double memory_gib = 0;              // as CUDA reports it
  std::optional<double> context_gib;  // CUDA context allowance; measured (the table's) if absent
  std::string key;                    // the card table's key when it is one of its cards
  int cc_major = 0, cc_minor = 0;     // compute capability; 0 = not known
  int sms = 0;                        // streaming multiprocessors; 0 = not known
  int line = 0;
};

struct Config {
  std::string path;
  std::string name;
  std::string device = "auto";  // auto | cuda | cpu | emulated
  int device_line = 0;          // where device was set
  std::string out;              // output directory ("" = results/<name>)
  std::optional<GpuTarget> gpu;
  double budget_gib = 0;  // explicit per-point memory budget (0 = none)
  int budget_line = 0;    // where budget_gib was set
  double timeout_s = 600;
  int steps = 3;
  int warmup_steps = 1;
  int repetitions = 3;
  bool prune_oom = true;
  std::string search;  // "" | "max_batch" | "max_seq" (sweeps/runner/search.h)
  int64_t search_max_batch = 1024;
  int64_t search_max_seq = int64_t{1} << 20;  // and the model's longest input
  int search_line = 0;  // where `search` was set
  double lr = 1e-3;
  double weight_decay = 0.01;
  uint64_t seed = 0;
  // The transformers release the models follow where releases differ (models/model.h).
  std::string transformers = "5.23";
  // The settings the config gives (schema::kAxes of Role::kLora: LoRA's rank, alpha, dropout
  // and target modules, for the points with adapter lora), each as a point's config spelling
  // ("16", "q;v"); one not given is PEFT's default (no targets: each family's defaults).
  std::map<std::string, std::string> settings;
  std::map<std::string, int> setting_lines;  // where each was set
  GridSpec grid;
  std::vector<ExcludeRule> exclude;
  std::vector<SweepGroup> sweeps;  // from `sweeps:`, or one group from top-level `models:`
};

// The axes a grid may set, in expansion order (outermost first; batch innermost so that
// larger batches follow smaller ones).
extern const std::vector<std::string> kAxes;

Config load_config(const std::string& path);
// The config at `path` with `key=value` overrides applied in memory (no file is written): a
// dotted key reaches into mappings (`grid.batch`), the value is YAML (`[1, 2]`). Checked as a
// file is; an error in what an override gave names the override as typed ("command line:
// grid.batch=[0]: must be at least 1, got 0"), one in the file the file's line.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// The YAML text of that config (what a run keeps as OUT/configs/): the file's tree with the
// overrides set, after a comment naming both. Throws UserError for an override that is not
// key=value or not YAML.
std::string apply_overrides(const std::string& path, const std::vector<std::string>& overrides);
// The hint for a model the zoo does not know: the nearest names ("did you mean gpt2-medium?")
// and where the list is.
std::string unknown_model_hint(const std::string& name);
// Checks one value of an axis and returns it in canonical form; throws UserError.
std::string canonical_axis_value(const std::string& axis, const std::string& value,
                                 const std::string& file, int line, const std::string& key);

}  // namespace sweep
