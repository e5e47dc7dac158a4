// What a fit's rows say; see fit_analysis.h.
#include "sweeps/cli/fit_analysis.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "reports/common/pick.h"
#include "reports/results/schema.h"
#include "sweeps/cli/fit_question.h"
#include "sweeps/cli/fit_search.h"
#include "sweeps/runner/estimate.h"
#include "sweeps/runner/search.h"

namespace sweep {

using schema::column;

std::string technique_key(const FitTechnique& t) { return t.key(); }


namespace {

// The row's point_id is `point`'s at the row's batch (a max_seq search's: at its seq); the
// device aside. A row of an encoder-classifier written before the whole Whisper took the name
// (the reader names it whisper-*-cls, reports/results/rows.cc) carries the id it had under its
// old name.
bool same_point(const reports::Row& row, Point point, std::string_view search = "max_batch") {
  const SearchedAxis axis = searched_axis(search);
  (axis.column == "seq" ? point.seq : point.batch) =
      static_cast<int64_t>(row.number(schema::find_column(axis.column)).value_or(0));
  if (row.at(column("point_id")) == point.id()) return true;
  if (point.family != "whisper-cls" || !point.model.ends_with("-cls")) return false;
  point.model.resize(point.model.size() - 4);
  return row.at(column("point_id")) == point.id();
}

}  // namespace

bool measures(const reports::Row& row, Point point, std::string_view search) {
  return row.value<Device>() == point.device && same_point(row, std::move(point), search);
}

const reports::Row* measured_elsewhere(const reports::Results& results,
                                       const std::vector<Point>& searches, std::string_view search) {
  for (const auto* r : reports::latest_per_point(results).rows)
    for (const auto& p : searches)
      if (r->value<Device>() != p.device && same_point(*r, p, search)) return r;
  return nullptr;
}

Analysis analyse(const reports::Results& results, const std::vector<Point>& searches,
                 const std::vector<FitTechnique>& wanted, std::string_view search) {
  Analysis a;
  if (!searches.empty()) a.budget_bytes = searches.front().budget_bytes;
  std::map<std::string, FitTechnique> by_key;
  for (const auto& t : wanted) by_key[technique_key(t)] = t;
  const std::string_view searched = searched_axis(search).column;
  const auto latest = reports::latest_per_point(results);
  for (const auto* r : latest.rows) {
    if (r->at(column("search")) != search ||
        std::none_of(searches.begin(), searches.end(),
                     [&](const Point& p) { return measures(*r, p, search); }))
      continue;
    const auto technique = technique_of(*r);
    if (!technique) continue;
    auto it = by_key.find(technique->key());
    if (it == by_key.end()) continue;
    FitTechnique& t = it->second;
    const auto batch = static_cast<int64_t>(r->number(schema::find_column(searched)).value_or(0));
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
      t.stopped_message = r->at(column("message"));
    }
  }
  for (const auto& t : wanted)
    a.techniques.push_back(by_key.at(technique_key(t)));
  return a;
}

FitRows analyse(const FitQuestion& q, const FitSearch& s, const std::vector<FitTechnique>& wanted) {
  FitRows f;
  f.results = std::make_shared<const reports::Results>(reports::read_results(s.results.string()));
  const std::string_view search = q.search();
  f.analysis = analyse(*f.results, s.question, wanted, search);
  // The emulated runs that seeded this question's searches: each a point of the question on
  // the emulated device.
  if (const auto path = s.results.parent_path() / kPredictionsFile; std::filesystem::exists(path)) {
    std::set<std::string> keys;
    for (const auto& p : s.question) keys.insert(combination_key(p, search));
    const auto rows = reports::read_results(path.string());  // the rows below point into it
    for (const auto* r : reports::latest_per_point(rows).rows) {
      if (r->at(column("search")) != search) continue;
      Point p = point_of(*r);
      p.device = q.device;
      p.card = {};
      f.predictions += keys.count(combination_key(p, search)) > 0;
    }
  }
  for (const auto& t : f.analysis.techniques) f.probes += t.probes;
  f.probes_line =
      probes_text(f.probes, static_cast<int>(f.analysis.techniques.size()), f.predictions);
  return f;
}

std::string stopped_searches(const Analysis& a) {
  int stopped = 0;
  const FitTechnique* first = nullptr;
  for (const auto& t : a.techniques)
    if (!t.largest && !t.stopped.empty() && stopped++ == 0) first = &t;
  if (!first) return "";
  return std::to_string(stopped) + " of " + std::to_string(a.techniques.size()) +
         " searches stopped before finding a batch that fits (" + first->label() + ": " +
         first->stopped + (first->stopped_message.empty() ? "" : ", " + first->stopped_message) + ")";
}

