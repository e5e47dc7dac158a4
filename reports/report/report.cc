// write_report and the `report` subcommand: parse every row into a Point first (bad input
// throws before a file is touched), then build one Document (header, failures, a section
// per model and shape) and print it twice, as Markdown and as HTML.
#include "reports/report/report.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "reports/common/device_parts.h"
#include "reports/report/report_sections.h"
#include "reports/results/files.h"
#include "reports/results/stats.h"

namespace sweep::reports {
namespace report {
namespace {

namespace fs = std::filesystem;
using schema::column;

constexpr const char* kNoGnuplot =
    "Plots not drawn: gnuplot was not found (apt-get install gnuplot-nox); the tables are "
    "complete and each plot's data is in its .dat file.";

// Median and coefficient of variation of the per-repetition step times.
void step_statistics(const Row& r, Point& p) {
  const std::vector<double> v = r.step_times();
  if (v.empty()) return;
  const std::size_t n = v.size();
  p.step_ms = median(v);
  if (n >= 2) {
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    if (mean > 0) p.step_ms_cv = std::sqrt(ss / static_cast<double>(n - 1)) / mean;
  }
}

Point parse_point(const Row& r) {
  Point p;
  p.line = r.line;
  p.model = r.at(column("model"));  // never empty: read_results checked the required cells
  p.status = r.status;
  p.search = r.at(column("search"));
  // Whole, at least 1 and in int64's range: read_results checked them.
  p.batch = static_cast<int64_t>(*r.number(column("batch")));
  p.accumulation = static_cast<int64_t>(r.number(column("accumulation")).value_or(1));
  // The input size: tokens for GPT-2 and T5 (encoder, decoder), seconds for Whisper (and its
  // label tokens: the whole model's decoder).
  auto axis = [&](std::size_t col) {
    r.number(col);  // numeric when present
    return r.at(col) == "0" ? std::string() : r.at(col);
  };
  std::string seq = axis(column("seq")), target = axis(column("target_seq"));
  std::string audio = axis(column("audio_s"));
  if (!audio.empty()) p.shape = "audio " + audio + " s" + (target.empty() ? "" : ", labels " + target);
  if (!seq.empty()) p.shape = "seq " + seq + (target.empty() ? "" : ", target " + target);
  p.mode = r.value<Mode>();
  p.precision = r.value<Precision>();
  p.checkpointing = r.value<Checkpointing>();
  p.optimizer = r.value<OptimizerKind>();
  p.techniques = technique_cells(r);
  p.technique_order =
      order_of(p.cell(), {"precision", "checkpointing", "accumulation", "optimizer", "alloc_conf"});
  const std::pair<std::string*, std::size_t> text[] = {
      {&p.alloc_conf, column("alloc_conf")},
      {&p.reason, column("reason")},
      {&p.phase, column("phase")},
      {&p.message, column("message")},
      {&p.signal, column("signal")},
      {&p.exit_code, column("exit_code")},
      {&p.device_name, column("device_name")},
      {&p.torch_version, column("torch_version")},
      {&p.cuda_version, column("cuda_version")},
      {&p.suite_version, column("suite_version")},
      {&p.git_commit, column("git_commit")},
      {&p.host, column("host")},
      {&p.timestamp, column("timestamp")},
  };
  for (auto [field, col] : text) *field = r.at(col);
  p.host_peak_bytes = r.number(column("host_peak_bytes"));
  p.paged_bytes = r.number(column("paged_bytes"));
  p.budget_bytes = r.number(column("budget_bytes")).value_or(0);
  p.budget_emulated = r.number(column("budget_emulated")).value_or(0) == 1;
  const auto card = predicted_card(r);
  p.predicted = card.has_value();
  p.card = card.value_or("");
  p.device_memory_bytes = r.number(column("device_memory_bytes"));
  // The breakdown as it stood at the peak (it adds up to peak_allocated_bytes); files written
  // before those columns existed have only each kind's size.
  if (auto at_peak = r.number(column("at_peak_weights_bytes"))) {
    p.weights = at_peak;
    p.grads = r.number(column("at_peak_grads_bytes"));
    p.optimizer_state = r.number(column("at_peak_optimizer_bytes"));
    p.activations = r.number(column("at_peak_activations_bytes"));
  } else {
    p.weights = r.number(column("weights_bytes"));
    p.grads = r.number(column("grads_bytes"));
    p.optimizer_state = r.number(column("optimizer_bytes"));
    p.activations = r.number(column("activations_bytes"));
  }
  p.peak_allocated = r.number(column("peak_allocated_bytes"));
  p.peak_reserved = r.number(column("peak_reserved_bytes"));
  p.tokens_per_s = r.number(column("tokens_per_s"));
  p.samples_per_s = r.number(column("samples_per_s"));
  step_statistics(r, p);
  if (!p.step_ms_cv) p.step_ms_cv = r.number(column("step_ms_cv"));
  return p;
}

// "gpt2-medium-seq-1024": a file-name prefix from the model and shape.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_';
    if (keep)
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "model" : out;
}

// Distinct non-empty values in order of appearance, joined with ", ".
template <class Get>
std::string distinct(const std::vector<Point>& pts, Get get) {
  std::vector<std::string> seen;
  std::unordered_set<std::string> known;
  for (const Point& p : pts) {
    std::string v = get(p);
    if (!v.empty() && known.insert(v).second) seen.push_back(v);
  }
  std::string out;
  for (const auto& v : seen) out += (out.empty() ? "" : ", ") + v;
  return out.empty() ? "unknown" : out;
}

std::string budget_text(const Point& p) {
  if (p.budget_bytes <= 0) return "whole device";
  return format_bytes(p.budget_bytes) + (p.budget_emulated ? " (emulated)" : "");
}

// The cards predicted by emulation, "" when every point was measured.
std::string predicted_cards(const std::vector<Point>& pts) {
  std::string cards;
  for (const Point& p : pts)
    if (p.predicted && cards.find(p.card) == std::string::npos)
      cards += (cards.empty() ? "" : ", ") + p.card;
  return cards;
}

void title(Document& doc, const std::vector<Point>& pts) {
  const std::string cards = predicted_cards(pts);
  if (cards.empty()) return doc.heading(1, "Sweep report");
  const bool measured =
      std::any_of(pts.begin(), pts.end(), [](const Point& p) { return !p.predicted; });
  const std::string on =
      distinct(pts, [](const Point& p) { return p.predicted ? std::string() : p.device_name; });
  doc.heading(1, "Sweep report: " + (measured ? "measured on " + on + "; " : std::string()) +
                     predicted_by(cards));
}

// What measured the rows and when: after the summary, the answer comes first.
void header(Document& doc, const Results& res, const std::vector<Point>& pts) {
  const std::string cards = predicted_cards(pts);
  const auto predicted =
      std::count_if(pts.begin(), pts.end(), [](const Point& p) { return p.predicted; });
  doc.heading(2, "About these results");
  std::map<Status, int> count;
  for (const Point& p : pts) ++count[p.status];
  std::string statuses;
  for (Status s : all_of<Status>())
    statuses += (statuses.empty() ? "" : ", ") + std::to_string(count[s]) + " " + to_string(s);
  std::string first, last;
  for (const Point& p : pts) {
    if (p.timestamp.empty()) continue;
    if (first.empty() || p.timestamp < first) first = p.timestamp;
    if (last.empty() || p.timestamp > last) last = p.timestamp;
  }
  doc.list({
      "Results: " + res.path + " (" + std::to_string(res.rows.size()) + " rows, " +
          std::to_string(pts.size()) + " points)",
      "Points: " + statuses,
      "Device: " + distinct(pts,
                            [](const Point& p) {
                              return p.device_name.empty()
                                         ? std::string()
                                         : p.device_name +
                                               (p.device_memory_bytes
                                                    ? " (" + format_bytes(*p.device_memory_bytes) + ")"
                                                    : "");
                            }),
      "Memory budget: " + distinct(pts, budget_text),
      "torch " + distinct(pts, [](const Point& p) { return p.torch_version; }) + ", CUDA " +
          distinct(pts, [](const Point& p) { return p.cuda_version; }),
      "Suite " + distinct(pts, [](const Point& p) { return p.suite_version; }) + ", commit " +
          distinct(pts, [](const Point& p) { return p.git_commit; }),
      "Host: " + distinct(pts, [](const Point& p) { return p.host; }),
      "Measured: " + (first.empty()   ? std::string("unknown")
                      : first == last ? first
                                      : first + " to " + last),
  });
  if (std::any_of(pts.begin(), pts.end(), [](const Point& p) { return p.budget_emulated; }))
    doc.paragraph(
        "Budget emulation was in effect: allocations beyond the budget were refused on a larger "
        "device, so what fits matches the smaller card, but times are the larger device's.");
  if (predicted > 0)
    doc.paragraph(
        std::string(predicted == static_cast<long>(pts.size())
                        ? "Every point is "
                        : std::to_string(predicted) + " points are ") +
        predicted_by(cards) +
        ": the memory CUDA's caching allocator would hold on that card, worked out on a machine "
        "without it (device emulated), and the step time predicted from the step's kernels and "
        "the card's datasheet (docs/fidelity.md, \"Step time\"). Measure on the card itself to "
        "confirm.");
  if (pts.empty()) doc.paragraph("The results file has no rows yet.");
}

void failures(Document& doc, const std::vector<Point>& pts) {
  std::vector<Point> failed;
  for (const Point& p : pts)
    if (p.failed()) failed.push_back(p);
  if (failed.empty()) return;
  doc.heading(2, "Crashes and timeouts");
  auto fields = technique_fields();
  fields.insert(fields.begin(),
                {.header = "model", .cell = [](const Point& p) { return p.model; }, .keep = true});
  fields.insert(fields.begin() + 1,
                {.header = "input", .cell = [](const Point& p) { return p.shape; }});
  fields.push_back({.header = "phase", .cell = [](const Point& p) { return p.phase; }});
  fields.push_back({.header = "exit", .cell = [](const Point& p) {
                      return p.signal.empty() ? p.exit_code : "signal " + p.signal;
                    }});
  fields.push_back(
      {.header = "message", .cell = [](const Point& p) { return p.message; }, .keep = true});
  fields.push_back({.header = "line",
                    .cell = [](const Point& p) { return std::to_string(p.line); },
                    .align = Align::kRight,
                    .keep = true});
  doc.table(make_table(fields, failed));
}

// Through the one install_file (files.h): whole or not at all, and a link planted at the
// name (a shared directory beside a results file) is replaced, never followed.
void write_text(const fs::path& path, const std::string& text) {
  install_file(path, text, "the report", "", "choose a directory you can write to with --out DIR");
}

}  // namespace

bool Group::fits(const Point& p) const {
  return rule && p.peak_reserved && rule->fits(p.ok(), *p.peak_reserved);
}

std::string Group::measured_by() const {
  std::vector<std::string> devices;
  for (const Point& p : points) {
    std::string d = p.predicted          ? "predicted: emulated " + p.card
                    : p.device_name.empty() ? std::string()
                    : p.device_name == "cpu" || p.device_name.rfind("cpu", 0) == 0
                        ? "measured on the CPU"
                        : "measured on " + p.device_name;
    if (!d.empty() && std::find(devices.begin(), devices.end(), d) == devices.end())
      devices.push_back(d);
  }
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : "; ") + d;
  return s.empty() ? "device unknown" : s;
}

