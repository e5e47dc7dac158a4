// Memory fidelity on the CPU: our bursts' peak allocated bytes (overall and per phase)
// against PyTorch + transformers' at the same points, measured with torch.profiler's memory
// events by tests/fixtures/make_memory_fixtures.py (tests/fixtures/memory_fidelity.json).
// The bar is 1% for every case; the table printed for each family shows both sides. The same
// cases run again on the emulated device configured as the CPU (its Meta execution, kernels
// and allocator replay, with the CPU's choices): it must land on the same peaks.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/hf_config.h"
#include "models/zoo.h"
#include "sweeps/measure/emulated_card.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/emulate/emulation.h"
#include "fidelity_case.h"

namespace sweep {
namespace {

constexpr double kTolerance = 0.01;
// The fixtures were recorded on a CPU with native bf16 (avx512_bf16 / amx_bf16): there oneDNN and
// ATen run bf16 kernels whose scratch differs from the emulated-bf16 paths a CPU without them
// takes (an AMD EPYC without AVX-512 BF16 measured gpt2 pure-bf16 Adafactor -10.7%, t5 bf16
// Adafactor -11%, whisper bf16 backward -7.8%: issue 36 item 8). On such a CPU the bf16 and
// bf16-amp cases are held to this bound and said so, until the fixtures record the CPU.
constexpr double kNoNativeBf16Tolerance = 0.15;
bool cpu_has_native_bf16() {
  std::ifstream in("/proc/cpuinfo");
  const std::string info((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return info.find("avx512_bf16") != std::string::npos || info.find("amx_bf16") != std::string::npos;
}

// transformers' training loop (tests/fixtures/make_memory_fixtures.py), and TRL's SFTTrainer
// (tests/fixtures/make_sft_fixtures.py: trainer sft, its fused LM head).
const nlohmann::json& memory_fixture() {
  static const nlohmann::json j = testing::read_fixture("memory_fidelity.json");
  return j;
}
const nlohmann::json& sft_fixture() {
  static const nlohmann::json j = testing::read_fixture("sft_fidelity.json");
  return j;
}

// Where the emulated device configured as the CPU may allocate less than the CPU: scratch that a
// CPU kernel allocates through the CPU allocator and frees before it returns, which a Meta
// kernel (shape only) has no reason to allocate. Found by comparing the two allocation traces
// (SWEEP_TRACE_ALLOC) of a case: each difference is an alloc/free pair inside one op.
const char* cpu_kernel_scratch(const Point& p) {
  if (p.family.starts_with("whisper"))
    return "the CPU's convolution (im2col columns) and flash attention (per-thread buffers)";
  if (p.precision != Precision::kFp32)
    return "the CPU's reduced-precision GEMMs (oneDNN packing buffers), attention and norms";
  // 4-bit layers compute in bf16 (bnb_4bit_compute_dtype) whatever the precision: their GEMMs
  // take the same packing buffers (a random fp32 QLoRA case on tests/fixtures/configs/qwen2-tiny
  // read 3.9% below the CPU, every difference an alloc/free pair inside an addmm or mm).
  if (p.weights == Weights::kNf4 || p.weights == Weights::kFp4)
    return "the CPU's bf16 GEMMs in the 4-bit layers (oneDNN packing buffers)";
  return nullptr;
}

// Runs every case of a family on `mem` (the CPU's tracking allocator, or the emulated device's)
// and holds each to 1% of transformers' peaks, overall and per phase.
void check_family(const nlohmann::json& fixture, const std::string& family, MemoryTracker& mem,
                  StepTimer& timer, const std::optional<EmulatedCard>& emulated) {
  int cases = 0, failures = 0, scratch_cases = 0;
  double worst = 0;
  std::printf("%-44s %12s %12s %8s  %s\n", "case", "sweep", "transformers", "error",
              "phase errors (forward/backward/optimizer)");
  // SWEEP_FIDELITY_CASE=N runs only the family's N-th case (with SWEEP_TRACE_ALLOC, to compare
  // its allocations with make_memory_fixtures.py --only MODEL --case N --trace FILE).
  const char* only = std::getenv("SWEEP_FIDELITY_CASE");
  int index = -1;
  for (const auto& c : fixture.at("cases")) {
    if (c.at("model") != family) continue;
    if (++index, only && *only && std::atoi(only) != index) continue;
    // The quantised cases load with from_pretrained(dtype=compute dtype) and copy each tensor
    // (scripts/hf_reference.py load_quantized), not from a checkpoint as a user's CPU load
    // does (tests/load_fidelity_test.cc).
    Point p = testing::fixture_point(c, fixture.at("steps"), "cast");
    // A real-size decoder (a config.json's) in bf16 takes minutes a case where the CPU has no
    // native bf16 (ATen's emulated bf16 GEMMs), more than the suite's budget allows: on the CPU
    // such cases run where it has native bf16, or with SWEEP_FIDELITY_ALL=1 (qwen3-0.6b's took
    // 6 minutes on the 2-core EPYC VM and matched to 4 bytes), and are said to be skipped; the
    // emulated device, which computes nothing, runs them always.
    static const bool native = cpu_has_native_bf16();
    const bool slow_bf16 = !native && !emulated && models::names_config_file(c.at("model").get<std::string>()) &&
                           (p.precision == Precision::kBf16 || p.precision == Precision::kBf16Amp);
    if (slow_bf16 && !std::getenv("SWEEP_FIDELITY_ALL")) {
      std::printf("%-44s skipped: bf16 at real size on a CPU without native bf16 (SWEEP_FIDELITY_ALL=1 runs it)\n",
                  p.label().c_str());
      continue;
    }
    if (emulated) {
      p.device = Device::kEmulated;
      p.card = *emulated;
    }
    const int64_t base = mem.allocated();
    BurstHooks hooks;
    hooks.on_phase = [](const std::string& phase, MemoryTracker&) { trace_alloc_note(phase); };
    const Measurement m = run_burst(p, mem, timer, hooks);
    ASSERT_EQ(m.status, Status::kOk) << p.label() << ": " << m.message;
    auto error = [](int64_t ours, int64_t ref) {
      return ref ? static_cast<double>(ours - ref) / static_cast<double>(ref) : 0.0;
    };
    const auto& ref_phases = c.at("phase_peak_bytes");
    // A quantised model's reference is built, saved and loaded again through a checkpoint
    // (scripts/hf_reference.py load_quantized): its fp32 model and the file's buffer alive at
    // once, which no user's from_pretrained holds. Where that build is its peak (the real-size
    // decoders in 4 bit), the training peak (the largest phase's) is what is compared.
    int64_t ref = c.at("peak_bytes"), ours = m.peak_allocated_bytes - base;
    if (p.weights != Weights::kFull && ref_phases.contains("build") && ref_phases.at("build") == ref) {
      ref = 0;
      ours = 0;
      for (auto [name, peak] : {std::pair{"forward", m.forward_peak_bytes},
                                std::pair{"backward", m.backward_peak_bytes},
                                std::pair{"optimizer", m.optimizer_peak_bytes}}) {
        if (!ref_phases.contains(name)) continue;
        ref = std::max(ref, ref_phases.at(name).get<int64_t>());
        ours = std::max(ours, peak.value_or(base) - base);
      }
      std::printf("  (the reference's own load is its peak: training peaks compared)\n");
    }
    const double e = error(ours, ref);
    std::string phases;
    bool phase_ok = true;
    for (auto [name, ours] : {std::pair{"forward", m.forward_peak_bytes},
                              std::pair{"backward", m.backward_peak_bytes},
                              std::pair{"optimizer", m.optimizer_peak_bytes}}) {
      if (!ref_phases.contains(name)) continue;
      const double pe = ours ? error(*ours - base, ref_phases.at(name)) : -1.0;
      phase_ok = phase_ok && std::abs(pe) <= kTolerance;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%+.2f%%", phases.empty() ? "" : " ", 100 * pe);
      phases += buf;
    }
    bool ok = std::abs(e) <= kTolerance && phase_ok;
    static const bool native_bf16 = cpu_has_native_bf16();
    const bool bf16 = p.precision == Precision::kBf16 || p.precision == Precision::kBf16Amp;
    if (!native_bf16 && bf16 && !ok) {
      ok = std::abs(e) <= kNoNativeBf16Tolerance;
      std::printf("  (this CPU has no native bf16: held to %.0f%%)\n", 100 * kNoNativeBf16Tolerance);
    }
    // The emulated device misses a CPU kernel's scratch, never adds to it: at most the
    // reference, and within 20% of it.
    const char* scratch = emulated ? cpu_kernel_scratch(p) : nullptr;
    if (scratch) ok = e <= 0.001 && e >= -0.2;
    std::printf("%-44s %12lld %12lld %+7.2f%%  %s%s\n", p.label().c_str(),
                static_cast<long long>(ours), static_cast<long long>(ref),
                100 * e, phases.c_str(), !ok ? "  <-- over 1%" : scratch && std::abs(e) > kTolerance ? "  (CPU kernel scratch)" : "");
    EXPECT_TRUE(ok) << p.label() << ": peak " << ours
                    << " B vs transformers " << ref << " B (" << 100 * e << "%), phases "
                    << phases;
    worst = std::max(worst, std::abs(e));
    ++cases;
    failures += ok ? 0 : 1;
    scratch_cases += scratch && std::abs(e) > kTolerance ? 1 : 0;
  }
  std::printf("%s%s: %d cases, %d over 1%%, %d more below the CPU by its kernels' scratch, worst "
              "peak error %.3f%%\n", family.c_str(), emulated ? " (emulated as the CPU)" : "", cases,
              failures, scratch_cases, 100 * worst);
  EXPECT_GT(cases, 0) << "no fixture cases for " << family;
}

// A family's cases on the CPU's tracking allocator (one per test process).
void check_on_the_cpu(const nlohmann::json& fixture, const std::string& family) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  check_family(fixture, family, *mem, *timer, std::nullopt);
}

// The emulated device's differential check: configured as the CPU (for-loop optimizers, the
// CPU's SDPA choice and autocast lists, exact counting without rounding or workspaces), the
// same bursts on Meta allocate what the CPU allocates. What differs by design: the optimizers'
// step counters and checkpointing's saved RNG states are CPU tensors in both runs, counted by the
// CPU's tracking allocator and outside the emulated device (a few hundred bytes to 20 KB a
// case); and the CPU kernels' scratch (cpu_kernel_scratch), which is held to "not above".
void check_emulated_as_the_cpu(const nlohmann::json& fixture, const std::string& family) {
  EmulatedCard cpu;
  cpu.name = "cpu";
  cpu.cpu = true;
  emu::start_emulation(cpu);
  static auto mem = make_emulated_tracker(cpu, "");
  static auto timer = make_cpu_timer();
  check_family(fixture, family, *mem, *timer, cpu);
}

class MemoryFidelity : public ::testing::TestWithParam<std::string> {};

TEST_P(MemoryFidelity, PeaksWithinOnePercentOfTransformers) {
  check_on_the_cpu(memory_fixture(), GetParam());
}

TEST_P(MemoryFidelity, EmulatedAsTheCpuWithinOnePercentOfTransformers) {
  check_emulated_as_the_cpu(memory_fixture(), GetParam());
}

// A case's test name: a zoo model's name without "-test" ("whisper-s2s-test" -> "whispers2s",
// "whisper-tiny" -> "whispertiny"), or a decoder fixture's folder up to its first '-'
// ("qwen2.5-0.5b-2layers" -> "qwen25"); letters and digits only.
std::string family_test_name(const ::testing::TestParamInfo<std::string>& info) {
  const std::string& m = info.param;
  std::string folder = m;
  if (m.ends_with("-test")) folder = m.substr(0, m.size() - 5);
  if (models::names_config_file(m)) {
    folder = m.substr(0, m.rfind('/'));
    folder = folder.substr(folder.rfind('/') + 1);
    folder = folder.substr(0, folder.find('-'));
  }
  std::string name;
  for (char ch : folder)
    if (std::isalnum(static_cast<unsigned char>(ch))) name += ch;
  return name;
}

// The test models by their family; the decoders from config.json (Llama 3.2 and TinyLlama,
// Qwen2, Qwen3, Phi-3 and Mistral at published widths with fewer layers, tests/fixtures/configs/) by their folder;
// one catalogue model whole (SmolLM2-135M, tied embeddings) by its Hub id.
INSTANTIATE_TEST_SUITE_P(Families, MemoryFidelity,
                         ::testing::Values("gpt2-test", "t5-test", "whisper-test", "whisper-s2s-test",
                                         "whisper-tiny", "whisper-base",
                                         "tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json",
                                         "tests/fixtures/configs/qwen3-0.6b-2layers/config.json",
                                         "tests/fixtures/configs/tinyllama-1.1b-1layer/config.json",
                                         "tests/fixtures/configs/phi3-mini-1layer/config.json",
                                         "tests/fixtures/configs/mistral-7b-v0.3-1layer/config.json",
                                         "tests/fixtures/configs/llama-3.2-1b-2layers/config.json",
                                         "HuggingFaceTB/SmolLM2-135M"),
                         family_test_name);

// TRL 1.16's SFTTrainer (trainer sft) on two decoders with a vocabulary of 128K and more, at
// 512 to 2048 tokens, full and LoRA, with and without checkpointing, a prompt-completion
// dataset (completion_only_loss) and padding-free batches: its fused LM head's tiles instead
// of the whole logits. The same 1% on the CPU and on the emulated device as the CPU.
class SftFidelity : public ::testing::TestWithParam<std::string> {};

TEST_P(SftFidelity, PeaksWithinOnePercentOfTrl) { check_on_the_cpu(sft_fixture(), GetParam()); }

TEST_P(SftFidelity, EmulatedAsTheCpuWithinOnePercentOfTrl) {
  check_emulated_as_the_cpu(sft_fixture(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Decoders, SftFidelity,
                         ::testing::Values("tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json",
                                           "tests/fixtures/configs/llama-3.2-1b-2layers/config.json"),
                         family_test_name);

}  // namespace
}  // namespace sweep
