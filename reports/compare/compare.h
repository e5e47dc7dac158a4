// `sweep compare BASELINE NEW`: regression tracking between two results files. Rows are
// joined on point_id. Peak allocated memory is close to deterministic, so it is gated by a
// threshold plus the allocator's rounding; step time is noisy, so it is gated only when the
// median moved by more than a threshold AND a Mann-Whitney U test on the per-repetition
// samples says the move is real. A point that ran and now fails is always a regression.
// compare_results() is the analysis (tests call it) and the `compare` command
// (compare.cc); the printers and dashboard exports sit on top of it (compare_report.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "reports/results/rows.h"

namespace CLI {
class App;
}

namespace sweep::reports {

// Slack added to the memory threshold: the caching allocator rounds blocks up to 2 MiB.
inline constexpr int64_t kAllocatorSlackBytes = int64_t{2} << 20;
// Fewer per-repetition samples than this on either side: no throughput verdict.
inline constexpr std::size_t kMinSamples = 9;
// Two-sided significance level for a step-time change.
inline constexpr double kAlpha = 0.01;


struct CompareOptions {
  double memory_threshold = 0.01;      // fraction: 0.01 = 1%
  double throughput_threshold = 0.05;  // fraction of the median step time
  // Per configuration (configuration_key), the step-time threshold measured on the runner
  // (run_to_run_thresholds); a point without one uses throughput_threshold.
  std::unordered_map<std::string, double> step_thresholds;
  std::string step_thresholds_from;  // the rerun they were measured with, for the report
  bool gate_reserved = false;          // peak_reserved_bytes growth fails too
  // A row predicted by emulation (device emulated) joined with a measured one: refused
  // (UserError, exit 2) unless allowed; allowed, its memory is compared and gated as usual.
  bool allow_predicted = false;
  // The gate refuses (exit 2) a comparison in which no point of NEW was compared with the
  // baseline (an empty NEW, or none of its configurations in the baseline) unless allowed:
  // otherwise a run that measured nothing would pass it.
  bool allow_empty = false;
};

enum class Verdict {
  kUnchanged,
  kRegression,  // gated: makes `sweep compare` exit 1
  kImprovement,
  kWarning,        // worse, but not gated (reserved/device memory) or unreliable (few samples)
  kNoise,          // changed beyond the threshold, but not significantly
  kNotComparable,  // on one side only, or a status change that says nothing
};
std::string_view verdict_name(Verdict v);  // "regression", "not-comparable", ...

// One metric of one point, both sides.
struct MetricComparison {
  std::string metric;  // status | peak_allocated_bytes | peak_reserved_bytes |
                       // device_used_bytes | step_ms | point
  Verdict verdict = Verdict::kUnchanged;
  char mark = '=';  // + worse, - better, ~ not significant, ! newly failing, x not comparable
  std::optional<double> base, next;  // bytes, or median ms; empty for status/point
  std::optional<double> p_value;
  bool exact = false;  // p from the exact distribution (else normal approximation)
  std::size_t base_samples = 0, next_samples = 0;
  std::string note;

  // next / base - 1, when both are known and base > 0.
  std::optional<double> change() const;
};

struct PointComparison {
  std::string point_id;
  std::optional<Row> base, next;  // the row used on each side (the last for that point)
  std::vector<MetricComparison> metrics;

  const Row& any() const { return base ? *base : *next; }
  bool unchanged() const;
};

// A column of the environment whose values differ between the sides.
struct EnvDifference {
  std::string column;
  std::vector<std::string> base, next;  // distinct values, in order of appearance
};

struct CompareSide {
  std::string path;
  std::size_t rows = 0;
  std::size_t points = 0;
  std::string schema_version;
};

struct CompareResult {
  CompareOptions options;
  CompareSide base, next;
  std::vector<EnvDifference> env_differences;
  std::vector<std::string> notes;       // warnings with advice (duplicates, nothing matched, ...)
  std::vector<PointComparison> points;  // the baseline's order, then points new in `next`