std::string Point::technique() const {
  return to_string(precision) + " / " + to_string(checkpointing) + " / acc " +
         std::to_string(accumulation) + " / " + to_string(optimizer) +
         name_tail(cell(), " / ", false, {"alloc_conf"});  // the group says the allocator's
}

std::vector<Point> parse_points(const Results& results) {
  // Every row is checked, then only the one that counts for each point is kept.
  std::vector<Point> out;
  for (const Row& r : results.rows) parse_point(r);
  for (const Row* r : latest_per_point(results).rows) out.push_back(parse_point(*r));
  return out;
}

std::vector<Group> make_groups(const std::vector<Point>& points) {
  std::vector<Group> groups;
  std::unordered_map<std::string, std::size_t> index;  // model + shape + mode + card -> group
  // Measured and predicted points are never one section (device_parts.h).
  const bool mixed =
      std::any_of(points.begin(), points.end(), [](const Point& p) { return p.predicted; }) &&
      std::any_of(points.begin(), points.end(), [](const Point& p) { return !p.predicted; });
  for (const Point& p : points) {
    // Train and eval rows are sections of their own (an eval batch is another question).
    auto [it, fresh] = index.emplace(
        p.model + '\x1f' + p.shape + '\x1f' + to_string(p.mode) + '\x1f' + p.card, groups.size());
    if (fresh) {
      groups.push_back(Group{.model = p.model, .shape = p.shape});
      groups.back().stem = slug((p.shape.empty() ? p.model : p.model + "-" + p.shape) +
                                (p.mode == Mode::kEval ? "-eval" : "") +
                                (mixed ? "-" + (p.predicted ? p.card : "measured") : ""));
    }
    groups[it->second].points.push_back(p);
  }
  if (mixed)
    for (Group& g : groups)
      if (!g.points.front().predicted)
        g.measured = "measured on " + distinct(g.points, [](const Point& p) { return p.device_name; });
  for (Group& g : groups) {
    std::vector<std::string> allocs, budgets, memories;
    for (const Point& p : g.points) {
      allocs.push_back(p.alloc_conf);
      budgets.push_back(fixed(p.budget_bytes, 0));
    }
    g.mode = g.points.front().mode;
    g.alloc_conf = most_common(allocs);
    std::string budget = most_common(budgets);
    std::vector<Point> kept;
    for (const Point& p : g.points)
      if (p.alloc_conf == g.alloc_conf && fixed(p.budget_bytes, 0) == budget) kept.push_back(p);
    g.left_out = static_cast<int>(g.points.size() - kept.size());
    g.points = std::move(kept);
    g.unit = unit_for(g.points);
    const std::string cards = predicted_cards(g.points);
    if (!cards.empty()) g.predicted = predicted_by(cards);
    const Point* emulated = nullptr;
    for (const Point& p : g.points) {
      if (p.device_memory_bytes) memories.push_back(fixed(*p.device_memory_bytes, 0));
      if (p.budget_emulated) emulated = &p;
    }
    g.budget_bytes = std::stod(budget);
    g.budget_enforced = g.budget_bytes > 0;
    if (g.budget_enforced) {
      g.budget_title = "budget " + format_bytes(g.budget_bytes) + (emulated ? " (emulated)" : "");
    } else if (!memories.empty()) {
      g.budget_bytes = std::stod(most_common(memories));
      g.budget_title = "device memory " + format_bytes(g.budget_bytes);
    }
  }
  return groups;
}

