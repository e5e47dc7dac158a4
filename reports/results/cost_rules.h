// The step-time cost model (issue 35): a table of rules, each a small function with its source,
// that turns the kernels one training step launches (recorded on the emulated device,
// sweeps/worker/emulate/cost_record.h) into a time on a card of the table. Pure arithmetic, no
// LibTorch, so that the reports and the tables can use the same rules.
//
// A step is replayed as CUDA runs it: the host dispatches op after op (host time per op), each
// kernel starts when the host has launched it and the kernel before it has finished (one
// stream), and takes the larger of its compute time and its memory time plus a fixed launch
// overhead; a synchronisation makes the host wait for the device. The step time is the
// steady-state distance between two consecutive steps' ends.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace sweep::cost {

enum class Dtype { kF32, kF16, kBf16, kInt8, kOther };

enum class Kind {
  kGemm,         // cuBLAS: batch x (M x K)(K x N)
  kConv,         // cuDNN convolution as an implicit GEMM of the same shape
  kAttention,    // a fused scaled_dot_product_attention kernel (m = Lq, n = Lk, k = head dim)
  kMemory,       // elementwise ops, reductions, norms, losses, copies on the device: bytes moved
  kForeach,      // a torch._foreach_* op: multi_tensor_apply's launches over its tensor lists
  kPcie,         // a copy between host and device memory
  kHostCompute,  // host work in the step (offload's CPU AdamW, CPU step counters): bytes at host
                 // speed, one dispatch a tensor for a foreach op's CPU loop
  kSync,         // the host waits for the device (torch.cuda.synchronize)
  kDispatch,     // an op that launches no kernel (a view, a factory): host time only
  kHook,         // a saved-tensor hook of non-reentrant checkpointing (torch.utils.checkpoint's
                 // pack hook in the forward and the recomputation, its unpack hook in backward):
                 // a Python function in a transformers loop, C++ in sweep's burst; host time only
};

enum class Attention { kFlash, kEfficient, kCudnn };

struct Kernel {
  Kind kind = Kind::kMemory;
  Dtype dtype = Dtype::kF32;
  int64_t m = 0, n = 0, k = 0, batch = 1;  // GEMM shape; attention: Lq, Lk, head dim, B x heads
  double bytes = 0;                        // read plus written
  int64_t tensors = 0, chunks = 0;         // foreach: tensors per list, 64 Ki-element chunks
  int lists = 1;                           // foreach: tensor lists it reads or writes
  Attention backend = Attention::kFlash;
  bool causal = false, backward = false;
  // The op runs under autograd: it records a node (grad mode on, an input requiring grad) or
  // the autograd engine runs it in the backward pass. Other ops (the optimizer's, eval's) are
  // dispatched with no autograd work.
  bool autograd = false;
};

// What the rules read of a card: cards.h's dense peaks (TFLOP/s) and SMs, card_speed.h's
// bandwidths (GB/s).
struct Card {
  double fp32_tflops = 0, tf32_tflops = 0, fp16_tflops = 0, bf16_tflops = 0;
  int sms = 0;
  double bandwidth_gbs = 0, pcie_gbs = 0;
};
// A table card's facts by key, name or CUDA device name (find_card); nullopt for an unknown
// card or one whose peaks are not published (the A10G).
std::optional<Card> card_for(std::string_view name);

// The efficiencies the rules apply to the datasheet peaks, fitted on measured H100 rows
// (docs/fidelity.md, "Step time"); the same for every card.
struct Calibration {
  double gemm_tensor = 0;  // a large tensor-core GEMM's fraction of the dense peak
  double gemm_simt = 0;    // a large fp32 (CUDA-core) GEMM's fraction of the fp32 peak
  double gemm_k_half = 0;  // K at which a tile's main loop is half its time (prologue, epilogue)
  double attention = 0;    // a flash kernel's fraction of the tensor peak
  double bandwidth = 0;    // a streaming kernel's fraction of the memory bandwidth
  double launch_us = 0;    // device time every kernel adds (launch, tail)
  double host_kernel_us = 0;    // host time to dispatch an op that launches a kernel
  double host_dispatch_us = 0;  // host time of an op that launches none
  double host_autograd_us = 0;  // what autograd adds to an op's host time (Kernel::autograd)
  double sync_us = 0;           // a synchronisation's round trip
  double host_gbs = 0;          // host memory speed of the CPU optimizer (offload)
  // A PyTorch + transformers loop's host time over sweep's (C++) for the same ops.
  double python_host = 0;
  // A checkpointing hook's host time (Kind::kHook): sweep's C++ one, and torch.utils.checkpoint's
  // Python one in a transformers loop.
  double host_hook_us = 0;
  double python_hook_us = 0;
};
const Calibration& calibration();

