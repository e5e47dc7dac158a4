// fit's flags checked, its configs emitted and installed; see fit_config.h.
#include "sweeps/cli/fit_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <strings.h>
#include <optional>
#include <type_traits>

#include "models/lora.h"
#include "models/zoo.h"
#include "reports/recommend/recommend.h"
#include "sweeps/runner/grid.h"
#include "reports/results/files.h"
#include "sweeps/runner/sweep.h"

namespace sweep {
namespace {

using reports::kGiB;

// The most samples per optimizer step a fit reaches: the largest accumulation a config takes
// (sweeps/runner/config.cc), so that every pick (micro-batch >= 1) is one a config can run.
constexpr int64_t kMaxEffectiveBatch = int64_t{1} << 20;

struct InputFlag {
  const char* axis;
  const char* flag;
  std::optional<std::string> text;  // as given; none: the flag is absent
};

std::vector<InputFlag> input_flags(const FitOptions& o) {
  auto text = [](const auto& v) -> std::optional<std::string> {
    if (!v) return std::nullopt;
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(*v)>>) return shown(*v);
    else return std::to_string(*v);
  };
  return {{"seq", "--seq", text(o.seq)},
          {"target_seq", "--target-seq", text(o.target_seq)},
          {"audio_s", "--audio-s", text(o.audio_s)}};
}

// Whether a setting's flag was given.
template <class T>
bool given(const std::optional<T>& flag) { return flag.has_value(); }
bool given(const std::vector<std::string>& flag) { return !flag.empty(); }

// A flag's value checked as a config's (sweeps/runner/config.cc, grid.cc) beyond the CLI's
// range: a probability below 1; module names that name a layer of the model, all-linear alone.
void check_setting(const std::string& flag, const schema::Axis& a, const std::optional<double>& v,
                   const models::ModelSpec&) {
  if (a.values == schema::Values::kProbability && v && *v >= 1)
    throw UserError("", 0, flag, "must be less than 1, got " + shown(*v),
                    "a probability from 0 up to (not including) 1, e.g. " + flag + " 0.05");
}
void check_setting(const std::string&, const schema::Axis&, const std::optional<int64_t>&,
                   const models::ModelSpec&) {}
void check_setting(const std::string& flag, const schema::Axis&, const std::vector<std::string>& names,
                   const models::ModelSpec& spec) {
  for (const auto& t : names) {
    if (strcasecmp(t.c_str(), models::kAllLinear) == 0) {
      if (names.size() > 1)
        throw UserError("", 0, flag, "'" + t + "' is PEFT's shorthand for every linear layer, not a module name",
                        "give it alone, " + flag + " all-linear, or list module names");
      continue;
    }
    if (!models::names_lora_layer(spec.family, t))
      throw UserError("", 0, flag, "'" + t + "' names no layer of " + spec.name,
                      "layers LoRA can adapt: " + models::lora_layer_list(spec.family) +
                          " (a name matches a layer's name or its end after a dot), or all-linear");
  }
}

// --lora-* as a config's lora_* keys are checked: with --adapter lora only, then each value.
void check_lora_flags(const FitOptions& o, const models::ModelSpec& spec) {
  const bool lora = std::find(o.adapters.begin(), o.adapters.end(), "lora") != o.adapters.end();
  o.lora.for_each([&](std::string_view column, const auto& flag) {
    if (given(flag) && !lora)
      throw UserError("", 0, flag_of(column), "sets LoRA, which this fit does not try",
                      "add --adapter lora (or --adapter none,lora)");
  });
  o.lora.for_each([&](std::string_view column, const auto& flag) {
    check_setting(flag_of(column), *schema::find_axis(column), flag, spec);
  });
}

}  // namespace

std::string shown(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "?";
}

namespace {

// --seq max searches the tokens per sample at one batch: a model that takes them, and no
// effective batch (the answer is a length, at --batch).
void check_seq_max(const FitOptions& o, const models::ModelSpec& spec) {
  if (!o.seq_max) {
    if (o.batch)
      throw UserError("", 0, "--batch", "--batch sets the batch at which --seq max searches the longest seq",
                      "add --seq max, or leave --batch out: fit searches the largest batch itself");
    return;
  }
  if (std::find(spec.axes.begin(), spec.axes.end(), "seq") == spec.axes.end())
    throw UserError("", 0, "--seq", spec.name + " takes no tokens per sample: there is no longest seq to search",
                    "ask for its largest batch without --seq max");
  if (o.effective_batch)
    throw UserError("", 0, "--effective-batch",
                    "--seq max answers the longest seq at one micro-batch (--batch, default 1), not a "
                    "way to an effective batch",
                    "leave --effective-batch out, or ask for the largest batch at a --seq N");
  if (o.batch) canonical_axis_value("batch", std::to_string(*o.batch), "", 0, "--batch");
}

}  // namespace