MemoryUnit unit_for(const std::vector<Point>& points) {
  double largest = 0;
  for (const Point& p : points)
    for (auto v : {p.peak_allocated, p.peak_reserved})
      if (v) largest = std::max(largest, *v);
  MemoryUnit u;
  if (largest > 0 && largest < u.bytes) u = {.bytes = 1024.0 * 1024.0, .name = "MiB"};
  return u;
}

std::string MemoryUnit::text(std::optional<double> b) const {
  if (!b) return "";
  return fixed(*b / bytes, name == "GiB" ? 2 : 1);
}


std::string percent(double fraction) { return fixed(100 * fraction, 0) + "%"; }

std::string signed_percent(double fraction) {
  std::string s = percent(fraction);
  return s[0] == '-' || s == "0%" ? s : "+" + s;
}

int precision_rank(std::optional<Precision> precision) {
  return precision ? static_cast<int>(*precision) : static_cast<int>(all_of<Precision>().size());
}

int optimizer_rank(std::optional<OptimizerKind> optimizer) {
  using enum OptimizerKind;
  static constexpr std::array kOrder = {kAdamW, kAdamWFused, kAdamW8bit, kPagedAdamW8bit,
                                        kPagedAdamW32bit, kSgd, kAdafactor};
  auto it = std::find(kOrder.begin(), kOrder.end(), optimizer);
  return static_cast<int>(it - kOrder.begin());
}