  std::size_t count(Verdict v) const;  // metrics with this verdict
  std::size_t unchanged_points() const;
  // Points on both sides with at least one metric that could be compared.
  std::size_t compared_points() const;
  bool regressed() const { return count(Verdict::kRegression) > 0; }
};

// What a row measured, without how (the axes less steps, warm-up, repetitions and the suite
// version): the key compare joins the two sides on.
std::string configuration_key(const Row& row);

// The step-time threshold of each configuration from run-to-run variation on the runner:
// `rerun` is the baseline's configuration measured again, back to back, on the same machine.
// A point's threshold is kRunToRunFactor x |median(rerun) / median(baseline) - 1|, at least
// `floor`: a change the machine makes between two identical runs is no regression. Points
// with fewer than kMinSamples samples on either side get none (their step time is not
// compared anyway).
inline constexpr double kRunToRunFactor = 2;
std::unordered_map<std::string, double> run_to_run_thresholds(const Results& baseline,
                                                              const Results& rerun, double floor);

// Compares `next` against `base`, the last row of each point on either side
// (latest_per_point). Throws UserError for files that cannot be compared (schema versions
// differ, a required column is missing, a measured row meets a predicted one without
// options.allow_predicted).
CompareResult compare_results(const Results& base, const Results& next,
                              const CompareOptions& options = {});

// Printers over one field list (compare_report.cc). Markdown is for a PR comment or
// $GITHUB_STEP_SUMMARY; JSON and CSV carry every compared metric, unchanged ones included.
std::string compare_markdown(const CompareResult& r);
// "1 regression, 0 improvements, 2 warnings, ..." (the Markdown's and stderr's summary).
std::string compare_summary(const CompareResult& r);
nlohmann::json compare_json(const CompareResult& r);
std::string compare_csv(const CompareResult& r);
// One of the above by name: "md", "json" (indented, invalid UTF-8 replaced) or "csv".
std::string compare_text(const CompareResult& r, std::string_view format);

// Dashboard formats for the rows of one results file (the last row per point, status ok):
// github-action-benchmark's custom JSON, an array of {name, unit, value, range, extra},
// smaller-is-better (peak memory in MiB, median step time in ms) or bigger-is-better
// (tokens/s); and Bencher Metric Format, {benchmark: {measure: {value, lower_value,
// upper_value}}}.
nlohmann::json benchmark_action_json(const Results& results, bool bigger_is_better);
nlohmann::json bencher_json(const Results& results);

// Writes compare.{md,json,csv}, benchmark-smaller.json, benchmark-bigger.json and
// bencher.json into `dir` (created). Returns false (and names the file on stderr) when
// something cannot be written.
bool write_compare_exports(const CompareResult& r, const Results& next, const std::string& dir);

// `sweep compare BASELINE NEW [--memory-threshold 1%] [--throughput-threshold 5%]
//  [--noise RERUN] [--record-missing] [--advance-baseline] [--gate-reserved] [--allow-predicted]
//  [--allow-empty] [--format md|json|csv] [--export DIR]`.
// --record-missing: a BASELINE that does not exist, or whose schema version cannot be compared
// with NEW's, is replaced by NEW (its rows, byte for byte) and the command says so and exits 0:
// the first run on a runner records its baseline. --advance-baseline: after a comparison where
// nothing regressed, NEW replaces BASELINE, which is kept beside it as <name>.previous.csv.
// Either refuses (exit 2, nothing written) a NEW with a point that crashed or timed out, or
// with no point ok.
// exit_code: 0 nothing regressed, 1 something did, 2 bad input (`file:line: message` and a
// `hint:` on stderr, a measured row against a predicted one without --allow-predicted among
// them) or nothing compared without --allow-empty (the report is printed first).
void register_compare_command(CLI::App& app, int& exit_code);

}  // namespace sweep::reports
