// Memory budgets and the GPU probe; see budget.h.
#include "sweeps/runner/budget.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "sweeps/runner/zygote.h"
#include "sweeps/worker/burst.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/measure/trackers.h"

namespace sweep {
namespace {

using reports::kGiB;

}  // namespace

EmulatedCard emulated_card_of(const Config& cfg) {
  if (!cfg.gpu)
    throw UserError(
        cfg.path, cfg.device_line, "device",
        "device emulated predicts a card, and the config names none",
        "add `gpu: rtx3060` (`sweep gpus` lists the cards), or write one out: gpu: {name: "
        "\"My card\", memory_gib: 11.75, compute_capability: 8.6, sms: 28}");
  const GpuTarget& t = *cfg.gpu;
  if (t.cc_major == 0 || t.sms == 0)
    throw UserError(
        cfg.path, t.line, t.cc_major == 0 ? "gpu.compute_capability" : "gpu.sms",
        "device emulated needs the card's compute capability and SM count: " +
            (t.name.empty() ? std::string("this card") : "'" + t.name + "'") +
            " is no card of the table",
        "add them, e.g. gpu: {name: \"" + (t.name.empty() ? std::string("My card") : t.name) +
            "\", memory_gib: " + number_text(t.memory_gib) +
            ", compute_capability: 8.6, sms: 28}, or name a card of the table (`sweep gpus`)");
  CardFacts facts;
  facts.name = t.name.empty() ? number_text(t.memory_gib) + " GiB card" : t.name;
  facts.memory_bytes = static_cast<int64_t>(t.memory_gib * kGiB);
  const CardSpec* spec = t.key.empty() ? nullptr : find_card(t.key);
  facts.context_bytes = t.context_gib ? static_cast<int64_t>(*t.context_gib * kGiB)
                        : spec        ? card_context_bytes(*spec)
                                      : kDefaultCudaContextBytes;
  facts.cc_major = t.cc_major;
  facts.cc_minor = t.cc_minor;
  facts.sms = t.sms;
  if (facts.memory_bytes - facts.context_bytes <= 0)
    throw UserError(cfg.path, t.line, "gpu.context_gib",
                    "the context allowance (" + reports::format_bytes(facts.context_bytes) +
                        ") leaves nothing of " + facts.name,
                    "lower gpu.context_gib, or raise gpu.memory_gib");
  return facts;
}

namespace {

// Device emulated: the card's memory less its context is what the emulated allocator may hold.
Budget emulated_budget(const Config& cfg) {
  const EmulatedCard card = emulated_card_of(cfg);
  const int64_t allocator = card.memory_bytes - card.context_bytes;
  const GpuTarget& t = *cfg.gpu;
  const CardSpec* spec = t.key.empty() ? nullptr : find_card(t.key);
  const std::string context_source = t.context_gib ? "configured"
                                     : spec ? context_allowance_source(*spec)
                                            : std::string(kDefaultContextSource);
  Budget b;
  b.context_bytes = card.context_bytes;
  b.note = predicted_by(card.name) + ": the emulated allocator may hold " +
           reports::format_bytes(static_cast<double>(allocator)) + " = " +
           reports::format_bytes(static_cast<double>(card.memory_bytes)) +
           " less a context allowance of " +
           reports::format_bytes(static_cast<double>(card.context_bytes)) + " (" + context_source +
           "); tokens/s predicted by the step-time model (docs/fidelity.md, \"Step time\")";
  if (cfg.budget_gib > 0) {
    b.bytes = static_cast<int64_t>(cfg.budget_gib * kGiB);
    if (b.bytes > allocator)
      throw UserError(
          cfg.path, cfg.budget_line, "budget_gib",
          "a budget of " + reports::format_bytes(static_cast<double>(b.bytes)) + " is more than " +
              card.name +
              " leaves the allocator: " + reports::format_bytes(static_cast<double>(allocator)) +
              " (its memory less the context allowance)",
          "lower budget_gib to at most " + reports::format_bytes(static_cast<double>(allocator)) +
              ", or remove it to use the whole card");
    b.note += "; budget " + reports::format_bytes(static_cast<double>(b.bytes)) + " (budget_gib)";
  }
  return b;
}

}  // namespace

EmulatedCard emulated_cpu() {
  EmulatedCard cpu;
  cpu.name = "CPU";
  cpu.cpu = true;
  cpu.cc_major = 8;
  cpu.sms = 1;
  return cpu;
}

std::optional<EmulatedCard> predictor_for(const HostGpu& gpu) {
  const CardSpec* spec = find_card(gpu.name);
  if (!spec) return std::nullopt;
  EmulatedCard card = facts_of(*spec);
  if (gpu.total_bytes > 0) card.memory_bytes = gpu.total_bytes;
  if (gpu.context_bytes > 0) card.context_bytes = gpu.context_bytes;
  return card;
}

std::string predictor_name(const EmulatedCard& card) {
  return card.cpu ? "the emulator configured as the CPU" : "emulation of " + card.name;
}

Budget resolve_budget(const Config& cfg, Device device, const std::vector<HostGpu>& gpus) {
  if (device == Device::kEmulated) return emulated_budget(cfg);
  Budget b;
  if (cfg.budget_gib > 0) {
    b.bytes = static_cast<int64_t>(cfg.budget_gib * kGiB);
    b.note = "budget " + reports::format_bytes(b.bytes) + " (budget_gib)";
    for (const auto& g : gpus)
      if (b.bytes > g.total_bytes)
        throw UserError(cfg.path, cfg.budget_line, "budget_gib",
                          "a budget of " + reports::format_bytes(b.bytes) + " is more than GPU " + g.index + " (" +
                              g.name + ") has: " + reports::format_bytes(g.total_bytes),
                          "lower budget_gib to at most " + reports::format_bytes(g.total_bytes) +
                              ", or remove it to use the whole card");
    return b;
  }
  if (!cfg.gpu) return b;
  const GpuTarget& t = *cfg.gpu;
  const double target = t.memory_gib * kGiB;
  const std::string target_name = t.name.empty() ? reports::format_bytes(target) : t.name + " (" + reports::format_bytes(target) + ")";
  if (device == Device::kCpu) {
    // No CUDA context on the CPU: the target's memory less the configured allowance only.
    b.context_bytes = static_cast<int64_t>(t.context_gib.value_or(0.0) * kGiB);
    b.bytes = static_cast<int64_t>(target) - b.context_bytes;
    b.emulated = true;
    b.note = "emulating " + target_name + " on the CPU: budget " + reports::format_bytes(b.bytes);
    return b;
  }
  if (gpus.empty()) return b;
  int64_t smallest = gpus.front().total_bytes, context = 0;
  std::string smallest_name = gpus.front().name;
  for (const auto& g : gpus) {
    if (g.total_bytes < smallest) {
      smallest = g.total_bytes;
      smallest_name = g.name;
    }
    context = std::max(context, g.context_bytes);
  }
  if (smallest < target * (1 - kSameCardTolerance)) {
    throw UserError(cfg.path, t.line, "gpu.memory_gib",
                      "this GPU (" + smallest_name + ", " + reports::format_bytes(smallest) +
                          ") is smaller than the target " + target_name +
                          ": a budget cannot add memory",
                      "run this config on a card with at least " + reports::format_bytes(target) +
                          ", or lower gpu.memory_gib");
  }
  if (smallest <= target * (1 + kSameCardTolerance)) {
    b.note = "the GPU is the target " + target_name + ": no cap, the whole card";
    return b;  // the card itself: its own context is already there
  }
  b.context_bytes = t.context_gib ? static_cast<int64_t>(*t.context_gib * kGiB) : context;
  b.bytes = static_cast<int64_t>(target) - b.context_bytes;
  if (b.bytes <= 0)
    throw UserError(cfg.path, t.line, "gpu.context_gib",
                      "the context allowance (" + reports::format_bytes(b.context_bytes) + ") leaves nothing of " +
                          target_name,
                      "lower gpu.context_gib, or raise gpu.memory_gib");
  b.emulated = true;
  b.note = "emulating " + target_name + " on " + smallest_name + " (" + reports::format_bytes(smallest) +
           "): allocator capped at " + reports::format_bytes(b.bytes) + " = target less a context allowance of " +
           reports::format_bytes(b.context_bytes) + (t.context_gib ? " (configured)" : " (measured)");
  for (const auto& g : gpus)
    if (g.other_bytes > 0)
      b.note += "\nwarning: other processes hold " + reports::format_bytes(g.other_bytes) + " on GPU " + g.index +
                " (not counted in the allowance; free the GPU for steadier timings)";
  return b;
}

namespace {

// Runs argv and returns its stdout's last non-empty line (library notices may come first;
// stderr passes through); throws with `what` and the output when it fails or times out.
std::string last_line_of(const std::vector<std::string>& argv, const std::string& what,
                         double timeout_s, const std::map<std::string, std::string>& env = {},
                         Zygote* zygote = nullptr) {
  const CommandOutput r =
      run_command(argv, {.timeout_s = timeout_s, .keep_stderr = true, .env = env, .zygote = zygote});
  std::istringstream in(r.output);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  if (r.timed_out)
    throw std::runtime_error(what + " did not finish within " + number_text(timeout_s) +
                             " s and was killed" + (r.output.empty() ? "" : ": " + r.output));
  if (r.exit_code != 0 || last.empty()) throw std::runtime_error(what + " failed: " + r.output);
  return last;
}

int64_t device_used_bytes() {
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total - free);
}

// The representative training step: a tiny burst of each family in each precision with each
// optimizer, and eval, so that the kernels a sweep's workers use are loaded (CUDA loads modules
// lazily: SDPA, dropout, layer norm, the optimizers' foreach and fused kernels, the loss
// scaler's, cuDNN for Whisper's convolutions) and the cuBLAS/cuBLASLt handles exist. Larger
// shapes can pick further GEMM kernels, so the allowance is a floor, not a bound.
void run_representative_bursts() {
  auto mem = make_cuda_tracker();
  auto timer = make_cuda_timer();
  for (const char* model : {"gpt2-test", "t5-test", "whisper-test"}) {
    for (const Precision precision : all_of<Precision>()) {
      // Every optimizer, then eval (OptimizerKind::kNone, the last).
      for (const OptimizerKind optimizer : all_of<OptimizerKind>()) {
        Point p = tiny_point(model, Device::kCuda, precision, optimizer);
        if (optimizer == OptimizerKind::kNone) p.mode = Mode::kEval;
        // A combination this GPU cannot run (pure bf16 on a card without it) loads nothing
        // the sweep's own points would load: it is left out, with a line on stderr.
        try {
          const auto m = run_burst(p, *mem, *timer);
          if (m.status != Status::kOk) std::cerr << "probe: " << p.label() << ": " << m.message << "\n";
        } catch (const c10::Error& e) {
          std::cerr << "probe: " << p.label() << ": " << e.what_without_backtrace() << "\n";
        }
      }
    }
  }
  mem->empty_cache();
}

}  // namespace

