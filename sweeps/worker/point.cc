// Point identity and (de)serialisation.
#include "sweeps/worker/point.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <type_traits>
#include <sstream>
#include <stdexcept>

#include "models/zoo.h"
#include "reports/results/rows.h"  // number_text
#include "sweep_version.h"

namespace sweep {

Point tiny_point(const std::string& model, Device device, Precision precision, OptimizerKind optimizer) {
  const auto* spec = models::find_model(model);
  if (!spec) throw std::invalid_argument("unknown model " + model);
  Point p;
  p.model = model;
  p.family = spec->family;
  p.device = device;
  p.batch = 2;
  const bool whisper = p.family.starts_with("whisper");
  if (!whisper) p.seq = 32;
  if (p.family == "t5" || p.family == "whisper") p.target_seq = 16;
  if (whisper) p.audio_s = 2;
  p.precision = precision;
  p.optimizer = optimizer;
  p.steps = p.warmup_steps = p.repetitions = 1;
  return p;
}

namespace {

template <class T>
const T& axis_value(const Point&, const T& v) { return v; }
// The card as its cell spells it, on device emulated only ("" elsewhere: no cell, and the id
// of a measured point does not name it).
std::string axis_value(const Point& p, const EmulatedCard& card) {
  return p.device == Device::kEmulated && !card.name.empty() ? card_cell(card)
                                                             : std::string();
}
// (without LoRA there are none to name: the family's defaults need not exist).
std::string axis_value(const Point& p, const std::vector<std::string>& names) {
  return p.adapter == Adapter::kLora || !names.empty() ? module_names_text(p.family, names) : std::string();
}

// The point's members, by axis: f(axis, value) for each, in schema::kAxes order. LoRA's
// targets are given as the row writes them (the family's defaults named, ';'-separated).
template <class F>
void for_each_axis(const Point& p, F&& f) {
  std::size_t i = 0;
#define X(m) f(schema::kAxes[i++], axis_value(p, p.m));
  SWEEP_POINT_AXES(X)
#undef X
}

constexpr auto kMemberNames = std::to_array<std::string_view>({
#define X(m) #m,
    SWEEP_POINT_AXES(X)
#undef X
});
consteval bool members_match_axes() {
  if (kMemberNames.size() != schema::kAxes.size()) return false;
  for (std::size_t i = 0; i < kMemberNames.size(); ++i)
    if (kMemberNames[i] != schema::kAxes[i].column) return false;
  return true;
}
static_assert(members_match_axes(), "SWEEP_POINT_AXES must name the columns of schema::kAxes, in its order");

// The three spellings of a value: in the point id (frozen: ids must not change), in a row's
// cell (as JSON, which the writer prints), and in a config.
std::string id_text(const std::string& v) { return v; }
std::string id_text(bool v) { return v ? "true" : "false"; }
template <Vocabulary E>
std::string id_text(E v) { return to_string(v); }
template <class T>
  requires std::is_arithmetic_v<T>
std::string id_text(T v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
nlohmann::json cell_of(const std::string& v) { return v; }
nlohmann::json cell_of(bool v) { return v ? 1 : 0; }
template <Vocabulary E>
nlohmann::json cell_of(E v) { return name_of(v); }
template <class T>
  requires std::is_arithmetic_v<T>
nlohmann::json cell_of(T v) { return v; }
std::string cell_text(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }
std::string config_text(const std::string& v) { return v; }
std::string config_text(bool v) { return v ? "true" : "false"; }
std::string config_text(double v) { return reports::number_text(v); }
template <Vocabulary E>
std::string config_text(E v) { return to_string(v); }
template <class T>
  requires std::is_integral_v<T>
std::string config_text(T v) { return std::to_string(v); }

bool unset(const std::string& v) { return v.empty(); }
template <Vocabulary E>
bool unset(E) { return false; }
template <class T>
  requires std::is_arithmetic_v<T>
bool unset(T v) { return v == T{}; }

void parse_into(const std::string& text, std::string& v) { v = text; }
void parse_into(const std::string& text, bool& v) { v = text == "true" || text == "1"; }
void parse_into(const std::string& text, double& v) { v = std::stod(text); }
void parse_into(const std::string& text, int& v) { v = std::stoi(text); }
void parse_into(const std::string& text, int64_t& v) { v = std::stoll(text); }
template <Vocabulary E>
void parse_into(const std::string& text, E& v) {
  const auto e = parse_as<E>(text);
  if (!e)
    throw std::invalid_argument(std::string(VocabTable<E>::key) + ": unknown value '" + text +
                                "' (one of " + choices<E>() + ")");
  v = *e;
}
void parse_into(const std::string& text, EmulatedCard& card) {
  if (text.empty()) {
    card = EmulatedCard{};
    return;
  }
  const auto facts = parse_card_cell(text);
  if (!facts)
    throw std::invalid_argument("card: '" + text +
                                "' is not a card cell (e.g. \"RTX 3060 (sm_86, 28 SMs, "
                                "memory 12616466432 B, context 805306368 B)\")");
  card = *facts;
}
void parse_into(const std::string& text, std::vector<std::string>& v) {
  v.clear();
  for (std::size_t b = 0, e; b <= text.size(); b = e + 1) {
    e = std::min(text.find(';', b), text.size());
    if (e > b) v.push_back(text.substr(b, e - b));
  }
}

// The point's cells by column, as a results row has them.
CellOf cells_of(const Point& p) {
  return [&p](std::string_view column) {
    std::string cell;
    for_each_axis(p, [&](const schema::Axis& a, const auto& v) {
      if (a.column == column) cell = cell_text(cell_of(v));
    });
    return cell;
  };
}

}  // namespace

std::string Point::id() const {
  // The first release's axes as key=value pairs, the suite version, then the axes added
  // since, each only where the schema says (so that older points keep their ids).
  const bool lora = adapter == Adapter::kLora;
  std::string first, later;
  for_each_axis(*this, [&](const schema::Axis& a, const auto& v) {
    const std::string part = std::string(a.column) + "=" + id_text(v);
    switch (a.id) {
      case schema::Named::kAlways: first += (first.empty() ? "" : ";") + part; break;
      case schema::Named::kUnlessDefault:
        // An unset cell (Cell::kIfSet) is its empty fallback.
        if (!(a.cell == schema::Cell::kIfSet && unset(v)) && cell_text(cell_of(v)) != a.fallback)
          later += ";" + part;
        break;
      case schema::Named::kWithLora:
        if (lora) later += ";" + part;
        break;
      case schema::Named::kNever: break;
    }
  });
  return fnv1a_hex(first + ";suite_version=" + SWEEP_VERSION + later);
}

nlohmann::json axis_cells(const Point& p) {
  nlohmann::json j = nlohmann::json::object();
  const bool lora = p.adapter == Adapter::kLora;
  for_each_axis(p, [&](const schema::Axis& a, const auto& v) {
    if ((a.cell == schema::Cell::kIfSet && unset(v)) || (a.cell == schema::Cell::kWithLora && !lora))
      return;
    j[std::string(a.column)] = cell_of(v);
  });
  return j;
}

std::string axis_text(const Point& p, std::string_view column) {
  std::string text;
  for_each_axis(p, [&](const schema::Axis& a, const auto& v) {
    if (a.column == column) text = config_text(v);
  });
  return text;
}

Point point_of(const reports::Row& row) {
  Point p;
  for (const auto& a : schema::kAxes)
    if (const auto cell = row.axis(schema::find_column(a.column)); !cell.empty())
      set_axis_text(p, a.column, std::string(cell));
  return p;
}

bool set_axis_text(Point& p, std::string_view column, const std::string& text) {
#define X(m) \
  if (column == #m) return parse_into(text, p.m), true;
  SWEEP_POINT_AXES(X)
#undef X
  return false;
}

std::string module_names_text(const std::string& family, const std::vector<std::string>& names) {
  std::string s;
  for (const auto& name : names.empty() ? models::default_lora_targets(family) : names)
    s += (s.empty() ? "" : ";") + name;
  return s;
}

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string Point::label() const {
  std::ostringstream s;
  s << model << " b=" << batch;
  if (seq) s << " seq=" << seq;
  if (target_seq) s << " tgt=" << target_seq;
  if (audio_s) s << " audio=" << audio_s << "s";
  s << " " << name_of(precision) << " ckpt=" << name_of(checkpointing) << " acc=" << accumulation
    << " " << name_of(optimizer);
  // The technique's named axes that are not said below, by their keys ("no-cache").
  s << name_tail(cells_of(*this), " ", true, {"adapter", "offload", "weights", "alloc_conf"});
  if (adapter == Adapter::kLora) s << " lora r=" << lora_r;
  if (offload != Offload::kNone) s << " offload=" << name_of(offload);
  if (weights != Weights::kFull) s << " weights=" << name_of(weights);
  if (mode != Mode::kTrain) s << " " << name_of(mode);
  if (!alloc_conf.empty()) s << " [" << alloc_conf << "]";
  return s.str();
}

namespace {
// A member as the worker's JSON holds it: the vocabulary by name.
template <class T>
void put(nlohmann::json& j, const char* key, const T& v) {
  if constexpr (Vocabulary<T>)
    j[key] = name_of(v);
  else
    j[key] = v;
}
// The card travels as an object of its own (to_json below), not as its cell.
void put(nlohmann::json&, const char*, const EmulatedCard&) {}
void get(const nlohmann::json&, const char*, EmulatedCard&) {}
template <class T>
void get(const nlohmann::json& j, const char* key, T& v) {
  if (!j.contains(key)) return;
  if constexpr (Vocabulary<T>)
    parse_into(j.at(key).get<std::string>(), v);
  else
    j.at(key).get_to(v);
}
}  // namespace

void to_json(nlohmann::json& j, const Point& p) {
#define X(f) put(j, #f, p.f);
  SWEEP_POINT_AXES(X)
  SWEEP_POINT_SETTINGS(X)
#undef X
  if (p.device == Device::kEmulated)
    j["card"] = {{"name", p.card.name},
                 {"memory_bytes", p.card.memory_bytes},
                 {"context_bytes", p.card.context_bytes},
                 {"cc_major", p.card.cc_major},
                 {"cc_minor", p.card.cc_minor},
                 {"sms", p.card.sms},
                 {"cpu", p.card.cpu}};
}

void from_json(const nlohmann::json& j, Point& p) {
#define X(f) get(j, #f, p.f);
  SWEEP_POINT_AXES(X)
  SWEEP_POINT_SETTINGS(X)
#undef X
  if (j.contains("card")) {
    const auto& c = j.at("card");
    get(c, "name", p.card.name);
    get(c, "memory_bytes", p.card.memory_bytes);
    get(c, "context_bytes", p.card.context_bytes);
    get(c, "cc_major", p.card.cc_major);
    get(c, "cc_minor", p.card.cc_minor);
    get(c, "sms", p.card.sms);
    get(c, "cpu", p.card.cpu);
  }
}

}  // namespace sweep