void add_plot(Document& doc, bool drawn, const std::string& stem, const std::string& alt) {
  if (drawn)
    doc.image({.stem = stem, .alt = alt});
  else
    doc.paragraph("Plot data: " + stem + ".dat (script: " + stem + ".gp).");
}

}  // namespace report

namespace report {
namespace {

// Each group's rule (see Group::rule); throws UserError before any write. `results` holds the
// one file read (card_target takes a list, as recommend does).
void set_rules(std::vector<Group>& groups, const std::vector<Results>& results,
               const ReportOptions& options) {
  const bool card = !options.card.gpu.empty() || options.card.memory_gib;
  std::optional<Target> given;
  if (card) given = card_target(results, options.card);
  std::map<std::pair<double, bool>, Target> known;  // (budget or memory, enforced) -> target
  for (Group& g : groups) {
    if (given) {
      g.rule = *given;
      g.card = given->name;
      continue;
    }
    if (g.budget_bytes <= 0) continue;
    auto it = known.find({g.budget_bytes, g.budget_enforced});
    if (it == known.end()) {
      RecommendOptions o = options.card;
      // A budget enforced while measuring was already the cap (memory - context).
      if (g.budget_enforced)
        o.budget_bytes = std::llround(g.budget_bytes);
      else
        o.memory_gib = g.budget_bytes / kGiB;
      it = known.emplace(std::pair{g.budget_bytes, g.budget_enforced}, card_target(results, o)).first;
    }
    g.rule = it->second;
    g.card = it->second.name;
  }
}

}  // namespace
}  // namespace report