bool probe_measures_context(const Config& cfg) {
  return cfg.gpu && !cfg.gpu->context_gib && cfg.budget_gib <= 0;
}

bool second_context_allowed(int compute_mode) {
  return compute_mode != kComputeModeExclusiveProcess;
}

int64_t other_processes_bytes(int compute_mode, int64_t used_at_start, int64_t with_second) {
  if (!second_context_allowed(compute_mode)) return 0;
  const int64_t bare_context = std::max<int64_t>(0, with_second - used_at_start);
  return std::max<int64_t>(0, used_at_start - bare_context);
}

std::map<std::string, std::string> probe_environment(const std::string& device) {
  std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", device}};
  set_alloc_conf(env, "");  // the native allocator, whatever the shell exported (zygote.h)
  return env;
}

std::vector<HostGpu> probe_gpus(const std::string& exe, const std::vector<std::string>& devices,
                                bool measure_context, double timeout_s, Zygote* zygote) {
  std::vector<HostGpu> out;
  for (const auto& device : devices) {
    std::vector<std::string> argv = {exe, "worker", "--probe-device"};
    if (!measure_context) argv.push_back("--no-context");
    const std::string line =
        last_line_of(argv, "probing GPU " + device, timeout_s, probe_environment(device), zygote);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw std::runtime_error("probing GPU " + device + ": " + line);
    out.push_back({device, j.value("name", ""), j.value("total_bytes", int64_t{0}),
                   j.value("context_bytes", int64_t{0}), j.value("other_bytes", int64_t{0})});
  }
  return out;
}

