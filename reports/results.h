// Reading results.csv: the only way reports, recommendations and comparisons see
// measurements. Columns are matched by name (older files may lack newer columns);
// malformed input throws ResultsError naming the file and line.
#pragma once

#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sweeps/schema.h"

namespace sweep::reports {

// Bad input: carries file and line so the CLI can print `file:line: message` and exit 2.
class ResultsError : public std::runtime_error {
 public:
  ResultsError(std::string file, unsigned line, const std::string& what)
      : std::runtime_error(what), file_(std::move(file)), line_(line) {}
  const std::string& file() const { return file_; }
  unsigned line() const { return line_; }
  // "results.csv:12: message"
  std::string located() const;

 private:
  std::string file_;
  unsigned line_;
};

// One measurement row; cells indexed by schema::column("name").
struct Row {
  std::array<std::string, schema::kColumnCount> cells;
  unsigned line = 0;  // line in the file it came from

  const std::string& at(std::size_t col) const { return cells[col]; }
  // The cell as a number; nullopt when empty. Throws ResultsError if not a number.
  std::optional<double> number(std::size_t col) const;
  std::string source;  // file it came from (for error messages)
};

struct Results {
  std::string path;
  std::vector<Row> rows;
  bool has_column(std::size_t col) const { return present[col]; }
  std::array<bool, schema::kColumnCount> present{};
};

// Reads `path` (a results.csv, or a directory holding one). Requires at least the
// columns `point_id`, `model` and `status`; unknown columns are ignored.
Results read_results(const std::string& path);

}  // namespace sweep::reports
