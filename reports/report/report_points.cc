// How the report's sections order, pick and label points: technique order, lines, columns.
#include "reports/report/report_sections.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace sweep::reports::report {
namespace {

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
         (p.adapter() == Adapter::kNone ? "" : ", " + shown(p.cell(), VocabTable<Adapter>::key));
}

std::string technique_title(const Point& p) {
  std::string s = pair_title(p) + ", " + to_string(p.optimizer);
  if (p.accumulation > 1) s += ", acc " + std::to_string(p.accumulation);
  // The rest of the technique's name (the adapter is in the pair's); the allocator's settings
  // as the user wrote them.
  s += name_tail(p.cell(), ", ", false, {"adapter", "alloc_conf"});
  if (!p.alloc_conf.empty()) s += ", " + p.alloc_conf;
  return s;
}

std::vector<Field<Point>> technique_fields() {
  std::vector<Field<Point>> fields = {
      right<Point>(
          "batch", [](const Point& p) { return std::to_string(p.batch); }, true),
      {.header = "precision", .cell = [](const Point& p) { return to_string(p.precision); }},
      {.header = "checkpointing", .cell = [](const Point& p) { return to_string(p.checkpointing); }},
      right<Point>("accumulation", [](const Point& p) { return std::to_string(p.accumulation); }),
      {.header = "optimizer", .cell = [](const Point& p) { return to_string(p.optimizer); }},
  };
  // The technique's named axes, in the order its name gives them (the group holds the
  // allocator's settings).
  std::vector<const schema::Axis*> named;
  for (const auto& a : schema::kAxes)
    if (a.name_rank > 0 && a.column != "alloc_conf") named.push_back(&a);
  std::sort(named.begin(), named.end(),
            [](const schema::Axis* x, const schema::Axis* y) { return x->name_rank < y->name_rank; });
  for (const schema::Axis* a : named)
    fields.push_back({.header = std::string(a->column),
                      .cell = [a](const Point& p) { return shown(p.cell(), a->column); }});
  fields.push_back({.header = "status", .cell = [](const Point& p) { return status_text(p); }});
  return fields;
}

}  // namespace sweep::reports::report
