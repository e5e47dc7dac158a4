// The results file: results.csv, append-only. Each finished point is one line, written,
// flushed and fsync'ed at once; the file is never rewritten, so a killed run loses at most
// the point in flight and never corrupts what is there.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "reports/results/rows.h"
#include "sweeps/runner/search.h"

namespace sweep {

// The `reason` of a row whose worker never ran (it could not be exec'd): kept in the file so
// the failure is seen, but no result: recall() skips it, and a resumed run runs the point again.
inline constexpr const char* kNotStartedReason = "worker-not-started";

// Whether a row on file is its point's result for a resumed run (and for a second `fit`, whose
// answer says "fix what stopped them and run the same command again"). Not a row whose worker
// never ran, nor a crash or a timeout: their cause (a bug since fixed, a driver reset, a busy
// machine) may be gone, so the point is measured again, its new row beside the old one. Within
// one run a failure is not retried. An OOM, a skip and an ok row are answers and stay. Applied
// to each point's latest row (reports::latest_per_point), as every reader of results takes it.
bool result_on_resume(const reports::Row& r);

class ResultsStore {
 public:
  // Opens (creating if needed) DIR/FILE. An existing file must have this schema's header, or
  // an older one's (its rows are then rewritten under this header, the file as it was kept
  // beside it as FILE.schema-N), and parse cleanly; otherwise UserError (file, line) and
  // nothing is touched.
  explicit ResultsStore(const std::string& dir, const std::string& file = "results.csv");
  ~ResultsStore();
  ResultsStore(const ResultsStore&) = delete;
  ResultsStore& operator=(const ResultsStore&) = delete;

  // Appends one row: keys are schema columns; missing keys are empty cells.
  void append(const nlohmann::json& row);
  // How a recorded point ended (the last row of its point_id), or nullptr (for resume).
  const ProbeOutcome* outcome(const std::string& point_id) const;
  // Also counts the points another results file holds as recorded (a Slurm task's resume
  // consults the merged file and the other shards). Same checks as the constructor's.
  // Returns the rows that file holds.
  std::size_t recall(const std::string& csv_path);
  const std::string& path() const { return path_; }
  // Points on record (each point once, however many rows it has).
  std::size_t recorded() const { return recorded_.size(); }
  // Rows in this file: those it held when opened and those appended since (a point re-run or
  // skipped has a row of its own: what Ctrl-C says is kept on disk).
  std::size_t rows() const { return rows_; }

  // One CSV line (no newline) in schema column order, quoted where needed. Every key must
  // be a column of schema.h (SWEEP_CHECK: an unknown key is a bug, never silently dropped).
  static std::string format_row(const nlohmann::json& row);
  static std::string header();

 private:
  // Appends `text` whole or not at all (see append); throws UserError naming the cause.
  void write_whole(const std::string& text);

  std::string path_;
  int fd_ = -1;
  std::map<std::string, ProbeOutcome> recorded_;
  std::size_t rows_ = 0;
};

}  // namespace sweep
