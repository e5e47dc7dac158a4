// The one recommendation; see pick.h.
#include "reports/common/pick.h"

#include <algorithm>
#include <cmath>

#include "reports/results/rows.h"

namespace sweep::reports {

std::string Candidate::label() const {
  return technique + ", batch " + std::to_string(batch) +
         (accumulation > 1 ? " x " + std::to_string(accumulation) : "");
}

bool ranks_by_speed(const Candidate& a, const Candidate& b) {
  if (a.on_target != b.on_target) return a.on_target;
  if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
  if (a.inferred != b.inferred) return !a.inferred;
  if (a.peak_reserved != b.peak_reserved) return a.peak_reserved < b.peak_reserved;
  if (a.techniques != b.techniques) return a.techniques < b.techniques;
  if (a.label() != b.label()) return a.label() < b.label();
  return a.where < b.where;
}

bool ranks_by_memory(const Candidate& a, const Candidate& b) {
  if (a.on_target != b.on_target) return a.on_target;
  if (a.techniques != b.techniques) return a.techniques < b.techniques;
  if (a.batch != b.batch) return a.batch > b.batch;
  if (a.inferred != b.inferred) return !a.inferred;
  if (a.peak_reserved != b.peak_reserved) return a.peak_reserved < b.peak_reserved;
  if (a.label() != b.label()) return a.label() < b.label();
  return a.where < b.where;
}

namespace {

using Indices = std::vector<std::size_t>;

// Step 1: the candidates under the ceiling when any is, else all of them.
Indices under_ceiling(const std::vector<Candidate>& c, const FitRule& rule, bool& above) {
  Indices under, all;
  for (std::size_t i = 0; i < c.size(); ++i) {
    all.push_back(i);
    if (c[i].peak_reserved <= static_cast<double>(rule.ceiling_bytes())) under.push_back(i);
  }
  above = under.empty();
  return above ? all : under;
}

std::size_t first_by(const std::vector<Candidate>& c, const Indices& among,
                     bool (*before)(const Candidate&, const Candidate&)) {
  return *std::min_element(among.begin(), among.end(),
                           [&](std::size_t a, std::size_t b) { return before(c[a], c[b]); });
}

// Step 3.
Picked by_memory(const std::vector<Candidate>& c, const Indices& among) {
  return {first_by(c, among, ranks_by_memory), Ranked::kByMemory, false, ""};
}

// Step 2 on measured speeds: the fastest, or the steadier runner-up where noise decides.
Picked by_measured_speed(const std::vector<Candidate>& c, Indices timed) {
  std::sort(timed.begin(), timed.end(),
            [&](std::size_t a, std::size_t b) { return ranks_by_speed(c[a], c[b]); });
  const Candidate &best = c[timed[0]];
  if (timed.size() > 1) {
    const Candidate& next = c[timed[1]];
    if (best.on_target == next.on_target &&
        prefer_runner_up(best.tokens_per_s, best.step_ms_cv, next.tokens_per_s, next.step_ms_cv))
      return {timed[1], Ranked::kBySpeed, false,
              runner_up_note(best.label(), best.tokens_per_s, best.step_ms_cv, next.label(),
                             next.tokens_per_s, next.step_ms_cv)};
  }
  return {timed[0], Ranked::kBySpeed, false, ""};
}

// Step 2 on predicted speeds: the fastest where its lead is larger than the prediction's
// measured error; else those within that error of it, by memory.
Picked by_predicted_speed(const std::vector<Candidate>& c, const Indices& timed, double error) {
  const std::size_t best = first_by(c, timed, ranks_by_speed);
  Indices close;
  for (const auto i : timed)
    if (c[i].tokens_per_s >= c[best].tokens_per_s * (1 - error)) close.push_back(i);
  if (close.size() == 1) return {best, Ranked::kBySpeed, false, ""};
  Picked p = by_memory(c, close);
  p.note = "too close to call by predicted speed: " + std::to_string(close.size()) +
           " configurations are within the prediction's measured error (" +
           fixed(100 * error, 0) + "%) of the fastest, " + c[best].label() +
           ", so the one with the fewest changes among them is recommended";
  return p;
}

}  // namespace

std::optional<Picked> pick(const std::vector<Candidate>& candidates, const PickRules& rules) {
  if (candidates.empty()) return std::nullopt;
  bool above = false;
  const Indices among = under_ceiling(candidates, rules.rule, above);
  Indices timed;
  bool predicted_speed = false;
  for (const auto i : among)
    if (candidates[i].tokens_per_s > 0) {
      timed.push_back(i);
      predicted_speed |= candidates[i].predicted;
    }
  Picked p = !rules.rule.cuda || timed.empty() ? by_memory(candidates, among)
             : predicted_speed ? by_predicted_speed(candidates, timed, rules.predicted_speed_error)
                               : by_measured_speed(candidates, timed);
  p.above_ceiling = above;
  return p;
}

}  // namespace sweep::reports
