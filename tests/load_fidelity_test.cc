// Quantised models loaded the way users load them (issue 58): a checkpoint saved with
// save_pretrained, then from_pretrained(path, quantization_config=BitsAndBytesConfig(...),
// device_map="cpu") with no dtype, QLoRA's prepare_model_for_kbit_training, LoRA, two steps.
// tests/fixtures/make_load_fixtures.py measured transformers 5.23 + PEFT 0.21.2 + bitsandbytes
// 0.50.2 with torch.profiler's memory events from before the load (tests/fixtures/
// load_fidelity.json); our bursts on the CPU device (Point::load "checkpoint", the CPU's
// default) are held to 1% of its peak and of each phase's, the load's included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/hf_config.h"
#include "models/zoo.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/load_int8.h"
#include "fidelity_case.h"

namespace sweep {
namespace {

constexpr double kTolerance = 0.01;

const nlohmann::json& fixture() {
  static const nlohmann::json j = testing::read_fixture("load_fidelity.json");
  return j;
}

// Every case names its load ("checkpoint").
Point point_of(const nlohmann::json& c) { return testing::fixture_point(c, fixture().at("steps"), ""); }

double error(int64_t ours, int64_t ref) {
  return ref ? static_cast<double>(ours - ref) / static_cast<double>(ref) : 0.0;
}

// Each case (its own test, so that ctest runs them side by side: SmolLM2's take minutes): the
// peak, each phase's peak (load, build, forward, backward, optimizer) within 1%, and the phase
// the peak is in named as the reference's.
class LoadFidelity : public ::testing::TestWithParam<std::size_t> {};

TEST_P(LoadFidelity, FromACheckpointWithinOnePercentOfTransformers) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  const auto& c = fixture().at("cases").at(GetParam());
  const Point p = point_of(c);
  const int64_t base = mem->allocated();
  const Measurement m = run_burst(p, *mem, *timer);
  ASSERT_EQ(m.status, Status::kOk) << p.label() << ": " << m.message;
  const auto& ref_phases = c.at("phase_peak_bytes");
  const int64_t ref = c.at("peak_bytes"), ours = m.peak_allocated_bytes - base;
  std::string ref_phase;
  for (const auto& [name, peak] : ref_phases.items())
    if (peak.get<int64_t>() == ref && ref_phase.empty()) ref_phase = name;
  std::printf("%s load=%s\n  %-10s %12s %12s %8s\n", p.label().c_str(), p.load.c_str(), "phase", "sweep",
              "transformers", "error");
  std::printf("  %-10s %12lld %12lld %+7.2f%%  (peak in %s; transformers' in %s)\n", "peak",
              static_cast<long long>(ours), static_cast<long long>(ref), 100 * error(ours, ref),
              m.peak_phase.c_str(), ref_phase.c_str());
  EXPECT_LE(std::abs(error(ours, ref)), kTolerance) << p.label() << ": peak " << ours << " vs " << ref;
  for (auto [name, phase] : {std::pair{"load", m.load_peak_bytes}, std::pair{"forward", m.forward_peak_bytes},
                             std::pair{"backward", m.backward_peak_bytes},
                             std::pair{"optimizer", m.optimizer_peak_bytes}}) {
    if (!ref_phases.contains(name)) continue;
    ASSERT_TRUE(phase.has_value()) << p.label() << ": no phase " << name;
    const int64_t r = ref_phases.at(name), o = *phase - base;
    std::printf("  %-10s %12lld %12lld %+7.2f%%\n", name, static_cast<long long>(o), static_cast<long long>(r),
                100 * error(o, r));
    EXPECT_LE(std::abs(error(o, r)), kTolerance) << p.label() << ": phase " << name;
  }
  // The phase named as the peak's: checked where the reference's leads every other phase by
  // more than the tolerance (Qwen2.5's 2 layers at 4 tokens: the load 0.4% above the
  // backward, whose dequantised fp32 MLP weight is the same size whatever the batch).
  int64_t second = 0;
  for (const auto& [name, peak] : ref_phases.items())
    if (name != ref_phase) second = std::max(second, peak.get<int64_t>());
  if (static_cast<double>(ref) > (1 + kTolerance) * static_cast<double>(second))
    EXPECT_EQ(m.peak_phase, ref_phase) << p.label();
}

INSTANTIATE_TEST_SUITE_P(Cases, LoadFidelity, ::testing::Range<std::size_t>(0, fixture().at("cases").size()));

// The file save_pretrained writes for a model, to the byte: qwen2-tiny's (78,400 fp32
// parameters, the tied lm_head left out) measured 316,248 bytes with transformers 5.23 and
// safetensors 0.8, a 2,640-byte header.
TEST(LoadFidelityFile, SafetensorsFileBytesAreSavePretrainedsFile) {
  const auto* spec = models::find_model(SWEEP_SOURCE_DIR "/tests/fixtures/configs/qwen2-tiny/config.json");
  ASSERT_TRUE(spec);
  auto model = spec->make();
  EXPECT_EQ(safetensors_bytes(*model), 316248);
}

}  // namespace
}  // namespace sweep
