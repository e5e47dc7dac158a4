// YAML config loading with yaml-cpp. Unknown keys are errors (a typo must not silently
// change a sweep); each error points at the line of the offending node.
#include "sweeps/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>

#include "models/zoo.h"

namespace sweep {

const std::vector<std::string> kAxes = {"mode",          "seq",       "target_seq",
                                        "audio_s",       "precision", "checkpointing",
                                        "optimizer",     "accumulation", "alloc_conf", "batch",
                                        "use_cache"};

namespace {

const std::map<std::string, std::vector<std::string>> kChoices = {
    {"mode", {"train", "eval"}},
    {"precision", {"fp32", "fp16-amp", "bf16-amp", "bf16"}},
    {"checkpointing", {"none", "block"}},
    {"optimizer", {"adamw", "adamw-fused", "sgd", "adafactor"}},
    {"use_cache", {"true", "false"}},
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

struct Ctx {
  std::string file;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& msg,
                         const std::string& hint = "") const {
    throw ConfigError(file, n.Mark().line + 1, key, msg, hint);
  }
  std::string scalar(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected a single value");
    return n.Scalar();
  }
  double number(const YAML::Node& n, const std::string& key, double min) const {
    std::string s = scalar(n, key);
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
      fail(n, key, "'" + s + "' is not a number");
    if (v < min) fail(n, key, "must be at least " + std::to_string(min) + ", got " + s);
    return v;
  }
  int64_t integer(const YAML::Node& n, const std::string& key, int64_t min) const {
    double v = number(n, key, static_cast<double>(min));
    if (v != std::floor(v)) fail(n, key, "'" + n.Scalar() + "' is not a whole number");
    return static_cast<int64_t>(v);
  }
  bool boolean(const YAML::Node& n, const std::string& key) const {
    std::string s = scalar(n, key);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    fail(n, key, "'" + s + "' is not true or false");
  }
  void only_keys(const YAML::Node& map, const std::string& where,
                 const std::set<std::string>& allowed) const {
    if (!map.IsMap()) fail(map, where, "expected a mapping of keys to values");
    for (const auto& kv : map) {
      auto k = kv.first.as<std::string>();
      if (!allowed.count(k)) {
        std::vector<std::string> names(allowed.begin(), allowed.end());
        fail(kv.first, where.empty() ? k : where + "." + k, "unknown key",
             "known keys here: " + join(names));
      }
    }
  }
};

std::string fmt_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

AxisValues parse_axis(const Ctx& c, const YAML::Node& n, const std::string& axis,
                      const std::string& key) {
  AxisValues a;
  a.line = n.Mark().line + 1;
  auto one = [&](const YAML::Node& v) {
    std::string s = v.IsScalar() ? v.Scalar() : "";
    if (!v.IsScalar()) c.fail(v, key, "expected a value or a list of values");
    a.values.push_back(canonical_axis_value(axis, s, c.file, v.Mark().line + 1, key));
  };
  if (n.IsSequence()) {
    if (n.size() == 0) c.fail(n, key, "empty list", "give at least one value");
    for (const auto& v : n) one(v);
  } else {
    one(n);
  }
  return a;
}

GridSpec parse_grid(const Ctx& c, const YAML::Node& n, const std::string& where) {
  c.only_keys(n, where, std::set<std::string>(kAxes.begin(), kAxes.end()));
  GridSpec g;
  for (const auto& kv : n) {
    auto axis = kv.first.as<std::string>();
    g[axis] = parse_axis(c, kv.second, axis, where + "." + axis);
  }
  return g;
}

std::vector<ExcludeRule> parse_excludes(const Ctx& c, const YAML::Node& n,
                                        const std::string& where) {
  if (!n.IsSequence())
    c.fail(n, where, "expected a list of rules", "e.g. exclude: [{precision: bf16, batch: 64}]");
  std::vector<ExcludeRule> rules;
  std::set<std::string> allowed(kAxes.begin(), kAxes.end());
  allowed.insert("model");
  for (const auto& r : n) {
    c.only_keys(r, where, allowed);
    ExcludeRule rule;
    rule.line = r.Mark().line + 1;
    for (const auto& kv : r) {
      auto axis = kv.first.as<std::string>();
      std::string v = c.scalar(kv.second, where + "." + axis);
      if (axis == "model") {
        if (!models::find_model(v)) c.fail(kv.second, where + ".model", "unknown model '" + v + "'",
                                           "run `sweep models` for the list");
        rule.match[axis] = v;
      } else {
        rule.match[axis] =
            canonical_axis_value(axis, v, c.file, kv.second.Mark().line + 1, where + "." + axis);
      }
    }
    rules.push_back(rule);
  }
  return rules;
}

std::vector<std::string> parse_models(const Ctx& c, const YAML::Node& n, const std::string& key) {
  std::vector<std::string> out;
  auto one = [&](const YAML::Node& v) {
    std::string name = c.scalar(v, key);
    if (!models::find_model(name))
      c.fail(v, key, "unknown model '" + name + "'", "run `sweep models` for the list");
    out.push_back(name);
  };
  if (n.IsSequence()) {
    if (n.size() == 0) c.fail(n, key, "empty list", "name at least one model");
    for (const auto& v : n) one(v);
  } else {
    one(n);
  }
  return out;
}

}  // namespace

ConfigError::ConfigError(std::string file, int line, std::string key, const std::string& message,
                         std::string hint)
    : std::runtime_error(message),
      file_(std::move(file)),
      key_(std::move(key)),
      hint_(std::move(hint)),
      line_(line) {}

std::string ConfigError::located() const {
  std::string s = file_;
  if (line_ > 0) s += ":" + std::to_string(line_);
  s += ": ";
  if (!key_.empty()) s += key_ + ": ";
  return s + what();
}

std::string canonical_axis_value(const std::string& axis, const std::string& value,
                                 const std::string& file, int line, const std::string& key) {
  auto fail = [&](const std::string& msg, const std::string& hint = "") {
    throw ConfigError(file, line, key, msg, hint);
  };
  if (auto it = kChoices.find(axis); it != kChoices.end()) {
    const auto& ok = it->second;
    if (std::find(ok.begin(), ok.end(), value) == ok.end())
      fail("unknown value '" + value + "'", "expected one of: " + join(ok));
    return value;
  }
  if (axis == "alloc_conf") return value;
  double v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || !std::isfinite(v))
    fail("'" + value + "' is not a number");
  if (axis == "audio_s") {
    if (v <= 0 || v > 30) fail("must be in (0, 30] seconds, got " + value,
                               "Whisper's encoder takes at most 30 s of audio");
    return fmt_number(v);
  }
  if (v != std::floor(v) || v < 1) fail("must be a whole number >= 1, got " + value);
  return fmt_number(v);
}

