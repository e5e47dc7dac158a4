// Mann-Whitney U and the median against known values. The expected p-values were computed
// once with scipy 1.17.1, scipy.stats.mannwhitneyu(x, y, alternative="two-sided",
// method=M, use_continuity=True), M named per case; the closed forms are noted where
// there is one. No Python is needed to run these tests.
#include "reports/results/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace sweep::reports {
namespace {

TEST(Median, OddEvenAndEmpty) {
  const std::vector<double> odd{5, 1, 3};
  const std::vector<double> even{4, 1, 3, 2};
  EXPECT_EQ(median(odd), 3);
  EXPECT_EQ(median(even), 2.5);
  EXPECT_TRUE(std::isnan(median(std::vector<double>{})));
}

TEST(MannWhitney, CompleteSeparationOfThreeIsTwoOverTwenty) {
  // Exact: only 1 of C(6,3) = 20 arrangements puts every x below every y; two-sided.
  const std::vector<double> x{1, 2, 3}, y{4, 5, 6};
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.u, 0);
  EXPECT_NEAR(r.p, 0.1, 1e-12);
  // Symmetric in the direction: U of the other sample is n1 n2 - U.
  const auto s = mann_whitney_u(y, x);
  EXPECT_EQ(s.u, 9);
  EXPECT_NEAR(s.p, 0.1, 1e-12);
}

TEST(MannWhitney, CompleteSeparationOfNineIsTwoOverC18Choose9) {
  std::vector<double> x, y;
  for (int i = 0; i < 9; ++i) {
    x.push_back(100 + i);
    y.push_back(110 + i);
  }
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_NEAR(r.p, 2.0 / 48620.0, 1e-15);
}

TEST(MannWhitney, ExactWithOverlapMatchesScipy) {
  // scipy method="exact": U = 13, p = 0.014191690662278898.
  const std::vector<double> x{19.1, 20.5, 21.3, 22.0, 23.4, 24.8, 25.1, 26.7, 27.2};
  const std::vector<double> y{22.6, 23.9, 25.5, 26.1, 27.8, 28.4, 29.0, 30.3, 31.7};
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.u, 13);
  EXPECT_NEAR(r.p, 0.014191690662278898, 1e-12);
}

TEST(MannWhitney, ExactWithUnequalSizesMatchesScipy) {
  // scipy method="exact": U = 66, p = 0.01137506284565108.
  const std::vector<double> x{5.1, 7.3, 2.2, 9.9, 4.4, 6.0, 8.8};
  const std::vector<double> y{3.3, 1.1, 2.9, 4.0, 0.5, 6.6, 2.0, 1.8, 3.9, 5.5, 0.9};
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.u, 66);
  EXPECT_NEAR(r.p, 0.01137506284565108, 1e-12);
}

TEST(MannWhitney, ExactAtTheSizeLimitMatchesScipy) {
  // 50 vs 50 without ties, still exact: scipy method="exact": U = 780, p = 0.001055016471113667.
  std::vector<double> x, y;
  for (int i = 0; i < 50; ++i) {
    x.push_back(i);
    y.push_back(i + 10.5);
  }
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.u, 780);
  EXPECT_NEAR(r.p, 0.001055016471113667, 1e-9);
}

TEST(MannWhitney, TiesUseTheNormalApproximationWithTieCorrection) {
  // Step times written with two decimals tie. scipy method="asymptotic": U = 6.5,
  // p = 0.0029590897740779483.
  const std::vector<double> x{61.5, 61.5, 61.7, 61.9, 62.0, 62.0, 62.3, 62.4, 62.4};
  const std::vector<double> y{61.9, 62.4, 62.8, 63.0, 63.0, 63.3, 63.5, 63.5, 64.1};
  const auto r = mann_whitney_u(x, y);
  EXPECT_FALSE(r.exact);
  EXPECT_EQ(r.u, 6.5);
  EXPECT_NEAR(r.p, 0.0029590897740779483, 1e-12);
}

TEST(MannWhitney, LargeSamplesUseTheNormalApproximation) {
  // 60 vs 60 without ties, above kExactMaxSamples. scipy method="asymptotic": U = 1225,
  // p = 0.0025668879435241754.
  std::vector<double> x, y;
  for (int i = 0; i < 60; ++i) {
    x.push_back(i);
    y.push_back(i + 10.5);
  }
  const auto r = mann_whitney_u(x, y);
  EXPECT_FALSE(r.exact);
  EXPECT_EQ(r.u, 1225);
  EXPECT_NEAR(r.p, 0.0025668879435241754, 1e-12);
}

TEST(MannWhitney, NoEvidenceGivesPOne) {
  const std::vector<double> same{5, 5, 5}, empty;
  EXPECT_EQ(mann_whitney_u(same, same).p, 1);
  EXPECT_EQ(mann_whitney_u(same, empty).p, 1);
  // Identical samples without ties: U at its mean, p capped at 1.
  const std::vector<double> outer{1, 4}, inner{2, 3};
  EXPECT_EQ(mann_whitney_u(outer, inner).u, 2);
  EXPECT_EQ(mann_whitney_u(outer, inner).p, 1);
}

}  // namespace
}  // namespace sweep::reports
