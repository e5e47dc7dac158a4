// From fit's flags to the configs it writes into its output directory: OUT/fit.yaml (a
// max-batch search per technique) and OUT/fit-pick.yaml (the pick at its accumulation). The
// flags are checked first, each error naming the flag typed; the configs are emitted with
// yaml-cpp's emitter, never pasted together, so that every value reads back as given (an
// --out of `o #x` or `o: x`); and installed only once they load as configs, by a rename over
// the old file, so that a refused or interrupted fit leaves the previous one whole.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sweeps/cli/fit.h"
#include "sweeps/runner/config.h"
#include "sweeps/worker/point.h"

namespace sweep {

namespace models {
struct ModelSpec;
}

// A number as an error message shows it: the shortest text that reads back ("0.05",
// "1e+300"), never the 301 digits of fixed notation.
std::string shown(double v);

// Fit's own flags beyond the card and the techniques (--margin, --context-gib,
// --effective-batch, --max-batch, the input lengths --seq, --target-seq, --audio-s, checked
// as a config's grid axis is and taken by the model, and --lora-*, as a config's lora_* keys
// are and with --adapter lora only), each before anything is written, so
// that an error names the flag typed, never the config fit writes from it. UserError.
void check_flags(const FitOptions& o, const models::ModelSpec& spec);

// The header fit.yaml and fit-pick.yaml share: name, device, out, the card (`gpu`, when not
// null), the budget, the probes' settings, the model.
YAML::Node config_head(const FitOptions& o, const std::string& name, Device device,
                       const std::string& out, int64_t budget_bytes, const YAML::Node& gpu);
// The grid's input lengths the flags give.
void add_input_axes(const FitOptions& o, YAML::Node grid);

// A list in flow style (`[fp32, bf16-amp]`), each value as the config spells it.
YAML::Node flow_list(const std::vector<std::string>& values);

// The text of a config: `comment` (one line or several) as a YAML comment, then `root`.
std::string emit_config(const std::string& comment, const YAML::Node& root);

// A config fit writes, installed once it loads and expands on `device` (with the runner's
// settings, run_settings) and `check` (which may throw UserError) accepts its points: its
// points. The flags were checked before, so a refusal of the config itself is fit's own
// mistake, said as such rather than as an error in a file the user never wrote.
std::vector<Point> install_fit_config(
    const std::filesystem::path& path, const std::string& text, Device device,
    const std::function<void(const std::vector<Point>&)>& check = [](const auto&) {});

}  // namespace sweep
