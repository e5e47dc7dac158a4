// The one rule for "fits" and "recommended"; see fit_rule.h.
#include "reports/common/fit_rule.h"

#include <cmath>

#include "reports/results/rows.h"

namespace sweep::reports {

int64_t FitRule::ceiling_bytes() const {
  // The epsilon keeps 10 GiB x 0.8 from landing one byte under 8 GiB.
  const auto kept = static_cast<int64_t>(
      std::floor(static_cast<long double>(memory_bytes) * (1 - margin) + 1e-6L));
  return kept - context_bytes;
}

std::string FitRule::derivation(const std::string& card) const {
  const std::string mem = format_bytes(static_cast<double>(memory_bytes));
  const std::string owner = cuda ? card + "'s memory" : "the CPU's memory, " + card;
  std::string s = "fits: no out-of-memory error and peak reserved memory at most the cap, " +
                  format_bytes(static_cast<double>(cap_bytes())) + " = " + mem + " (" + owner + ")";
  if (cuda)
    s += " - " + format_bytes(static_cast<double>(context_bytes)) + " CUDA context (" +
         context_source + ")";
  else
    s += " (nothing held outside PyTorch's allocations on the CPU)";
  s += "; recommended: fits and peaks at most the recommended ceiling, " +
       format_bytes(static_cast<double>(ceiling_bytes())) + " = " + mem + " x (1 - " +
       fixed(margin, 2) + " margin kept free)" +
       (cuda ? " - " + format_bytes(static_cast<double>(context_bytes)) + " context" : "");
  return s;
}

bool prefer_runner_up(double best_tokens_per_s, double best_cv, double next_tokens_per_s,
                      double next_cv) {
  if (best_tokens_per_s <= 0 || next_tokens_per_s <= 0) return false;
  const double gap = (best_tokens_per_s - next_tokens_per_s) / best_tokens_per_s;
  return best_cv > gap && next_cv < best_cv;
}

std::string runner_up_note(const std::string& best, double best_tokens_per_s, double best_cv,
                           const std::string& next, double next_tokens_per_s, double next_cv) {
  const double gap = 100 * (best_tokens_per_s - next_tokens_per_s) / best_tokens_per_s;
  return best + " measured " + fixed(gap, gap < 10 ? 1 : 0) +
         "% faster but its step time varied " + fixed(100 * best_cv, 0) +
         "% between repetitions, more than that gap: the steadier " + next + " (varied " +
         fixed(100 * next_cv, 0) + "%) is recommended; measure both again on an idle machine, or "
         "with more repetitions, to tell them apart";
}

}  // namespace sweep::reports
