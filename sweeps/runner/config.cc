// YAML config loading with yaml-cpp. Unknown keys are errors (a typo must not silently
// change a sweep); each error points at the line of the offending node.
#include "sweeps/runner/config.h"

#include "reports/results/files.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <strings.h>
#include <sstream>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "models/lora.h"
#include "models/zoo.h"
#include "sweeps/measure/alloc_conf.h"
#include "reports/results/cards.h"
#include "reports/results/spelling.h"

namespace sweep {

// The grid's keys, nested in this order (schema::kAxes' grid ranks).
const std::vector<std::string> kAxes = [] {
  std::vector<std::string> names;
  for (const auto column : schema::grid_axes()) names.emplace_back(column);
  return names;
}();

namespace {

// Each grid axis of named values: its vocabulary's names (but optimizer "none", which an eval
// point gets by itself), or true and false.
const std::map<std::string, std::vector<std::string>> kChoices = [] {
  std::map<std::string, std::vector<std::string>> choices;
  for (const auto& a : schema::kAxes) {
    const std::string column(a.column);
    if (a.values == schema::Values::kBool) choices[column] = {"true", "false"};
    if (a.values != schema::Values::kVocabulary) continue;
    for (const auto name : vocabulary_names(a.column))
      if (column != VocabTable<OptimizerKind>::key || name != name_of(OptimizerKind::kNone))
        choices[column].emplace_back(name);
    SWEEP_CHECK(!choices[column].empty(), "the grid axis " + column + " has no vocabulary");
  }
  return choices;
}();

// Ranges of the numeric axes (schema::kAxes' max). The upper ends keep every product the burst
// forms (batch x seq x accumulation x steps) far inside int64 and stop a typo from asking for a
// petabyte.
const std::map<std::string, Range> kAxisRanges = [] {
  std::map<std::string, Range> ranges;
  for (const auto& a : schema::kAxes) {
    if (a.values == schema::Values::kCount)
      ranges[std::string(a.column)] = {1, static_cast<double>(a.max), true};
    if (a.values == schema::Values::kSeconds || a.values == schema::Values::kPositive)
      ranges[std::string(a.column)] = {0, static_cast<double>(a.max), false};
  }
  return ranges;
}();

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// A key=value override of the command line, applied onto the file's YAML tree in memory.
struct Override {
  std::string text;  // as typed: "grid.batch=[1,2]"
  std::string key;   // "grid.batch"
  YAML::Node value;  // its value, now a node of the config's tree
};

// Whether `n` is `tree` or a node inside it.
bool contains(const YAML::Node& tree, const YAML::Node& n) {
  if (tree.is(n)) return true;
  if (tree.IsMap())
    for (const auto& kv : tree)
      if (contains(kv.first, n) || contains(kv.second, n)) return true;
  if (tree.IsSequence())
    for (const auto& v : tree)
      if (contains(v, n)) return true;
  return false;
}

struct Ctx {
  std::string file;
  std::vector<Override> overrides;
  // The override `n` came from: a node of its value, or a key it added (a key without a
  // place in the file) under its dotted key; nullptr for a node of the file.
  const Override* override_of(const YAML::Node& n, const std::string& key) const {
    if (overrides.empty() || !n.IsDefined()) return nullptr;
    for (auto o = overrides.rbegin(); o != overrides.rend(); ++o)
      if (contains(o->value, n)) return &*o;
    if (n.Mark().is_null())
      for (auto o = overrides.rbegin(); o != overrides.rend(); ++o)
        if (key == o->key || key.rfind(o->key + ".", 0) == 0 || key.rfind(o->key + "[", 0) == 0)
          return &*o;
    return nullptr;
  }
  // The file's line of `n`; 0 for a value an override gave.
  int line(const YAML::Node& n) const { return override_of(n, "") ? 0 : n.Mark().line + 1; }
  // Every config error says what to do: the hint is not optional. An error in what an
  // override gave names the override as typed, not a line of a file the user never wrote.
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& msg,
                         const std::string& hint) const {
    if (const Override* o = override_of(n, key))
      throw UserError("command line", 0, o->text, (key.empty() || key == o->key ? "" : key + ": ") + msg,
                      hint);
    throw UserError(file, n.Mark().line + 1, key, msg, hint);
  }
  std::string scalar(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected a single value", "write it as `" + key + ": VALUE`");
    if (const std::string c = control_character(n.Scalar()); !c.empty())
      fail(n, key, "contains " + c, "write the value on one line, without control characters");
    return n.Scalar();
  }
  // One value of an axis in canonical form (canonical_axis_value), its error placed here.
  std::string axis_value(const YAML::Node& v, const std::string& axis, const std::string& key) const {
    const std::string text = scalar(v, key);
    try {
      return canonical_axis_value(axis, text, file, line(v), key);
    } catch (const UserError& e) {
      fail(v, key, e.what(), e.hint());
    }
  }
  double number(const YAML::Node& n, const std::string& key, Range r) const {
    try {
      return parse_number(scalar(n, key), r);
    } catch (const std::invalid_argument& e) {
      fail(n, key, e.what(), r.hint());
    }
  }
  int64_t integer(const YAML::Node& n, const std::string& key, Range r) const {
    try {
      return parse_integer(scalar(n, key), r);
    } catch (const std::invalid_argument& e) {
      fail(n, key, e.what(), r.hint());
    }
  }
  bool boolean(const YAML::Node& n, const std::string& key) const {
    std::string s = scalar(n, key);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    fail(n, key, "'" + s + "' is not true or false", "write true or false");
  }
  // Also refuses a key given twice (yaml-cpp keeps both; the second would silently win).
  void only_keys(const YAML::Node& map, const std::string& where,
                 const std::set<std::string>& allowed) const {
    if (!map.IsMap())
      fail(map, where, "expected a mapping of keys to values", "write it as `key: value` lines");
    std::map<std::string, int> seen;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) fail(kv.first, where, "a key must be a plain name", "write keys as `name: value`");
      auto k = kv.first.Scalar();
      // `steps:` with nothing after it: a null, never a meaningful value.
      if (kv.second.IsNull())
        fail(kv.first, where.empty() ? k : where + "." + k, "has no value",
             "write it as `" + k + ": VALUE`, or delete the line");
      if (auto [it, fresh] = seen.emplace(k, kv.first.Mark().line + 1); !fresh)
        fail(kv.first, where.empty() ? k : where + "." + k, "duplicate key",
             "it is already set on line " + std::to_string(it->second) + "; keep one");
      if (!allowed.count(k)) {
        std::vector<std::string> names(allowed.begin(), allowed.end());
        const std::string full = where.empty() ? k : where + "." + k;
        // An axis beside `models:` instead of under `grid:` (`batch: [1, 2]` at the top).
        if (allowed.count("grid") && std::find(kAxes.begin(), kAxes.end(), k) != kAxes.end())
          fail(kv.first, full, "unknown key: " + k + " is a grid axis",
               "write it under `grid:`, e.g. grid: {" + k + ": [...]} (on the command line " +
                   (where.empty() ? "" : where + ".") + "grid." + k + "=[...])");
        fail(kv.first, full, "unknown key", did_you_mean(k, names) + "known keys here: " + join(names));
      }
    }
  }
};

