// The one recommendation (reports/common/pick.h), rule by rule, on candidates written out by
// hand: no rows, no worker.
#include <gtest/gtest.h>

#include "reports/common/pick.h"

namespace sweep::reports {
namespace {

constexpr double kGiBd = 1024.0 * 1024 * 1024;

// A 12 GiB card, no context: cap 12 GiB, recommended ceiling 10.8 GiB.
FitRule card(bool cuda = true) { return {12LL << 30, 0, 0.1, cuda, ""}; }

Candidate timed(const std::string& technique, int techniques, int64_t batch, double tokens_per_s,
                double peak_gib, double cv = 0.01) {
  Candidate c;
  c.technique = technique;
  c.techniques = techniques;
  c.batch = batch;
  c.tokens_per_s = tokens_per_s;
  c.step_ms_cv = cv;
  c.peak_reserved = peak_gib * kGiBd;
  return c;
}

Candidate predicted(const std::string& technique, int techniques, int64_t batch, double peak_gib,
                    double tokens_per_s = 0) {
  Candidate c = timed(technique, techniques, batch, tokens_per_s, peak_gib, 0);
  c.predicted = true;
  return c;
}

TEST(Pick, NothingToPickFromIsNoPick) { EXPECT_FALSE(pick({}, {card()})); }

TEST(Pick, TheFastestUnderTheCeilingWins) {
  const std::vector<Candidate> c = {timed("fp32", 0, 4, 1000, 9),
                                    timed("bf16-amp", 1, 16, 3000, 11.5),  // over the ceiling
                                    timed("bf16-amp, block", 2, 32, 2000, 8)};
  const auto p = pick(c, {card()});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 2u);
  EXPECT_EQ(p->ranked, Ranked::kBySpeed);
  EXPECT_FALSE(p->above_ceiling);
  EXPECT_EQ(p->note, "");
}

TEST(Pick, AboveTheCeilingOnlyWhenNothingIsUnderItAndSaidSo) {
  const std::vector<Candidate> c = {timed("fp32", 0, 4, 1000, 11), timed("bf16-amp", 1, 8, 1500, 11.9)};
  const auto p = pick(c, {card()});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);
  EXPECT_TRUE(p->above_ceiling);
}

TEST(Pick, TheSteadierRunnerUpWhenNoiseDecides) {
  // 3% faster, but its step time varied 12%: more than the lead.
  const std::vector<Candidate> c = {timed("bf16-amp", 1, 8, 1030, 5, 0.12),
                                    timed("bf16-amp, block", 2, 16, 1000, 4, 0.02)};
  const auto p = pick(c, {card()});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);
  EXPECT_NE(p->note.find("varied 12% between repetitions"), std::string::npos) << p->note;
}

TEST(Pick, OnTheCpuByMemoryWhateverTheThroughput) {
  const std::vector<Candidate> c = {timed("bf16-amp, block", 2, 32, 5000, 3),
                                    timed("fp32", 0, 4, 100, 9), timed("fp32", 0, 2, 120, 5)};
  const auto p = pick(c, {card(false)});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);  // fewest changes, then the largest micro-batch
  EXPECT_EQ(p->ranked, Ranked::kByMemory);
}

TEST(Pick, PredictedWithoutSpeedByMemoryFewestChangesThenLargestBatchThenLowerPeak) {
  const std::vector<Candidate> c = {predicted("bf16-amp", 1, 32, 6), predicted("fp32, sgd", 1, 32, 5),
                                    predicted("bf16-amp, block", 2, 64, 4)};
  const auto p = pick(c, {card()});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);
  EXPECT_EQ(p->ranked, Ranked::kByMemory);
}

TEST(Pick, PredictedSpeedsRankOnlyWhereTheLeadBeatsTheMeasuredError) {
  // 30% ahead with a 10% error: by speed.
  std::vector<Candidate> c = {predicted("fp32", 0, 4, 9, 1000), predicted("bf16-amp, block", 2, 16, 6, 1300)};
  auto p = pick(c, {card(), 0.10});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);
  EXPECT_EQ(p->ranked, Ranked::kBySpeed);
  // 5% ahead with a 10% error: too close to call, by memory among the two.
  c[1].tokens_per_s = 1050;
  p = pick(c, {card(), 0.10});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 0u);
  EXPECT_EQ(p->ranked, Ranked::kByMemory);
  EXPECT_NE(p->note.find("too close to call"), std::string::npos) << p->note;
}

TEST(Pick, RowsMeasuredOnTheTargetComeFirst) {
  std::vector<Candidate> c = {timed("fp32", 0, 4, 5000, 5), timed("fp32", 0, 2, 1000, 4)};
  c[0].on_target = false;
  const auto p = pick(c, {card()});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);
}

TEST(Pick, MeasuredBeatsInferredAtEqualSpeed) {
  std::vector<Candidate> c = {timed("fp32", 0, 4, 1000, 5), timed("fp32", 0, 4, 1000, 5)};
  c[0].inferred = true;
  c[0].accumulation = c[1].accumulation = 4;
  const auto p = pick(c, {card()});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->index, 1u);
}

}  // namespace
}  // namespace sweep::reports
