// The card table (cards.h). Peaks are the vendors' dense figures (datasheets quote tensor-core
// rates "with sparsity": those are halved here). GeForce cards run FP16/BF16 tensor math with
// FP32 accumulation (what autocast uses) at half their FP16-accumulate rate; that half is the
// figure given. Compute capability and SM counts are NVIDIA's (the CUDA C Programming Guide's
// compute-capability table; the SMs from each datasheet's CUDA core count over the cores per
// SM of its architecture: 64 on Turing and GA100, 128 on GA10x, Ada and Hopper).
//
// Memory: the total CUDA reports (cudaMemGetInfo; the "total capacity" of PyTorch's OOM
// message), never the capacity as sold: every card's figure is measured here or quoted from a
// public issue thread that names the card, one source each (`memory_source`). Where threads
// disagree (drivers, ECC, hypervisors reserve different amounts) the lowest total seen is
// taken, so that a batch the table says fits also fits on the least generous setup. An OOM
// message rounds to 0.01 GiB: these figures are good to about 5 MiB.
//
// Not in the table: the V100 16GB and 32GB (sm_70). torch 2.11.0+cu130, the build sweep links
// and whose allocator, cuBLAS workspaces and attention kernels the emulator transcribes, ships
// sm_75 and newer only; 2.11 runs Volta only in its cu126 build (CUDA 12.6, cuDNN 9), whose
// workspace and kernel choices nobody has read or measured for this project, and which sweep's
// own binary is not built against. A table for it would be labelled with a build it was not
// modelled on, so the cards are refused with that reason (unsupported_card_reason below).
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
  // key        name             tokens             GiB   fp32   tf32    fp16    bf16  reported         cc     SMs  context  source
  // GeForce RTX 3060 specifications (3584 CUDA cores = 28 SMs, 1.78 GHz boost) at the
  // per-SM rates of the NVIDIA Ampere GA102 whitepaper (its RTX 3090 figures / 82 SMs).
  // reported: 11.75 GiB on Linux (configs/rtx3060.yaml).
  {"rtx3060",    "RTX 3060",      "rtx 3060",        12,  12.7,  12.7,   25.5,   25.5, reported(11.75),  8, 6,  28, 0,
   "https://github.com/Kunhao-Liu/StyleGaussian/issues/12"},
  // NVIDIA T4 datasheet: FP32 8.1, mixed FP16/FP32 65 (2560 CUDA cores = 40 SMs); Turing has
  // no TF32 or BF16. reported: 14.56 GiB on GCP (Windows reports 15.83).
  {"t4",         "T4",            "t4",              16,   8.1,     0,     65,      0, reported(14.56),  7, 5,  40, 0,
   "https://github.com/Zheng-Chong/CatVTON/issues/133"},
  // NVIDIA A10 datasheet (9216 CUDA cores = 72 SMs). reported: 21.99 GiB, "A10 GPU (24G)",
  // with ECC on, as data-centre A10s ship (23.70 with ECC off).
  {"a10",        "A10",           "a10",             24,  31.2,  62.5,    125,    125, reported(21.99),  8, 6,  72, 0,
   "https://github.com/vllm-project/vllm/issues/16128"},
  // AWS's variant of the A10 (EC2 G5): the same 24 GB GA102 with 80 SMs (10240 CUDA cores).
  // NVIDIA publishes no datasheet for it and its tensor rates differ from the A10's
  // (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/), so its peaks are
  // left unknown (no MFU). reported: "A10G reports ~22GB" with ECC on (the source); the exact
  // figure taken is the A10's 21.99 GiB (the same memory, ECC on), the lowest seen for either.
  {"a10g",       "A10G",          "a10g",            24,     0,     0,      0,      0, reported(21.99),  8, 6,  80, 0,
   "https://github.com/huggingface/local-gemma/pull/25"},
  // NVIDIA L4 datasheet (TF32 120, FP16/BF16 242 with sparsity; 7424 CUDA cores = 58 SMs).
  // reported: 22.03 GiB, "Is a L4 GPU not enough".
  {"l4",         "L4",            "l4",              24,  30.3,    60,    121,    121, reported(22.03),  8, 9,  58, 0,
   "https://github.com/ArcInstitute/evo2/issues/190"},
  // NVIDIA Ada Lovelace architecture whitepaper, table "GeForce RTX 4090" (128 SMs).
  // reported: 23.52 GiB (a "4090 24G"; 23.64 in https://github.com/ali-vilab/VGen/issues/104).
  {"rtx4090",    "RTX 4090",      "rtx 4090",        24,  82.6,  82.6,  165.2,  165.2, reported(23.52),  8, 9, 128, 0,
   "https://github.com/Soul-AILab/SoulX-FlashTalk/issues/5"},
  // NVIDIA Ampere GA102 whitepaper, table "GeForce RTX 3090" (82 SMs).
  // reported: 23.70 GiB on Linux (also https://github.com/xiaoxiangAQ/GAS-Net/issues/7;
  // Windows reports 24.00 GiB).
  {"rtx3090",    "RTX 3090",      "rtx 3090",        24,  35.6,  35.6,     71,     71, reported(23.70),  8, 6,  82, 0,
   "https://github.com/GaoLii/DSP/issues/10"},
  // NVIDIA A100 datasheet (SXM and PCIe share the peaks; 6912 CUDA cores = 108 SMs).
  // reported: 39.50 GiB (configs/a100-40gb.yaml).
  {"a100-40gb",  "A100 40GB",     "a100 40gb",       40,  19.5,   156,    312,    312, reported(39.5),   8, 0, 108, 0,
   "https://github.com/TianheWu/CoSeR/issues/10"},
  // NVIDIA L40S datasheet (TF32 366, FP16/BF16 733 with sparsity; 18176 CUDA cores = 142 SMs).
  // reported: 44.42 GiB on 8 x L40S.
  {"l40s",       "L40S",          "l40s",            48,  91.6,   183, 362.05, 362.05, reported(44.42),  8, 9, 142, 0,
   "https://github.com/stepfun-ai/Step-Video-T2V/issues/8"},
  // NVIDIA H100 datasheet and Hopper whitepaper: PCIe (114 SMs) and SXM5 (132 SMs; the SXM
  // part reports itself as "H100 80GB HBM3"). reported: 79.11 GiB on an H100 in a vLLM
  // thread, below the 79.18 the SXM part lent here reports: the lowest H100 80GB total seen.
  {"h100-pcie",  "H100 PCIe",     "h100 pcie",       80,    51,   378,    756,    756, reported(79.11),  9, 0, 114, 0,
   "https://github.com/vllm-project/vllm/issues/27508"},
  // reported: measured here, device_memory_bytes of the H100 80GB HBM3 lent on 2026-11-22
  // (bench/baselines/ci-gpu/results.csv), 79.18 GiB of the 80 sold. context: measured on the
  // same GPU (132 SMs, torch 2.11.0+cu130, CUDA 13): device memory in use less the allocator's
  // reserved memory, the median over the 60 ok rows of docs/tables/rtx3060-results.csv
  // (767 MiB; 687 to 767 MiB over bench/baselines/ci-gpu, whose bursts load fewer kernels).
  {"h100-80gb",  "H100 80GB SXM", "h100 hbm3",       80,  66.9, 494.7,  989.4,  989.4, 85017493504,      9, 0, 132, 804061184,
   "measured: bench/baselines/ci-gpu/results.csv (H100 80GB HBM3, 2026-11-22)"},
  // reported: 79.25 GiB (configs/a100-80gb.yaml).
  {"a100-80gb",  "A100 80GB",     "a100 80gb",       80,  19.5,   156,    312,    312, reported(79.25),  8, 0, 108, 0,
   "https://github.com/levihsu/OOTDiffusion/issues/235"},
  // NVIDIA H200 datasheet (SXM): the H100 SXM's compute with 141 GB of HBM3e. reported:
  // "NVIDIA H200 (139.81 GiB)" (driver 570); 139.80 appears in other public H200 logs: the
  // lower is taken (the H200 lent here on 2026-11-27, driver 580.159.04, reported
  // 150,109,880,320 bytes, 139.8007 GiB: bench/baselines/h200-fidelity/results.csv). context:
  // measured on that H200 by the H100's rule, device memory in use less the allocator's
  // reserved memory, median over the file's 38 ok rows: 766.8 MiB, the H100's to the byte.
  {"h200",       "H200",          "h200",           141,  66.9, 494.7,  989.4,  989.4, reported(139.80), 9, 0, 132, 804061184,
   "https://github.com/vllm-project/vllm/issues/34553"},
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

