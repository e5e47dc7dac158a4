// results.csv reader on top of fccp's CSVReader (quoted fields, header by name).
#include "reports/results/rows.h"

#include "reports/results/cards.h"
#include "reports/results/files.h"

#include <libfccp/csv.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <unordered_map>
#include <filesystem>
#include <utility>

namespace sweep::reports {
namespace {

using Reader = io::CSVReader<schema::kColumnCount, io::trim_chars<' ', '\t'>,
                             io::double_quote_escape<',', '"'>, io::throw_on_overflow,
                             io::no_comment>;

template <std::size_t... I>
void read_header(Reader& in, std::index_sequence<I...>) {
  in.read_header(io::ignore_extra_column | io::ignore_missing_column,
                 std::string(schema::kColumns[I])...);
}

template <std::size_t... I>
bool read_row(Reader& in, Row& row, std::index_sequence<I...>) {
  return in.read_row(row.cells[I]...);
}

}  // namespace


std::optional<double> Row::number(std::size_t col) const {
  const std::string& s = cells[col];
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw UserError(source, static_cast<int>(line), "", "column '" + std::string(schema::kColumns[col]) +
                                         "': '" + s + "' is not a number", kResultsHint);
  return v;
}

std::vector<double> Row::step_times() const {
  if (!step_ms_samples.empty()) return step_ms_samples;
  if (auto v = number(schema::column("step_ms"))) return {*v};
  return {};
}

std::string Row::where() const { return source + ":" + std::to_string(line); }

Latest latest_per_point(const Results& results) {
  Latest out;
  std::unordered_map<std::string_view, std::size_t> index;  // point_id -> position in out
  std::unordered_map<std::size_t, std::string> lines;       // position -> "3, 9" when repeated
  for (const Row& row : results.rows) {
    const std::string& id = row.at(schema::column("point_id"));
    auto [it, fresh] = index.emplace(id, out.rows.size());
    if (fresh) {
      out.rows.push_back(&row);
      continue;
    }
    std::string& l = lines[it->second];
    if (l.empty()) l = std::to_string(out.rows[it->second]->line);
    l += ", " + std::to_string(row.line);
    out.rows[it->second] = &row;
  }
  for (std::size_t i = 0; i < out.rows.size(); ++i)
    if (auto it = lines.find(i); it != lines.end())
      out.duplicates.push_back(out.rows[i]->at(schema::column("point_id")) + " (lines " +
                               it->second + ")");
  return out;
}

std::string number_text(double v) {
  char buf[400];  // fixed notation of the largest double fits
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  SWEEP_CHECK(ec == std::errc(), "number too long to print");
  return std::string(buf, end);
}

std::string gib(std::optional<double> bytes) {
  if (!bytes) return "";
  return fixed(*bytes / kGiB, 2);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  // "-0" reads as a change where there is none.
  bool negative_zero = s[0] == '-' && s.find_first_not_of("0.", 1) == std::string::npos;
  return negative_zero ? s.substr(1) : s;
}

std::string format_bytes(double bytes, bool sign) {
  const bool gib = std::abs(bytes) >= 1024 * kMiB;
  char buf[64];
  std::snprintf(buf, sizeof buf,
                sign ? (gib ? "%+.2f GiB" : "%+.1f MiB") : (gib ? "%.2f GiB" : "%.1f MiB"),
                bytes / (gib ? 1024 * kMiB : kMiB));
  return buf;
}

std::string csv_field(std::string_view text) {
  std::string s(text);
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string spreadsheet_field(std::string_view text) {
  // A plain number ("-1.5", "+2", "3e-5") is a number to every spreadsheet, never a formula.
  static const std::regex number(R"([+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)");
  const bool formula = !text.empty() && std::string_view("=+-@\t\r").find(text.front()) != std::string_view::npos &&
                       !std::regex_match(text.begin(), text.end(), number);
  return csv_field(formula ? "'" + std::string(text) : std::string(text));
}

namespace {

[[noreturn]] void bad_cell(const Row& row, std::string_view column, const std::string& what) {
  throw UserError(row.source, static_cast<int>(row.line), "",
                  "column '" + std::string(column) + "': " + what, kResultsHint);
}

// Every number a command reads fits int64 (counts are converted to it; a throughput of
// 1e19 tokens/s is no measurement either): 1e19, 1e308 and 2^64 used to pass as finite and
// turned into INT64_MIN in `recommend`.
constexpr double kInt64Limit = 9223372036854775808.0;  // 2^63, the first double past INT64_MAX
constexpr const char* kInt64MaxText = "9223372036854775807";

bool listed(std::string_view name, const auto& table) {
  return std::find(table.begin(), table.end(), name) != table.end();
}

// One numeric cell, checked: a finite number in int64's range, whole in an integer column,
// not negative unless the column may be, at least 1 where the column counts from 1.
double checked_number(const Row& row, std::string_view column, std::string_view text) {
  const bool integer = listed(column, schema::kIntegerColumns);
  const bool may_be_negative = listed(column, schema::kSignedColumns);
  const char* first = text.data();
  const char* last = first + text.size();
  while (first < last && *first == ' ') ++first;
  const std::string shown = "'" + std::string(text) + "'";
  double v = 0;
  int64_t whole = 0;
  // An integer column's digits are read as an integer (exact up to INT64_MAX); a cell such
  // as "4.0" or "1e3" is then read as a double, which must be whole.
  if (auto [p, ec] = std::from_chars(first, last, whole); integer && first != last && p == last) {
    if (ec == std::errc::result_out_of_range)
      bad_cell(row, column, shown + " is out of range: a count is at most " + kInt64MaxText);
    v = static_cast<double>(whole);
  } else {
    auto [q, ec2] = std::from_chars(first, last, v);
    if (first == last || (ec2 != std::errc() && ec2 != std::errc::result_out_of_range) || q != last)
      bad_cell(row, column, shown + " is not a number");
    if (ec2 == std::errc() && !std::isfinite(v)) bad_cell(row, column, shown + " is not a finite number");
    if (ec2 == std::errc::result_out_of_range || !(v > -kInt64Limit && v < kInt64Limit))
      bad_cell(row, column, shown + " is out of range: at most " + kInt64MaxText + " in magnitude");
    if (integer && v != std::floor(v)) bad_cell(row, column, shown + " is not a whole number");
  }
  if (v < 0 && !may_be_negative)
    bad_cell(row, column, shown + " is negative; it counts bytes, steps or time");
  if (v < 1 && listed(column, schema::kAtLeastOneColumns))
    bad_cell(row, column, shown + " is less than 1");
  return v;
}

// Every enumerated axis cell names a value of its vocabulary (or is empty: an older file).
template <Vocabulary E>
void check_name(const Row& row) {
  static constexpr std::size_t kColumn = schema::find_column(VocabTable<E>::key);
  const std::string& cell = row.at(kColumn);
  if (!cell.empty() && !parse_as<E>(cell))
    bad_cell(row, VocabTable<E>::key, "'" + cell + "' is not one of " + choices<E>());
}
template <Vocabulary... E>
void check_names(const Row& row) {
  (check_name<E>(row), ...);
}

// Until the whole Whisper came (WhisperForConditionalGeneration, which takes labels of
// target_seq tokens), whisper-* was the encoder with WhisperForAudioClassification's head. A
// Whisper row without target_seq is one of those: it reads as the model it measured,
// whisper-*-cls, so that older results, baselines and tables compare with the classifier's
// rows and never with the whole model's.
void read_whisper_classifier_under_its_name(Row& row) {
  using schema::column;
  std::string& family = row.cells[column("family")];
  if (family != "whisper" || !row.at(column("target_seq")).empty()) return;
  family = "whisper-cls";
  row.cells[column("model")] += "-cls";
}

// The one gate every row passes before any command sees it.
void check_row(Row& row) {
  using schema::column;
  const std::string& status = row.at(column("status"));
  auto s = parse_as<Status>(status);
  if (!s) bad_cell(row, "status", "'" + status + "' is not one of " + choices<Status>());
  row.status = *s;
  check_names<Mode, Precision, Checkpointing, OptimizerKind, Adapter, Offload, Weights, Device>(row);
  for (auto name : schema::kRequiredCells)
    if (row.at(schema::find_column(name)).empty()) bad_cell(row, name, "is empty");
  if (row.status == Status::kOk)
    for (auto name : schema::kRequiredWhenOk)
      if (row.at(schema::find_column(name)).empty())
        bad_cell(row, name, "is empty in a row with status ok");
  for (auto name : schema::kNumberColumns) {
    const std::string& cell = row.at(schema::find_column(name));
    if (!cell.empty()) checked_number(row, name, cell);
  }
  if (auto v = row.number(column("schema_version")); v && (*v > schema::kSchemaVersion || *v < 1))
    throw UserError(row.source, static_cast<int>(row.line), "",
                    "schema_version " + row.at(column("schema_version")) +
                        ": this sweep reads versions 1 to " + std::to_string(schema::kSchemaVersion),
                    "read it with the sweep that wrote it (suite_version " +
                        row.at(column("suite_version")) + ")");
  // An emulated row's card: the facts its prediction used, which must read back as a card
  // (one of negative memory was taken).
  if (const std::string& card = row.at(column("card")); !card.empty() && !parse_card_cell(card))
    bad_cell(row, "card",
             "'" + card + "' is not a card cell (e.g. \"RTX 3060 (sm_86, 28 SMs, memory 12616466432 B, context "
             "805306368 B)\": memory above 0, its context a part of it)");
  read_whisper_classifier_under_its_name(row);
  const std::string& samples = row.at(column("step_ms_samples"));
  row.step_ms_samples.clear();
  for (std::size_t at = 0; at < samples.size();) {
    const std::size_t end = std::min(samples.find(';', at), samples.size());
    row.step_ms_samples.push_back(
        checked_number(row, "step_ms_samples", std::string_view(samples).substr(at, end - at)));
    at = end + 1;
  }
}

// Lines in the file and whether it ends with a newline: tells a torn last row from a bad one.
std::pair<unsigned, bool> line_count(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned lines = 0;
  char c = '\n', last = '\n';
  while (in.get(c)) {
    if (c == '\n') ++lines;
    last = c;
  }
  return {last == '\n' ? lines : lines + 1, last == '\n'};
}

}  // namespace

Results read_results(const std::string& path_in) {
  namespace fs = std::filesystem;
  std::string path = path_in;
  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "results.csv")) {
    // A directory of results under other names (docs/tables holds rtx3060-results.csv): its
    // one *results*.csv is read; several are named in the hint.
    std::vector<std::string> csvs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && name.ends_with(".csv") && name.find("results") != std::string::npos)
        csvs.push_back(e.path().string());
    }
    std::sort(csvs.begin(), csvs.end());
    if (csvs.size() == 1) return read_results(csvs.front());
    if (csvs.size() > 1) {
      std::string list;
      for (const auto& c : csvs) list += (list.empty() ? "" : ", ") + c;
      throw UserError(path, 0, "", "no results.csv here, and several results files: " + list,
                      "pass one of them, e.g. " + csvs.front());
    }
  }
  if (fs::is_directory(path)) path = (fs::path(path) / "results.csv").string();
  // The one check every file sweep reads goes through (files.h): a FIFO is refused, not waited on.
  std::FILE* file = ::fdopen(open_regular_file(path, "", kNoResultsHint), "rb");
  SWEEP_CHECK(file != nullptr, "fdopen of an open descriptor");
  Results out;
  out.path = path;
  constexpr auto idx = std::make_index_sequence<schema::kColumnCount>{};
  try {
    Reader in(path, file);  // fccp owns `file` from here
    read_header(in, idx);
    for (std::size_t i = 0; i < schema::kColumnCount; ++i)
      out.present[i] = in.has_column(std::string(schema::kColumns[i]));
    std::vector<std::string_view> required(schema::kRequiredCells.begin(), schema::kRequiredCells.end());
    required.insert(required.end(), schema::kRequiredWhenOk.begin(), schema::kRequiredWhenOk.end());
    for (auto required_column : required)
      if (!in.has_column(std::string(required_column)))
        throw UserError(path, 1, "", "header has no '" + std::string(required_column) + "' column",
                        kResultsHint);
    Row row;
    row.source = path;
    while (true) {
      // fccp reports the line it finished; the row's own line is that one.
      if (!read_row(in, row, idx)) break;
      row.line = in.get_file_line();
      check_row(row);
      out.rows.push_back(row);
    }
  } catch (const io::error::base& e) {
    // fccp's messages already name the file and line; keep the line for the caller.
    unsigned line = 0;
    if (auto* wl = dynamic_cast<const io::error::with_file_line*>(&e); wl && wl->file_line > 0)
      line = static_cast<unsigned>(wl->file_line);
    const auto [lines, ends_in_newline] = line_count(path);
    if (line > 1 && line == lines &&
        (!ends_in_newline || dynamic_cast<const io::error::too_few_columns*>(&e)))
      throw UserError(path, static_cast<int>(line), "",
                      std::string("the last row is cut short (") + e.what() +
                          "): a run was killed or the disk filled while writing it" +
                          (ends_in_newline ? "" : " (no newline at the end)"),
                      "drop that line with `sed -i '" + std::to_string(line) + "d' " + path +
                          "`; re-running the sweep then measures that point again");
    throw UserError(path, static_cast<int>(line), "", e.what(), kResultsHint);
  }
  return out;
}

}  // namespace sweep::reports
