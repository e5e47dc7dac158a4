// bitsandbytes' AdamW (Optimizer2State "adam"). AdamW8bit (optim_bits 8): both moments
// quantised block-wise (256 elements a block) to 8-bit codes of bnb's dynamic maps, a signed
// one for the first moment and an unsigned one for the second, with one float absmax per
// block; parameters under min_8bit_size (4096) elements keep bnb's 32-bit state instead.
// optim_bits 32: float moments for every parameter. Paged (PagedAdamW8bit, PagedAdamW32bit):
// the same, with the moments of large parameters in CUDA unified memory.
// The update is the arithmetic of bnb's CUDA kernels, on CUDA by a kernel of ours
// (sweeps/worker/adamw8bit.cu), on the CPU with ATen ops (bnb's own CPU backend differs: see the .cc).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "sweeps/worker/optim.h"

namespace sweep {

constexpr int64_t k8bitBlock = 256;      // Optimizer2State.init_state: blocksize = 256
constexpr int64_t kMin8bitSize = 4096;   // AdamW8bit(min_8bit_size=4096)

// functional.py create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): 256 sorted
// floats in [-1, 1] (signed) or [0, 1].
torch::Tensor dynamic_map(bool is_signed);

// The codes bnb's CUDA kernel gives x (already divided by its block's absmax): the nearest
// code as its binary search and midpoint rule (quantize_2D) pick it, ties included. Long,
// x's shape.
torch::Tensor quantize_codes(const torch::Tensor& x, const torch::Tensor& code);

// Optimizer-state bytes bnb's AdamW8bit allocates for one parameter of `numel` elements on
// the first step (state1/state2 and, when 8-bit, absmax1/absmax2; the step count is a Python int).
int64_t adamw8bit_param_state_bytes(int64_t numel);

// The state of one parameter: 8-bit (state1/state2 uint8 of the parameter's shape, absmax1/2
// float per block) or 32-bit (state1/state2 float, absmax undefined).
struct AdamW8bitState {
  torch::Tensor state1, state2, absmax1, absmax2;
  int64_t step = 0;
};

// The 256-entry maps, shared by every 8-bit parameter as bnb's name2qmap.
struct QMaps {
  torch::Tensor qmap1, qmap2;  // signed (first moment), unsigned (second moment)
};

struct AdamW8bitHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};

// One update of one parameter in place (the step count already advanced), on the parameter's
// device: the kernel on CUDA, ATen on the CPU. `force_cpu_arithmetic` runs the ATen path on a
// CUDA tensor (the *_CUDA tests compare the two).
void adamw8bit_update(const torch::Tensor& p, const torch::Tensor& g, AdamW8bitState& s,
                      const QMaps& maps, const AdamW8bitHyper& h, bool force_cpu_arithmetic = false);

// What Optimizer8bit.step does after each parameter's update: bnb's sync_gpu(p), which waits
// for the device of a CUDA parameter and does nothing elsewhere.
using ParamSync = std::function<void(const torch::Tensor&)>;
void sync_device_of(const torch::Tensor& t);

// bitsandbytes' AdamW as transformers builds it (trainer_optimizer.py
// _get_bitsandbytes_optimizer: bnb.optim.AdamW(optim_bits=8 if "8bit" in optim else 32,
// is_paged="paged" in optim)): adamw_bnb_8bit {8, false}, paged_adamw_8bit {8, true},
// paged_adamw_32bit {32, true}.
struct BnbAdamW {
  int bits = 8;
  bool paged = false;
};
// Optimizer8bit.get_state_buffer: a parameter's state is paged (CUDA unified memory) when the
// optimizer is paged, the parameter is on a GPU (on the CPU bnb warns and falls back) and it
// has at least 1e5 elements; otherwise zeros in the device's allocator.
constexpr int64_t kPagedMinNumel = 100000;

// `sync` runs after each parameter's update (tests pass one that records the calls).
std::unique_ptr<Optimizer> make_bnb_adamw(double lr, double weight_decay,
                                          std::vector<torch::Tensor> params, BnbAdamW kind = {},
                                          ParamSync sync = &sync_device_of);

}  // namespace sweep