int64_t card_memory_bytes(const CardSpec& card) { return card.reported_bytes; }

int64_t card_context_bytes(const CardSpec& card) {
  return card.context_bytes > 0 ? card.context_bytes : kDefaultCudaContextBytes;
}

std::string context_allowance_source(const CardSpec& card) {
  return card.context_bytes > 0 ? "measured on this card" : kDefaultContextSource;
}

std::optional<std::string> unsupported_card_reason(std::string_view name) {
  const auto w = words(name);
  if (std::find(w.begin(), w.end(), "v100") == w.end() && !squeeze(name).starts_with("v100"))
    return std::nullopt;
  return "the V100 (sm_70) is not a card sweep predicts: torch 2.11.0+cu130, the build sweep "
         "links and the emulator follows, has kernels for sm_75 and newer only; torch 2.11 runs "
         "Volta only in its cu126 build (CUDA 12.6, cuDNN 9), which sweep is not built against "
         "and whose workspaces were never measured";
}

std::string unknown_card_message(std::string_view name) {
  if (auto why = unsupported_card_reason(name)) return "'" + std::string(name) + "': " + *why;
  return "unknown card '" + std::string(name) + "'";
}

std::string card_keys() {
  std::string keys;
  for (const auto& c : kCards) keys += (keys.empty() ? "" : ", ") + std::string(c.key);
  return keys;
}

std::string nearest_card_key(std::string_view name) {
  // A card refused for a reason (the V100) is no typo of another: no suggestion ("v100" came
  // within two edits of a10, a10g and h200).
  if (unsupported_card_reason(name)) return "";
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
