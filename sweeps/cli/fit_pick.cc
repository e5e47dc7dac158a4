// fit's pick; see fit_pick.h.
#include "sweeps/cli/fit_pick.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "reports/results/error.h"
#include "reports/results/schema.h"
#include "reports/results/stats.h"
#include "sweeps/cli/fit_config.h"
#include "sweeps/cli/fit_search.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using schema::column;

// OUT/fit-pick.yaml: the pick at its batch and accumulation, one point.
Point install_pick_config(const FitQuestion& q, const FitPlan& p, const FitRows& rows,
                          const Pick& choice) {
  const auto& t = *choice.technique;
  YAML::Node v = config_head(q.o, p.name + "-pick", q.device, p.out, rows.analysis.budget_bytes, p.gpu);
  YAML::Node grid = v["grid"];
  grid["batch"] = choice.batch;
  add_input_axes(q.o, grid);
  // Each searched axis at the pick's value; a flag the model lacks (its cache) left to its default.
  for (const schema::Axis* a : schema::fit_axes())
    if (a->values != schema::Values::kBool)
      grid[std::string(a->column)] = t.cell(a->column);
  grid["accumulation"] = choice.accumulation;
  for (const schema::Axis* a : schema::fit_axes())
    if (a->values == schema::Values::kBool && q.has_cache())
      grid[std::string(a->column)] = config_text(a->column, t.cell(a->column)) == "true";
  const auto points = install_fit_config(
      fs::path(p.out) / "fit-pick.yaml",
      emit_config("The recommendation of `sweep fit`, measured at its accumulation.", v), q.device);
  SWEEP_CHECK(points.size() == 1, "fit's pick is one point");
  return points.front();
}

// The row that measured `point` in OUT/results.csv, read again into a copy of its own (the
// rows `rows` points into stay as they were); nullopt when it did not run ok.
std::optional<Pick> measured_at_accumulation(const fs::path& results, const Point& point,
                                             Pick choice) {
  const auto after = reports::read_results(results.string());
  const reports::Row* measured = nullptr;
  for (const auto* r : reports::latest_per_point(after).rows)
    if (measures(*r, point)) measured = r;
  if (!measured || measured->status != reports::Status::kOk) return std::nullopt;
  choice.tokens_per_s = measured->number(column("tokens_per_s")).value_or(0);
  choice.step_ms_cv = measured->number(column("step_ms_cv")).value_or(0);
  choice.peak_reserved =
      measured->number(column("peak_reserved_bytes")).value_or(choice.peak_reserved);
  return choice;
}

// Why this pick, as the answer prints it.
std::string reason_of(const FitQuestion& q, const FitPlan& p, const Pick& choice) {
  const auto& t = *choice.technique;
  const auto& effective = q.o.effective_batch;
  std::ostringstream why;
  if (choice.by_memory)
    why << "ranked by memory, not throughput ("
        << (!q.emulated() ? "on the CPU step times say nothing about a GPU and vary with the host's "
                            "load"
            : !choice.why.empty() ? "their predicted speeds are too close to call"
                                  : "no step time was predicted for them")
        << "): the configuration with the fewest changes from plain training (fp32, no "
           "checkpointing, AdamW) that fits"
        << (effective ? " and reaches an effective batch of " + std::to_string(*effective) : "")
        << ", at its largest such micro-batch, then the lowest peak";
  else
    why << "the highest " << (q.emulated() ? "predicted" : "measured")
        << " throughput among the configurations under the recommended ceiling";
  if (choice.above_ceiling)
    why << " (none stayed under the recommended ceiling of "
        << reports::format_bytes(static_cast<double>(q.rule.ceiling_bytes()))
        << ": this one fits the cap with less than the margin kept free)";
  if (effective && choice.by_memory)
    why << " (micro-batch " << choice.batch << " x accumulation " << choice.accumulation
        << (choice.accumulation > 1 ? q.emulated() ? ", predicted as such" : ", measured as such"
                                    : "")
        << ")";
  else if (effective)
    why << " and reach an effective batch of " << *effective << " (micro-batch " << choice.batch
        << " x accumulation " << choice.accumulation
        << (choice.accumulation > 1 ? ", measured as such" : "") << ")";
  // The question without an effective batch is another one than the per-card tables' (32):
  // said, so that two answers for one model and card are not taken for one.
  if (!effective)
    why << " (no --effective-batch asked: accumulation 1, each micro-batch an optimizer step; "
           "the per-card tables answer --effective-batch 32)";
  if (t.largest && choice.batch < *t.largest) why << "; its largest batch is " << *t.largest;
  if (!choice.why.empty()) why << "; " << choice.why;
  if (!choice.by_memory && choice.why.empty() && choice.step_ms_cv > reports::kNoisyStepCv)
    why << ". Noisy: its step time varied " << std::lround(choice.step_ms_cv * 100)
        << "% between repetitions, so the ranking by throughput is not reliable; re-run on an "
           "idle machine, or with more repetitions (`sweep run "
        << p.out << "/fit.yaml --search max-batch --force` after raising `repetitions`)";
  return why.str();
}

}  // namespace