int probe_context_main() {
  // CUDA initialised as torch does (CUDAHooks::init, as in the probe), then the primary
  // context only: the same bare context as the probe's.
  try {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    C10_CUDA_CHECK(cudaFree(nullptr));
    std::cout << device_used_bytes() << std::endl;
    return 0;
  } catch (const c10::Error& e) {
    std::cerr << "no CUDA context: " << e.what_without_backtrace() << "\n";
    return 1;
  }
}

int probe_device_main(bool measure_context) {
  if (!torch::cuda::is_available()) {
    std::cerr << "no GPU is visible\n";
    return 1;
  }
  try {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    C10_CUDA_CHECK(cudaFree(nullptr));  // this process's bare context, nothing loaded yet
    if (!measure_context) {
      size_t free = 0, total = 0;
      C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      nlohmann::json j;
      j["name"] = at::cuda::getCurrentDeviceProperties()->name;
      j["total_bytes"] = static_cast<int64_t>(total);
      std::cout << j.dump() << std::endl;
      return 0;
    }
    const int64_t used_at_start = device_used_bytes();
    // cudaMemGetInfo sees the whole device: other processes' memory included, and no API
    // reports it per process without NVML (whose header the wheel does not ship). A second
    // fresh process with a bare context of its own reports the device with one more context;
    // the difference is one bare context, and what was used before ours is other processes'.
    // In EXCLUSIVE_PROCESS mode the second context cannot open while ours exists (and no other
    // process's can either): none is started, and others are 0.
    int mode = kComputeModeDefault;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, c10::cuda::current_device()));
    int64_t with_second = 0;
    if (second_context_allowed(mode))
      with_second = std::stoll(last_line_of({self_exe(), "worker", "--probe-context"},
                                            "a second CUDA context", kProbeContextTimeoutS));
    const int64_t others = other_processes_bytes(mode, used_at_start, with_second);
    run_representative_bursts();
    C10_CUDA_CHECK(cudaDeviceSynchronize());
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    const int64_t reserved =
        stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    nlohmann::json j;
    j["name"] = at::cuda::getCurrentDeviceProperties()->name;
    j["total_bytes"] = static_cast<int64_t>(total);
    j["context_bytes"] = static_cast<int64_t>(total - free) - reserved - others;
    j["other_bytes"] = others;
    std::cout << j.dump() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "probe failed: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace sweep
