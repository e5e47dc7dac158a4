// Budgets from a config's target card and the GPUs that measure it (pure: GPUs as probed).
#include <gtest/gtest.h>

#include "sweeps/runner/budget.h"
#include "sweeps/measure/env.h"

namespace sweep {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;

Config target(double memory_gib, std::optional<double> context_gib = std::nullopt) {
  Config c;
  c.path = "configs/rtx3060.yaml";
  c.gpu = GpuTarget{.name = "RTX 3060", .memory_gib = memory_gib, .context_gib = context_gib, .line = 9};
  return c;
}

HostGpu h100(int64_t context = 530 * (int64_t{1} << 20)) {
  return {"0", "NVIDIA H100 80GB HBM3", static_cast<int64_t>(79.19 * GiB), context, 0};
}

TEST(Budget, LargerGpuIsCappedAtTheTargetLessTheMeasuredContext) {
  const auto b = resolve_budget(target(12), Device::kCuda, {h100()});
  EXPECT_TRUE(b.emulated);
  EXPECT_EQ(b.context_bytes, 530 * (int64_t{1} << 20));
  EXPECT_EQ(b.bytes, 12 * GiB - b.context_bytes);
  EXPECT_NE(b.note.find("(measured)"), std::string::npos) << b.note;
}

TEST(Budget, ConfiguredContextAllowanceWins) {
  const auto b = resolve_budget(target(12, 0.75), Device::kCuda, {h100()});
  EXPECT_EQ(b.bytes, 12 * GiB - GiB * 3 / 4);
  EXPECT_NE(b.note.find("(configured)"), std::string::npos) << b.note;
}

TEST(Budget, SeveralGpusTakeTheLargestContext) {
  auto a = h100(400 << 20), c = h100(600 << 20);
  c.index = "1";
  EXPECT_EQ(resolve_budget(target(12), Device::kCuda, {a, c}).context_bytes, 600 << 20);
}

TEST(Budget, TheTargetCardItselfIsNotCapped) {
  // An "80 GB" card reports 79.2 GiB: that is the target, not a smaller card.
  const auto b = resolve_budget(target(80), Device::kCuda, {h100()});
  EXPECT_EQ(b.bytes, 0);
  EXPECT_FALSE(b.emulated);
}

TEST(Budget, SmallerGpuIsRefusedAtTheConfigLine) {
  try {
    resolve_budget(target(141), Device::kCuda, {h100()});
    FAIL() << "a smaller card was accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 9);
    EXPECT_EQ(e.key(), "gpu.memory_gib");
    EXPECT_NE(std::string(e.what()).find("smaller than the target"), std::string::npos) << e.what();
  }
}

TEST(Budget, CpuEnforcesTheTargetAndExplicitBudgetsAreNotEmulation) {
  const auto cpu = resolve_budget(target(12, 0.5), Device::kCpu, {});
  EXPECT_TRUE(cpu.emulated);
  EXPECT_EQ(cpu.bytes, 12 * GiB - GiB / 2);
  Config c = target(12);
  c.budget_gib = 2;
  const auto explicit_budget = resolve_budget(c, Device::kCuda, {h100()});
  EXPECT_EQ(explicit_budget.bytes, 2 * GiB);
  EXPECT_FALSE(explicit_budget.emulated);
  EXPECT_EQ(resolve_budget(Config{}, Device::kCuda, {h100()}).bytes, 0);
}

TEST(Budget, AnExplicitBudgetAboveTheCardIsRefusedAtItsLine) {
  Config c;
  c.path = "configs/big.yaml";
  c.budget_gib = 96;
  c.budget_line = 4;
  try {
    resolve_budget(c, Device::kCuda, {h100()});
    FAIL() << "a budget above the card was accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.key(), "budget_gib");
    EXPECT_NE(std::string(e.what()).find("more than GPU 0"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("79.19 GiB"), std::string::npos) << e.hint();
  }
  c.budget_gib = 79;  // within the card: a cap the allocator can take (a fraction <= 1)
  EXPECT_EQ(resolve_budget(c, Device::kCuda, {h100()}).bytes, 79 * GiB);
}

TEST(Budget, AnAllowanceThatLeavesNothingIsRefused) {
  EXPECT_THROW(resolve_budget(target(1, 1.5), Device::kCuda, {h100()}), UserError);
}

TEST(Budget, OtherProcessesOnTheGpuAreNamedNotCounted) {
  auto g = h100();
  g.other_bytes = 2 * GiB;
  const auto b = resolve_budget(target(12), Device::kCuda, {g});
  EXPECT_EQ(b.bytes, 12 * GiB - g.context_bytes);
  EXPECT_NE(b.note.find("other processes hold 2.00 GiB on GPU 0"), std::string::npos) << b.note;
}

// --gpus indices and the probe go through this process's CUDA_VISIBLE_DEVICES.
TEST(VisibleDevice, MapsAnIndexThroughTheInheritedList) {
  EXPECT_EQ(visible_device(nullptr, 0), "0");
  EXPECT_EQ(visible_device(nullptr, 3), "3");
  EXPECT_EQ(visible_device("2,3", 0), "2");
  EXPECT_EQ(visible_device("2, 3", 1), "3");
  EXPECT_EQ(visible_device("GPU-8f6e1c2a,MIG-0d1f", 1), "MIG-0d1f");
  EXPECT_THROW(visible_device("2,3", 2), std::out_of_range);
  EXPECT_THROW(visible_device("", 0), std::out_of_range);
}

}  // namespace
}  // namespace sweep