AxisValues parse_axis(const Ctx& c, const YAML::Node& n, const std::string& axis,
                      const std::string& key) {
  AxisValues a;
  a.line = c.line(n);
  auto one = [&](const YAML::Node& v) {
    if (!v.IsScalar()) c.fail(v, key, "expected a value or a list of values", "e.g. `" + axis + ": [1, 2]`");
    a.values.push_back(c.axis_value(v, axis, key));
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
    rule.line = c.line(r);
    for (const auto& kv : r) {
      auto axis = kv.first.as<std::string>();
      std::string v = c.scalar(kv.second, where + "." + axis);
      if (axis == "model") {
        const auto* spec = models::find_model(v);
        if (!spec) c.fail(kv.second, where + ".model", "unknown model '" + v + "'", unknown_model_hint(v));
        rule.match[axis] = spec->name;
      } else {
        rule.match[axis] = c.axis_value(kv.second, axis, where + "." + axis);
      }
    }
    rules.push_back(rule);
  }
  return rules;
}

// A name or a list of names, each checked by `check` (which fails on a bad one).
std::vector<std::string> parse_names(
    const Ctx& c, const YAML::Node& n, const std::string& key, const std::string& empty_hint,
    const std::function<void(const YAML::Node&, const std::string&)>& check) {
  std::vector<std::string> out;
  auto one = [&](const YAML::Node& v) {
    std::string name = c.scalar(v, key);
    check(v, name);
    out.push_back(name);
  };
  if (n.IsSequence()) {
    if (n.size() == 0) c.fail(n, key, "empty list", empty_hint);
    for (const auto& v : n) one(v);
  } else {
    one(n);
  }
  return out;
}

