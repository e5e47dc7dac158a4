// Budgets from a config's target card and the GPUs that measure it (pure: GPUs as probed).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>

#include "sweeps/runner/budget.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/measure/env.h"
#include "test_util.h"

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


// EXCLUSIVE_PROCESS compute mode (Slurm clusters): while the probe holds its context no second
// process may open one, so none is started, and no other process can hold the GPU either.
TEST(ContextProbe, ExclusiveProcessModeOpensNoSecondContextAndCountsNoOthers) {
  EXPECT_TRUE(second_context_allowed(kComputeModeDefault));
  EXPECT_FALSE(second_context_allowed(kComputeModeExclusiveProcess));
  const int64_t bare = 500 << 20, others = 3 * GiB;
  EXPECT_EQ(other_processes_bytes(kComputeModeDefault, bare + others, 2 * bare + others), others);
  EXPECT_EQ(other_processes_bytes(kComputeModeExclusiveProcess, bare, 0), 0);
}

// The context is measured only for a target card whose allowance the config does not give.
TEST(ContextProbe, AGivenContextAllowanceIsNotMeasured) {
  EXPECT_TRUE(probe_measures_context(target(12)));
  EXPECT_FALSE(probe_measures_context(target(12, 0.5)));
  Config budget_only;
  budget_only.budget_gib = 4;
  EXPECT_FALSE(probe_measures_context(budget_only));
}

// A fake `sweep` that records its arguments and answers as the probe does, or hangs.
std::string fake_probe(const std::filesystem::path& dir, const std::string& body) {
  const auto path = dir / "fake-sweep";
  testing::write_file(path, "#!/bin/sh\n" + body);
  chmod(path.c_str(), 0755);
  return path.string();
}

TEST(ContextProbe, WithTheAllowanceGivenTheProbeMeasuresNoContext) {
  const auto dir = testing::temp_dir("probe_args");
  const auto args = (dir / "args").string();
  const auto exe = fake_probe(dir, "echo \"$CUDA_VISIBLE_DEVICES $*\" >> " + args +
                                       "\necho 'notice on stdout'\n"
                                       "echo '{\"name\": \"Fake GPU\", \"total_bytes\": 1024}'\n");
  const auto gpus = probe_gpus(exe, {"3"}, /*measure_context=*/false);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].name, "Fake GPU");
  EXPECT_EQ(gpus[0].total_bytes, 1024);
  EXPECT_EQ(gpus[0].context_bytes, 0);
  probe_gpus(exe, {"3"}, /*measure_context=*/true);
  std::ifstream in(args);
  std::string without, with;
  std::getline(in, without);
  std::getline(in, with);
  EXPECT_EQ(without, "3 worker --probe-device --no-context");
  EXPECT_EQ(with, "3 worker --probe-device");
}

// A probe that never answers (a second context waiting on a GPU held exclusively, a hung
// driver) is killed at its timeout, with what it started, and the run stops with the reason.
TEST(ContextProbe, AHangingProbeIsKilledAtItsTimeout) {
  const auto dir = testing::temp_dir("probe_hang");
  const auto exe = fake_probe(dir, "sleep 30 &\necho $! > " + (dir / "child").string() + "\nsleep 30\n");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    probe_gpus(exe, {"0"}, true, /*timeout_s=*/1.0);
    ADD_FAILURE() << "a hanging probe returned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("did not finish within 1 s"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  std::ifstream child(dir / "child");
  int pid = 0;
  ASSERT_TRUE(child >> pid);
  for (int i = 0; i < 50 && ::kill(pid, 0) == 0; ++i) ::usleep(100000);
  EXPECT_NE(::kill(pid, 0), 0) << "the probe's own child outlived the timeout";
}

TEST(DriverVersion, ReadFromTheKernelModulesVersionFile) {
  EXPECT_EQ(driver_version_of_procfs(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Jul  1 00:00:00 UTC 2025\n"
                "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "580.159.04");
  EXPECT_EQ(driver_version_of_procfs("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                     "580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun "
                                     "Jul 27 06:56:17 UTC 2025\n"),
            "580.65.06");
  EXPECT_EQ(driver_version_of_procfs(""), "");
  EXPECT_EQ(driver_version_of_procfs("GCC version:  gcc version 12.2.0\n"), "");
}

}  // namespace
}  // namespace sweep
