// How the report's sections order, pick and label points: technique order, lines, columns.
#include "reports/report/report_sections.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace sweep::reports::report {
namespace {

// "lora r8" for LoRA, else the adapter's name.
std::string adapter_text(const Point& p) {
  return p.adapter == Adapter::kLora ? "lora r" + p.lora_r : to_string(p.adapter);
}

std::string status_text(const Point& p) {
  return p.reason.empty() || p.ok() ? to_string(p.status)
                                    : to_string(p.status) + " (" + p.reason + ")";
}

}  // namespace

bool by_technique(const Point& a, const Point& b) {
  return std::tuple_cat(technique_key(a), std::make_tuple(a.batch)) <
         std::tuple_cat(technique_key(b), std::make_tuple(b.batch));
}

Selection select_lines(const Group& g) {
  Selection s;
  std::vector<std::string> accs;
  std::vector<std::optional<OptimizerKind>> optimizers;
  bool has_one = false;
  for (const Point& p : g.points) {
    accs.push_back(std::to_string(p.accumulation));
    has_one = has_one || p.accumulation == 1;
  }
  s.accumulation = has_one ? 1 : std::stoll(most_common(accs));
  for (const Point& p : g.points)
    if (p.accumulation == s.accumulation) optimizers.push_back(p.optimizer);
  s.optimizer = most_common(optimizers);
  // The last row of a (pair, batch) wins when a point was re-measured with other settings.
  std::map<std::tuple<std::string, int64_t>, Point> latest;
  for (const Point& p : g.points)
    if (p.accumulation == s.accumulation && p.optimizer == s.optimizer)
      latest[{p.pair(), p.batch}] = p;
  for (auto& [key, p] : latest) s.points.push_back(p);
  std::sort(s.points.begin(), s.points.end(), by_technique);
  std::set<std::string> known;
  for (const Point& p : s.points)
    if (known.insert(p.pair()).second) s.pairs.push_back(p.pair());
  s.held = "mode " + to_string(g.mode) + ", accumulation " + std::to_string(s.accumulation) +
           ", optimizer " + to_string(s.optimizer) +
           (g.alloc_conf.empty() ? "" : ", alloc_conf " + g.alloc_conf);
  return s;
}

std::string pair_title(const Point& p) {
  return to_string(p.precision) + ", " +
         (p.checkpointing == Checkpointing::kNone ? std::string("no checkpointing")
          : p.checkpointing ? to_string(p.checkpointing) + " checkpointing"
                            : std::string("checkpointing unknown")) +
         (p.adapter == Adapter::kNone ? "" : ", " + adapter_text(p));
}

std::string technique_title(const Point& p) {
  std::string s = pair_title(p) + ", " + to_string(p.optimizer);
  if (p.accumulation > 1) s += ", acc " + std::to_string(p.accumulation);
  if (!p.use_cache) s += ", use_cache=False";
  if (p.offload != Offload::kNone) s += ", offload " + to_string(p.offload);
  if (p.weights_axis != Weights::kFull) s += ", " + to_string(p.weights_axis) + " weights";
  if (!p.alloc_conf.empty()) s += ", " + p.alloc_conf;
  return s;
}

std::vector<Field<Point>> technique_fields() {
  return {
      right<Point>(
          "batch", [](const Point& p) { return std::to_string(p.batch); }, true),
      {.header = "precision", .cell = [](const Point& p) { return to_string(p.precision); }},
      {.header = "checkpointing", .cell = [](const Point& p) { return to_string(p.checkpointing); }},
      right<Point>("accumulation", [](const Point& p) { return std::to_string(p.accumulation); }),
      {.header = "optimizer", .cell = [](const Point& p) { return to_string(p.optimizer); }},
      {.header = "adapter", .cell = adapter_text},
      {.header = "use_cache", .cell = [](const Point& p) { return std::string(p.use_cache ? "True" : "False"); }},
      {.header = "offload", .cell = [](const Point& p) { return to_string(p.offload); }},
      {.header = "weights", .cell = [](const Point& p) { return to_string(p.weights_axis); }},
      {.header = "status", .cell = [](const Point& p) { return status_text(p); }},
  };
}

}  // namespace sweep::reports::report