// Each model by its zoo name (a Hugging Face id, as `sweep models` prints it, names one too).
std::vector<std::string> parse_models(const Ctx& c, const YAML::Node& n, const std::string& key) {
  auto names = parse_names(c, n, key, "name at least one model",
                           [&](const YAML::Node& v, const std::string& name) {
                             if (!models::find_model(name))
                               c.fail(v, key, "unknown model '" + name + "'", unknown_model_hint(name));
                           });
  for (auto& name : names) name = models::find_model(name)->name;
  return names;
}

// LoRA target modules: plain names, or PEFT's "all-linear" alone (matched without case, as PEFT
// does); which layers they match is checked per model (grid.cc).
std::vector<std::string> parse_targets(const Ctx& c, const YAML::Node& n, const std::string& key) {
  auto names = parse_names(c, n, key, "name at least one module, or drop the key",
                           [&](const YAML::Node& v, const std::string& name) {
                             if (name.empty() || name.find_first_of(";, ") != std::string::npos)
                               c.fail(v, key, "'" + name + "' is not a module name",
                                      "write module names as a list, e.g. `" + key + ": [q, v]`");
                           });
  for (auto& name : names) {
    if (strcasecmp(name.c_str(), models::kAllLinear) != 0) continue;
    if (names.size() > 1)
      c.fail(n, key, "'" + name + "' is PEFT's shorthand for every linear layer, not a module name",
             "give it alone, `" + key + ": all-linear`, or list module names");
    name = models::kAllLinear;
  }
  return names;
}

// A setting's value (schema::Axis::values) as a point's config spelling; the axis's help is
// the hint of a value out of range.
std::string parse_setting(const Ctx& c, const YAML::Node& n, const schema::Axis& a) {
  const std::string key(a.column), help(a.help);
  switch (a.values) {
    case schema::Values::kCount:
      return std::to_string(c.integer(n, key, {1, static_cast<double>(a.max), true}));
    case schema::Values::kPositive: {
      const double v = c.number(n, key, {0, static_cast<double>(a.max)});
      if (v <= 0) c.fail(n, key, "must be more than 0, got " + c.scalar(n, key), help);
      return number_text(v);
    }
    case schema::Values::kProbability: {
      const double v = c.number(n, key, {0, 1});
      if (v >= 1) c.fail(n, key, "must be less than 1, got " + c.scalar(n, key), help);
      return number_text(v);
    }
    case schema::Values::kNames: {
      std::string names;
      for (const auto& name : parse_targets(c, n, key)) names += (names.empty() ? "" : ";") + name;
      return names;
    }
    default: break;
  }
  SWEEP_CHECK(false, "the setting " + key + " has no values a config can give");
}

// "8.6" -> {8, 6}.
std::pair<int, int> parse_compute_capability(const Ctx& c, const YAML::Node& n) {
  const std::string text = c.scalar(n, "gpu.compute_capability");
  int major = 0, minor = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, major);
  bool ok = ec == std::errc() && p + 1 < end && *p == '.';
  if (ok) {
    auto [q, ec2] = std::from_chars(p + 1, end, minor);
    ok = ec2 == std::errc() && q == end && q == p + 2;
  }
  if (!ok || major > 20)
    c.fail(n, "gpu.compute_capability", "'" + text + "' is not a compute capability",
           "write it as major.minor, e.g. compute_capability: 8.6 for sm_86 (`sweep gpus` lists "
           "the cards')");
  // The oldest card any torch 2.11 build runs: its CUDA 12.6 wheels start at sm_50
  // (torch/cuda/__init__.py, PYTORCH_RELEASES_CODE_CC: 12.6 {50, ...}; 13.0 starts at 75).
  if (major < 5)
    c.fail(n, "gpu.compute_capability", "sm_" + std::to_string(major) + std::to_string(minor) +
                                            " is older than any card torch 2.11 runs on (sm_50 and newer)",
           "give the card's own compute capability, 5.0 or higher (`sweep gpus` lists the table's)");
  return {major, minor};
}

