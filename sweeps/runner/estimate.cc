// Time estimates from measured rows; see estimate.h.
#include "sweeps/runner/estimate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>

#include "reports/results/stats.h"
#include "sweeps/runner/results_store.h"
#include "sweeps/runner/search.h"
#include "sweeps/runner/sweep.h"

namespace sweep {
namespace {

using schema::column;

double cell(const reports::Row& r, std::size_t col) { return r.number(col).value_or(0); }

std::string plural(int n, const std::string& what) {
  const bool es = what.ends_with("h") || what.ends_with("s");  // searches
  return std::to_string(n) + " " + what + (n == 1 ? "" : es ? "es" : "s");
}

}  // namespace

void WallHistory::add(const reports::Results& results, std::optional<Device> device,
                      const std::string& host) {
  int used = 0;
  for (const auto& r : results.rows) {
    if ((device && r.value<Device>() != device) || (!host.empty() && r.at(column("host")) != host))
      continue;
    const auto wall = r.number(column("wall_s")), step_ms = r.number(column("step_ms"));
    const auto steps = r.number(column("steps")), reps = r.number(column("repetitions"));
    if (r.status != reports::Status::kOk || !wall || !step_ms || !steps || !reps) continue;
    const double step_s = *step_ms / 1000;
    const double n = cell(r, column("warmup_steps")) + *steps * *reps;
    Sample s;
    s.model = r.at(column("model"));
    s.mode = r.value<Mode>();
    s.precision = r.value<Precision>();
    s.seq = cell(r, column("seq"));
    s.target_seq = cell(r, column("target_seq"));
    s.audio_s = cell(r, column("audio_s"));
    s.batch = cell(r, column("batch"));
    s.start_s = std::max(0.0, *wall - step_s * n);
    s.micro_step_s = step_s / std::max(1.0, cell(r, column("accumulation")));
    samples_.push_back(std::move(s));
    ++used;
  }
  if (used) sources_.push_back(results.path);
}

bool WallHistory::knows(const std::string& model) const {
  return std::any_of(samples_.begin(), samples_.end(), [&](const Sample& s) { return s.model == model; });
}

std::optional<PointEstimate> WallHistory::estimate(const Point& p) const {
  auto same_shape = [&](const Sample& s) {
    return s.model == p.model && s.mode == p.mode && s.precision == p.precision &&
           s.seq == static_cast<double>(p.seq) && s.target_seq == static_cast<double>(p.target_seq) &&
           s.audio_s == p.audio_s;
  };
  // Most similar first; the first tier with rows is used. Rows of the point's batch give
  // their step time as measured; rows of other batches give it per sample, times the batch.
  const double batch = static_cast<double>(p.batch);
  struct Tier {
    const char* basis;
    std::function<bool(const Sample&)> match;
    bool per_sample;
  };
  const std::array<Tier, 3> tiers = {{
      {"same model, shape, precision and batch",
       [&](const Sample& s) { return same_shape(s) && s.batch == batch; }, false},
      {"same model, shape and precision", same_shape, true},
      {"same model", [&](const Sample& s) { return s.model == p.model; }, true},
  }};
  for (const auto& t : tiers) {
    std::vector<double> starts, steps;
    for (const auto& s : samples_)
      if (t.match(s)) {
        starts.push_back(s.start_s);
        steps.push_back(t.per_sample ? s.micro_step_s / std::max(1.0, s.batch) : s.micro_step_s);
      }
    if (starts.empty()) continue;
    PointEstimate e;
    e.start_s = reports::median(starts);
    e.step_s = reports::median(steps) * (t.per_sample ? batch : 1.0) *
               static_cast<double>(std::max<int64_t>(1, p.accumulation));
    e.seconds = e.start_s + e.step_s * (p.warmup_steps + p.steps * p.repetitions);
    e.rows = static_cast<int>(starts.size());
    e.basis = t.basis;
    return e;
  }
  return std::nullopt;
}

std::optional<double> WallHistory::start_s() const {
  if (samples_.empty()) return std::nullopt;
  std::vector<double> starts;
  for (const auto& s : samples_) starts.push_back(s.start_s);
  return reports::median(starts);
}

std::string combination_key(const Point& p, std::string_view search) {
  Point q = p;
  searched_axis(search).set(q, 0);
  return q.id();
}

void Recorded::add(const reports::Results& results) {
  for (const auto* r : reports::latest_per_point(results).rows) {
    if (!result_on_resume(*r)) continue;  // measured again: it costs what a new point costs
    points[r->at(column("point_id"))] = r->status;
    const std::string& search = r->at(column("search"));
    if (search.empty()) continue;
    const Point p = point_of(*r);
    searches[combination_key(p, search)][searched_axis(search).value_of(p)] = r->status;
  }
}

namespace {

// The probes a search of [lo, hi] has left, given the statuses on record by batch (answers
// only: a crash or a timeout runs again, Recorded::add): none when its answer is there, else
// about `expected` less those done.
int probes_left(const std::map<int64_t, Status>& done, int64_t lo, int64_t hi, int expected) {
  int in_range = 0;
  for (const auto& [batch, status] : done) {
    if (batch < lo || batch > hi) continue;
    ++in_range;
    if (status == Status::kOk && batch == hi) return 0;
    if (status == Status::kOom && batch == lo) return 0;
    if (status == Status::kOk) {
      const auto next = done.find(batch + 1);
      if (next != done.end() && next->second == Status::kOom) return 0;
    }
  }
  return std::max(1, expected - in_range);
}

}  // namespace

PlanEstimate estimate_plan(const std::vector<std::vector<Point>>& combinations, std::string_view search,
                           const WallHistory& history, const Recorded& recorded,
                           int64_t search_max_batch, int probes_per_search) {
  PlanEstimate plan;
  plan.start_s = history.start_s();
  plan.rows = history.rows();
  plan.sources = history.sources();
  auto add = [&](const Point& p, int runs) {
    PlanEstimate::Unit u{&p, runs, runs == 0, std::nullopt};
    if (u.recorded) {
      ++plan.recorded;
    } else if ((u.each = history.estimate(p))) {
      ++plan.estimated;
      plan.total_s += u.each->seconds * runs;
    } else {
      ++plan.unknown;
    }
    plan.units.push_back(u);
  };
  for (const auto& c : combinations) {
    if (!search.empty()) {
      // A max_seq search's end is the model's longest input: counted as open-ended.
      const SearchedAxis axis = searched_axis(search);
      const int64_t lo = axis.value_of(c.front());
      const int64_t hi = axis.column == "batch" ? std::max(lo, search_max_batch) : int64_t{1} << 40;
      const auto done = recorded.searches.find(combination_key(c.front(), search));
      add(c.front(), done == recorded.searches.end()
                         ? probes_per_search
                         : probes_left(done->second, lo, hi, probes_per_search));
    } else {
      for (const auto& p : c) add(p, recorded.points.count(p.id()) ? 0 : 1);
    }
  }
  return plan;
}

std::string PlanEstimate::summary(const std::string& unit_name) const {
  std::string s;
  if (estimated) {
    s = "about " + duration_text(total_s) + " for " + plural(estimated, unit_name);
    int probes = 0;
    for (const auto& u : units) probes += u.each ? u.runs : 0;
    if (probes > estimated)
      s += " (about " + std::to_string(probes) + " probes left)";
    char start[32];
    std::snprintf(start, sizeof start, "%.1f", start_s.value_or(0));
    std::string from;
    for (const auto& src : sources) from += (from.empty() ? "" : ", ") + src;
    s += ", from " + plural(rows, "row") + " measured in " + from + " (a worker start takes " +
         start + " s of each)";
  }
  if (recorded)
    s += (s.empty() ? "" : "; ") + plural(recorded, unit_name) + " already measured (kept)";
  if (unknown)
    s += (s.empty() ? "" : "; ") + plural(unknown, unit_name) + " with no estimate (never measured here)";
  return s;
}

int PlanEstimate::runs_left() const {
  int left = 0;
  for (const auto& u : units) left += u.runs;
  return left;
}

std::string PlanEstimate::search_summary(const std::string& results_path, bool seeded) const {
  const int left = runs_left();
  std::string s = left == 0 ? "nothing to run"
                            : "about " + plural(left, "probe") + " to run" +
                                  (seeded ? " (2 a search where the prediction is exact)" : "");
  if (recorded)
    s += (left == 0 ? ": " : ", ") + std::to_string(recorded) + " of the " +
         std::to_string(units.size()) + " searches already answered in " + results_path + " (reused)";
  if (estimated) {
    std::string from;
    for (const auto& src : sources) from += (from.empty() ? "" : ", ") + src;
    s += "; about " + duration_text(total_s) + " for " +
         (estimated < static_cast<int>(units.size()) - recorded
              ? std::to_string(estimated) + " searches estimated"
              : std::string("them")) +
         " (from " + plural(rows, "row") + " measured in " + from + ")";
  }
  return s;
}

std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(std::ceil(std::max(0.0, seconds)));
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%lld s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lld min %02lld s", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld h %02lld min", s / 3600, (s % 3600) / 60);
  return buf;
}