void check_flags(const FitOptions& o, const models::ModelSpec& spec) {
  // Before anything is created: a newline in --out would cut fit.yaml's lines (it was refused
  // as "a bug in sweep fit", after the directory was made).
  if (const std::string c = control_character(o.out); !c.empty())
    throw UserError("", 0, "--out", "the directory's name holds " + c,
                    "name the directory without control characters");
  // --margin, --context-gib, --memory-gib and --audio-s are finite and in range by the CLI's
  // validators (reports::finite_number), checked before any command runs.
  if (o.effective_batch && (*o.effective_batch < 1 || *o.effective_batch > kMaxEffectiveBatch))
    throw UserError("", 0, "--effective-batch",
                    "must be from 1 to " + std::to_string(kMaxEffectiveBatch) + ", got " +
                        std::to_string(*o.effective_batch),
                    "micro-batch x accumulation per optimizer step, e.g. --effective-batch 32");
  canonical_axis_value("batch", std::to_string(o.max_batch), "", 0, "--max-batch");
  check_seq_max(o, spec);
  check_lora_flags(o, spec);
  std::string takes;
  for (const auto& f : input_flags(o))
    if (std::find(spec.axes.begin(), spec.axes.end(), f.axis) != spec.axes.end())
      takes += std::string(takes.empty() ? "" : ", ") + f.flag;
  for (const auto& f : input_flags(o)) {
    if (!f.text) continue;
    if (std::find(spec.axes.begin(), spec.axes.end(), f.axis) == spec.axes.end())
      throw UserError("", 0, f.flag, spec.name + " takes no " + f.axis,
                      "its input lengths: " + (takes.empty() ? std::string("none") : takes));
    Point p;
    set_axis_text(p, f.axis, canonical_axis_value(f.axis, *f.text, "", 0, f.flag));
    check_fits(spec, p, f.axis, "", 0, f.flag);
  }
}

namespace {

// A flag's value as a config's key holds it.
YAML::Node yaml_value(const std::optional<int64_t>& v) { return YAML::Node(*v); }
YAML::Node yaml_value(const std::optional<double>& v) { return YAML::Node(shown(*v)); }
YAML::Node yaml_value(const std::vector<std::string>& names) { return flow_list(names); }

// The --lora-* flags given, as the config's lora_* keys.
void add_lora_settings(const FitOptions& o, YAML::Node& y) {
  o.lora.for_each([&](std::string_view column, const auto& flag) {
    if (given(flag)) y[std::string(column)] = yaml_value(flag);
  });
}

}  // namespace

YAML::Node config_head(const FitOptions& o, const std::string& name, Device device,
                       const std::string& out, int64_t budget_bytes, const YAML::Node& gpu) {
  YAML::Node y;
  y["name"] = name;
  y["device"] = std::string(name_of(device));
  y["out"] = out;
  if (!gpu.IsNull()) y["gpu"] = gpu;
  y["budget_gib"] = number_text(static_cast<double>(budget_bytes) / kGiB);
  y["timeout_s"] = 600;
  y["steps"] = 1;
  y["warmup_steps"] = 1;
  y["repetitions"] = 3;
  y["prune_oom"] = true;
  y["models"] = flow_list({o.model});
  add_lora_settings(o, y);
  return y;
}

void add_input_axes(const FitOptions& o, YAML::Node grid) {
  for (const auto& f : input_flags(o))
    if (f.text) grid[f.axis] = *f.text;
}

YAML::Node flow_list(const std::vector<std::string>& values) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& v : values) list.push_back(v);
  list.SetStyle(YAML::EmitterStyle::Flow);
  return list;
}

std::string emit_config(const std::string& comment, const YAML::Node& root) {
  YAML::Emitter out;
  out << YAML::Comment(comment) << YAML::Newline << root;
  return std::string(out.c_str()) + "\n";
}

std::vector<Point> install_fit_config(
    const std::filesystem::path& path, const std::string& text, Device device,
    const std::function<void(const std::vector<Point>&)>& check) {
  std::vector<Point> points;
  install_file(path, text, "the fit's config", "out",
               "choose an output directory you can write to with --out DIR",
               [&](const std::string& written) {
    try {
      const Config c = load_config(written);
      points = expand_grid(c, run_settings(c, device, resolve_budget(c, device, {})));
    } catch (const UserError& e) {
      throw UserError("", 0, "fit",
                      "the config for these flags is refused: " +
                          (e.key().empty() ? std::string() : e.key() + ": ") + e.what(),
                      "this is a bug in sweep fit if the flags are valid; please report it with "
                      "the command line (" + e.hint() + ")");
    }
    check(points);
  });
  return points;
}

}  // namespace sweep