int write_report(const std::string& results_dir, const std::string& out_dir_in,
                 const ReportOptions& options) {
  namespace fs = std::filesystem;
  std::vector<Results> results;  // one file; pushed, not braced (a braced list would copy it)
  results.push_back(read_results(results_dir));
  const Results& res = results.front();
  std::vector<report::Point> points = report::parse_points(res);  // throws before any write
  std::vector<report::Group> groups = report::make_groups(points);
  report::set_rules(groups, results, options);
  fs::path out_dir = out_dir_in.empty() ? fs::path(default_out_dir(res.path)) : fs::path(out_dir_in);
  make_output_directory(out_dir, "--out");

  Plotter plotter(out_dir.string());
  Document doc;
  report::title(doc, points);
  // The summary's answer is recommend()'s on the same rows and card, so that the two agree:
  // one per device part (measured rows apart from each predicted card's, device_parts.h);
  // rows that do not say which card (several devices, no memory) get a line saying how to ask.
  const std::vector<DevicePart> parts = device_parts(results);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const DevicePart& part = parts[i];
    std::optional<Recommendation> rec;
    std::string no_recommendation;
    try {
      rec = recommend(part.results, options.card);
    } catch (const UserError& e) {
      no_recommendation = e.what() + std::string(" (") + e.hint() + ")";
    }
    std::vector<report::Point> part_points;
    for (const report::Point& p : points)
      if (p.card == part.card.value_or("")) part_points.push_back(p);
    const std::string label = parts.size() > 1 ? part.label : "";
    if (rec) rec->part_label = label;
    report::summary_section(doc, part_points, rec ? &*rec : nullptr, no_recommendation, label, i);
  }
  report::header(doc, res, points);
  if (!plotter.available()) {
    std::cerr << "sweep report: note: " << report::kNoGnuplot << "\n";
    doc.paragraph(report::kNoGnuplot);
  }
  report::failures(doc, points);
  for (const report::Group& g : groups) {
    doc.heading(2, g.title());
    if (g.left_out > 0)
      doc.paragraph(
          std::to_string(g.left_out) +
          " points with another allocator setting or budget are not shown; compared here: " +
          (g.alloc_conf.empty() ? "the default allocator" : "alloc_conf " + g.alloc_conf) + ".");
    report::memory_section(doc, plotter, g);
    // The rest opens folded: the memory chart and the summary answer the question.
    doc.begin_details("Techniques at each batch, where the memory goes, throughput (" +
                      std::to_string(g.points.size()) + " points)");
    report::technique_section(doc, plotter, g);
    report::guides_section(doc, g);
    report::breakdown_section(doc, plotter, g);
    report::throughput_section(doc, plotter, g);
    doc.end();
  }
  if (!plotter.errors().empty()) {
    doc.heading(2, "Plot errors");
    doc.list(plotter.errors());
    for (const auto& e : plotter.errors()) std::cerr << "sweep report: " << e << "\n";
  }
  report::write_text(out_dir / "report.md", doc.markdown());
  report::write_text(out_dir / "report.html",
                     doc.html("Sweep report: " + res.path, out_dir.string()));
  std::cerr << "sweep report: wrote " << (out_dir / "report.html").string() << " and "
            << (out_dir / "report.md").string() << " (" << plotter.drawn()
            << " plots) from " << res.path << "\n";
  // After the report is written (its tables are whole): a failed plot is an error of the
  // environment, exit 2, not a note.
  if (!plotter.errors().empty())
    return print_user_error(UserError(out_dir.string(), 0, "plots",
                    std::to_string(plotter.errors().size()) +
                        " plots failed (named above); report.md and report.html are written "
                        "without them",
                    "run the .gp file named above with gnuplot in " + out_dir.string() +
                        " to see why; a missing gnuplot is not an error (the plots are then "
                        "left out with a note)"));
  return 0;
}

void register_report_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string results_dir, out_dir;
    ReportOptions report;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write report.md, report.html and plots (SVG, PNG) from a results directory");
  cmd->add_option("RESULTS_DIR", opts->results_dir, "directory holding results.csv, or a results CSV file")
      ->required();
  cmd->add_option("--out", opts->out_dir, "where to write the report (default: beside the results, or results/<name>/ when "
                  "the results sit in a source tree outside results/)");
  auto card = add_card_options(cmd, opts->report.card);
  cmd->callback([opts, card, &exit_code] {
    card();
    exit_code = run_guarded(
        [&] { return write_report(opts->results_dir, opts->out_dir, opts->report); });
  });
}

}  // namespace sweep::reports