nlohmann::json DryRun::json() const {
  nlohmann::json j;
  j["run_json_version"] = kRunJsonVersion;
  j["dry_run"] = true;
  j["config"] = config_path;
  j["device"] = device;
  if (!predicted.empty()) j["predicted"] = predicted;
  j["out"] = out;
  j["search"] = search ? nlohmann::json("max_batch") : nlohmann::json(nullptr);
  if (search) j["search_max_batch"] = search_max_batch;
  j["count"] = estimate.units.size();
  j["points"] = nlohmann::json::array();
  for (const auto& u : estimate.units) {
    nlohmann::json e = {{"point_id", u.point->id()}, {"label", u.point->label()},
                        {"configuration", *u.point}, {"already_measured", u.recorded}};
    if (search) e["probes_estimated"] = u.runs;
    e["estimate_s"] = u.each ? nlohmann::json(u.each->seconds * u.runs) : nlohmann::json(nullptr);
    e["estimate_basis"] = u.each ? nlohmann::json(u.each->basis) : nlohmann::json(nullptr);
    j["points"].push_back(e);
  }
  j["estimate"] = {{"total_s", estimate.total_s},
                   {"estimated", estimate.estimated},
                   {"already_measured", estimate.recorded},
                   {"no_estimate", estimate.unknown},
                   {"rows", estimate.rows},
                   {"sources", estimate.sources},
                   {"text", estimate.summary(search ? "search" : "point")}};
  j["estimate"]["worker_start_s"] =
      estimate.start_s ? nlohmann::json(*estimate.start_s) : nlohmann::json(nullptr);
  return j;
}

std::string DryRun::text() const {
  // Points are marked only where the estimate differs from the rest: already measured, or
  // never measured here while others were.
  const bool mark_unknown = estimate.estimated > 0 || estimate.recorded > 0;
  std::string s;
  for (const auto& u : estimate.units) {
    s += search ? "search  " + u.point->label() : u.point->id() + "  " + u.point->label();
    if (u.recorded) s += "  (already measured)";
    else if (!u.each && mark_unknown) s += "  (no estimate: never measured here)";
    s += "\n";
  }
  const std::size_t n = estimate.units.size();
  if (search)
    s += std::to_string(n) + " combinations to search for their largest batch (up to " +
         std::to_string(search_max_batch) + "), device " + device + ", output " + out + "\n";
  else
    s += std::to_string(n) + " points, device " + device + ", output " + out + "\n";
  if (!predicted.empty()) s += "every row will be " + predicted + "\n";
  if (estimate.estimated == 0 && estimate.recorded == 0)
    s += "estimate: none: no row of these models was measured before in " + out +
         " (no estimate: never measured here); `--estimate-from DIR` reads the rows of another "
         "run on this machine\n";
  else
    s += "estimate: " + estimate.summary(search ? "search" : "point") + "\n";
  return s;
}

}  // namespace sweep
