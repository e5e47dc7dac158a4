// The comparison behind `sweep compare` (see compare.h): join on the configuration, then per point
// the status, three memory peaks and the step time, each with a verdict and a mark. Plus the
// `compare` command over it.
#include "reports/compare/compare.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "reports/results/cards.h"
#include "reports/results/stats.h"

namespace sweep::reports {
namespace {

using schema::column;

constexpr std::array kRequiredColumns = std::to_array<std::string_view>(
    {"schema_version", "point_id", "status", "peak_allocated_bytes", "step_ms_samples"});
// Differences here change what a number means; they are said first, as a warning.
constexpr std::array kEnvColumns = std::to_array<std::string_view>(
    {"device_name", "device_memory_bytes", "driver_version", "torch_version", "cuda_version",
     "cuda_driver_version"});

constexpr std::string_view kRefreshHint =
    "refresh the baseline with results of this version (docs/regression-tracking.md)";

// What a row measured, without how: the identity columns less the measurement settings
// (the axes of Role::kRun: steps, warm-up, repetitions) and the suite version. Two rows with
// the same configuration are the same point for a comparison, whatever those settings were.
// The card an emulated row predicts belongs to the device, as `device` does: a prediction
// joins the measurement of the same configuration (which compare then refuses to gate
// unless --allow-predicted).
constexpr std::string_view kDeviceAxis = "card";

std::string configuration(const Row& row) {
  const bool lora = row.value<Adapter>() == Adapter::kLora;
  std::string key;
  for (const auto& a : schema::kAxes) {
    if (a.id == schema::Named::kNever || (a.id == schema::Named::kWithLora && !lora) ||
        a.column == kDeviceAxis || a.role == schema::Role::kRun)
      continue;
    // Numbers by value: "8" and "8.0" are one LoRA alpha.
    const std::size_t col = schema::find_column(a.column);
    const auto number = schema::is_number_column(a.column) ? row.number(col) : std::nullopt;
    char text[32];
    if (number) std::snprintf(text, sizeof text, "%.17g", *number);
    key += std::string(a.column) + "=" + (number ? std::string(text) : std::string(row.axis(col))) + ";";
  }
  return key;
}

// "steps 5 vs 3, repetitions 9 vs 3", or "" when the settings are the same.
std::string settings_difference(const Row& b, const Row& n) {
  std::string out;
  for (const auto& a : schema::kAxes) {
    if (a.role != schema::Role::kRun) continue;
    const std::string_view name = a.column;
    const auto col = schema::find_column(name);
    if (b.at(col) != n.at(col))
      out += (out.empty() ? "" : ", ") + std::string(name) + " " + b.at(col) + " vs " + n.at(col);
  }
  return out;
}

bool predicted(const Row& row) { return row.value<Device>() == Device::kEmulated; }

// "predicted by emulation of RTX 3060, not measured" or "measured on NVIDIA H100 80GB HBM3".
std::string provenance(const Row& row) {
  const std::string& device = row.at(column("device_name"));
  if (predicted(row)) return predicted_by(emulated_card_name(device).value_or(device));
  return "measured" + (device.empty() ? std::string() : " on " + device);
}

bool failing(Status status) {
  return status == Status::kOom || status == Status::kCrash || status == Status::kTimeout;
}



void check_columns(const Results& r) {
  for (auto name : kRequiredColumns) {
    if (!r.has_column(schema::find_column(name)))
      throw UserError(r.path, 1, "", "header has no '" + std::string(name) + "' column",
                         "compare results.csv files written by `sweep run` (schema version " +
                             std::to_string(schema::kSchemaVersion) + ")");
  }
}

// The one schema version of a file, or "" when it has no rows.
std::string schema_version(const Results& r) {
  if (r.rows.empty()) return "";
  const Row& first = r.rows.front();
  for (const Row& row : r.rows)
    if (row.at(column("schema_version")) != first.at(column("schema_version")))
      throw UserError(r.path, static_cast<int>(row.line), "",
                         "schema_version " + row.at(column("schema_version")) + ", but line " +
                             std::to_string(first.line) + " has " +
                             first.at(column("schema_version")),
                         "a results file holds one schema version; write each version's "
                         "results into its own directory");
  return first.at(column("schema_version"));
}

}  // namespace

namespace {

MetricComparison status_change(Status before, Status after, const Row& next) {
  MetricComparison m{.metric = "status"};
  if (before == after) return m;
  if (before == Status::kOk && failing(after)) {
    m.verdict = Verdict::kRegression;
    m.mark = '!';
    const std::string& phase = next.at(column("phase"));
    const std::string& message = next.at(column("message"));
    m.note = "newly failing: " + to_string(after) + (phase.empty() ? "" : " in " + phase) +
             (message.empty() ? "" : ": " + message);
  } else if (failing(before) && after == Status::kOk) {
    m.verdict = Verdict::kImprovement;
    m.mark = '-';
    m.note = "runs now (was " + to_string(before) + ")";
  } else {
    m.verdict = Verdict::kNotComparable;
    m.mark = 'x';
    const std::string& reason = next.at(column("reason"));
    m.note = to_string(before) + " -> " + to_string(after) +
             (reason.empty() ? "" : " (" + reason + ")");
  }
  return m;
}

// A memory peak: worse beyond base x (1 + threshold) + slack, better below the mirror.
std::optional<MetricComparison> memory_change(std::string_view metric, std::size_t col,
                                              const Row& b, const Row& n, double threshold,
                                              bool gated, std::string_view ungated_why) {
  MetricComparison m{.metric = std::string(metric), .base = b.number(col), .next = n.number(col)};
  if (!m.base && !m.next) return std::nullopt;
  if (!m.base || !m.next) {
    m.verdict = Verdict::kNotComparable;
    m.mark = 'x';
    m.note = std::string("not measured in the ") + (m.base ? "new results" : "baseline");
    return m;
  }
  const double slack = static_cast<double>(kAllocatorSlackBytes);
  const double pct = threshold * 100;
  char limit[64];
  std::snprintf(limit, sizeof limit, "%.3g%% + %lld MiB", pct,
                static_cast<long long>(kAllocatorSlackBytes >> 20));
  if (*m.next > *m.base * (1 + threshold) + slack) {
    m.verdict = gated ? Verdict::kRegression : Verdict::kWarning;
    m.mark = '+';
    m.note = std::string("grew by more than ") + limit +
             (gated ? "" : "; not gated: " + std::string(ungated_why));
  } else if (*m.next < *m.base * (1 - threshold) - slack) {
    m.verdict = Verdict::kImprovement;
    m.mark = '-';
    m.note = std::string("shrank by more than ") + limit;
  }
  return m;
}

std::optional<MetricComparison> step_time_change(const Row& b, const Row& n, double threshold,
                                                 bool measured) {
  const std::vector<double> xs = b.step_times(), ys = n.step_times();
  if (xs.empty() && ys.empty()) return std::nullopt;
  MetricComparison m{.metric = "step_ms", .base_samples = xs.size(), .next_samples = ys.size()};
  if (!xs.empty()) m.base = median(xs);
  if (!ys.empty()) m.next = median(ys);
  if (xs.empty() || ys.empty()) {
    m.verdict = Verdict::kNotComparable;
    m.mark = 'x';
    m.note = std::string("no step time in the ") + (xs.empty() ? "baseline" : "new results");
    return m;
  }
  // Too few samples for a verdict: the step time is not compared (the run says so once).
  if (xs.size() < kMinSamples || ys.size() < kMinSamples) return std::nullopt;
  const MannWhitney test = mann_whitney_u(xs, ys);
  m.p_value = test.p;
  m.exact = test.exact;
  const double change = *m.next / *m.base - 1;
  if (std::abs(change) <= threshold) return m;
  char limit[96];
  std::snprintf(limit, sizeof limit, " beyond %.3g%%%s", threshold * 100,
                measured ? " (this point's run-to-run variation on the runner)" : "");
  if (test.p < kAlpha) {
    const bool slower = change > 0;
    m.verdict = slower ? Verdict::kRegression : Verdict::kImprovement;
    m.mark = slower ? '+' : '-';
    m.note = std::string(slower ? "slower" : "faster") + ", significant," + limit;
  } else {
    m.verdict = Verdict::kNoise;
    m.mark = '~';
    char why[48];
    std::snprintf(why, sizeof why, "not significant (p >= %g)", kAlpha);
    m.note = why + std::string(",") + limit;
  }
  return m;
}

std::vector<MetricComparison> compare_rows(const Row& b, const Row& n, const CompareOptions& o) {
  std::vector<MetricComparison> out;
  out.push_back(status_change(b.status, n.status, n));
  if (b.status != Status::kOk || n.status != Status::kOk) return out;
  const double mem = o.memory_threshold;
  const auto own = o.step_thresholds.find(configuration(b));
  const bool measured = own != o.step_thresholds.end();
  const double threshold = measured ? own->second : o.throughput_threshold;
  for (auto m : {
           memory_change("peak_allocated_bytes", column("peak_allocated_bytes"), b, n, mem, true,
                         ""),
           memory_change("peak_reserved_bytes", column("peak_reserved_bytes"), b, n, mem,
                         o.gate_reserved,
                         "the allocator's cache depends on fragmentation; --gate-reserved "
                         "gates it"),
           memory_change("device_used_bytes", column("device_used_bytes"), b, n, mem, false,
                         "includes the CUDA context and anything else on the device"),
           step_time_change(b, n, threshold, measured),
       })
    if (m) out.push_back(std::move(*m));
  return out;
}

PointComparison one_side(const Row& row, bool in_base) {
  PointComparison p{.point_id = row.at(column("point_id"))};
  (in_base ? p.base : p.next) = row;
  p.metrics.push_back(
      {.metric = "point",
       .verdict = Verdict::kNotComparable,
       .mark = 'x',
       .note = in_base ? "only in the baseline: not measured now" : "new point: no baseline"});
  return p;
}

std::vector<std::string> distinct(const Results& r, std::size_t col) {
  std::vector<std::string> out;
  for (const Row& row : r.rows)
    if (std::find(out.begin(), out.end(), row.at(col)) == out.end()) out.push_back(row.at(col));
  return out;
}

// Environment differences; across schema versions the driver columns changed meaning, so
// they are left out.
void environment(const Results& base, const Results& next, CompareResult& out, bool other_schema) {
  if (base.rows.empty() || next.rows.empty()) return;
  for (auto name : kEnvColumns) {
    if (other_schema && (name == "driver_version" || name == "cuda_driver_version")) continue;
    auto b = distinct(base, schema::find_column(name)), n = distinct(next, schema::find_column(name));
    auto sb = b, sn = n;
    std::sort(sb.begin(), sb.end());
    std::sort(sn.begin(), sn.end());
    if (sb != sn) out.env_differences.push_back({std::string(name), b, n});
  }
}

}  // namespace

std::string_view verdict_name(Verdict v) {
  // In the order of the enum.
  static constexpr std::array<std::string_view, 6> kNames = {
      "unchanged", "regression", "improvement", "warning", "noise", "not-comparable"};
  return kNames[static_cast<std::size_t>(v)];
}

std::optional<double> MetricComparison::change() const {
  if (!base || !next || *base <= 0) return std::nullopt;
  return *next / *base - 1;
}

bool PointComparison::unchanged() const {
  return std::all_of(metrics.begin(), metrics.end(),
                     [](const auto& m) { return m.verdict == Verdict::kUnchanged; });
}

std::size_t CompareResult::count(Verdict v) const {
  std::size_t n = 0;
  for (const auto& p : points)
    for (const auto& m : p.metrics) n += m.verdict == v;
  return n;
}

std::size_t CompareResult::compared_points() const {
  return static_cast<std::size_t>(std::count_if(points.begin(), points.end(), [](const auto& p) {
    return p.base && p.next && std::any_of(p.metrics.begin(), p.metrics.end(), [](const auto& m) {
             return m.verdict != Verdict::kNotComparable;
           });
  }));
}

std::size_t CompareResult::unchanged_points() const {
  return static_cast<std::size_t>(
      std::count_if(points.begin(), points.end(), [](const auto& p) { return p.unchanged(); }));
}

std::string configuration_key(const Row& row) { return configuration(row); }

std::unordered_map<std::string, double> run_to_run_thresholds(const Results& baseline,
                                                              const Results& rerun, double floor) {
  std::unordered_map<std::string, const Row*> again;
  for (const Row* r : latest_per_point(rerun).rows) again[configuration(*r)] = r;
  std::unordered_map<std::string, double> out;
  for (const Row* b : latest_per_point(baseline).rows) {
    const auto it = again.find(configuration(*b));
    if (it == again.end()) continue;
    const auto xs = b->step_times(), ys = it->second->step_times();
    if (xs.size() < kMinSamples || ys.size() < kMinSamples) continue;
    const double moved = std::abs(median(ys) / median(xs) - 1);
    out[configuration(*b)] = std::max(floor, kRunToRunFactor * moved);
  }
  return out;
}

CompareResult compare_results(const Results& base, const Results& next,
                              const CompareOptions& options) {
  check_columns(base);
  check_columns(next);
  CompareResult out{.options = options};
  out.base = {.path = base.path, .rows = base.rows.size(), .schema_version = schema_version(base)};
  out.next = {.path = next.path, .rows = next.rows.size(), .schema_version = schema_version(next)};
  const bool other_schema = !out.base.schema_version.empty() && !out.next.schema_version.empty() &&
                            out.base.schema_version != out.next.schema_version;
  if (other_schema) {
    // The reader has checked both versions are ones this sweep knows.
    if (std::min(std::stoi(out.base.schema_version), std::stoi(out.next.schema_version)) <
        schema::kSameMeasurementsSince)
      throw UserError(next.path, static_cast<int>(next.rows.front().line), "",
                      "schema_version " + out.next.schema_version + ", but the baseline (" +
                          base.rows.front().where() + ") has " + out.base.schema_version,
                      "compare results of the same schema version; " + std::string(kRefreshHint));
    out.notes.push_back("schema_version " + out.base.schema_version + " (baseline) and " +
                        out.next.schema_version +
                        " differ in environment columns only: the measurements compare, the "
                        "driver versions are not set side by side.");
  }
  environment(base, next, out, other_schema);
  if (!options.step_thresholds_from.empty())
    out.notes.push_back("Step-time thresholds of " + std::to_string(options.step_thresholds.size()) +
                        " point(s) come from the run-to-run variation measured on this runner (" +
                        options.step_thresholds_from + ", the baseline run again back to back): " +
                        number_text(kRunToRunFactor) + " x the change between the two runs' medians, "
                        "at least the throughput threshold.");
  const Latest base_latest = latest_per_point(base), next_latest = latest_per_point(next);
  const auto& base_rows = base_latest.rows;
  const auto& next_rows = next_latest.rows;
  const auto& base_dups = base_latest.duplicates;
  const auto& next_dups = next_latest.duplicates;
  out.base.points = base_rows.size();
  out.next.points = next_rows.size();
  for (const auto& [side, dups] : {std::pair{&base, &base_dups}, {&next, &next_dups}})
    if (!dups->empty())
      out.notes.push_back(side->path + ": " + std::to_string(dups->size()) +
                          " point(s) written more than once, e.g. " + dups->front() +
                          "; the last row of each is used.");

  // Joined on the configuration; where one side measured a configuration more than once
  // (with other settings), its later row counts.
  std::unordered_map<std::string, const Row*> by_config;
  for (const Row* row : next_rows) by_config[configuration(*row)] = row;
  std::unordered_map<std::string, const Row*> base_by_config;
  for (const Row* row : base_rows) base_by_config[configuration(*row)] = row;
  std::size_t matched = 0, other_settings = 0, too_few_samples = 0, mixed = 0, both_predicted = 0;
  std::string settings_example;
  for (const Row* b : base_rows) {
    const std::string key = configuration(*b);
    if (base_by_config.at(key) != b) continue;  // an earlier measurement of the same configuration
    auto it = by_config.find(key);
    if (it == by_config.end()) {
      out.points.push_back(one_side(*b, true));
      continue;
    }
    const Row& n = *it->second;
    ++matched;
    // A prediction is not a measurement: gating one against the other is asked for, or refused.
    if (predicted(*b) != predicted(n)) {
      if (!options.allow_predicted)
        throw UserError(
            next.path, static_cast<int>(n.line), "device",
            n.where() + " is " + provenance(n) + ", and the baseline's " + b->where() + " is " +
                provenance(*b) + ": compare does not gate a measurement against a prediction",
            "compare predictions with predictions and measurements with measurements; to see how "
            "far a prediction is from a measurement, pass --allow-predicted (memory is then "
            "compared and gated as usual; a prediction has no step time)");
      ++mixed;
    }
    both_predicted += predicted(*b) && predicted(n);
    if (const auto d = settings_difference(*b, n); !d.empty()) {
      ++other_settings;
      if (settings_example.empty()) settings_example = d;
    }
    if (b->status == Status::kOk && n.status == Status::kOk &&
        (b->step_times().size() < kMinSamples || n.step_times().size() < kMinSamples))
      ++too_few_samples;
    out.points.push_back({.point_id = n.at(column("point_id")),
                          .base = *b,
                          .next = n,
                          .metrics = compare_rows(*b, n, options)});
    by_config.erase(it);
  }
  for (const Row* n : next_rows) {
    auto it = by_config.find(configuration(*n));
    if (it != by_config.end() && it->second == n) out.points.push_back(one_side(*n, false));
  }

  if (other_settings)
    out.notes.push_back(std::to_string(other_settings) + " point(s) were measured with other settings (" +
                        settings_example + "); they are compared as the same configurations.");
  if (too_few_samples)
    out.notes.push_back("Step time not compared for " + std::to_string(too_few_samples) +
                        " point(s): a verdict needs " + std::to_string(kMinSamples) +
                        " samples per side (set repetitions to " + std::to_string(kMinSamples) +
                        " in the config); memory was compared.");
  if (mixed)
    out.notes.push_back(
        std::to_string(mixed) +
        " point(s) compare a prediction with a measurement (--allow-predicted): "
        "a memory difference there is the prediction's error as much as a change; a prediction "
        "has no step time to compare.");
  if (both_predicted)
    out.notes.push_back(std::to_string(both_predicted) +
                        " point(s) are predicted by emulation on both sides, not "
                        "measured: the comparison is between predictions.");
  const auto bv = distinct(base, column("suite_version"));
  const auto nv = distinct(next, column("suite_version"));
  if (!bv.empty() && !nv.empty() && bv != nv)
    out.notes.push_back("suite_version " + bv.front() + " vs " + nv.front() +
                        ": the configurations are compared, but a change may come from the suite.");
  if (matched == 0 && !base_rows.empty() && !next_rows.empty())
    out.notes.push_back("No configuration is in both files, so nothing was compared; " +
                        std::string(kRefreshHint) + ".");
  return out;
}

}  // namespace sweep::reports
