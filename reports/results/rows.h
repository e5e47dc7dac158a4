// Reading results.csv: the only way reports, recommendations and comparisons see
// measurements. Columns are matched by name (older files may lack newer columns);
// malformed input throws UserError naming the file and line.
#pragma once

#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "reports/results/error.h"
#include "reports/results/schema.h"
#include "reports/results/vocab.h"

namespace sweep::reports {


// The hint of every results-file error: what `sweep run` writes and how to recover.
inline constexpr const char* kResultsHint =
    "results.csv holds one row per point with the columns of reports/results/schema.h, as `sweep run` "
    "writes it; the file is left as it is: fix or delete that line, then run again";
// The hint when there is no results file where one was named.
inline constexpr const char* kNoResultsHint =
    "pass the directory `sweep run` wrote (it holds results.csv), or the file itself";

// A row's `status` and the enumerated axes are the vocabulary's (vocab.h).
using ::sweep::Status;
template <Vocabulary... E>
consteval bool keys_are_columns() {
  return ((schema::find_column(VocabTable<E>::key) < schema::kColumnCount) && ...);
}
static_assert(keys_are_columns<Mode, Precision, Checkpointing, OptimizerKind, Adapter, Offload, Weights,
                               Device, Status>(),
              "a vocabulary's key names no column of schema::kColumns");

// One measurement row, checked when read: every numeric cell is a finite number (not
// negative but for a leak rate), the status is known, the schema version is one this
// sweep reads. Cells are indexed by schema::column("name").
struct Row {
  std::array<std::string, schema::kColumnCount> cells;
  unsigned line = 0;  // line in the file it came from
  std::string source;  // file it came from (for error messages)
  Status status = Status::kOk;
  std::vector<double> step_ms_samples;  // per-repetition step times; empty if none recorded

  const std::string& at(std::size_t col) const { return cells[col]; }
  // An axis cell, its fallback (schema::kAxes) when empty: an older file's `adapter` is "none".
  std::string_view axis(std::size_t col) const {
    if (!cells[col].empty()) return cells[col];
    const schema::Axis* a = schema::find_axis(schema::kColumns[col]);
    return a ? a->fallback : std::string_view();
  }
  // An enumerated axis as its value (row.value<Precision>() == Precision::kBf16); nullopt when
  // the cell is empty and has no fallback. read_results has checked that the name is known.
  template <Vocabulary E>
  std::optional<E> value() const {
    static constexpr std::size_t kColumn = schema::find_column(VocabTable<E>::key);
    const std::string_view name = axis(kColumn);
    if (name.empty()) return std::nullopt;
    const auto v = parse_as<E>(name);
    SWEEP_CHECK(v.has_value(), "a row whose " + std::string(VocabTable<E>::key) + " was not checked");
    return v;
  }
  // The cell as a number; nullopt when empty (read_results has checked it is one).
  std::optional<double> number(std::size_t col) const;
  // The step times to compute statistics from: the samples, else step_ms alone, else none.
  std::vector<double> step_times() const;
  std::string where() const;  // "results.csv:12"
};

struct Results {
  std::string path;
  std::vector<Row> rows;
  bool has_column(std::size_t col) const { return present[col]; }
  std::array<bool, schema::kColumnCount> present{};
};

// The row that counts for each point: a point run again (`--force`, a resumed search)
// has several rows and the last one is its current result. Rows keep the position of the
// point's first row. `duplicates` names each point written more than once and its lines,
// "0123abcd (lines 3, 9)". Every command that reads results uses this one policy.
struct Latest {
  std::vector<const Row*> rows;
  std::vector<std::string> duplicates;
};
Latest latest_per_point(const Results& results);

// Binary units: every byte count in the tree is shown in these.
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * kMiB;

// The text forms of values, one of each for the whole tree:
// bytes for people ("512.0 MiB" below 1 GiB, "1.50 GiB" from there; sign: "+2.0 MiB"),
std::string format_bytes(double bytes, bool sign = false);
// bytes as a number of GiB for a column whose header names the unit ("12.89"; "" unknown),
std::string gib(std::optional<double> bytes);
// a number with a fixed count of decimals ("3.14"),
std::string fixed(double v, int decimals);
// a number as a config spells it: the shortest text that reads back to the same double, in
// fixed notation ("1.5", "1000000"),
std::string number_text(double v);
// and one CSV field (quoted when it holds a comma or a quote; a newline becomes a space,
// so that every CSV this suite writes has one record per line).
std::string csv_field(std::string_view text);
// One field of a CSV file written for spreadsheets (compare.csv, recommendations.csv): a cell
// a spreadsheet would evaluate as a formula (beginning =, +, -, @, a tab or a carriage
// return; OWASP's "CSV injection") gets a leading ', unless it is a plain number ("-1.5").
// results.csv is not one: it is read back exactly, and the text a user gives that reaches it
// (models, gpu.name, alloc_conf) is checked when the config is loaded.
std::string spreadsheet_field(std::string_view text);

// Reads `path` (a results.csv, or a directory holding one). Requires at least the
// columns `point_id`, `model` and `status`; unknown columns are ignored. Throws UserError
// (file, line, hint) for a file that is missing or not a results file, a malformed or
// impossible cell, and a torn last line (a run killed mid-write, a full disk): that error
// says how to drop the line.
Results read_results(const std::string& path);

}  // namespace sweep::reports
