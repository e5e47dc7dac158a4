// scaled_dot_product_attention as PyTorch 2.11 runs it on a CUDA card, executed on Meta tensors:
// the backend choice of aten/src/ATen/native/transformers/cuda/sdp_utils.cpp for the emulated
// card, then the calls aten/src/ATen/native/transformers/attention.cpp makes for that backend,
// with Meta kernels (sdpa_meta_kernels.cc) that allocate what the CUDA kernels allocate, in the
// same order, at the same sizes, so that a tracking allocator registered for Meta sees the
// storages a CUDA caching allocator would be asked for, forward and backward.
//
// Sources read (the torch 2.11.0 wheel's headers are exact; the .cpp/.cu are not in the wheel):
// - the wheel (git_version 70d99e998b4955e0049d13a98d77ae1b14db1f45): sdp_utils_cpp.h,
//   ATen/Context.h (default priority order), mem_eff_attention/{kernel_forward,kernel_backward}.h,
//   mem_eff_attention/kernels/{cutlassF,cutlassB}.h, the ops' schemas, autograd/generated/
//   Functions.h (what each backward saves); libtorch_cuda.so's strings to tell which checks of
//   sdp_utils.cpp 2.11 has.
// - pytorch/pytorch sdp_utils.cpp at 001f694aef6f (newer than 2.11: its mem-efficient
//   storage-offset check, cuDNN 1/16 dropout check and cuDNN d256 backward check are not in the
//   2.11 binary and are left out here); attention.cu, attention_backward.cu, flash_api.cpp as
//   copied in rbarfinezhadfeli0/pytorch@0edb99975b52 docs/ (schemas match 2.11's: rng_state /
//   unused, no num_splits); cudnn/MHA.cpp as copied in stored files (run_cudnn_SDP_fprop/bprop).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "sweeps/measure/emulated_card.h"

namespace sweep::emu {

enum class SdpBackend { kMath, kFlash, kEfficient, kCudnn };

const char* sdp_backend_name(SdpBackend backend);

// The software the choice reads besides the card: the 2.11.0+cu130 wheel ships cuDNN 9.19.0
// (nvidia-cudnn-cu13 9.19.0.56), CUDA 13.0.
struct SdpSoftware {
  int64_t cudnn_version = 91900;  // at::detail::getCUDAHooks().versionRuntimeCuDNN()
  int cuda_version = 13000;       // CUDA_VERSION the wheel was built with
};

// select_sdp_backend of sdp_utils.cpp for a CUDA card of this compute capability, every backend
// enabled (the defaults), deterministic algorithms off. Reads requires_grad of q/k/v and
// at::GradMode as the original does (input_requires_grad of sdp_utils_cpp.h).
SdpBackend choose_sdp_backend(const EmulatedCard& card, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, const std::optional<at::Tensor>& attn_mask,
                              double dropout_p, bool is_causal, bool enable_gqa,
                              const SdpSoftware& software = {});

// at::scaled_dot_product_attention as it runs on CUDA, on Meta tensors: the choice, then what
// attention.cpp's scaled_dot_product_attention does for that backend. Sets the card the Meta
// kernels read (split-KV heuristic, memory-efficient kernel choice) for this process.
at::Tensor cuda_sdpa(const EmulatedCard& card, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const std::optional<at::Tensor>& attn_mask,
                     double dropout_p, bool is_causal, std::optional<double> scale,
                     bool enable_gqa = false);

// attention.cpp convert_boolean_attn_mask: a bool mask becomes an additive one (-inf out).
std::optional<at::Tensor> convert_boolean_attn_mask(const std::optional<at::Tensor>& mask,
                                                    at::ScalarType dtype);

// _scaled_dot_product_attention_math of attention.cpp, transcribed with one difference that is
// CUDA's: at::dropout there takes the fused path (native_dropout, a bool mask), which Meta
// tensors would not (is_fused_kernel_acceptable asks for is_cuda()), so it is called directly.
std::tuple<at::Tensor, at::Tensor> sdpa_math_as_on_cuda(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
    std::optional<double> scale, bool enable_gqa);

}  // namespace sweep::emu
