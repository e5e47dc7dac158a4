// Printing a comparison: every output line is one metric of one point; one field list turns
// those into Markdown (through the shared table builder), JSON and CSV. Plus the dashboard
// exports of a results file.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include "reports/compare/compare.h"
#include "reports/common/markup.h"
#include "reports/results/files.h"
#include "reports/results/stats.h"
#include "reports/results/technique.h"

namespace sweep::reports {
namespace {

using schema::column;
using json = nlohmann::json;


struct Line {
  const PointComparison* point;
  const MetricComparison* metric;
};

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string bytes(double b, bool sign = false) { return format_bytes(b, sign); }

bool is_bytes(const MetricComparison& m) { return m.metric.ends_with("_bytes"); }

// A code span: Markdown leaves what is inside alone.
std::string code(std::string s) {
  std::erase(s, '`');
  return "`" + s + "`";
}

// A side's status as the file spells it; "" when the point is not on that side.
std::string status_of(const std::optional<Row>& row) {
  return row ? to_string(row->status) : std::string();
}

// The value of one side as printed in Markdown.
std::string side_text(const Line& l, bool next) {
  const MetricComparison& m = *l.metric;
  const auto& v = next ? m.next : m.base;
  if (m.metric == "status" || m.metric == "point")
    return status_of(next ? l.point->next : l.point->base);
  if (!v) return "";
  return is_bytes(m) ? bytes(*v) : format("%.2f ms", *v);
}

json side_json(const Line& l, bool next) {
  const MetricComparison& m = *l.metric;
  const auto& v = next ? m.next : m.base;
  if (m.metric == "status" || m.metric == "point") {
    const std::string s = status_of(next ? l.point->next : l.point->base);
    return s.empty() ? json() : json(s);
  }
  if (!v) return json();
  return is_bytes(m) ? json(static_cast<int64_t>(*v)) : json(*v);
}

std::string change_text(const Line& l) {
  const MetricComparison& m = *l.metric;
  auto c = m.change();
  if (!c) return "";
  const std::string pct = format("%+.1f%%", *c * 100);
  return is_bytes(m) ? bytes(*m.next - *m.base, true) + " (" + pct + ")" : pct;
}

std::string source(const std::optional<Row>& row) {
  return row ? row->source + ":" + std::to_string(row->line) : "";
}

struct OutField {
  std::string_view name;  // JSON key and CSV header
  std::function<json(const Line&)> value;
  // Markdown: header ("" = not shown) and cell; columns that never vary are hidden
  // unless kept.
  std::string_view title = "";
  std::function<std::string(const Line&)> cell = nullptr;
  Align align = Align::kLeft;
  bool keep = false;
  bool keep_if_set = false;  // kept in a table where some row has a value (p, samples)
};

OutField axis(std::string_view name, std::size_t col) {
  auto get = [col](const Line& l) { return l.point->any().at(col); };
  return {name, [get](const Line& l) { return json(get(l)); }, name, get};
}

// clang-format off
const std::vector<OutField>& fields() {
  static const std::vector<OutField> kFields = {
    {"mark", [](const Line& l) { return json(std::string(1, l.metric->mark)); }, "mark", [](const Line& l) { return std::string(1, l.metric->mark); }, Align::kLeft, true},
    {"verdict", [](const Line& l) { return json(verdict_name(l.metric->verdict)); }},
    {"point_id", [](const Line& l) { return json(l.point->point_id); }},
    axis("model", column("model")), axis("mode", column("mode")), axis("batch", column("batch")),
    axis("seq", column("seq")), axis("target_seq", column("target_seq")), axis("audio_s", column("audio_s")),
    axis("precision", column("precision")), axis("checkpointing", column("checkpointing")),
    axis("accumulation", column("accumulation")), axis("optimizer", column("optimizer")),
    axis("alloc_conf", column("alloc_conf")),
    {"metric", [](const Line& l) { return json(l.metric->metric); }, "metric", [](const Line& l) { return l.metric->metric; }, Align::kLeft, true},
    {"base", [](const Line& l) { return side_json(l, false); }, "baseline", [](const Line& l) { return side_text(l, false); }, Align::kRight, true},
    {"new", [](const Line& l) { return side_json(l, true); }, "new", [](const Line& l) { return side_text(l, true); }, Align::kRight, true},
    {"change_pct", [](const Line& l) { auto c = l.metric->change(); return c ? json(*c * 100) : json(); }, "change", change_text, Align::kRight, true},
    {"p_value", [](const Line& l) { auto p = l.metric->p_value; return p ? json(*p) : json(); }, "p", [](const Line& l) {
       auto p = l.metric->p_value;
       return p ? format("%.2g", *p) + (l.metric->exact ? " (exact)" : " (normal)") : std::string(); }, Align::kRight, false, true},
    {"p_method", [](const Line& l) { return l.metric->p_value ? json(l.metric->exact ? "exact" : "normal") : json(); }},
    {"base_samples", [](const Line& l) { return json(l.metric->base_samples); }, "samples", [](const Line& l) {
       const auto& m = *l.metric;
       return m.base_samples || m.next_samples ? std::to_string(m.base_samples) + " / " + std::to_string(m.next_samples) : std::string(); }, Align::kRight, false, true},
    {"new_samples", [](const Line& l) { return json(l.metric->next_samples); }},
    {"gated", [](const Line& l) { return json(l.metric->verdict == Verdict::kRegression); }},
    {"note", [](const Line& l) { return json(l.metric->note); }, "note", [](const Line& l) { return l.metric->note; }, Align::kLeft, true},
    {"base_source", [](const Line& l) { return json(source(l.point->base)); }},
    {"new_source", [](const Line& l) { return json(source(l.point->next)); }},
  };
  return kFields;
}
// clang-format on

std::vector<Line> lines(const CompareResult& r, std::optional<Verdict> only = std::nullopt) {
  std::vector<Line> out;
  for (const auto& p : r.points)
    for (const auto& m : p.metrics)
      if (!only || m.verdict == *only) out.push_back({&p, &m});
  return out;
}

std::string md_section(const CompareResult& r, Verdict v, std::string_view heading) {
  const std::vector<Line> items = lines(r, v);
  if (items.empty()) return "";
  std::vector<Field<Line>> md;
  for (const auto& f : fields()) {
    if (!f.cell) continue;
    const bool set =
        std::any_of(items.begin(), items.end(), [&](const Line& l) { return !f.cell(l).empty(); });
    md.push_back({std::string(f.title), f.cell, f.align, f.keep || (f.keep_if_set && set)});
  }
  return "### " + std::string(heading) + " (" + std::to_string(items.size()) + ")\n\n" +
         markdown_table(make_table(md, items)) + "\n";
}

std::string csv_cell(const json& v) {
  return spreadsheet_field(v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump());
}

// The mark in words for compare.csv: a bare + or = is a formula to a spreadsheet.
std::string mark_word(char mark) {
  switch (mark) {
    case '+': return "worse";
    case '-': return "better";
    case '~': return "not-significant";
    case '!': return "newly-failing";
    case 'x': return "not-comparable";
    default: return "unchanged";
  }
}

// Indented JSON; bytes that are not UTF-8 (a device name, an error message) are replaced
// rather than thrown on.
std::string json_text(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string percent(double fraction) { return format("%g%%", fraction * 100); }

}  // namespace

std::string compare_summary(const CompareResult& r) {
  auto n = [&](Verdict v, const char* one, const char* many) {
    const std::size_t c = r.count(v);
    return std::to_string(c) + " " + (c == 1 ? one : many);
  };
  return n(Verdict::kRegression, "regression", "regressions") + ", " +
         n(Verdict::kImprovement, "improvement", "improvements") + ", " +
         n(Verdict::kWarning, "warning", "warnings") + ", " +
         n(Verdict::kNoise, "not significant", "not significant") + ", " +
         n(Verdict::kNotComparable, "not comparable", "not comparable");
}

std::string compare_markdown(const CompareResult& r) {
  const std::size_t regressions = r.count(Verdict::kRegression);
  std::string out =
      "## sweep compare: " +
      (regressions ? std::to_string(regressions) + " regression" + (regressions == 1 ? "" : "s")
                   : std::string("no regression")) +
      "\n\n";
  out += "Baseline " + code(r.base.path) + " (" + std::to_string(r.base.points) +
         " points) vs new " + code(r.next.path) + " (" + std::to_string(r.next.points) +
         " points): " + compare_summary(r) + "; " + std::to_string(r.unchanged_points()) +
         " points unchanged.\n\n";
  if (!r.env_differences.empty()) {
    out +=
        "> [!WARNING]\n> The environment differs between the two sides, so a change may "
        "come from it rather than from the code:\n";
    for (const auto& d : r.env_differences) {
      auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + code(x);
        return s;
      };
      out += "> - " + code(d.column) + ": " + join(d.base) + " -> " + join(d.next) + "\n";
    }
    out += "\n";
  }
  out += md_section(r, Verdict::kRegression, "Regressions");
  out += md_section(r, Verdict::kImprovement, "Improvements");
  out += md_section(r, Verdict::kWarning, "Warnings (not gated)");
  out += md_section(r, Verdict::kNoise, "Changed, not significant");
  out += md_section(r, Verdict::kNotComparable, "Not comparable");
  out += std::to_string(r.unchanged_points()) + " of " + std::to_string(r.points.size()) +
         " points unchanged.\n\n";
  for (const auto& note : r.notes) out += "> [!NOTE]\n> " + note + "\n\n";
  out +=
      "<details><summary>How changes are judged</summary>\n\n"
      "- Marks: `+` worse, `-` better, `~` changed but not significant, `!` newly failing, "
      "`x` not comparable.\n"
      "- Peak allocated memory regresses above baseline x (1 + " +
      percent(r.options.memory_threshold) +
      ") + 2 MiB (allocator rounding). Reserved and device-level peaks are " +
      (r.options.gate_reserved ? "gated (reserved) or warned on (device)"
                               : "warned on, not gated") +
      ".\n"
      "- Step time: the per-repetition samples, at least " +
      std::to_string(kMinSamples) +
      " per side. A regression needs the median slower by more than " +
      percent(r.options.throughput_threshold) + " and a two-sided Mann-Whitney U p < " +
      format("%g", kAlpha) + " (exact distribution without ties and up to " +
      std::to_string(kExactMaxSamples) +
      " samples per side; otherwise normal approximation with tie and continuity "
      "correction).\n"
      "- ok -> oom/crash/timeout is always a regression; the reverse an improvement.\n\n"
      "</details>\n";
  return out;
}

json compare_json(const CompareResult& r) {
  auto side = [](const CompareSide& s) {
    return json{{"path", s.path},
                {"rows", s.rows},
                {"points", s.points},
                {"schema_version", s.schema_version}};
  };
  json env = json::array();
  for (const auto& d : r.env_differences)
    env.push_back({{"column", d.column}, {"base", d.base}, {"new", d.next}});
  json entries = json::array();
  for (const Line& l : lines(r)) {
    json e = json::object();
    for (const auto& f : fields()) e[std::string(f.name)] = f.value(l);
    entries.push_back(std::move(e));
  }
  return {
      {"format", "sweep-compare"},
      {"format_version", 1},
      {"regressed", r.regressed()},
      {"options",
       {{"memory_threshold", r.options.memory_threshold},
        {"throughput_threshold", r.options.throughput_threshold},
        {"gate_reserved", r.options.gate_reserved},
        {"allow_predicted", r.options.allow_predicted},
        {"allow_empty", r.options.allow_empty},
        {"allocator_slack_bytes", kAllocatorSlackBytes},
        {"min_samples", kMinSamples},
        {"alpha", kAlpha}}},
      {"base", side(r.base)},
      {"new", side(r.next)},
      {"environment_differences", env},
      {"summary",
       {{"regressions", r.count(Verdict::kRegression)},
        {"improvements", r.count(Verdict::kImprovement)},
        {"warnings", r.count(Verdict::kWarning)},
        {"noise", r.count(Verdict::kNoise)},
        {"not_comparable", r.count(Verdict::kNotComparable)},
        {"unchanged_points", r.unchanged_points()},
        {"points", r.points.size()}}},
      {"notes", r.notes},
      {"entries", entries},
  };
}

std::string compare_csv(const CompareResult& r) {
  std::string out;
  for (const auto& f : fields()) out += (out.empty() ? "" : ",") + std::string(f.name);
  out += "\n";
  for (const Line& l : lines(r)) {
    std::string row;
    for (const auto& f : fields())
      row += (row.empty() ? "" : ",") +
             csv_cell(f.name == "mark" ? json(mark_word(l.metric->mark)) : f.value(l));
    out += row + "\n";
  }
  return out;
}

// ---- dashboard exports -----------------------------------------------------------------
namespace {

// A name stable across suite versions (point ids are not): the axes, in identity order.
std::string bench_name(const Row& row) {
  auto cell = [&](std::size_t c) -> const std::string& { return row.at(c); };
  std::string n = cell(column("model")) + "/" + cell(column("mode")) + "/b" + cell(column("batch"));
  if (!cell(column("seq")).empty()) n += "/seq" + cell(column("seq"));
  if (!cell(column("target_seq")).empty()) n += "/tgt" + cell(column("target_seq"));
  if (!cell(column("audio_s")).empty()) n += "/audio" + cell(column("audio_s")) + "s";
  n += "/" + cell(column("precision")) + "/ckpt-" + cell(column("checkpointing")) + "/acc" +
       cell(column("accumulation")) + "/" + cell(column("optimizer"));
  // Techniques added after the first baselines: named only when used, so old names stay.
  n += name_tail(cells_of(row), "/", true);
  if (auto b = row.number(column("budget_bytes")); b && *b > 0) n += "/budget" + bytes(*b);
  return n;
}

struct Named {
  std::string name;
  const Row* row;
};

// ok rows (last per point) with unique names; a clash keeps both, told apart by point id.
std::vector<Named> named_ok_rows(const Results& results) {
  std::vector<Named> out;
  std::map<std::string, int> uses;
  const auto rows = latest_per_point(results).rows;
  for (const Row* row : rows)
    if (row->status == Status::kOk) ++uses[bench_name(*row)];
  for (const Row* row : rows) {
    if (row->status != Status::kOk) continue;
    std::string name = bench_name(*row);
    if (uses[name] > 1) name += " [" + row->at(column("point_id")) + "]";
    out.push_back({name, row});
  }
  return out;
}

std::string extra(const Row& row) {
  return "point " + row.at(column("point_id")) + "\n" + row.at(column("device_name")) +
         "\ncommit " + row.at(column("git_commit"));
}

}  // namespace

json benchmark_action_json(const Results& results, bool bigger_is_better) {
  json out = json::array();
  for (const auto& [name, row] : named_ok_rows(results)) {
    if (bigger_is_better) {
      if (auto t = row->number(column("tokens_per_s")))
        out.push_back({{"name", name + " tokens_per_s"},
                       {"unit", "tokens/s"},
                       {"value", *t},
                       {"extra", extra(*row)}});
      continue;
    }
    if (auto b = row->number(column("peak_allocated_bytes")))
      out.push_back({{"name", name + " peak_allocated"},
                     {"unit", "MiB"},
                     {"value", *b / kMiB},
                     {"extra", extra(*row)}});
    const std::vector<double> s = row->step_times();
    if (!s.empty()) {
      auto [lo, hi] = std::minmax_element(s.begin(), s.end());
      out.push_back(
          {{"name", name + " step_ms"},
           {"unit", "ms"},
           {"value", median(s)},
           {"range", format("± %.3g", (*hi - *lo) / 2)},
           {"extra", extra(*row) + "\nmedian of " + std::to_string(s.size()) + " repetitions"}});
    }
  }
  return out;
}

json bencher_json(const Results& results) {
  json out = json::object();
  for (const auto& [name, row] : named_ok_rows(results)) {
    json measures = json::object();
    for (auto [m, col] : {std::pair{"peak_allocated_bytes", column("peak_allocated_bytes")},
                          {"peak_reserved_bytes", column("peak_reserved_bytes")}})
      if (auto v = row->number(col)) measures[m] = {{"value", static_cast<int64_t>(*v)}};
    const std::vector<double> s = row->step_times();
    if (!s.empty()) {
      auto [lo, hi] = std::minmax_element(s.begin(), s.end());
      const double mid = median(s);
      measures["step_ms"] = {{"value", mid}, {"lower_value", *lo}, {"upper_value", *hi}};
      // Tokens per step are fixed, so the slowest repetition bounds tokens/s from below.
      if (auto t = row->number(column("tokens_per_s")))
        measures["tokens_per_s"] = {
            {"value", *t}, {"lower_value", *t * mid / *hi}, {"upper_value", *t * mid / *lo}};
    }
    if (!measures.empty()) out[name] = std::move(measures);
  }
  return out;
}

std::string compare_text(const CompareResult& r, std::string_view format) {
  if (format == "json") return json_text(compare_json(r));
  if (format == "csv") return compare_csv(r);
  return compare_markdown(r);
}

bool write_compare_exports(const CompareResult& r, const Results& next, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::pair<const char*, std::string> files[] = {
      {"compare.md", compare_text(r, "md")},
      {"compare.json", compare_text(r, "json")},
      {"compare.csv", compare_text(r, "csv")},
      {"benchmark-smaller.json", json_text(benchmark_action_json(next, false))},
      {"benchmark-bigger.json", json_text(benchmark_action_json(next, true))},
      {"bencher.json", json_text(bencher_json(next))},
  };
  for (const auto& [name, text] : files) {
    // The one install_file (files.h): a link planted at the name is replaced, not followed.
    try {
      install_file(fs::path(dir) / name, text, name, "", "check that --export names a writable directory");
    } catch (const UserError& e) {
      print_user_error(e);
      return false;
    }
  }
  return true;
}

}  // namespace sweep::reports
