// results.csv reader on top of fccp's CSVReader (quoted fields, header by name).
#include "reports/results.h"

#include <libfccp/csv.h>

#include <charconv>
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

std::string ResultsError::located() const {
  return file_ + (line_ ? ":" + std::to_string(line_) : std::string()) + ": " + what();
}

std::optional<double> Row::number(std::size_t col) const {
  const std::string& s = cells[col];
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw ResultsError(source, line, "column '" + std::string(schema::kColumns[col]) +
                                         "': '" + s + "' is not a number");
  return v;
}

Results read_results(const std::string& path_in) {
  namespace fs = std::filesystem;
  std::string path = path_in;
  if (fs::is_directory(path)) path = (fs::path(path) / "results.csv").string();
  if (!fs::exists(path)) throw ResultsError(path, 0, "no such file");
  Results out;
  out.path = path;
  constexpr auto idx = std::make_index_sequence<schema::kColumnCount>{};
  try {
    Reader in(path);
    read_header(in, idx);
    for (std::size_t i = 0; i < schema::kColumnCount; ++i)
      out.present[i] = in.has_column(std::string(schema::kColumns[i]));
    for (auto required : {"point_id", "model", "status"})
      if (!in.has_column(required))
        throw ResultsError(path, 1, std::string("header has no '") + required + "' column");
    Row row;
    row.source = path;
    while (true) {
      // fccp reports the line it finished; the row's own line is that one.
      if (!read_row(in, row, idx)) break;
      row.line = in.get_file_line();
      out.rows.push_back(row);
    }
  } catch (const io::error::base& e) {
    // fccp's messages already name the file and line; keep the line for the caller.
    unsigned line = 0;
    if (auto* wl = dynamic_cast<const io::error::with_file_line*>(&e); wl && wl->file_line > 0)
      line = static_cast<unsigned>(wl->file_line);
    std::string msg = e.what();
    throw ResultsError(path, line, msg);
  }
  return out;
}

}  // namespace sweep::reports