FitPick pick_confirmed(const FitQuestion& q, const FitPlan& p, const FitRows& rows) {
  FitPick f;
  PickQuestion question{q.rule, q.o.effective_batch, q.emulated(), q.bf16_tensor_cores(), {}, {}};
  bool confirmed = false;  // the pick ran ok at its accumulation (or needs none)
  // Each attempt refuses a pick or measures one: bounded by the candidates, and by this.
  for (int attempt = 0; attempt < 32 && !confirmed; ++attempt) {
    f.choice = pick(rows.analysis, question);
    if (!f.choice) break;
    // A pick measured at its accumulation is ranked again with that measurement: confirmed
    // when it still comes first.
    if ((f.choice->accumulation == 1 && !f.choice->unprobed) ||
        question.confirmed.count(pick_id(*f.choice))) {
      confirmed = true;
      break;
    }
    const Point point = install_pick_config(q, p, rows, *f.choice);
    const auto run = fit_run_options(q, p.out, (fs::path(p.out) / "fit-pick.yaml").string());
    if (const int rc = run_sweep(run).exit_code; rc != 0) {
      f.exit_code = rc;
      return f;
    }
    const auto measured = measured_at_accumulation(fs::path(p.out) / "results.csv", point, *f.choice);
    if (!measured) {  // out of memory once gradients accumulate: the next
      question.refused.push_back(pick_id(*f.choice));
      if (f.choice->accumulation > 1) {
        auto& oom = question.accumulation_oom.try_emplace(technique_key(*f.choice->technique),
                                                          f.choice->batch).first->second;
        oom = std::min(oom, f.choice->batch);
      }
      continue;
    }
    // Ranked again with what the confirmation measured, by speed or by memory: one that
    // peaked over the ceiling at its accumulation gives way to one under it.
    f.choice->unprobed = false;
    question.confirmed[pick_id(*f.choice)] = *measured;
    question.confirmed[pick_id(*f.choice)].unprobed = false;
  }
  if (!confirmed && !question.confirmed.empty()) {
    // Every confirmation moved the lead to another pick not yet measured (a micro-batch ranked
    // by the speed of the larger probe above it, say): the pick among what was measured.
    question.measured_only = true;
    f.choice = pick(rows.analysis, question);
    confirmed = f.choice.has_value();
    if (f.choice)
      f.choice->why += std::string(f.choice->why.empty() ? "" : "; ") +
                       "chosen among the measured configurations: each of " +
                       std::to_string(question.confirmed.size()) +
                       " confirmation runs moved the lead to one not yet measured";
  }
  if (!confirmed) f.choice.reset();
  if (f.choice) f.reason = reason_of(q, p, *f.choice);
  if (!f.choice) f.no_answer = stopped_searches(rows.analysis);
  return f;
}

}  // namespace sweep