// A card of the table, found by the name a config gives; fails with the known cards and the
// nearest one.
const CardSpec& table_card(const Ctx& c, const YAML::Node& n, const std::string& key,
                           const std::string& name, const std::string& written_out) {
  if (const CardSpec* card = find_card(name)) return *card;
  const std::string near = nearest_card_key(name);
  c.fail(n, key, unknown_card_message(name),
         (near.empty() ? "" : "did you mean " + near + "? ") + "known cards: " + card_keys() +
             " (`sweep gpus` lists them); for another card " + written_out);
}

GpuTarget parse_gpu(const Ctx& c, const YAML::Node& v) {
  const std::string written_out =
      "write it out: gpu: {name: \"My card\", memory_gib: 11.75, compute_capability: 8.6, sms: 28}";
  GpuTarget g;
  g.line = c.line(v);
  auto from_table = [&g](const CardSpec& card) {
    g.name = card.name;
    g.key = card.key;
    g.memory_gib = static_cast<double>(card_memory_bytes(card)) / reports::kGiB;
    g.cc_major = card.cc_major;
    g.cc_minor = card.cc_minor;
    g.sms = card.sms;
  };
  if (v.IsScalar()) {  // gpu: rtx3060
    from_table(table_card(c, v, "gpu", v.Scalar(), written_out));
    return g;
  }
  c.only_keys(v, "gpu", {"name", "memory_gib", "context_gib", "compute_capability", "sms"});
  if (v["name"]) {
    g.name = c.scalar(v["name"], "gpu.name");
    // The card's name goes into results.csv (its card column), read back as it is written:
    // one that a spreadsheet would take for a formula is refused here.
    if (!g.name.empty() && std::strchr("=+-@", g.name.front()))
      c.fail(v["name"], "gpu.name", "'" + g.name + "' begins with '" + g.name.substr(0, 1) + "'",
             "a spreadsheet opening results.csv would read it as a formula; begin the name with a "
             "letter or a digit");
  }
  if (!v["memory_gib"]) {
    // {name: "RTX 3060"}: a card of the table by name.
    if (g.name.empty())
      c.fail(v, "gpu.memory_gib", "missing",
             "name a card of the table, e.g. gpu: rtx3060, or " + written_out);
    from_table(table_card(c, v["name"], "gpu.name", g.name, written_out));
  } else {
    g.memory_gib = c.number(v["memory_gib"], "gpu.memory_gib", {0.25, 1 << 20});
    // Today's {name, memory_gib}: a named card of the table keeps its compute capability and SMs.
    if (const CardSpec* card = g.name.empty() ? nullptr : find_card(g.name)) {
      // ... with its own memory (as sold, or as CUDA reports it, give or take 5%). A card of
      // another memory under a table card's name would be read back as that card.
      const double sold = card->memory_gib, reported = static_cast<double>(card_memory_bytes(*card)) / reports::kGiB;
      if (std::abs(g.memory_gib - sold) > 0.05 * sold && std::abs(g.memory_gib - reported) > 0.05 * reported)
        c.fail(v["memory_gib"], "gpu.memory_gib",
               "'" + g.name + "' is the table's " + std::string(card->name) + ", a card of " + number_text(sold) +
                   " GiB, not " + number_text(g.memory_gib),
               "give a card of your own a name of its own (gpu: {name: \"My card\", memory_gib: " +
                   number_text(g.memory_gib) + ", ...}), or drop memory_gib for the table's " +
                   std::string(card->name));
      g.key = card->key;
      g.cc_major = card->cc_major;
      g.cc_minor = card->cc_minor;
      g.sms = card->sms;
    }
  }
  if (v["context_gib"])
    g.context_gib = c.number(v["context_gib"], "gpu.context_gib", {0, g.memory_gib});
  if (v["compute_capability"])
    std::tie(g.cc_major, g.cc_minor) = parse_compute_capability(c, v["compute_capability"]);
  if (v["sms"]) g.sms = static_cast<int>(c.integer(v["sms"], "gpu.sms", {1, 10000, true}));
  return g;
}

}  // namespace


