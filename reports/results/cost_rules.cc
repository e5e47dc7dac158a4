// The step-time cost rules (cost_rules.h).
#include "reports/results/cost_rules.h"

#include <algorithm>
#include <cmath>

#include "reports/results/card_speed.h"
#include "reports/results/cards.h"

namespace sweep::cost {
namespace {

constexpr int64_t kTile = 128;              // CUTLASS default threadblock M and N
constexpr int64_t kSplitKMin = 256;         // the least K a split-K slice keeps
constexpr int64_t kAttentionBlock = 128;    // FlashAttention-2's kBlockM / kBlockN
constexpr int64_t kForeachChunk = 65536;    // multi_tensor_apply.cuh kChunkSize
constexpr int64_t kForeachMaxBlocks = 320;  // depth_to_max_blocks
constexpr int64_t kForeachMaxTensors[] = {110, 64, 48, 36, 30};  // depth_to_max_tensors

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// cost::fit (cost_fit.h) on the training half of the measured H100 rows, as
// StepTime.TheCommittedCalibrationIsTheFitOnTheFittedHalf runs it (docs/fidelity.md, "Step
// time": the rows, the split and the held-out error).
const Calibration kCalibration = {
    .gemm_tensor = 0.497,
    .gemm_simt = 0.943,
    .gemm_k_half = 135.4,
    .attention = 0.876,
    .bandwidth = 0.699,
    .launch_us = 5.47,
    .host_kernel_us = 4.39,
    .host_dispatch_us = 4.56,
    .host_autograd_us = 10.00,
    .sync_us = 4.6,
    // Not fitted (no measured offload row): a CPU AdamW's stream at a tenth of a server's
    // DDR bandwidth, the for-loop optimizer's elementwise kernels on the host's threads.
    .host_gbs = 10.0,
    .python_host = 1.146,
    .host_hook_us = 0.01,
    .python_hook_us = 20.86,
};

}  // namespace

std::optional<Card> card_for(std::string_view name) {
  const CardSpec* spec = find_card(name);
  if (!spec) return std::nullopt;
  const CardSpeed* speed = card_speed(spec->key);
  if (!speed || spec->fp32_tflops <= 0 || spec->sms <= 0) return std::nullopt;
  return Card{spec->fp32_tflops, spec->tf32_tflops, spec->fp16_tflops, spec->bf16_tflops,
              spec->sms,         speed->bandwidth_gbs, pcie_gbs(speed->pcie_gen)};
}

const Calibration& calibration() { return kCalibration; }

double gemm_flops(const Kernel& g) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
         static_cast<double>(g.batch);
}

double gemm_peak_tflops(const Kernel& g, const Card& card) {
  switch (g.dtype) {
    case Dtype::kF16:
    case Dtype::kInt8: return card.fp16_tflops;
    case Dtype::kBf16: return card.bf16_tflops > 0 ? card.bf16_tflops : card.fp32_tflops;
    case Dtype::kF32:
      if (g.kind == Kind::kConv && card.tf32_tflops > 0) return card.tf32_tflops;
      return card.fp32_tflops;
    default: return card.fp32_tflops;
  }
}

namespace {
bool on_tensor_cores(const Kernel& g, const Card& card) {
  return gemm_peak_tflops(g, card) != card.fp32_tflops;
}
int64_t gemm_tiles(const Kernel& g) {
  return ceil_div(std::max<int64_t>(g.m, 1), kTile) * ceil_div(std::max<int64_t>(g.n, 1), kTile) *
         std::max<int64_t>(g.batch, 1);
}
int64_t split_k(const Kernel& g, int sms) {
  const int64_t tiles = gemm_tiles(g);
  if (tiles >= sms) return 1;
  return std::max<int64_t>(1, std::min<int64_t>(sms / tiles, g.k / kSplitKMin));
}
}  // namespace

int64_t gemm_ctas(const Kernel& g, int sms) { return gemm_tiles(g) * split_k(g, sms); }

double wave_efficiency(int64_t ctas, int sms) {
  if (ctas <= 0 || sms <= 0) return 1;
  const int64_t waves = ceil_div(ctas, sms);
  return static_cast<double>(ctas) / static_cast<double>(waves * sms);
}

double gemm_us(const Kernel& g, const Card& card, const Calibration& c) {
  const double flops = gemm_flops(g);
  if (flops <= 0) return 0;
  const double peak = gemm_peak_tflops(g, card) * 1e6;  // FLOP per microsecond
  const double large = on_tensor_cores(g, card) ? c.gemm_tensor : c.gemm_simt;
  const double k_slice = static_cast<double>(g.k) / static_cast<double>(split_k(g, card.sms));
  const double main_loop = k_slice / (k_slice + c.gemm_k_half);
  return flops / (peak * large * main_loop * wave_efficiency(gemm_ctas(g, card.sms), card.sms));
}

double memory_us(double bytes, const Card& card, const Calibration& c) {
  if (bytes <= 0 || card.bandwidth_gbs <= 0) return 0;
  return bytes / (card.bandwidth_gbs * 1e3 * c.bandwidth);  // GB/s = 1e3 B/us
}