Config load_config(const std::string& path) {
  Ctx c{path};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path, 0, "", "cannot read the file", "check the path");
  } catch (const YAML::ParserException& e) {
    throw ConfigError(path, e.mark.line + 1, "", "YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) throw ConfigError(path, 1, "", "a config is a mapping of keys to values");
  c.only_keys(root, "", {"name", "device", "out", "gpu", "budget_gib", "timeout_s", "steps",
                         "warmup_steps", "repetitions", "prune_oom", "search", "search_max_batch",
                         "lr", "weight_decay", "seed", "models", "grid", "exclude", "sweeps"});
  Config cfg;
  cfg.path = path;
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "name") cfg.name = c.scalar(v, key);
    else if (key == "device") {
      cfg.device = c.scalar(v, key);
      if (cfg.device != "auto" && cfg.device != "cuda" && cfg.device != "cpu")
        c.fail(v, key, "unknown device '" + cfg.device + "'", "expected auto, cuda or cpu");
    } else if (key == "out") cfg.out = c.scalar(v, key);
    else if (key == "gpu") {
      c.only_keys(v, "gpu", {"name", "memory_gib", "context_gib"});
      GpuTarget g;
      g.line = v.Mark().line + 1;
      if (!v["memory_gib"]) c.fail(v, "gpu.memory_gib", "missing", "e.g. gpu: {name: \"RTX 3060\", memory_gib: 12}");
      g.memory_gib = c.number(v["memory_gib"], "gpu.memory_gib", 0.25);
      if (v["name"]) g.name = c.scalar(v["name"], "gpu.name");
      if (v["context_gib"]) g.context_gib = c.number(v["context_gib"], "gpu.context_gib", 0);
      cfg.gpu = g;
    } else if (key == "budget_gib") {
      cfg.budget_gib = c.number(v, key, 0);
      cfg.budget_line = v.Mark().line + 1;
    }
    else if (key == "timeout_s") cfg.timeout_s = c.number(v, key, 0.1);
    else if (key == "steps") cfg.steps = static_cast<int>(c.integer(v, key, 1));
    else if (key == "warmup_steps") cfg.warmup_steps = static_cast<int>(c.integer(v, key, 0));
    else if (key == "repetitions") cfg.repetitions = static_cast<int>(c.integer(v, key, 1));
    else if (key == "prune_oom") cfg.prune_oom = c.boolean(v, key);
    else if (key == "search") {
      cfg.search = c.scalar(v, key);
      if (cfg.search != "max_batch" && cfg.search != "none")
        c.fail(v, key, "unknown search '" + cfg.search + "'", "expected max_batch or none");
      if (cfg.search == "none") cfg.search.clear();
    } else if (key == "search_max_batch") cfg.search_max_batch = c.integer(v, key, 1);
    else if (key == "lr") cfg.lr = c.number(v, key, 0);
    else if (key == "weight_decay") cfg.weight_decay = c.number(v, key, 0);
    else if (key == "seed") cfg.seed = static_cast<uint64_t>(c.integer(v, key, 0));
    else if (key == "grid") cfg.grid = parse_grid(c, v, "grid");
    else if (key == "exclude") cfg.exclude = parse_excludes(c, v, "exclude");
  }
  if (root["models"] && root["sweeps"])
    c.fail(root["sweeps"], "sweeps", "give either top-level `models` or `sweeps`, not both");
  if (root["models"]) {
    SweepGroup g;
    g.line = root["models"].Mark().line + 1;
    g.models = parse_models(c, root["models"], "models");
    cfg.sweeps.push_back(g);
  } else if (root["sweeps"]) {
    const auto& s = root["sweeps"];
    if (!s.IsSequence() || s.size() == 0) c.fail(s, "sweeps", "expected a non-empty list");
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::string where = "sweeps[" + std::to_string(i) + "]";
      c.only_keys(s[i], where, {"models", "grid", "exclude"});
      SweepGroup g;
      g.line = s[i].Mark().line + 1;
      if (!s[i]["models"]) c.fail(s[i], where + ".models", "missing");
      g.models = parse_models(c, s[i]["models"], where + ".models");
      if (s[i]["grid"]) g.grid = parse_grid(c, s[i]["grid"], where + ".grid");
      if (s[i]["exclude"]) g.exclude = parse_excludes(c, s[i]["exclude"], where + ".exclude");
      cfg.sweeps.push_back(g);
    }
  } else {
    throw ConfigError(path, 1, "models", "missing: a config names the models to sweep",
                      "add e.g. `models: [gpt2]` (run `sweep models` for the list)");
  }
  if (cfg.name.empty()) {
    auto slash = path.find_last_of('/');
    auto base = path.substr(slash == std::string::npos ? 0 : slash + 1);
    cfg.name = base.substr(0, base.find_last_of('.'));
  }
  if (cfg.out.empty()) cfg.out = "results/" + cfg.name;
  return cfg;
}

}  // namespace sweep