std::string unknown_model_hint(const std::string& name) {
  std::vector<std::string> known;
  for (const auto& m : models::zoo()) {
    known.push_back(m.name);
    if (!m.hf_id.empty()) known.push_back(m.hf_id);
  }
  std::vector<std::string> names;  // each suggestion by its zoo name
  for (const auto& near : nearest(name, known))
    if (const auto* spec = models::find_model(near);
        spec && std::find(names.begin(), names.end(), spec->name) == names.end())
      names.push_back(spec->name);
  return did_you_mean(names) + "`sweep models` lists them (by name or Hugging Face id)";
}

std::string Range::hint() const {
  return std::string("expected ") + (whole ? "a whole number" : "a number") + " from " +
         number_text(min) + " to " + number_text(max);
}

double parse_number(const std::string& text, const Range& r) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || (ec != std::errc() && ec != std::errc::result_out_of_range) ||
      p != text.data() + text.size() || std::isnan(v))
    throw std::invalid_argument("'" + text + "' is not a number");
  if (ec == std::errc() && !std::isfinite(v))
    throw std::invalid_argument("'" + text + "' is not a finite number");
  if (ec == std::errc::result_out_of_range || v > r.max)
    throw std::invalid_argument("must be at most " + number_text(r.max) + ", got " + text);
  if (v < r.min)
    throw std::invalid_argument("must be at least " + number_text(r.min) + ", got " + text);
  return v;
}

int64_t parse_integer(const std::string& text, const Range& r) {
  int64_t i = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (!text.empty() && ec == std::errc() && p == text.data() + text.size()) {
    if (static_cast<double>(i) > r.max)
      throw std::invalid_argument("must be at most " + number_text(r.max) + ", got " + text);
    if (static_cast<double>(i) < r.min)
      throw std::invalid_argument("must be at least " + number_text(r.min) + ", got " + text);
    return i;
  }
  // "1e3", "4.0", or a number too long for int64: read as a double, then it must be whole.
  const double v = parse_number(text, r);
  if (v != std::floor(v)) throw std::invalid_argument("'" + text + "' is not a whole number");
  return static_cast<int64_t>(v);
}

std::string control_character(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != 0x7f) continue;
    const std::string at = " (character " + std::to_string(i + 1) + ")";
    switch (c) {
      case '\n': return "a newline" + at;
      case '\r': return "a carriage return" + at;
      case '\t': return "a tab" + at;
      case '\0': return "a NUL byte" + at;
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "%02X", c);
        return std::string("the control character 0x") + hex + at;
      }
    }
  }
  return "";
}

std::string spelled_as(const std::string& value, const std::vector<std::string>& choices) {
  auto folded = [](std::string s) {
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
  };
  for (const auto& c : choices)
    if (folded(c) == folded(value)) return c;
  return "";
}

