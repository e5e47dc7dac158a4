// Inside the report: results rows turned into typed points (every number parsed before
// anything is written, so bad input writes nothing), grouped per model and input shape,
// and the four per-group sections (memory vs batch, techniques, breakdown, throughput).
// report.cc owns the header, the failure list and the files; this is what it calls.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reports/markup.h"
#include "reports/plots.h"
#include "reports/results/rows.h"

namespace sweep::reports::report {

// One results row, its numbers parsed. Memory in bytes, as in the file.
struct Point {
  std::string model, mode, shape, precision, checkpointing, optimizer, alloc_conf;
  std::string status, reason, phase, message, signal, exit_code;
  std::string device_name, torch_version, cuda_version, suite_version, git_commit, host;
  std::string timestamp;
  std::string search;  // "max_batch" for a max-batch search probe
  std::string adapter = "none";  // "none" | "lora"; files from before the column: none
  std::string lora_r;            // the LoRA rank as written, when adapter is lora
  bool use_cache = true;         // false: called with use_cache=False (GPT-2, T5)
  std::string offload = "none";  // "optimizer": AdamW's state on the host (ZeRO-Offload)
  std::string weights_axis = "full";  // the weights column: "int8" (frozen base in 8 bit); older files: full
  int batch = 0;
  int accumulation = 1;
  double budget_bytes = 0;
  bool budget_emulated = false;
  std::optional<double> device_memory_bytes, weights, grads, optimizer_state, activations,
      peak_allocated, peak_reserved, tokens_per_s, samples_per_s, host_peak_bytes;
  std::optional<double> step_ms, step_ms_cv;  // from the raw samples when the row has them
  unsigned line = 0;

  bool ok() const { return status == "ok"; }
  // oom, or skipped because a smaller point already ran out of memory
  bool out_of_memory() const { return status == "oom" || reason == "implied-oom"; }
  // "fp16-amp / block", "fp16-amp / block / lora"
  std::string pair() const {
    return precision + " / " + checkpointing + (adapter == "none" ? "" : " / " + adapter);
  }
  // "fp16-amp / block / acc 4 / adamw", "... / adamw / lora r8", "... / use_cache=False"
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
  std::string mode, alloc_conf;
  std::vector<Point> points;
  int left_out = 0;
  MemoryUnit unit;
  double budget_bytes = 0;   // the budget the rows ran under, or the device's memory
  std::string budget_title;  // "budget 24.00 GiB (emulated)"
  bool budget_enforced = false;  // budget_bytes is a budget the rows ran under
  // The line a point's peak *reserved* memory must stay under to fit, by the one rule
  // (recommend.h usable_bytes): the card given to `report --gpu/--memory-gib`, else the
  // budget the rows ran under (enforced: it is already what was usable), else the measuring
  // device's usable memory. 0: unknown.
  double usable_bytes = 0;
  std::string usable_title;  // "usable on RTX 3060: 10.29 GiB"
  std::string title() const {
    std::string t = shape.empty() ? model : model + ", " + shape;
    return mode == "eval" ? t + " (eval)" : t;
  }
  bool fits(const Point& p) const;  // p ran and its peak reserved is within usable_bytes
};

std::vector<Group> make_groups(const std::vector<Point>& points);

// Formatting shared by the sections and the header.
std::string percent(double fraction);         // 0.423 -> "42%"
std::string signed_percent(double fraction);  // -0.42 -> "-42%", 0.1 -> "+10%"
int precision_rank(const std::string& precision);
int optimizer_rank(const std::string& optimizer);
// The value seen most often; ties go to the one seen first.
std::string most_common(const std::vector<std::string>& values);

// Table columns naming a point's batch, technique and status; hidden where they do not vary.
std::vector<Field<Point>> technique_fields();

// The sections; each adds headings, plots, tables and sentences for one group.
void memory_section(Document& doc, Plotter& plotter, const Group& g);
void technique_section(Document& doc, Plotter& plotter, const Group& g);
void breakdown_section(Document& doc, Plotter& plotter, const Group& g);
void throughput_section(Document& doc, Plotter& plotter, const Group& g);
// The savings the OOM guides quote next to the measured ones (guides.cc); train groups.
void guides_section(Document& doc, const Group& g);

// The max-batch search's answer per combination of the other axes (probe rows only).
void search_section(Document& doc, const std::vector<Point>& points);

// Adds the image when it was drawn, else a line naming the data file.
void add_plot(Document& doc, bool drawn, const std::string& stem, const std::string& alt);

}  // namespace sweep::reports::report
