// What a fit's rows say; see fit_analysis.h.
#include "sweeps/cli/fit_analysis.h"

#include <algorithm>

#include "reports/common/fit_rule.h"
#include "reports/results/schema.h"

namespace sweep {
namespace {

using schema::column;

std::string technique_key(const FitTechnique& t) {
  return to_string(t.precision) + "|" + to_string(t.checkpointing) + "|" + to_string(t.optimizer) +
         "|" + (t.use_cache ? "1" : "0") + "|" + to_string(t.adapter) + "|" + to_string(t.offload) +
         "|" + to_string(t.weights);
}

// The technique a probe row measured; nullopt for a row that does not name one.
std::optional<FitTechnique> technique_of(const reports::Row& r) {
  const auto precision = r.value<Precision>();
  const auto checkpointing = r.value<Checkpointing>();
  const auto optimizer = r.value<OptimizerKind>();
  const auto adapter = r.value<Adapter>();
  const auto offload = r.value<Offload>();
  const auto weights = r.value<Weights>();
  if (!precision || !checkpointing || !optimizer || !adapter || !offload || !weights) return std::nullopt;
  return FitTechnique{*precision, *checkpointing, *optimizer, r.axis(column("use_cache")) != "0",
                      *adapter, *offload, *weights};
}

}  // namespace

nlohmann::json technique_json(const FitTechnique& t) {
  return {{"precision", to_string(t.precision)}, {"checkpointing", to_string(t.checkpointing)},
          {"optimizer", to_string(t.optimizer)}, {"use_cache", t.use_cache},
          {"adapter", to_string(t.adapter)},     {"offload", to_string(t.offload)},
          {"weights", to_string(t.weights)}};
}


namespace {

// The row's point_id is `point`'s at the row's batch; the device aside.
bool same_point(const reports::Row& row, Point point) {
  point.batch = static_cast<int64_t>(row.number(column("batch")).value_or(0));
  return row.at(column("point_id")) == point.id();
}

}  // namespace

bool measures(const reports::Row& row, Point point) {
  return row.value<Device>() == point.device && same_point(row, std::move(point));
}

const reports::Row* measured_elsewhere(const reports::Results& results,
                                       const std::vector<Point>& searches) {
  for (const auto* r : reports::latest_per_point(results).rows)
    for (const auto& p : searches)
      if (r->value<Device>() != p.device && same_point(*r, p)) return r;
  return nullptr;
}

Analysis analyse(const reports::Results& results, const std::vector<Point>& searches,
                 const std::vector<FitTechnique>& wanted) {
  Analysis a;
  if (!searches.empty()) a.budget_bytes = searches.front().budget_bytes;
  std::map<std::string, FitTechnique> by_key;
  for (const auto& t : wanted) by_key[technique_key(t)] = t;
  const auto latest = reports::latest_per_point(results);
  for (const auto* r : latest.rows) {
    if (r->at(column("search")) != "max_batch" ||
        std::none_of(searches.begin(), searches.end(),
                     [&](const Point& p) { return measures(*r, p); }))
      continue;
    const auto technique = technique_of(*r);
    if (!technique) continue;
    auto it = by_key.find(technique_key(*technique));
    if (it == by_key.end()) continue;
    FitTechnique& t = it->second;
    const auto batch = static_cast<int64_t>(r->number(column("batch")).value_or(0));
    ++t.probes;
    if (r->status == reports::Status::kOk) {
      a.ok_rows[it->first].push_back(r);
      if (!t.largest || batch > *t.largest) {
        t.largest = batch;
        t.peak_reserved = r->number(column("peak_reserved_bytes")).value_or(0);
        t.peak_allocated = r->number(column("peak_allocated_bytes")).value_or(0);
        t.tokens_per_s = r->number(column("tokens_per_s")).value_or(0);
        t.step_ms_cv = r->number(column("step_ms_cv")).value_or(0);
      }
      if (a.device_name.empty()) a.device_name = r->at(column("device_name"));
    } else if (r->status == reports::Status::kOom) {
      if (!t.first_oom || batch < *t.first_oom) t.first_oom = batch;
    } else {
      t.stopped = to_string(r->status);
    }
  }
  for (const auto& t : wanted)
    a.techniques.push_back(by_key.at(technique_key(t)));
  return a;
}

namespace {

// Every fitting probe whose batch reaches the effective batch, less those refused, as a pick
// each (a confirmed one as measured at its accumulation), under the ceiling when any is.
std::vector<Pick> candidates(const Analysis& a, const PickQuestion& q) {
  std::vector<Pick> all;
  for (const auto& t : a.techniques) {
    const auto it = a.ok_rows.find(technique_key(t));
    if (it == a.ok_rows.end()) continue;
    for (const auto* r : it->second) {
      const auto b = static_cast<int64_t>(r->number(column("batch")).value_or(0));
      if (b <= 0 || (q.effective && (b > *q.effective || *q.effective % b != 0))) continue;
      Pick p{&t,
             b,
             q.effective ? *q.effective / b : 1,
             r->number(column("tokens_per_s")).value_or(0),
             r->number(column("step_ms_cv")).value_or(0),
             r->number(column("peak_reserved_bytes")).value_or(0)};
      const std::string id = pick_id(p);
      if (std::find(q.refused.begin(), q.refused.end(), id) != q.refused.end()) continue;
      if (const auto c = q.confirmed.find(id); c != q.confirmed.end()) p = c->second;
      all.push_back(p);
    }
  }
  std::vector<Pick> under;
  for (const auto& p : all)
    if (p.peak_reserved <= static_cast<double>(q.ceiling_bytes)) under.push_back(p);
  if (!under.empty() || q.ceiling_bytes <= 0) return q.ceiling_bytes <= 0 ? all : under;
  for (auto& p : all) p.above_ceiling = true;
  return all;
}

}  // namespace

std::optional<Pick> pick(const Analysis& a, const PickQuestion& q) {
  std::vector<Pick> c = candidates(a, q);
  if (c.empty()) return std::nullopt;
  // The first of equals wins (listed order): a stable sort by throughput.
  std::stable_sort(c.begin(), c.end(),
                   [](const Pick& x, const Pick& y) { return x.tokens_per_s > y.tokens_per_s; });
  if (c.size() > 1 && reports::prefer_runner_up(c[0].tokens_per_s, c[0].step_ms_cv,
                                                c[1].tokens_per_s, c[1].step_ms_cv)) {
    auto label = [](const Pick& p) {
      return p.technique->label() + ", batch " + std::to_string(p.batch) +
             (p.accumulation > 1 ? " x " + std::to_string(p.accumulation) : "");
    };
    c[1].why = reports::runner_up_note(label(c[0]), c[0].tokens_per_s, c[0].step_ms_cv,
                                       label(c[1]), c[1].tokens_per_s, c[1].step_ms_cv);
    return c[1];
  }
  return c[0];
}

int technique_count(const FitTechnique& t) {
  return (t.precision != Precision::kFp32) + (t.checkpointing != Checkpointing::kNone) +
         (t.optimizer != OptimizerKind::kAdamW) + !t.use_cache + (t.adapter != Adapter::kNone) +
         (t.offload != Offload::kNone) + (t.weights != Weights::kFull);
}

std::optional<Pick> pick_by_memory(const Analysis& a, const PickQuestion& q) {
  std::vector<Pick> c = candidates(a, q);
  if (c.empty()) return std::nullopt;
  return *std::min_element(c.begin(), c.end(), [](const Pick& p, const Pick& best) {
    const int n = technique_count(*p.technique), m = technique_count(*best.technique);
    if (n != m) return n < m;
    if (p.batch != best.batch) return p.batch > best.batch;
    return p.peak_reserved < best.peak_reserved;
  });
}

std::string pick_id(const Pick& p) {
  const auto& t = *p.technique;
  return technique_key(t) + "|" + std::to_string(p.batch) + "|" + std::to_string(p.accumulation);
}

}  // namespace sweep
