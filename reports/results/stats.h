// Statistics over raw samples, computed when reporting (rows keep the per-repetition
// times, see schema.h). The two-sample test is Mann-Whitney U: GPU step times are not
// normal (a slow repetition is a long right tail, a clock-throttled one a second mode), so
// a rank test is the honest choice for "did this get slower?".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace sweep::reports {

// A step time that varies more than this between repetitions (coefficient of variation)
// is flagged noisy by every command that ranks or reports throughput (report, recommend,
// fit, run's summary): a machine busy with something else, not a property of the point.
inline constexpr double kNoisyStepCv = 0.10;

// The batch whose peak memory reaches `budget`, extrapolated in a straight line from the
// two largest batches measured (batch -> peak): memory grows close to linearly in the batch,
// and the largest batches are where activations dominate. nullopt with fewer than two, a
// peak that does not rise, or no budget. The max-batch search steers its probes with it;
// `recommend` labels it "predicted" where no OOM bounded a largest batch.
std::optional<int64_t> batch_at_budget(const std::map<int64_t, double>& peaks, double budget);

// Median; NaN for an empty sample.
double median(std::span<const double> values);

// The exact null distribution is used up to this many values per sample (and only
// without ties); beyond it the normal approximation is within a few percent of it.
inline constexpr std::size_t kExactMaxSamples = 50;

struct MannWhitney {
  double u = 0;        // U of the first sample: pairs (x, y) with x > y, ties counting 1/2
  double p = 1;        // two-sided p-value
  bool exact = false;  // exact null distribution (else normal approximation)
};

// Two-sided Mann-Whitney U test of x against y, as scipy.stats.mannwhitneyu computes it:
// - no ties and both samples <= kExactMaxSamples: exact, p = 2 P(U <= min(U1, U2)) under H0;
// - otherwise: normal approximation with the tie correction of the variance and a
//   continuity correction of 0.5, p = 2 P(Z >= (max(U1, U2) - n1 n2 / 2 - 0.5) / sigma).
// p is capped at 1; with an empty sample, or every value equal, p = 1 (no evidence).
MannWhitney mann_whitney_u(std::span<const double> x, std::span<const double> y);

}  // namespace sweep::reports
