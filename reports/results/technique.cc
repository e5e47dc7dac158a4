// The one way a technique is named, keyed, counted and read; see technique.h.
#include "reports/results/technique.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "reports/results/rows.h"

namespace sweep {
namespace {

constexpr auto kMembers = std::to_array<std::string_view>({
#define SWEEP_AXIS_NAME(type, column, plain) #column,
    SWEEP_TECHNIQUE_AXES(SWEEP_AXIS_NAME)
});
constexpr auto kFlags = std::to_array<std::string_view>({
    SWEEP_TECHNIQUE_AXES_OF(SWEEP_AXIS_NOTHING, SWEEP_AXIS_NAME)
});
constexpr auto kLoraSettings = std::to_array<std::string_view>({
    SWEEP_LORA_SETTINGS(SWEEP_AXIS_NAME)
#undef SWEEP_AXIS_NAME
});

// Whether `names` are the columns of the kAxes entries `picked` holds for, in the table's order.
template <std::size_t N, class Pick>
consteval bool are_axes(const std::array<std::string_view, N>& names, Pick picked) {
  std::size_t i = 0;
  for (const auto& a : schema::kAxes) {
    if (!picked(a)) continue;
    if (i >= N || names[i] != a.column) return false;
    ++i;
  }
  return i == N;
}
// The members are the table's fit axes, each a technique axis; the flags those of them whose
// values are a flag's.
static_assert(are_axes(kMembers, [](const schema::Axis& a) { return a.fit > 0; }) &&
                  are_axes(kMembers, [](const schema::Axis& a) {
                    return a.fit > 0 && a.role == schema::Role::kTechnique;
                  }),
              "SWEEP_TECHNIQUE_AXES must name the kAxes entries with `fit` set, in the table's order");
static_assert(are_axes(kFlags,
                       [](const schema::Axis& a) { return a.fit > 0 && a.values == schema::Values::kBool; }),
              "SWEEP_TECHNIQUE_AXES_OF must pass FLAG each fit axis of Values::kBool");
// The settings are the table's Role::kLora entries, each with its LoraConfig word.
static_assert(are_axes(kLoraSettings,
                       [](const schema::Axis& a) { return a.role == schema::Role::kLora; }) &&
                  are_axes(kLoraSettings, [](const schema::Axis& a) {
                    return a.role == schema::Role::kLora && !a.trainer.empty();
                  }),
              "SWEEP_LORA_SETTINGS must name the kAxes entries of Role::kLora, in the table's order");

std::string cell_text(bool v) { return v ? "1" : "0"; }
template <Vocabulary E>
std::string cell_text(E v) { return to_string(v); }

bool parse_into(std::string_view text, bool& v) {
  if (text == "1" || text == "true") return v = true, true;
  if (text == "0" || text == "false") return v = false, true;
  return false;
}
template <Vocabulary E>
bool parse_into(std::string_view text, E& v) {
  const auto e = parse_as<E>(text);
  if (e) v = *e;
  return e.has_value();
}

const schema::Axis& axis(std::string_view column) {
  const schema::Axis* a = schema::find_axis(column);
  SWEEP_CHECK(a != nullptr, "no axis " + std::string(column));
  return *a;
}

// `text` with "{}" as `self` and "{column}" as that cell; a word whose "{column}" is empty
// left out (with the space before it).
std::string spelled(std::string_view text, const std::string& self, const CellOf& cell) {
  std::string out;
  for (std::size_t b = 0; b <= text.size();) {
    const std::size_t e = std::min(text.find(' ', b), text.size());
    std::string word;
    bool empty_reference = false;
    for (std::size_t i = b; i < e; ++i) {
      if (text[i] != '{') {
        word += text[i];
        continue;
      }
      const std::size_t close = text.find('}', i);
      SWEEP_CHECK(close != std::string_view::npos && close < e, "an unclosed {} in a phrase");
      const std::string_view name = text.substr(i + 1, close - i - 1);
      const std::string v = name.empty() ? self : cell(name);
      empty_reference = empty_reference || (!name.empty() && v.empty());
      word += v;
      i = close;
    }
    if (!empty_reference) out += (out.empty() ? "" : " ") + word;
    b = e + 1;
  }
  return out;
}

}  // namespace

std::string Technique::cell(std::string_view column) const {
#define SWEEP_TECHNIQUE_CELL(type, member, plain) \
  if (column == #member) return cell_text(member);
  SWEEP_TECHNIQUE_AXES(SWEEP_TECHNIQUE_CELL)
#undef SWEEP_TECHNIQUE_CELL
  return "";
}

bool Technique::set(std::string_view column, std::string_view text) {
#define SWEEP_TECHNIQUE_SET(type, member, plain) \
  if (column == #member) return parse_into(text, member);
  SWEEP_TECHNIQUE_AXES(SWEEP_TECHNIQUE_SET)
#undef SWEEP_TECHNIQUE_SET
  return false;
}

std::string Technique::key() const {
  std::string k;
  for (auto m : kMembers) k += (k.empty() ? "" : "|") + cell(m);
  return k;
}

nlohmann::json Technique::json() const {
  nlohmann::json j = nlohmann::json::object();
  for (auto m : kMembers) {
    if (axis(m).values == schema::Values::kBool)
      j[std::string(m)] = cell(m) == "1";
    else
      j[std::string(m)] = cell(m);
  }
  return j;
}

int Technique::changes() const {
  int n = 0;
  for (auto m : kMembers) n += !schema::is_plain(axis(m), cell(m));
  return n;
}

std::string TechniqueFlags::cell(std::string_view column) const {
#define SWEEP_FLAG_CELL(type, member, plain) \
  if (column == #member) return cell_text(member);
  SWEEP_TECHNIQUE_AXES_OF(SWEEP_AXIS_NOTHING, SWEEP_FLAG_CELL)
#undef SWEEP_FLAG_CELL
  return "";
}

nlohmann::json TechniqueFlags::json() const {
  nlohmann::json j = nlohmann::json::object();
  for (auto f : kFlags) j[std::string(f)] = cell(f) == "1";
  return j;
}

void read_flags(const reports::Row& row, TechniqueFlags& f) {
#define SWEEP_FLAG_READ(type, member, plain) \
  parse_into(row.axis(schema::find_column(#member)), f.member);
  SWEEP_TECHNIQUE_AXES_OF(SWEEP_AXIS_NOTHING, SWEEP_FLAG_READ)
#undef SWEEP_FLAG_READ
}

namespace {
void read_setting(const reports::Row& row, std::size_t col, int64_t& v) {
  if (const auto n = row.number(col)) v = static_cast<int64_t>(*n);
}
void read_setting(const reports::Row& row, std::size_t col, double& v) {
  if (const auto n = row.number(col)) v = *n;
}
void read_setting(const reports::Row& row, std::size_t col, std::vector<std::string>& names) {
  const std::string_view cell = row.axis(col);
  if (cell.empty()) return;
  names.clear();
  for (std::size_t b = 0; b <= cell.size();) {
    const std::size_t e = std::min(cell.find(';', b), cell.size());
    if (e > b) names.emplace_back(cell.substr(b, e - b));
    b = e + 1;
  }
}
}  // namespace

void read_lora_settings(const reports::Row& row, LoraSettings& s) {
#define SWEEP_LORA_READ(type, member, plain) read_setting(row, schema::find_column(#member), s.member);
  SWEEP_LORA_SETTINGS(SWEEP_LORA_READ)
#undef SWEEP_LORA_READ
}

std::string config_text(std::string_view column, const std::string& cell) {
  const schema::Axis* a = schema::find_axis(column);
  if (a && a->values == schema::Values::kBool) return cell == "1" ? "true" : cell == "0" ? "false" : cell;
  return cell;
}

bool read_technique(const reports::Row& row, Technique& t) {
  bool all = true;
  for (auto m : kMembers) all = t.set(m, row.axis(schema::find_column(m))) && all;
  return all;
}

std::optional<Technique> technique_of(const reports::Row& row) {
  Technique t;
  if (!read_technique(row, t)) return std::nullopt;
  return t;
}

CellOf cells_of(const reports::Row& row) {
  return [&row](std::string_view column) {
    const std::size_t c = schema::find_column(column);
    return c < schema::kColumnCount ? std::string(row.axis(c)) : std::string();
  };
}

namespace {
// An empty cell as an older file's row means it: the axis's fallback.
std::string or_fallback(std::string_view column, std::string v) {
  if (v.empty())
    if (const schema::Axis* a = schema::find_axis(column); a != nullptr) v = a->fallback;
  return v;
}
}  // namespace

CellOf cells_of(const Technique& t) {
  // A technique axis that is no member (the trainer, which fit does not search) is at its
  // value for a row without the cell: fit's techniques run Trainer.
  return [&t](std::string_view column) { return or_fallback(column, t.cell(column)); };
}

TechniqueCells technique_cells(const reports::Row& row) {
  TechniqueCells cells;
  for (const auto& a : schema::kAxes)
    if (a.role == schema::Role::kTechnique || a.role == schema::Role::kLora)
      cells.emplace(a.column, row.axis(schema::find_column(a.column)));
  return cells;
}

CellOf cells_of(const TechniqueCells& cells) {
  return [&cells](std::string_view column) {
    const auto it = cells.find(column);
    return or_fallback(column, it == cells.end() ? std::string() : it->second);
  };
}

std::vector<std::string> name_parts(const CellOf& cell, bool key,
                                    std::initializer_list<std::string_view> skip) {
  std::vector<const schema::Axis*> named;
  for (const auto& a : schema::kAxes)
    if (a.name_rank > 0 && std::find(skip.begin(), skip.end(), a.column) == skip.end())
      named.push_back(&a);
  std::sort(named.begin(), named.end(),
            [](const schema::Axis* x, const schema::Axis* y) { return x->name_rank < y->name_rank; });
  std::vector<std::string> parts;
  for (const schema::Axis* a : named) {
    const std::string v = cell(a->column);
    if (is_plain(*a, v)) continue;
    parts.push_back(spelled(key ? a->key : a->phrase, v, cell));
  }
  return parts;
}

std::string name_tail(const CellOf& cell, std::string_view separator, bool key,
                      std::initializer_list<std::string_view> skip) {
  std::string s;
  for (const auto& part : name_parts(cell, key, skip)) s += std::string(separator) + part;
  return s;
}

std::string shown(const CellOf& cell, std::string_view column) {
  const schema::Axis& a = axis(column);
  const std::string v = cell(column);
  if (a.values == schema::Values::kBool) return v == "0" ? "False" : "True";
  if (!a.shown.empty() && !is_plain(a, v)) return spelled(a.shown, v, cell);
  return v;
}

int changes_but(const CellOf& cell, std::initializer_list<std::string_view> except) {
  int n = 0;
  for (const auto& a : schema::kAxes)
    n += a.role == schema::Role::kTechnique &&
         std::find(except.begin(), except.end(), a.column) == except.end() && !is_plain(a, cell(a.column));
  return n;
}

std::vector<std::pair<double, std::string>> order_of(const CellOf& cell,
                                                     std::initializer_list<std::string_view> except) {
  std::vector<const schema::Axis*> axes;
  for (const auto& a : schema::kAxes)
    if ((a.role == schema::Role::kTechnique && a.name_rank > 0) || a.role == schema::Role::kLora)
      if (std::find(except.begin(), except.end(), a.column) == except.end()) axes.push_back(&a);
  std::stable_sort(axes.begin(), axes.end(), [](const schema::Axis* x, const schema::Axis* y) {
    auto rank = [](const schema::Axis* a) { return a->role == schema::Role::kLora ? 1000 : a->name_rank; };
    return rank(x) < rank(y);
  });
  std::vector<std::pair<double, std::string>> key;
  for (const schema::Axis* a : axes) {
    const std::string v = cell(a->column);
    double place = 0;
    if (a->values == schema::Values::kBool) {
      place = is_plain(*a, v) ? 0 : 1;
    } else if (const auto names = vocabulary_names(a->column); !names.empty()) {
      place = static_cast<double>(std::find(names.begin(), names.end(), v) - names.begin());
    } else if (schema::is_number_column(a->column) && !v.empty()) {
      place = std::strtod(v.c_str(), nullptr);
    }
    key.emplace_back(place, v);
  }
  return key;
}

std::string configuration_key(const CellOf& cell, std::initializer_list<std::string_view> except) {
  std::string k;
  for (const auto& a : schema::kAxes)
    if ((a.role == schema::Role::kTechnique || a.role == schema::Role::kLora) &&
        std::find(except.begin(), except.end(), a.column) == except.end())
      k += cell(a.column) + '\x1f';
  return k;
}

}  // namespace sweep
