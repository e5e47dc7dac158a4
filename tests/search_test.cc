// The max-batch search strategy against synthetic memory curves (no workers): it must give
// the exhaustive answer, and with memory close to linear in the batch (as it is) within
// ceil(log2(range)) + 2 probes.
#include <gtest/gtest.h>

#include <cmath>

#include "sweeps/runner/search.h"

namespace sweep {
namespace {

struct Curve {
  double base, per_sample, quadratic = 0;
  double peak(int64_t b) const { return base + per_sample * b + quadratic * b * b; }
};

// The answer a grid of every batch in [lo, hi] gives.
std::optional<int64_t> exhaustive(const Curve& c, double budget, int64_t lo, int64_t hi) {
  std::optional<int64_t> best;
  for (int64_t b = lo; b <= hi && c.peak(b) <= budget; ++b) best = b;
  return best;
}

SearchResult search(const Curve& c, double budget, int64_t lo, int64_t hi) {
  return search_max_batch(lo, hi, budget, [&](int64_t b) {
    return c.peak(b) <= budget ? ProbeOutcome{Status::kOk, c.peak(b)} : ProbeOutcome{Status::kOom, budget};
  });
}

TEST(MaxBatchSearch, LinearMemoryFindsTheExhaustiveAnswerWithinTheProbeBound) {
  for (int64_t hi : {8, 24, 64, 1024}) {
    const int bound = static_cast<int>(std::ceil(std::log2(static_cast<double>(hi)))) + 2;
    for (double budget = 3.0; budget < 3.0 + 1.7 * hi * 1.2; budget *= 1.37) {
      const Curve c{2.0, 1.7};
      const auto r = search(c, budget, 1, hi);
      EXPECT_EQ(r.largest_fit, exhaustive(c, budget, 1, hi)) << "hi " << hi << " budget " << budget;
      EXPECT_LE(static_cast<int>(r.probed.size()), bound) << "hi " << hi << " budget " << budget;
    }
  }
}

TEST(MaxBatchSearch, CurvedMemoryStillFindsTheExactAnswer) {
  // Memory that grows faster than linearly misleads the prediction; the search must fall back
  // to doubling and bisection and still be exact.
  for (double budget : {10.0, 50.0, 300.0, 5000.0}) {
    const Curve c{1.0, 0.5, 0.3};
    const auto r = search(c, budget, 1, 512);
    EXPECT_EQ(r.largest_fit, exhaustive(c, budget, 1, 512)) << budget;
    EXPECT_LT(r.probed.size(), 25u);
  }
}

TEST(MaxBatchSearch, WithoutABudgetItDoublesThenBisects) {
  const Curve c{0, 1};
  const auto r = search_max_batch(1, 100, 0, [&](int64_t b) {
    return b <= 37 ? ProbeOutcome{Status::kOk, c.peak(b)} : ProbeOutcome{Status::kOom, 0};
  });
  EXPECT_EQ(r.largest_fit, 37);
  EXPECT_EQ(r.first_oom, 38);
  // 1 2 4 8 16 32 64 (oom), then bisecting (32, 64): 48 40 36 38 37
  EXPECT_EQ(r.probed, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37}));
}

TEST(MaxBatchSearch, EdgesAndFailures) {
  auto never = [](int64_t) { return ProbeOutcome{Status::kOom, 0}; };
  auto none = search_max_batch(1, 64, 100, never);
  EXPECT_FALSE(none.largest_fit);
  EXPECT_EQ(none.probed.size(), 1u);
  auto always = [](int64_t b) { return ProbeOutcome{Status::kOk, static_cast<double>(b)}; };
  auto all = search_max_batch(1, 64, 1e9, always);
  EXPECT_EQ(all.largest_fit, 64);
  EXPECT_FALSE(all.first_oom);
  auto crash = search_max_batch(1, 64, 0, [](int64_t b) {
    return b < 4 ? ProbeOutcome{Status::kOk, 1.0 * b} : ProbeOutcome{Status::kCrash, 0};
  });
  EXPECT_EQ(crash.largest_fit, 2);
  EXPECT_EQ(crash.stopped, "batch 4: crash");
  auto single = search_max_batch(5, 5, 0, always);
  EXPECT_EQ(single.largest_fit, 5);
  EXPECT_EQ(single.probed.size(), 1u);
}

}  // namespace
}  // namespace sweep