namespace {

// Refused by the question: this very pick, or a micro-batch at least as large as one of the
// same technique that ran out of memory at its accumulation.
bool is_refused(const Pick& p, const PickQuestion& q) {
  if (std::find(q.refused.begin(), q.refused.end(), pick_id(p)) != q.refused.end()) return true;
  const auto oom = q.accumulation_oom.find(technique_key(*p.technique));
  return p.accumulation > 1 && oom != q.accumulation_oom.end() && p.batch >= oom->second;
}

// Every fitting probe whose batch reaches the effective batch, less those refused, as a pick
// each (a confirmed one as measured at its accumulation).
Pick probe_pick(const FitTechnique& t, const reports::Row& r, int64_t batch, const PickQuestion& q) {
  return {&t,
          batch,
          q.effective ? *q.effective / batch : 1,
          r.number(column("tokens_per_s")).value_or(0),
          r.number(column("step_ms_cv")).value_or(0),
          r.number(column("peak_reserved_bytes")).value_or(0)};
}

// The largest micro-batches of technique `t` that divide the effective batch, when the search
// never probed them (a seeded search probes near the prediction only): one under its largest
// batch that fits the cap, and one under its largest probe that stays under the recommended
// ceiling (memory grows with the batch). Each is a candidate to be measured, its peak and
// throughput those of the smallest probe above it (an upper bound of its peak) until then: the
// first alone left a card whose largest fitting probe is over the ceiling with only the small
// probed divisors (gpt2-medium on an A10 at an effective batch of 32: 2 x 16 picked, the
// unprobed 16 bounded by batch 17's peak over the ceiling, 8 never offered). A divisor refused
// (out of memory at its accumulation) gives way to the next smaller one.
std::vector<Pick> unprobed_divisors(const FitTechnique& t,
                                    const std::vector<const reports::Row*>& ok,
                                    const PickQuestion& q) {
  std::vector<Pick> out;
  if (!q.effective || !t.largest) return out;
  auto batch_of = [](const reports::Row* r) {
    return static_cast<int64_t>(r->number(column("batch")).value_or(0));
  };
  int64_t under_ceiling = 0;
  for (const auto* r : ok)
    if (r->number(column("peak_reserved_bytes")).value_or(0) <=
        static_cast<double>(q.rule.ceiling_bytes()))
      under_ceiling = std::max(under_ceiling, batch_of(r));
  auto probe_at = [&](int64_t b) -> const reports::Row* {
    const auto it = std::find_if(ok.begin(), ok.end(), [&](auto* r) { return batch_of(r) == b; });
    return it == ok.end() ? nullptr : *it;
  };
  for (const int64_t limit : {*t.largest, under_ceiling}) {
    // The largest divisor under the limit that is not refused: one that ran out of memory once
    // gradients accumulated gives way to the next smaller one (whisper-test under 30 MiB on a
    // CPU with AVX-512: batch 25 fits alone, 25 x 4 does not; 20 x 5 is the answer).
    for (int64_t d = std::min(limit, *q.effective); d >= 1; --d) {
      if (*q.effective % d != 0) continue;
      if (const reports::Row* probe = probe_at(d)) {
        if (!is_refused(probe_pick(t, *probe, d, q), q)) break;  // a candidate of its own
        continue;
      }
      if (std::any_of(out.begin(), out.end(), [&](const Pick& p) { return p.batch == d; })) break;
      const reports::Row* above = nullptr;
      for (const auto* r : ok)
        if (batch_of(r) > d && (!above || batch_of(r) < batch_of(above))) above = r;
      if (!above) break;
      Pick p = probe_pick(t, *above, d, q);
      p.unprobed = true;
      if (is_refused(p, q)) continue;
      out.push_back(p);
      break;
    }
  }
  return out;
}

// Every fitting probe whose batch reaches the effective batch and the largest micro-batches that
// divide it (unprobed_divisors), less those refused, as a pick each (a confirmed one as
// measured at its accumulation).
std::vector<Pick> candidates(const Analysis& a, const PickQuestion& q) {
  std::vector<Pick> all;
  auto add = [&](Pick p) {
    const std::string id = pick_id(p);
    if (is_refused(p, q)) return;
    if (const auto c = q.confirmed.find(id); c != q.confirmed.end()) p = c->second;
    else if (q.measured_only && (p.unprobed || p.accumulation > 1)) return;
    all.push_back(p);
  };
  for (const auto& t : a.techniques) {
    const auto it = a.ok_rows.find(technique_key(t));
    if (it == a.ok_rows.end()) continue;
    if (!q.bf16 && (t.precision == Precision::kBf16 || t.precision == Precision::kBf16Amp)) continue;
    for (const auto* r : it->second) {
      const auto b = static_cast<int64_t>(r->number(column("batch")).value_or(0));
      if (b <= 0 || (q.effective && (b > *q.effective || *q.effective % b != 0))) continue;
      add(probe_pick(t, *r, b, q));
    }
    for (const Pick& d : unprobed_divisors(t, it->second, q)) add(d);
  }
  return all;
}

}  // namespace

std::optional<Pick> pick(const Analysis& a, const PickQuestion& q) {
  std::vector<Pick> c = candidates(a, q);
  std::vector<reports::Candidate> seen;
  for (const auto& p : c)
    seen.push_back({p.technique->label(), technique_count(*p.technique), p.batch, p.accumulation,
                    p.tokens_per_s, p.step_ms_cv, p.peak_reserved, q.predicted});
  const auto picked = reports::pick(seen, {q.rule});
  if (!picked) return std::nullopt;
  Pick p = c[picked->index];
  p.above_ceiling = picked->above_ceiling;
  p.by_memory = picked->ranked == reports::Ranked::kByMemory;
  p.why = picked->note;
  return p;
}

std::optional<reports::TrainingSetup> training_setup(const Analysis& a, const Pick& p) {
  const auto it = a.ok_rows.find(technique_key(*p.technique));
  if (it == a.ok_rows.end() || it->second.empty()) return std::nullopt;
  reports::TrainingSetup s = reports::setup_of(*it->second.front());
  s.batch = p.batch;
  s.accumulation = p.accumulation;
  if (p.seq > 0) s.seq = p.seq;
  return s;
}

int technique_count(const FitTechnique& t) { return t.changes(); }

std::string pick_id(const Pick& p) {
  const auto& t = *p.technique;
  return technique_key(t) + "|" + std::to_string(p.batch) + "|" + std::to_string(p.accumulation);
}

}  // namespace sweep
