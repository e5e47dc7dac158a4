// Memory budgets and the GPU probe; see budget.h.
#include "sweeps/budget.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace sweep {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  return buf;
}

}  // namespace

Budget resolve_budget(const Config& cfg, const std::string& device, const std::vector<HostGpu>& gpus) {
  Budget b;
  if (cfg.budget_gib > 0) {
    b.bytes = static_cast<int64_t>(cfg.budget_gib * kGiB);
    b.note = "budget " + gib(b.bytes) + " (budget_gib)";
    return b;
  }
  if (!cfg.gpu) return b;
  const GpuTarget& t = *cfg.gpu;
  const double target = t.memory_gib * kGiB;
  const std::string target_name = t.name.empty() ? gib(target) : t.name + " (" + gib(target) + ")";
  if (device == "cpu") {
    // No CUDA context on the CPU: the target's memory less the configured allowance only.
    b.context_bytes = static_cast<int64_t>(t.context_gib.value_or(0.0) * kGiB);
    b.bytes = static_cast<int64_t>(target) - b.context_bytes;
    b.emulated = true;
    b.note = "emulating " + target_name + " on the CPU: budget " + gib(b.bytes);
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
    throw ConfigError(cfg.path, t.line, "gpu.memory_gib",
                      "this GPU (" + smallest_name + ", " + gib(smallest) +
                          ") is smaller than the target " + target_name +
                          ": a budget cannot add memory",
                      "run this config on a card with at least " + gib(target) +
                          ", or lower gpu.memory_gib");
  }
  if (smallest <= target * (1 + kSameCardTolerance)) {
    b.note = "the GPU is the target " + target_name + ": no cap, the whole card";
    return b;  // the card itself: its own context is already there
  }
  b.context_bytes = t.context_gib ? static_cast<int64_t>(*t.context_gib * kGiB) : context;
  b.bytes = static_cast<int64_t>(target) - b.context_bytes;
  b.emulated = true;
  b.note = "emulating " + target_name + " on " + smallest_name + " (" + gib(smallest) +
           "): allocator capped at " + gib(b.bytes) + " = target less a context allowance of " +
           gib(b.context_bytes) + (t.context_gib ? " (configured)" : " (measured)");
  return b;
}

std::vector<HostGpu> probe_gpus(const std::string& exe, const std::vector<std::string>& indices) {
  std::vector<HostGpu> out;
  for (const auto& index : indices) {
    const std::string cmd = "CUDA_VISIBLE_DEVICES=" + index + " '" + exe + "' worker --probe-device";
    FILE* p = popen(cmd.c_str(), "r");
    std::string text;
    char buf[4096];
    size_t n;
    while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    const int status = p ? pclose(p) : -1;
    auto j = nlohmann::json::parse(text.substr(0, text.find('\n')), nullptr, false);
    if (status != 0 || j.is_discarded())
      throw std::runtime_error("probing GPU " + index + " failed: " + text);
    out.push_back({index, j.value("name", ""), j.value("total_bytes", int64_t{0}),
                   j.value("context_bytes", int64_t{0})});
  }
  return out;
}

int probe_device_main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "no GPU is visible\n";
    return 1;
  }
  // What a training process has before its first tensor: the context, the loaded kernels and
  // the cuBLAS handle. The matmul's buffers sit in the caching allocator and are subtracted.
  auto a = torch::ones({256, 256}, torch::kCUDA);
  auto c = torch::matmul(a, a);
  at::cuda::getCurrentCUDABlasHandle();
  c.sum().item<float>();
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const int64_t reserved =
      stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  nlohmann::json j;
  j["name"] = at::cuda::getCurrentDeviceProperties()->name;
  j["total_bytes"] = static_cast<int64_t>(total);
  j["context_bytes"] = static_cast<int64_t>(total - free) - reserved;
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace sweep