std::string canonical_axis_value(const std::string& axis, const std::string& value,
                                 const std::string& file, int line, const std::string& key) {
  // Returns the error for the caller to throw, so that every path visibly ends in a return or
  // a throw (a lambda that throws is not [[noreturn]]: "control reaches end of non-void").
  auto fail = [&](const std::string& msg, const std::string& hint) {
    return UserError(file, line, key, msg, hint);
  };
  if (auto it = kChoices.find(axis); it != kChoices.end()) {
    const std::string c = spelled_as(value, it->second);
    // QLoRA is no adapter of its own: LoRA over a 4-bit base, two axes.
    if (c.empty() && axis == "adapter" && folded(value) == "qlora")
      throw fail("unknown value '" + value + "'",
                 "QLoRA is LoRA over 4-bit NF4 weights: adapter lora with weights nf4 (on the "
                 "command line, --adapter lora --weights nf4); expected one of: " +
                     join(it->second));
    if (c.empty())
      throw fail("unknown value '" + value + "'",
           did_you_mean(value, it->second) + "expected one of: " + join(it->second));
    return c;
  }
  if (axis == "alloc_conf") {
    // As torch 2.11 parses PYTORCH_CUDA_ALLOC_CONF: what it refuses (or aborts on) would make
    // every point a crash row; a NUL would cut the variable short.
    if (const std::string c = control_character(value); !c.empty())
      throw fail("contains " + c, "write the settings on one line, e.g. expandable_segments:True");
    const auto parsed = emu::parse_alloc_conf(value);
    if (const auto* error = std::get_if<std::string>(&parsed))
      throw fail(*error, "PyTorch 2.11 refuses it: keys it takes are " + emu::alloc_conf_keys() +
                       " (key:value, comma-separated, e.g. expandable_segments:True)");
    return value;
  }
  const auto range = kAxisRanges.find(axis);
  SWEEP_CHECK(range != kAxisRanges.end(), "axis " + axis + " has no range");
  try {
    if (!range->second.whole) {  // seconds of audio, a share: above 0
      const double v = parse_number(value, range->second);
      if (v <= 0) throw std::invalid_argument("must be more than 0, got " + value);
      // Whisper's feature extractor reads 10 ms frames (models/whisper.cc frames()): less
      // than half a frame rounds to none, and the encoder has nothing to read.
      if (axis == "audio_s" && std::llround(v * 100) < 1)
        throw std::invalid_argument("must be at least 0.005 (Whisper reads audio in 10 ms "
                                    "frames: " + value + " s rounds to none), got " + value);
      return number_text(v);
    }
    return std::to_string(parse_integer(value, range->second));
  } catch (const std::invalid_argument& e) {
    const auto* a = schema::find_axis(axis);
    throw fail(e.what(), axis == "audio_s"  ? "Whisper's encoder takes at most 30 s of audio"
                         : !a->help.empty() ? std::string(a->help) + ": " + range->second.hint()
                                            : range->second.hint());
  }
}

namespace {

// The configs of ./configs, for the hint of a config that is not there.
std::string configs_here() {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("configs", ec))
    if (e.path().extension() == ".yaml") found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  if (found.empty()) return "check the path (no configs/*.yaml in this directory)";
  return "check the path; the configs here: " + join(found) + " (e.g. sweep run " + found.front() + ")";
}

// The first line of `path` indented with a tab (1-based), 0 when none: YAML forbids tabs in
// indentation, and yaml-cpp says only "illegal map value" or the like.
int tab_indented_line(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const auto text = line.find_first_not_of(" \t");
    if (line.find('\t') < std::min(text, line.size())) return n;
  }
  return 0;
}

YAML::Node load_yaml(const std::string& path) {
  // Read as every file sweep reads (files.h): a FIFO or a directory is refused by name.
  const std::string text = read_regular_file(path, "", configs_here());
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    if (const int tab = tab_indented_line(path))
      throw UserError(path, tab, "", "YAML syntax error: this line is indented with a tab (yaml-cpp: " + e.msg + ")",
                      "YAML forbids tabs for indentation: indent with spaces");
    throw UserError(path, e.mark.line + 1, "", "YAML syntax error: " + e.msg,
                    "check the indentation and the brackets and quotes on this line and the "
                    "one before; lists are [a, b] or one `- a` per line");
  } catch (const YAML::Exception& e) {
    throw UserError(path, e.mark.line + 1, "", "not a YAML config: " + e.msg,
                    "start from configs/quickstart.yaml");
  }
}

