// fit's pick; see fit_pick.h.
#include "sweeps/cli/fit_pick.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <vector>

#include "reports/results/error.h"
#include "reports/results/schema.h"
#include "reports/results/stats.h"
#include "sweeps/cli/fit_config.h"
#include "sweeps/cli/fit_search.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using schema::column;

// A pick's accumulation up to this runs as such to confirm it (the per-card tables' effective
// batch, 32: their picks are measured as before). A larger one is not: a step of k micro-batches
// costs k forwards and backwards, and a prime effective batch leaves only micro-batch 1 (4099
// micro-batches a step took gpt2-test's confirmation 70 s, 65521 over 5 minutes). It runs at
// accumulation 2 and 3, and its peak is extrapolated from them, exactly: a step holds all k
// micro-batches' inputs from its start (as Trainer's get_batch_samples fetches them, burst.cc
// builds them before the step), and from the second micro-batch on the gradients accumulate in
// place, so each micro-batch past the second adds its inputs and nothing else, the difference
// between the runs at 3 and 2 (FitPick.ALargeAccumulationIsConfirmedAtTwoAndThree).
constexpr int64_t kConfirmedAsSuchUpTo = 32;
constexpr int64_t kExtrapolatedFrom[] = {2, 3};

// OUT/fit-pick.yaml: the pick at its batch and `accumulations`, one point each, in that order.
std::vector<Point> install_pick_config(const FitQuestion& q, const FitPlan& p, const FitRows& rows,
                                      const Pick& choice, const std::vector<int64_t>& accumulations) {
  const auto& t = *choice.technique;
  YAML::Node v = config_head(q.o, p.name + "-pick", q.device, p.out, rows.analysis.budget_bytes, p.gpu);
  YAML::Node grid = v["grid"];
  grid["batch"] = choice.batch;
  add_input_axes(q.o, grid);
  // Each searched axis at the pick's value; a flag the model lacks (its cache) left to its default.
  for (const schema::Axis* a : schema::fit_axes())
    if (a->values != schema::Values::kBool)
      grid[std::string(a->column)] = t.cell(a->column);
  for (const int64_t a : accumulations) grid["accumulation"].push_back(a);
  if (accumulations.size() == 1) grid["accumulation"] = accumulations.front();
  for (const schema::Axis* a : schema::fit_axes())
    if (a->values == schema::Values::kBool && q.has_cache())
      grid[std::string(a->column)] = config_text(a->column, t.cell(a->column)) == "true";
  const auto points = install_fit_config(
      fs::path(p.out) / "fit-pick.yaml",
      emit_config(accumulations.size() == 1
                      ? "The recommendation of `sweep fit`, measured at its accumulation."
                      : "The recommendation of `sweep fit` at accumulation 2 and 3: its peak at " +
                            std::to_string(choice.accumulation) + " is extrapolated from them.",
                  v),
      q.device);
  std::vector<Point> ordered;
  for (const int64_t a : accumulations)
    for (const auto& point : points)
      if (point.accumulation == a) ordered.push_back(point);
  SWEEP_CHECK(ordered.size() == accumulations.size() && points.size() == ordered.size(),
              "fit's pick is one point per accumulation");
  return ordered;
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

// The rows that measured `two` and `three` (the pick at accumulation 2 and 3), extrapolated to
// the pick's accumulation (kConfirmedAsSuchUpTo); nullopt when either did not run ok or the
// extrapolated peak exceeds `budget_bytes` (0: none), as the run at that accumulation would have
// run out of memory.
std::optional<Pick> extrapolated_to_accumulation(const fs::path& results, const Point& two,
                                                 const Point& three, Pick choice,
                                                 int64_t budget_bytes) {
  const auto after = reports::read_results(results.string());
  const reports::Row *at2 = nullptr, *at3 = nullptr;
  for (const auto* r : reports::latest_per_point(after).rows) {
    if (measures(*r, two)) at2 = r;
    if (measures(*r, three)) at3 = r;
  }
  if (!at2 || !at3 || at2->status != reports::Status::kOk || at3->status != reports::Status::kOk)
    return std::nullopt;
  const auto extra = static_cast<double>(choice.accumulation - 2);
  auto at_k = [&](std::size_t col) {
    const double p2 = at2->number(col).value_or(0), p3 = at3->number(col).value_or(0);
    return p2 + extra * std::max(0.0, p3 - p2);
  };
  const double allocated = at_k(column("peak_allocated_bytes"));
  const double reserved = at_k(column("peak_reserved_bytes"));
  if (budget_bytes > 0 && std::max(allocated, reserved) > static_cast<double>(budget_bytes))
    return std::nullopt;
  choice.tokens_per_s = at3->number(column("tokens_per_s")).value_or(0);
  choice.step_ms_cv = at3->number(column("step_ms_cv")).value_or(0);
  choice.peak_reserved = reserved;
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
  const bool extrapolated = choice.accumulation > kConfirmedAsSuchUpTo;
  const std::string as_such =
      extrapolated ? std::string(", ") + (q.emulated() ? "predicted" : "measured") +
                         " at accumulation 2 and 3, its peak extrapolated from them"
      : choice.accumulation > 1 ? (choice.by_memory && q.emulated() ? ", predicted as such" : ", measured as such")
                                : "";
  if (effective && choice.by_memory)
    why << " (micro-batch " << choice.batch << " x accumulation " << choice.accumulation << as_such << ")";
  else if (effective)
    why << " and reach an effective batch of " << *effective << " (micro-batch " << choice.batch
        << " x accumulation " << choice.accumulation << as_such << ")";
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
    const bool extrapolate = f.choice->accumulation > kConfirmedAsSuchUpTo;
    const auto points = install_pick_config(
        q, p, rows, *f.choice,
        extrapolate ? std::vector<int64_t>(std::begin(kExtrapolatedFrom), std::end(kExtrapolatedFrom))
                    : std::vector<int64_t>{f.choice->accumulation});
    const auto run = fit_run_options(q, p.out, (fs::path(p.out) / "fit-pick.yaml").string());
    if (const int rc = run_sweep(run).exit_code; rc != 0) {
      f.exit_code = rc;
      return f;
    }
    const fs::path results = fs::path(p.out) / "results.csv";
    const auto measured =
        extrapolate ? extrapolated_to_accumulation(results, points[0], points[1], *f.choice,
                                                   rows.analysis.budget_bytes)
                    : measured_at_accumulation(results, points.front(), *f.choice);
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

// Full fine-tuning in bf16 weights (model.to(bfloat16), no fp32 master copy): an AdamW update
// below half a bf16 ulp of its weight rounds away (at lr 1e-5 most do), so it trains worse than
// the user's fp32 or autocast run. The longest-context pick takes it only when asked for alone.
bool changes_numerics(const FitTechnique& t) {
  return t.precision == Precision::kBf16 && t.adapter == Adapter::kNone;
}

FitPick pick_longest(const FitQuestion& q, const FitRows& rows) {
  auto before = [](const FitTechnique& a, const FitTechnique& b) {
    if (*a.largest != *b.largest) return *a.largest > *b.largest;
    if (a.changes() != b.changes()) return a.changes() < b.changes();
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.peak_reserved < b.peak_reserved;
  };
  const auto& asked = q.o.precisions;
  const bool only_bf16 = !asked.empty() && std::all_of(asked.begin(), asked.end(), [](const std::string& p) {
    return parse_as<Precision>(p) == Precision::kBf16;
  });
  const FitTechnique *best = nullptr, *passed_over = nullptr;
  int tied = 0;
  for (const auto& t : rows.analysis.techniques) {
    // A card without bf16 tensor cores runs bf16 at a fraction of fp16's speed: never picked.
    if (!t.largest || (!q.bf16_tensor_cores() && (t.precision == Precision::kBf16 ||
                                                  t.precision == Precision::kBf16Amp)))
      continue;
    if (changes_numerics(t) && !only_bf16) {
      if (!passed_over || before(t, *passed_over)) passed_over = &t;
      continue;
    }
    if (best && *t.largest == *best->largest) ++tied;
    else if (!best || *t.largest > *best->largest) tied = 0;
    if (!best || before(t, *best)) best = &t;
  }
  FitPick f;
  if (!best) {
    f.no_answer = stopped_searches(rows.analysis);
    return f;
  }
  Pick c;
  c.technique = best;
  c.batch = q.o.batch.value_or(1);
  c.seq = *best->largest;
  c.tokens_per_s = best->tokens_per_s;
  c.step_ms_cv = best->step_ms_cv;
  c.peak_reserved = best->peak_reserved;
  c.above_ceiling = best->peak_reserved > static_cast<double>(q.rule.ceiling_bytes());
  c.by_memory = true;
  f.choice = c;
  f.reason = "the longest seq of the " + std::to_string(rows.analysis.techniques.size()) +
             " techniques searched" +
             (tied ? ", tied with " + std::to_string(tied) +
                         " more: the fewest changes from plain training, then the faster"
                   : std::string()) +
             (passed_over && *passed_over->largest > c.seq
                  ? "; full fine-tuning in bf16 weights (" + passed_over->label() + ") reaches " +
                        std::to_string(*passed_over->largest) +
                        " but is not recommended: without fp32 master weights an AdamW update "
                        "smaller than half a bf16 step of its weight rounds away (most do at a "
                        "fine-tuning learning rate); ask for it alone with --precision bf16"
                  : std::string()) +
             (c.above_ceiling ? "; its peak is over the recommended ceiling (under the cap): "
                                "a step shorter keeps the margin free"
                              : std::string());
  return f;
}

}  // namespace sweep
