// fit's search; see fit_search.h.
#include "sweeps/cli/fit_search.h"

#include <cstdio>

#include "reports/results/error.h"
#include "reports/results/files.h"
#include "reports/results/rows.h"
#include "sweeps/cli/fit_analysis.h"
#include "sweeps/cli/fit_config.h"
#include "sweeps/measure/env.h"
#include "sweeps/runner/estimate.h"
#include "sweeps/runner/search.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

// Validated before; now locked (another fit or run writing OUT is refused before anything is
// written), then fit.yaml replaced at once by a config that loads and expands (fit_config.h).
std::vector<std::vector<Point>> install(const FitQuestion& q, const FitPlan& p,
                                        const FitSearch& s) {
  make_output_directory(p.out, "--out");  // a dangling link said "File exists"
  hold_lock((fs::path(p.out) / ".lock").string(), p.out);
  return combinations(install_fit_config(
      s.config, emit_config(p.comment, p.config), q.device, [&](const std::vector<Point>& points) {
        if (!fs::exists(s.results)) return;
        const auto* r = measured_elsewhere(reports::read_results(s.results.string()), points, q.search());
        if (r)
          throw UserError(r->source, static_cast<int>(r->line), "--out",
                          "this directory holds probes of the same points measured on " +
                              to_string(*r->value<Device>()) + ", and this fit runs on " +
                              to_string(q.device) + ": they would be taken as measured here",
                          "give this fit its own --out");
      }), q.search());
}

// What the estimate reads: the rows measured in OUT before and, on a first fit of this model
// here, the rows other runs on this machine measured beside it (results/*/results.csv), of
// its device.
void read_history(const FitQuestion& q, const FitPlan& p, const FitSearch& s, WallHistory& history,
                  Recorded& recorded) {
  if (fs::exists(s.results)) {
    const auto results = reports::read_results(s.results.string());
    history.add(results, q.device);
    recorded.add(results);
  }
  if (history.knows(q.o.model) || q.emulated()) return;
  std::error_code ec;
  const auto parent = fs::absolute(p.out).parent_path();
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const auto csv = e.path() / "results.csv";
    if (csv == fs::absolute(s.results) || !fs::is_regular_file(csv)) continue;
    try {
      history.add(reports::read_results(csv.string()), q.device, host_name());
    } catch (const UserError&) {
      // A results file that does not read is not this estimate's to report.
    }
  }
}

// The estimate, before the first probe (sweeps/runner/estimate.h): the probes still to run (a
// search whose answer this directory holds replays without one), each timed from the rows
// measured before; without such rows the time follows from the first probe.
void say_estimate(const FitQuestion& q, const FitPlan& p, const FitSearch& s,
                  const std::vector<std::vector<Point>>& searches) {
  WallHistory history;
  Recorded recorded;
  read_history(q, p, s, history, recorded);
  const bool seeded = q.o.predict && !q.emulated();
  const PlanEstimate plan = estimate_plan(searches, q.search(), history, recorded, q.o.max_batch,
                                          seeded ? 2 : kProbesPerSearch);
  const int left = plan.runs_left();
  std::string estimate = "; " + plan.search_summary(s.results.string(), seeded);
  if (!plan.estimated && left > 0)
    estimate += "; no estimate of the time yet (nothing of " + q.o.model + " was measured on " +
                to_string(q.device) + " in " + fs::absolute(p.out).parent_path().string() +
                "/*): the ETA follows from the first probe";
  if (q.cpu() && left > 0)
    estimate += "\nnote: on the CPU each probe trains " + q.o.model +
                " for real (the first line below says how long one takes); `--gpu NAME` "
                "without --device predicts a card by emulation in seconds";
  std::fprintf(stderr, "fit %s on %s (cap %s, %s): %zu technique%s%s\n", q.o.model.c_str(),
               q.card.name.c_str(), reports::format_bytes(static_cast<double>(q.cap())).c_str(),
               q.cpu()        ? "enforced by the CPU's tracking allocator"
               : q.emulated() ? q.predicted.c_str()
                              : "emulated on this GPU",
               p.wanted.size(), p.wanted.size() == 1 ? "" : "s", estimate.c_str());
}

}  // namespace

RunOptions fit_run_options(const FitQuestion& q, const std::string& out, const std::string& config) {
  RunOptions run;
  run.config = config;
  run.out = out;
  run.device = to_string(q.device);
  run.device_given = true;
  run.quiet = q.o.quiet;
  run.zygote = q.o.zygote;
  run.predict = q.o.predict;
  return run;
}

FitSearch search(const FitQuestion& q, const FitPlan& p) {
  FitSearch s;
  s.config = fs::path(p.out) / "fit.yaml";
  s.results = fs::path(p.out) / "results.csv";
  const auto searches = install(q, p, s);
  for (const auto& c : searches) s.question.push_back(c.front());
  if (!q.o.quiet) say_estimate(q, p, s, searches);
  s.exit_code = run_sweep(fit_run_options(q, p.out, s.config.string())).exit_code;
  return s;
}

}  // namespace sweep