// Sets each `key=value` of `overrides` in `root` (a dotted key reaches into mappings, the
// value is YAML); what each set, for errors to name it.
std::vector<Override> apply_to(YAML::Node& root, const std::string& path,
                               const std::vector<std::string>& overrides) {
  std::vector<Override> applied;
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError("command line", 0, o, "an override is key=value",
                      "e.g. grid.batch=[1,2] models=[gpt2] steps=5");
    const std::string key = o.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw UserError("command line", 0, o, "the value is not YAML: " + e.msg,
                      "quote it for the shell, e.g. 'grid.precision=[fp32, bf16-amp]'");
    }
    std::vector<std::string> parts;
    std::stringstream in(key);
    for (std::string part; std::getline(in, part, '.');) {
      if (part.empty())
        throw UserError("command line", 0, o, "empty part in the key", "e.g. grid.batch=[1,2]");
      parts.push_back(part);
    }
    if (key.back() == '.')
      throw UserError("command line", 0, o, "empty part in the key", "e.g. grid.batch=[1,2]");
    std::vector<YAML::Node> nodes{root};
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = nodes.back()[parts[i]];
      if (next.IsDefined() && !next.IsMap())
        throw UserError("command line", 0, o, parts[i] + " is not a mapping in " + path,
                        "override a key inside a mapping, e.g. grid.batch");
      nodes.push_back(next);
    }
    nodes.back()[parts.back()] = value;
    applied.push_back({o, key, value});
  }
  return applied;
}

Config parse_config(const YAML::Node& root, const Ctx& c);

}  // namespace

Config load_config(const std::string& path) { return load_config(path, {}); }

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = load_yaml(path);
  if (!root.IsMap())
    throw UserError(path, 1, "", "a config is a mapping of keys to values",
                    "start from configs/quickstart.yaml");
  const Ctx c{path, apply_to(root, path, overrides)};
  return parse_config(root, c);
}

std::string apply_overrides(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = load_yaml(path);
  std::string given;
  for (const auto& o : overrides) given += " " + o;
  apply_to(root, path, overrides);
  YAML::Emitter text;
  text << root;
  return "# " + path + " with" + given + "\n" + text.c_str() + "\n";
}

namespace {

// A config's name is one folder of results/: no separator, not . or ...
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find_first_of("/\\") == std::string::npos &&
         control_character(name).empty();
}

// The config's sweeps: its top-level `models` as one, or each entry of `sweeps:` with its own
// grid and excludes; one of the two, never both.
std::vector<SweepGroup> parse_sweeps(const YAML::Node& root, const Ctx& c) {
  std::vector<SweepGroup> sweeps;
  if (root["models"] && root["sweeps"])
    c.fail(root["sweeps"], "sweeps", "give either top-level `models` or `sweeps`, not both",
           "move the top-level models into a `sweeps:` entry, or drop `sweeps:`");
  if (root["models"]) {
    SweepGroup g;
    g.line = c.line(root["models"]);
    g.models = parse_models(c, root["models"], "models");
    sweeps.push_back(g);
  } else if (root["sweeps"]) {
    const auto& s = root["sweeps"];
    if (!s.IsSequence() || s.size() == 0) c.fail(s, "sweeps", "expected a non-empty list", "e.g. sweeps: [{models: [gpt2]}]");
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::string where = "sweeps[" + std::to_string(i) + "]";
      c.only_keys(s[i], where, {"models", "grid", "exclude"});
      SweepGroup g;
      g.line = c.line(s[i]);
      if (!s[i]["models"]) c.fail(s[i], where + ".models", "missing", "each sweeps entry names its models, e.g. models: [gpt2]");
      g.models = parse_models(c, s[i]["models"], where + ".models");
      if (s[i]["grid"]) g.grid = parse_grid(c, s[i]["grid"], where + ".grid");
      if (s[i]["exclude"]) g.exclude = parse_excludes(c, s[i]["exclude"], where + ".exclude");
      sweeps.push_back(g);
    }
  } else {
    throw UserError(c.file, 1, "models", "missing: a config names the models to sweep",
                    "add e.g. `models: [gpt2]` (run `sweep models` for the list)");
  }
  return sweeps;
}

// A config without `name:` is named by its file: configs/rtx3060.yaml is rtx3060.
std::string name_from_file(const std::string& path) {
  auto slash = path.find_last_of('/');
  auto base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  std::string name = base.substr(0, base.find_last_of('.'));
  if (!plain_name(name))
    throw UserError(path, 0, "name", "the file's name '" + base + "' gives no plain name for results/NAME",
                    "add `name: NAME` to the config, or pass --out");
  return name;
}

