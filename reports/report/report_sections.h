// Inside the report: results rows turned into typed points (every number parsed before
// anything is written, so bad input writes nothing), grouped per model and input shape,
// and the four per-group sections (memory vs batch, techniques, breakdown, throughput).
// report.cc owns the header, the failure list and the files; this is what it calls.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "reports/common/markup.h"
#include "reports/common/fit_rule.h"
#include "reports/common/plots.h"
#include "reports/recommend/recommend.h"
#include "reports/results/rows.h"
#include "reports/results/technique.h"

namespace sweep::reports::report {

// One results row, its numbers parsed. Memory in bytes, as in the file.
struct Point {
  std::string model, shape, alloc_conf;
  // The enumerated axes; unknown (nullopt) only where an older file's cell is empty.
  std::optional<Mode> mode;
  std::optional<Precision> precision;
  std::optional<Checkpointing> checkpointing;
  std::optional<OptimizerKind> optimizer;
  Status status = Status::kOk;
  std::string reason, phase, message, signal, exit_code;
  std::string device_name, torch_version, cuda_version, suite_version, git_commit, host;
  std::string timestamp;
  std::string search;  // "max_batch" for a max-batch search probe
  // Every technique axis's and LoRA setting's cell (schema::kAxes; an older file's empty cell
  // its fallback: adapter none), as the row has it.
  TechniqueCells techniques;
  // The order of its technique beyond precision, checkpointing, accumulation and optimizer
  // (order_of), computed once when read: the sections sort by it.
  std::vector<std::pair<double, std::string>> technique_order;
  int64_t batch = 0;
  int64_t accumulation = 1;
  double budget_bytes = 0;
  bool budget_emulated = false;
  // Device emulated: predicted by emulation of `card`, not measured (its throughput, where it
  // has one, the step-time model's).
  bool predicted = false;
  std::string card;
  std::optional<double> device_memory_bytes, weights, grads, optimizer_state, activations,
      peak_allocated, peak_reserved, tokens_per_s, samples_per_s, host_peak_bytes, paged_bytes;
  std::optional<double> step_ms, step_ms_cv;  // from the raw samples when the row has them
  unsigned line = 0;