// The rules' measured error: the mean absolute error of the predicted step time on the H100
// steps held out from the fit (docs/fidelity.md, "Step time"; StepTime.* measures it again).
// A predicted lead smaller than this is too close to call (reports/common/pick.h).
inline constexpr double kStepTimeError = 0.101;

// --- The rules, each pinned by a test in tests/reports_cost_rules_test.cc ---

// GEMM and convolution FLOPs: 2 M N K per batch entry.
double gemm_flops(const Kernel& g);
// The dense peak a GEMM of this dtype runs at (TFLOP/s): fp16/bf16 on tensor cores; fp32 GEMMs
// on CUDA cores (torch.backends.cuda.matmul.allow_tf32 is False by default); fp32
// convolutions on TF32 tensor cores (torch.backends.cudnn.allow_tf32 is True by default).
double gemm_peak_tflops(const Kernel& g, const Card& card);
// Tiles of the output a GEMM is cut into: 128 x 128 (CUTLASS's default threadblock for
// tensor-core and SIMT GEMMs, default_gemm_configuration.h; cuBLAS's common 128x128 kernels),
// split along K when too few tiles fill the SMs (cuBLAS's split-K): the CTAs it launches.
int64_t gemm_ctas(const Kernel& g, int sms);
// Wave quantisation: CTAs run in waves of one per SM; the last wave's idle SMs are lost.
double wave_efficiency(int64_t ctas, int sms);
double gemm_us(const Kernel& g, const Card& card, const Calibration& c);
// Bytes at the card's bandwidth.
double memory_us(double bytes, const Card& card, const Calibration& c);
// Fused attention FLOPs: forward 4 B H Lq Lk d (QK^T and PV), halved when causal; backward
// 2.5 times the forward (five GEMMs for two: FlashAttention-2, section 3.1).
double attention_flops(const Kernel& a);
// CTAs of a fused attention kernel: one per (batch x head, 128-row block of queries) forward,
// of keys backward (FlashAttention-2's partition, kBlockM = kBlockN = 128 for head dim 64..128
// on sm80+).
int64_t attention_ctas(const Kernel& a);
// The backend's fraction of the flash kernel's throughput (memory-efficient: xFormers'
// CUTLASS kernel; cuDNN's fused kernel as fast as flash).
double attention_backend_factor(Attention backend);
double attention_us(const Kernel& a, const Card& card, const Calibration& c);
// The launches of one foreach op: multi_tensor_apply.cuh launches when a launch's tensors reach
// depth_to_max_tensors[lists - 1] ({110, 64, 48, 36, 30}) or its chunks of kChunkSize = 65536
// elements reach depth_to_max_blocks (320).
int64_t foreach_launches(const Kernel& f);
// A kernel's device time: max(compute, memory) + the launch overhead, per launch.
double kernel_us(const Kernel& k, const Card& card, const Calibration& c);

// The steady-state step time of a recorded step on a card.
struct StepTime {
  double step_ms = 0;
  double device_ms = 0;  // the kernels' device time alone
  double host_ms = 0;    // the host's dispatch and host work alone
  int64_t kernels = 0;
};
// The loop that dispatches the step: a PyTorch + transformers script (what a user runs, and
// what an emulated row predicts) or sweep's own burst (what `sweep run` measures on a GPU).
struct Loop {
  bool python = true;
};
StepTime predict_step(const std::vector<Kernel>& step, const Card& card,
                      const Calibration& c = calibration(), Loop loop = {});

}  // namespace sweep::cost