double attention_flops(const Kernel& a) {
  const double forward = 4.0 * static_cast<double>(a.batch) * static_cast<double>(a.m) *
                         static_cast<double>(a.n) * static_cast<double>(a.k) * (a.causal ? 0.5 : 1.0);
  return a.backward ? 2.5 * forward : forward;
}

int64_t attention_ctas(const Kernel& a) {
  return std::max<int64_t>(a.batch, 1) * ceil_div(std::max<int64_t>(a.backward ? a.n : a.m, 1), kAttentionBlock);
}

double attention_backend_factor(Attention backend) {
  switch (backend) {
    case Attention::kFlash: return 1.0;
    // xFormers' CUTLASS kernels run at about 70% of FlashAttention-2's throughput
    // (FlashAttention-2 paper, figure 4: "xformers" against "FlashAttention-2" on A100).
    case Attention::kEfficient: return 0.7;
    // cuDNN's fused flash kernel (cuDNN 9 "SDPA"): on par with FlashAttention-2 on Hopper.
    case Attention::kCudnn: return 1.0;
  }
  return 1.0;
}

double attention_us(const Kernel& a, const Card& card, const Calibration& c) {
  Kernel as_gemm = a;
  as_gemm.kind = Kind::kGemm;
  const double peak = gemm_peak_tflops(as_gemm, card) * 1e6;
  const double eff = c.attention * attention_backend_factor(a.backend) *
                     wave_efficiency(attention_ctas(a), card.sms);
  return attention_flops(a) / (peak * eff);
}

int64_t foreach_launches(const Kernel& f) {
  if (f.tensors <= 0) return 0;
  const int lists = std::clamp(f.lists, 1, 5);
  return std::max(ceil_div(f.tensors, kForeachMaxTensors[lists - 1]),
                  ceil_div(std::max<int64_t>(f.chunks, 1), kForeachMaxBlocks));
}

double kernel_us(const Kernel& k, const Card& card, const Calibration& c) {
  const double memory = memory_us(k.bytes, card, c);
  switch (k.kind) {
    case Kind::kGemm:
    case Kind::kConv: return std::max(gemm_us(k, card, c), memory) + c.launch_us;
    case Kind::kAttention: return std::max(attention_us(k, card, c), memory) + c.launch_us;
    case Kind::kMemory: return memory + c.launch_us;
    case Kind::kForeach: {
      const int64_t launches = foreach_launches(k);
      return launches == 0 ? 0 : memory + c.launch_us * static_cast<double>(launches);
    }
    case Kind::kPcie: return card.pcie_gbs > 0 ? k.bytes / (card.pcie_gbs * 1e3) + c.launch_us : 0;
    default: return 0;
  }
}

namespace {

// One pass over the step: the host clock and the device clock, carried from the pass before.
struct Clocks {
  double host = 0, device = 0, device_busy = 0, host_busy = 0;
  int64_t kernels = 0;
};

double autograd_us(const Kernel& k, const Calibration& c) { return k.autograd ? c.host_autograd_us : 0; }

void replay(const std::vector<Kernel>& step, const Card& card, const Calibration& c, Loop loop,
            Clocks& t) {
  const double host_factor = loop.python ? c.python_host : 1.0;
  for (const Kernel& k : step) {
    switch (k.kind) {
      case Kind::kDispatch: {
        const double host = (c.host_dispatch_us + autograd_us(k, c)) * host_factor;
        t.host += host;
        t.host_busy += host;
        break;
      }
      case Kind::kHook: {
        const double host = loop.python ? c.python_hook_us : c.host_hook_us;
        t.host += host;
        t.host_busy += host;
        break;
      }
      case Kind::kSync:
        t.host = std::max(t.host, t.device) + c.sync_us;
        break;
      case Kind::kHostCompute: {
        // One op a tensor where a foreach op runs on the CPU (its slow path).
        const double ops = static_cast<double>(std::max<int64_t>(k.tensors, 1));
        const double us = c.host_kernel_us * ops + (c.host_gbs > 0 ? k.bytes / (c.host_gbs * 1e3) : 0);
        t.host += us;
        t.host_busy += us;
        break;
      }
      default: {
        const int64_t launches = k.kind == Kind::kForeach ? std::max<int64_t>(foreach_launches(k), 1) : 1;
        const double host =
            (c.host_kernel_us * static_cast<double>(launches) + autograd_us(k, c)) * host_factor;
        t.host += host;
        t.host_busy += host;
        const double us = kernel_us(k, card, c);
        t.device = std::max(t.device, t.host) + us;
        t.device_busy += us;
        t.kernels += launches;
      }
    }
  }
}

}  // namespace

StepTime predict_step(const std::vector<Kernel>& step, const Card& card, const Calibration& c,
                      Loop loop) {
  // Two passes: the second starts where the first left the host and the device, as the
  // timed steps follow each other without a synchronisation between them.
  Clocks t;
  replay(step, card, c, loop, t);
  const double end1 = std::max(t.host, t.device);
  const double device1 = t.device_busy, host1 = t.host_busy;
  const int64_t kernels1 = t.kernels;
  replay(step, card, c, loop, t);
  const double end2 = std::max(t.host, t.device);
  return {(end2 - end1) / 1e3, device1 / 1e3, host1 / 1e3, kernels1};
}

}  // namespace sweep::cost
