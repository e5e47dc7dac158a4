// scaled_dot_product_attention as PyTorch 2.11 runs it on a CUDA card, on Meta tensors.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "sweeps/measure/emulated_card.h"

namespace sweep::emu {

enum class SdpBackend { kMath, kFlash, kEfficient, kCudnn };

SdpBackend choose_sdp_backend(const EmulatedCard& card, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, const std::optional<at::Tensor>& attn_mask,
                              double dropout_p, bool is_causal, bool enable_gqa);

at::Tensor cuda_sdpa(const EmulatedCard& card, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const std::optional<at::Tensor>& attn_mask,
                     double dropout_p, bool is_causal, std::optional<double> scale,
                     bool enable_gqa = false);

}  // namespace sweep::emu