  bool ok() const { return status == Status::kOk; }
  // A crash or a timeout: failures that say nothing about memory.
  bool failed() const { return status == Status::kCrash || status == Status::kTimeout; }
  // oom, or skipped because a smaller point already ran out of memory
  bool out_of_memory() const { return status == Status::kOom || reason == "implied-oom"; }
  // A technique axis's cell by its column ("" for none): what the names are spelled from.
  CellOf cell() const { return cells_of(techniques); }
  Adapter adapter() const {
    return parse_as<Adapter>(cell()(VocabTable<Adapter>::key)).value_or(Adapter::kNone);
  }
  // "fp16-amp / block", "fp16-amp / block / lora"
  std::string pair() const {
    return to_string(precision) + " / " + to_string(checkpointing) +
           (adapter() == Adapter::kNone ? "" : " / " + to_string(adapter()));
  }
  // "fp16-amp / block / acc 4 / adamw", "... / adamw / lora r8", "... / offload optimizer"
  std::string technique() const;
};

// Parses and checks every row; throws UserError (file:line) on the first bad one.
// A point_id that appears twice keeps its last row (results.csv is append-only).
std::vector<Point> parse_points(const Results& results);

// The points of one model and input shape that are compared with each other: the most
// common mode, allocator setting and budget; `left_out` counts the others.
// The unit a group's memory is shown in, in its charts and tables: MiB when its largest
// peak is under 1 GiB (a test model's 0.01 GiB says nothing), else GiB.
struct MemoryUnit {
  double bytes = 1024.0 * 1024.0 * 1024.0;
  std::string name = "GiB";
  double of(double b) const { return b / bytes; }
  std::string text(std::optional<double> b) const;         // "12.89"; "" when unknown
  std::string header(const std::string& what) const { return what + " (" + name + ")"; }
};
MemoryUnit unit_for(const std::vector<Point>& points);

struct Group {
  std::string model, shape, stem;  // stem: file-name prefix, e.g. "gpt2-medium-seq1024"
  std::optional<Mode> mode;
  std::string alloc_conf;
  std::vector<Point> points;
  int left_out = 0;
  MemoryUnit unit;
  double budget_bytes = 0;   // the budget the rows ran under, or the device's memory
  std::string budget_title;  // "budget 24.00 GiB (emulated)"
  bool budget_enforced = false;  // budget_bytes is a budget the rows ran under
  // The one rule (fit_rule.h) for the card the group answers for: the card given to `report
  // --gpu/--memory-gib`, else the card whose cap is the budget the rows ran under, else the
  // measuring device. nullopt: unknown (no budget, no device memory).
  std::optional<FitRule> rule;
  std::string card;  // its name: "RTX 3060", "the emulated budget of 0.05 GiB", "47 GiB"
  // Its points predicted by emulation: "predicted by emulation of RTX 3060, not measured".
  std::string predicted;
  // Its points measured, in a file that also holds predicted ones (each group is one kind,
  // device_parts.h): "measured on AMD EPYC".
  std::string measured;
  std::string title() const {
    std::string t = shape.empty() ? model : model + ", " + shape;
    if (mode == Mode::kEval) t += " (eval)";
    return !predicted.empty() ? t + ": " + predicted : !measured.empty() ? t + ": " + measured : t;
  }
  bool fits(const Point& p) const;  // by the rule: ran with no OOM, peak reserved <= cap
  // "measured on NVIDIA H100 80GB HBM3", "predicted: emulated RTX 3060", "measured on the CPU
  // (host)": what every chart title names.
  std::string measured_by() const;
};

std::vector<Group> make_groups(const std::vector<Point>& points);

// Formatting shared by the sections and the header.
std::string percent(double fraction);         // 0.423 -> "42%"
std::string signed_percent(double fraction);  // -0.42 -> "-42%", 0.1 -> "+10%"
// Sort orders: precision fp32 first (the enum's order); optimizer adamw, adamw-fused,
// adamw8bit, paged-adamw8bit, paged-adamw32bit, sgd, adafactor; unknown last.
int precision_rank(std::optional<Precision> precision);
int optimizer_rank(std::optional<OptimizerKind> optimizer);
// The value seen most often; ties go to the one seen first.
template <class T>
T most_common(const std::vector<T>& values) {
  // Counted in one pass (counting each value over the whole list made `sweep report`
  // quadratic: 20k rows of one model took 5 s).
  std::map<T, long> count;
  for (const auto& v : values) ++count[v];
  const T* best = nullptr;
  long best_count = 0;
  for (const auto& v : values)
    if (long n = count[v]; n > best_count) {
      best = &v;
      best_count = n;
    }
  return best ? *best : T{};
}

// How the sections order, pick and label points (report_points.cc).

// Order: precision, checkpointing (none first), accumulation, optimizer, the other technique
// axes (plain first: order_of, reports/results/technique.h), then batch; unknown values after
// the known ones. Inline: technique_section keys a
// map by the type it returns.
inline auto technique_key(const Point& p) {
  const auto checkpointing_rank = p.checkpointing ? static_cast<int>(*p.checkpointing) : 2;
  return std::make_tuple(precision_rank(p.precision), p.precision, checkpointing_rank,
                         p.checkpointing, p.accumulation, optimizer_rank(p.optimizer), p.optimizer,
                         p.technique_order);
}
bool by_technique(const Point& a, const Point& b);

// The points a line chart over batch size shows: accumulation 1 (or the most common) and
// the most common optimizer, so each line varies only in batch. Sorted by technique.
struct Selection {
  std::vector<Point> points;
  int64_t accumulation = 1;
  std::optional<OptimizerKind> optimizer;
  std::string held;  // "mode train, accumulation 1, optimizer adamw"
  std::vector<std::string> pairs;
};
Selection select_lines(const Group& g);

// What charts call a point's line, "none" said as what it is: "fp32, no checkpointing",
// "bf16-amp, block checkpointing, lora r8".
std::string pair_title(const Point& p);
// Every technique axis in words: "bf16-amp, block checkpointing, adafactor, acc 4".
std::string technique_title(const Point& p);

// A right-aligned column.
template <class T>
Field<T> right(std::string header, std::function<std::string(const T&)> cell, bool keep = false) {
  return {
      .header = std::move(header), .cell = std::move(cell), .align = Align::kRight, .keep = keep};
}

// Table columns naming a point's batch, technique and status; hidden where they do not vary.
std::vector<Field<Point>> technique_fields();

// The sections; each adds headings, plots, tables and sentences for one group.
void memory_section(Document& doc, Plotter& plotter, const Group& g);
void technique_section(Document& doc, Plotter& plotter, const Group& g);
void breakdown_section(Document& doc, Plotter& plotter, const Group& g);
void throughput_section(Document& doc, Plotter& plotter, const Group& g);
// The savings the OOM guides quote next to the measured ones (guides.cc); train groups.
void guides_section(Document& doc, const Group& g);

// The first screen (report_summary.cc): the device that measured, the rule with its figures,
// the recommendation and the largest batch per technique, from `r` (recommend() on the same
// rows); without one (r null), why not. Rows of several devices (device_parts.h) get one
// summary each: `part` is its label ("" for rows of one kind), `index` its place.
void summary_section(Document& doc, const std::vector<Point>& points, const Recommendation* r,
                     const std::string& no_recommendation, const std::string& part,
                     std::size_t index);

// What the probes of max-batch searches say, one answer per combination (model, input, mode,
// technique, allocator setting, budget), in file order: the largest batch that ran, the
// smallest that ran out of memory. search_section's table and `sweep tables`' measured rows.
struct SearchAnswer {
  const Point* first = nullptr;    // names the combination
  const Point* largest = nullptr;  // the largest batch that fit
  std::optional<int64_t> first_oom;
  int probes = 0;
  std::string failed;  // "batch 8: crash; ..."
};
std::vector<SearchAnswer> search_answers(const std::vector<Point>& points);

// Adds the image when it was drawn, else a line naming the data file.
void add_plot(Document& doc, bool drawn, const std::string& stem, const std::string& alt);

}  // namespace sweep::reports::report
