// The card table (cards.h). Peaks are the vendors' dense figures (datasheets quote tensor-core
// rates "with sparsity": those are halved here). GeForce cards run FP16/BF16 tensor math with
// FP32 accumulation (what autocast uses) at half their FP16-accumulate rate; that half is the
// figure given. Memory is the capacity as sold; `reported` is the total CUDA reports
// (cudaMemGetInfo, "total capacity" in PyTorch's OOM message), where it is known: measured
// here (H100), or quoted from a PyTorch OOM message in a public issue, the same figures and
// sources as the configs' memory_gib (an OOM message rounds to 0.01 GiB: these are good to
// about 5 MiB). Compute capability and SM counts are NVIDIA's (the CUDA C Programming Guide's
// compute-capability table; the SMs from each datasheet's CUDA core count over the cores per
// SM of its architecture: 64 on Volta, Turing and GA100, 128 on GA10x, Ada and Hopper).
#include "reports/results/cards.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "reports/results/rows.h"  // kGiB
#include "reports/results/spelling.h"

namespace sweep {
namespace {

constexpr int64_t reported(double gib) { return static_cast<int64_t>(gib * reports::kGiB); }

// clang-format off
const std::vector<CardSpec> kCards = {
  // key        name             tokens             GiB   fp32   tf32    fp16    bf16  reported        cc     SMs  context
  // GeForce RTX 3060 specifications (3584 CUDA cores = 28 SMs, 1.78 GHz boost) at the
  // per-SM rates of the NVIDIA Ampere GA102 whitepaper (its RTX 3090 figures / 82 SMs).
  // reported: configs/rtx3060.yaml: 11.75 GiB on Linux, https://github.com/Kunhao-Liu/StyleGaussian/issues/12
  {"rtx3060",    "RTX 3060",      "rtx 3060",        12,  12.7,  12.7,   25.5,   25.5, reported(11.75),  8, 6,  28},
  // NVIDIA T4 datasheet: FP32 8.1, mixed FP16/FP32 65 (2560 CUDA cores = 40 SMs); Turing has
  // no TF32 or BF16. reported: configs/t4.yaml: 14.56 GiB on GCP, https://github.com/Zheng-Chong/CatVTON/issues/133
  {"t4",         "T4",            "t4",              16,   8.1,     0,     65,      0, reported(14.56),  7, 5,  40},
  // NVIDIA V100 datasheet (SXM2): FP32 15.7, tensor 125 (5120 CUDA cores = 80 SMs); Volta has
  // no TF32 or BF16.
  {"v100-16gb",  "V100 16GB",     "v100 sxm2 16gb",  16,  15.7,     0,    125,      0, 0,                7, 0,  80},
  // NVIDIA Ada Lovelace architecture whitepaper, table "GeForce RTX 4090" (128 SMs).
  // reported: configs/rtx4090.yaml: 23.64 GiB, https://github.com/ali-vilab/VGen/issues/104
  {"rtx4090",    "RTX 4090",      "rtx 4090",        24,  82.6,  82.6,  165.2,  165.2, reported(23.64),  8, 9, 128},
  // NVIDIA Ampere GA102 whitepaper, table "GeForce RTX 3090" (82 SMs).
  // reported: 23.70 GiB total capacity on Linux, https://github.com/GaoLii/DSP/issues/10 and
  // https://github.com/xiaoxiangAQ/GAS-Net/issues/7 (Windows reports 24.00 GiB).
  {"rtx3090",    "RTX 3090",      "rtx 3090",        24,  35.6,  35.6,     71,     71, reported(23.70),  8, 6,  82},
  // NVIDIA A10 datasheet (9216 CUDA cores = 72 SMs).
  {"a10",        "A10",           "a10",             24,  31.2,  62.5,    125,    125, 0,                8, 6,  72},
  // AWS's variant of the A10 (EC2 G5): the same 24 GB GA102 with 80 SMs (10240 CUDA cores).
  // NVIDIA publishes no datasheet for it and its tensor rates differ from the A10's
  // (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/), so its peaks are
  // left unknown (no MFU). CUDA reports about 22 GB of it with ECC on
  // (https://github.com/huggingface/local-gemma/pull/25), no exact figure: as sold.
  {"a10g",       "A10G",          "a10g",            24,     0,     0,      0,      0, 0,                8, 6,  80},
  // NVIDIA L4 datasheet (TF32 120, FP16/BF16 242 with sparsity; 7424 CUDA cores = 58 SMs).
  {"l4",         "L4",            "l4",              24,  30.3,    60,    121,    121, 0,                8, 9,  58},
  {"v100-32gb",  "V100 32GB",     "v100 sxm2 32gb",  32,  15.7,     0,    125,      0, 0,                7, 0,  80},
  // NVIDIA A100 datasheet (SXM and PCIe share the peaks; 6912 CUDA cores = 108 SMs).
  // reported: configs/a100-40gb.yaml: 39.50 GiB, https://github.com/TianheWu/CoSeR/issues/10
  {"a100-40gb",  "A100 40GB",     "a100 40gb",       40,  19.5,   156,    312,    312, reported(39.5),   8, 0, 108},
  // NVIDIA L40S datasheet (TF32 366, FP16/BF16 733 with sparsity; 18176 CUDA cores = 142 SMs).
  {"l40s",       "L40S",          "l40s",            48,  91.6,   183, 362.05, 362.05, 0,                8, 9, 142},
  // reported: configs/a100-80gb.yaml: 79.25 GiB, https://github.com/levihsu/OOTDiffusion/issues/235
  {"a100-80gb",  "A100 80GB",     "a100 80gb",       80,  19.5,   156,    312,    312, reported(79.25),  8, 0, 108},
  // NVIDIA H100 datasheet and Hopper whitepaper: PCIe (114 SMs) and SXM5 (132 SMs; the SXM
  // part reports itself as "H100 80GB HBM3").
  {"h100-pcie",  "H100 PCIe",     "h100 pcie",       80,    51,   378,    756,    756, 0,                9, 0, 114},
  // reported: measured here, device_memory_bytes of the H100 80GB HBM3 lent on 2026-11-22
  // (bench/baselines/ci-gpu/results.csv), 79.18 GiB of the 80 sold. context: measured on the
  // same GPU, torch 2.11.0+cu130: device memory in use less the allocator's reserved memory,
  // the median over the 60 ok rows of docs/tables/rtx3060-results.csv (767 MiB; 687 to 767 MiB
  // over bench/baselines/ci-gpu, whose bursts load fewer kernels).
  {"h100-80gb",  "H100 80GB SXM", "h100 hbm3",       80,  66.9, 494.7,  989.4,  989.4, 85017493504,      9, 0, 132, 804061184},
  // NVIDIA H200 datasheet (SXM): the H100 SXM's compute with 141 GB of HBM3e.
  {"h200",       "H200",          "h200",           141,  66.9, 494.7,  989.4,  989.4, 0,                9, 0, 132},
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
// Anything else ("ti", "laptop", "nvl") makes it another card.
bool neutral(const std::string& w) {
  if (w == "nvidia" || w == "geforce" || w == "tesla" || w == "gpu" || w == "pcie") return true;
  if (w.starts_with("sxm")) return true;
  return w.size() > 2 && w.ends_with("gb") &&
         std::all_of(w.begin(), w.end() - 2, [](char c) { return std::isdigit(c) != 0; });
}

constexpr std::string_view kEmulatedSuffix = " (emulated)";

}  // namespace

const std::vector<CardSpec>& cards() { return kCards; }

const CardSpec* find_card(std::string_view name) {
  if (const auto card = emulated_card_name(name)) return find_card(*card);
  const std::string flat = squeeze(name);
  for (const auto& g : kCards)
    if (flat == squeeze(g.key) || flat == squeeze(g.name)) return &g;
  const auto device = words(name);
  const CardSpec* best = nullptr;
  std::size_t best_size = 0;
  for (const auto& g : kCards) {
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

int64_t card_memory_bytes(const CardSpec& card) {
  return card.reported_bytes > 0
             ? card.reported_bytes
             : static_cast<int64_t>(std::llround(card.memory_gib * reports::kGiB));
}

int64_t card_context_bytes(const CardSpec& card) {
  return card.context_bytes > 0 ? card.context_bytes : kDefaultCudaContextBytes;
}

std::string card_keys() {
  std::string keys;
  for (const auto& c : kCards) keys += (keys.empty() ? "" : ", ") + std::string(c.key);
  return keys;
}

std::string nearest_card_key(std::string_view name) {
  // Keys and names alike ("RTX 3060"), each suggested by its key.
  std::vector<std::string> spellings;
  for (const auto& c : kCards) {
    spellings.emplace_back(c.key);
    spellings.emplace_back(c.name);
  }
  std::vector<std::string> keys;
  for (const auto& near : nearest(std::string(name), spellings))
    for (const auto& c : kCards)
      if ((near == c.key || near == c.name) &&
          std::find(keys.begin(), keys.end(), std::string(c.key)) == keys.end())
        keys.emplace_back(c.key);
  return either(keys);
}

CardFacts facts_of(const CardSpec& card) {
  return {std::string(card.name), card_memory_bytes(card), card_context_bytes(card),
          card.cc_major,          card.cc_minor,           card.sms};
}

std::string card_cell(const CardFacts& c) {
  return c.name + " (sm_" + std::to_string(c.cc_major) + std::to_string(c.cc_minor) + ", " +
         std::to_string(c.sms) + " SMs, memory " + std::to_string(c.memory_bytes) + " B, context " +
         std::to_string(c.context_bytes) + " B" + (c.cpu ? ", cpu" : "") + ")";
}

std::optional<CardFacts> parse_card_cell(std::string_view cell) {
  const auto open = cell.rfind(" (sm_");
  if (open == std::string_view::npos || open == 0 || !cell.ends_with(")")) return std::nullopt;
  CardFacts c;
  c.name = std::string(cell.substr(0, open));
  std::string_view rest = cell.substr(open + 5, cell.size() - open - 6);  // "86, 28 SMs, ..."
  // Reads an integer, then expects `after` literally.
  auto take = [&rest](auto& out, std::string_view after) {
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), out);
    if (ec != std::errc() || p == rest.data()) return false;
    rest.remove_prefix(static_cast<std::size_t>(p - rest.data()));
    if (!rest.starts_with(after)) return false;
    rest.remove_prefix(after.size());
    return true;
  };
  int sm = 0;
  if (!take(sm, ", ") || !take(c.sms, " SMs, memory ") || !take(c.memory_bytes, " B, context ") ||
      !take(c.context_bytes, " B"))
    return std::nullopt;
  if (rest == ", cpu") {
    c.cpu = true;
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  if (sm < 10) return std::nullopt;  // sm_86: two digits at least
  // A card has memory, and its context is a part of it (a negative memory was read as a
  // card). The test-only CPU card (emulated_cpu) has none: it enforces no memory.
  if (c.memory_bytes < 0 || c.context_bytes < 0) return std::nullopt;
  if (!c.cpu && (c.memory_bytes == 0 || c.context_bytes >= c.memory_bytes)) return std::nullopt;
  c.cc_major = sm / 10;
  c.cc_minor = sm % 10;
  return c;
}

std::string emulated_device_name(std::string_view card_name) {
  return std::string(card_name) + std::string(kEmulatedSuffix);
}

std::optional<std::string> emulated_card_name(std::string_view device_name) {
  if (!device_name.ends_with(kEmulatedSuffix) || device_name.size() == kEmulatedSuffix.size())
    return std::nullopt;
  return std::string(device_name.substr(0, device_name.size() - kEmulatedSuffix.size()));
}

std::string predicted_by(std::string_view card_name) {
  return "predicted by emulation of " + std::string(card_name) + ", not measured";
}

}  // namespace sweep