Config parse_config(const YAML::Node& root, const Ctx& c) {
  const std::string& path = c.file;
  std::set<std::string> keys = {"name", "device", "out", "gpu", "budget_gib", "timeout_s", "steps",
                                "warmup_steps", "repetitions", "prune_oom", "search", "search_max_batch", "search_max_seq",
                                "lr", "weight_decay", "seed", "transformers", "models", "grid", "exclude",
                                "sweeps"};
  for (const auto& a : schema::kAxes)
    if (a.role == schema::Role::kLora) keys.emplace(a.column);
  c.only_keys(root, "", keys);
  Config cfg;
  cfg.path = path;
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "name") {
      cfg.name = c.scalar(v, key);
      if (!plain_name(cfg.name))
        c.fail(v, key, "'" + cfg.name + "' is not a plain name: it names the output folder results/NAME",
               "use letters, digits, '-', '_' or '.', without '/' (and not . or ..); to write "
               "elsewhere, set `out:` or pass --out");
    }
    else if (key == "device") {
      cfg.device = c.scalar(v, key);
      cfg.device_line = c.line(v);
      if (cfg.device != "auto" && !parse_as<Device>(cfg.device))
        c.fail(v, key, "unknown device '" + cfg.device + "'", "expected one of: auto, " + choices<Device>());
    } else if (key == "out") cfg.out = c.scalar(v, key);
    else if (key == "gpu")
      cfg.gpu = parse_gpu(c, v);
    else if (key == "budget_gib") {
      cfg.budget_gib = c.number(v, key, {0, 1 << 20});
      cfg.budget_line = c.line(v);
    }
    // A day at most: a deadline is a guard against hangs, and std::chrono overflows past
    // ~1e11 s (timeout_s: 1e300 used to kill every point at once).
    else if (key == "timeout_s")
      cfg.timeout_s = c.number(v, key, {0.1, 86400});
    else if (key == "steps") cfg.steps = static_cast<int>(c.integer(v, key, {1, 1e6, true}));
    else if (key == "warmup_steps")
      cfg.warmup_steps = static_cast<int>(c.integer(v, key, {0, 1e6, true}));
    else if (key == "repetitions")
      cfg.repetitions = static_cast<int>(c.integer(v, key, {1, 1e4, true}));
    else if (key == "prune_oom") cfg.prune_oom = c.boolean(v, key);
    else if (key == "search") {
      cfg.search = spelled_as(c.scalar(v, key), {"max_batch", "max_seq", "none"});
      if (cfg.search.empty())
        c.fail(v, key, "unknown search '" + c.scalar(v, key) + "'",
               "expected max_batch (or max-batch: the largest batch), max_seq (or max-seq: the longest seq) or none");
      if (cfg.search == "none") cfg.search.clear();
      cfg.search_line = c.line(v);
    } else if (key == "search_max_batch") cfg.search_max_batch = c.integer(v, key, {1, 1 << 30, true});
    else if (key == "search_max_seq") cfg.search_max_seq = c.integer(v, key, {64, 1 << 20, true});
    else if (key == "lr") cfg.lr = c.number(v, key, {0, 1e3});
    else if (key == "weight_decay") cfg.weight_decay = c.number(v, key, {0, 1e3});
    else if (key == "seed") cfg.seed = static_cast<uint64_t>(c.integer(v, key, {0, 9e15, true}));
    else if (key == "transformers") {
      cfg.transformers = c.scalar(v, key);
      if (!models::parse_transformers_release(cfg.transformers))
        c.fail(v, key, "unknown transformers release '" + cfg.transformers + "'",
               "5.23 (the default) or 5.17: the releases whose forward code differs for a model "
               "of the zoo (T5's attention mask layout); quote it, transformers: \"5.17\"");
    }
    else if (const schema::Axis* a = schema::find_axis(key); a && a->role == schema::Role::kLora) {
      cfg.settings[key] = parse_setting(c, v, *a);
      cfg.setting_lines[key] = c.line(v);
    } else if (key == "grid") cfg.grid = parse_grid(c, v, "grid");
    else if (key == "exclude") cfg.exclude = parse_excludes(c, v, "exclude");
  }
  cfg.sweeps = parse_sweeps(root, c);
  if (cfg.name.empty()) cfg.name = name_from_file(path);
  if (cfg.out.empty()) cfg.out = "results/" + cfg.name;
  return cfg;
}

}  // namespace


}  // namespace sweep
