// The GPU table. Peaks are the vendors' dense figures (datasheets quote tensor-core rates
// "with sparsity": those are halved here). GeForce cards run FP16/BF16 tensor math with
// FP32 accumulation (what autocast uses) at half their FP16-accumulate rate; that half is
// the figure given. Memory is the capacity as sold; `reported` is the total CUDA reports
// (cudaMemGetInfo, "total capacity" in PyTorch's OOM message), where it is known: measured
// here (H100), or quoted from a PyTorch OOM message in a public issue, the same figures and
// sources as the configs' memory_gib. The rule for "fits" reads that one.
#include "reports/gpus.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

namespace sweep::reports {
namespace {

constexpr int64_t reported(double gib) { return static_cast<int64_t>(gib * kGiB); }

// clang-format off
const std::vector<GpuSpec> kGpus = {
  // key        name             tokens             GiB   fp32   tf32    fp16    bf16
  // GeForce RTX 3060 specifications (3584 CUDA cores = 28 SMs, 1.78 GHz boost) at the
  // per-SM rates of the NVIDIA Ampere GA102 whitepaper (its RTX 3090 figures / 82 SMs).
  // reported: configs/rtx3060.yaml: 11.75 GiB on Linux, https://github.com/Kunhao-Liu/StyleGaussian/issues/12
  {"rtx3060",    "RTX 3060",      "rtx 3060",        12,  12.7,  12.7,   25.5,   25.5, reported(11.75)},
  // NVIDIA T4 datasheet: FP32 8.1, mixed FP16/FP32 65; Turing has no TF32 or BF16.
  // reported: configs/t4.yaml: 14.56 GiB on GCP, https://github.com/Zheng-Chong/CatVTON/issues/133
  {"t4",         "T4",            "t4",              16,   8.1,     0,     65,      0, reported(14.56)},
  // NVIDIA V100 datasheet (SXM2): FP32 15.7, tensor 125; Volta has no TF32 or BF16.
  {"v100-16gb",  "V100 16GB",     "v100 sxm2 16gb",  16,  15.7,     0,    125,      0},
  // NVIDIA Ampere GA102 whitepaper, table "GeForce RTX 3090".
  {"rtx3090",    "RTX 3090",      "rtx 3090",        24,  35.6,  35.6,     71,     71},
  // NVIDIA A10 datasheet.
  {"a10",        "A10",           "a10",             24,  31.2,  62.5,    125,    125},
  // NVIDIA L4 datasheet (TF32 120, FP16/BF16 242 with sparsity).
  {"l4",         "L4",            "l4",              24,  30.3,    60,    121,    121},
  // NVIDIA Ada Lovelace architecture whitepaper, table "GeForce RTX 4090".
  // reported: configs/rtx4090.yaml: 23.64 GiB, https://github.com/ali-vilab/VGen/issues/104
  {"rtx4090",    "RTX 4090",      "rtx 4090",        24,  82.6,  82.6,  165.2,  165.2, reported(23.64)},
  {"v100-32gb",  "V100 32GB",     "v100 sxm2 32gb",  32,  15.7,     0,    125,      0},
  // NVIDIA A100 datasheet (SXM and PCIe share the peaks).
  // reported: configs/a100-40gb.yaml: 39.50 GiB, https://github.com/TianheWu/CoSeR/issues/10
  {"a100-40gb",  "A100 40GB",     "a100 40gb",       40,  19.5,   156,    312,    312, reported(39.5)},
  // NVIDIA L40S datasheet (TF32 366, FP16/BF16 733 with sparsity).
  {"l40s",       "L40S",          "l40s",            48,  91.6,   183, 362.05, 362.05},
  // reported: configs/a100-80gb.yaml: 79.25 GiB, https://github.com/levihsu/OOTDiffusion/issues/235
  {"a100-80gb",  "A100 80GB",     "a100 80gb",       80,  19.5,   156,    312,    312, reported(79.25)},
  // NVIDIA H100 datasheet and Hopper whitepaper: PCIe and SXM5 (the SXM part reports
  // itself as "H100 80GB HBM3").
  {"h100-pcie",  "H100 PCIe",     "h100 pcie",       80,    51,   378,    756,    756},
  // reported: measured here, device_memory_bytes of the H100 80GB HBM3 lent on 2026-11-22
  // (bench/baselines/ci-gpu/results.csv), 79.18 GiB of the 80 sold.
  {"h100-80gb",  "H100 80GB SXM", "h100 hbm3",       80,  66.9, 494.7,  989.4,  989.4, 85017493504},
  // NVIDIA H200 datasheet (SXM): the H100 SXM's compute with 141 GB of HBM3e.
  {"h200",       "H200",          "h200",           141,  66.9, 494.7,  989.4,  989.4},
};
// clang-format on

std::string squeeze(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.back().empty())
      out.emplace_back();
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

// Words a device name may carry besides the model: vendor, form factor, memory size.
// Anything else ("ti", "laptop", "nvl", "a10g") makes it another card.
bool neutral(const std::string& w) {
  if (w == "nvidia" || w == "geforce" || w == "tesla" || w == "gpu" || w == "pcie") return true;
  if (w.starts_with("sxm")) return true;
  return w.size() > 2 && w.ends_with("gb") &&
         std::all_of(w.begin(), w.end() - 2, [](char c) { return std::isdigit(c) != 0; });
}

}  // namespace

const std::vector<GpuSpec>& gpus() { return kGpus; }

const GpuSpec* find_gpu(std::string_view name) {
  const std::string flat = squeeze(name);
  for (const auto& g : kGpus)
    if (flat == squeeze(g.key) || flat == squeeze(g.name)) return &g;
  const auto device = words(name);
  const GpuSpec* best = nullptr;
  std::size_t best_size = 0;
  for (const auto& g : kGpus) {
    const auto want = words(g.tokens);
    bool all = std::all_of(want.begin(), want.end(), [&](const std::string& w) {
      return std::find(device.begin(), device.end(), w) != device.end();
    });
    bool rest = std::all_of(device.begin(), device.end(), [&](const std::string& w) {
      return neutral(w) || std::find(want.begin(), want.end(), w) != want.end();
    });
    if (all && rest && want.size() > best_size) {
      best = &g;
      best_size = want.size();
    }
  }
  return best;
}

std::optional<double> peak_tflops(const GpuSpec& gpu, Precision precision) {
  double v = 0;
  switch (precision) {
    case Precision::kFp32: v = gpu.fp32_tflops; break;
    case Precision::kFp16Amp: v = gpu.fp16_tflops; break;
    case Precision::kBf16Amp:
    case Precision::kBf16: v = gpu.bf16_tflops; break;
  }
  if (v <= 0) return std::nullopt;
  return v;
}

int64_t memory_bytes(const GpuSpec& gpu) {
  return gpu.reported_bytes > 0 ? gpu.reported_bytes : static_cast<int64_t>(std::llround(gpu.memory_gib * kGiB));
}

std::optional<double> mfu(const Row& row) {
  const auto tflops = row.number(schema::column("tflops"));
  const auto precision = row.value<Precision>();
  if (row.value<Device>() != Device::kCuda || !tflops || !precision) return std::nullopt;
  const GpuSpec* gpu = find_gpu(row.at(schema::column("device_name")));
  if (!gpu) return std::nullopt;
  const auto peak = peak_tflops(*gpu, *precision);
  if (!peak || *peak <= 0) return std::nullopt;
  return *tflops / *peak;
}

}  // namespace sweep::reports
