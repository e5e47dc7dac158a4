// Meta kernels that LibTorch 2.11's C++ lacks (Python registers them in
// torch/_meta_registrations.py; shared/notes/meta-device-in-libtorch.md lists what was found
// missing), for the ops the zoo runs. Each allocates what the emulated device's kernel
// allocates, at its final size (a Meta storage grown by resize_ bypasses the allocator), in
// the kernel's order; what a CUDA kernel allocates inside that is not modelled is named where
// it happens. Registered at run time, only in an emulated worker. (Attention's, where's and
// dropout's are in sdpa_meta_kernels.cc.)
#include <ATen/native/ConvUtils.h>
#include <ATen/AccumulateType.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <cmath>

#include "models/emulation.h"
#include "sweeps/worker/emulate/emulation.h"

namespace sweep::emu {
namespace {

bool cuda() { return models::emulated_device() == c10::kCUDA; }

// aten/src/ATen/native/TensorAdvancedIndexing.cpp index_select_out_{cpu_,cuda}: the output
// (self's sizes, dim replaced by the index's length).
at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  auto sizes = self.sizes().vec();
  dim = c10::maybe_wrap_dim(dim, self.dim());
  if (!sizes.empty()) sizes[dim] = index.numel();
  return at::empty(sizes, self.options());
}

// embedding_dense_backward: CUDA (Embedding.cu embedding_dense_backward_cuda) sorts the
// indices (sorted_indices, orig_indices: int64 copies of the indices; cub's radix-sort scratch
// is not modelled) and then embedding_backward_cuda_kernel builds the (num_weights, C)
// gradient; the CPU (Embedding.cpp) only the gradient.
at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt, bool) {
  at::Tensor sorted, orig;
  if (cuda()) {
    sorted = at::empty({indices.numel()}, indices.options());
    orig = at::empty({indices.numel()}, indices.options());
  }
  return at::zeros({num_weights.expect_int(), grad.size(-1)}, grad.options());
}

// `input.expect_contiguous()`, as both kernels begin: a contiguous copy of a non-contiguous
// input, alive until the kernel returns (Whisper's encoder keeps its residual stream in the
// convolution's (B, C, T) storage, so every one of its LayerNorms copies its input).
at::Tensor contiguous_copy(const at::Tensor& t) {
  return t.is_contiguous() ? at::Tensor() : at::empty_like(t, at::MemoryFormat::Contiguous);
}

// layer_norm_cuda / layer_norm_cpu (layer_norm.cpp, cuda/layer_norm_kernel.cu): X contiguous,
// Y like X, then mean and rstd of M rows: CUDA in the accumulate type (fp32 for half inputs),
// the CPU in param_scalar_type (fp32 when the weights are fp32, else the input's type).
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>&, double) {
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  int64_t M = 1;
  for (int64_t i = 0; i < axis; ++i) M *= input.size(i);
  const at::Tensor x = contiguous_copy(input);
  auto y = at::empty_like(input, at::MemoryFormat::Contiguous);
  at::ScalarType stat = input.scalar_type();
  if (cuda())
    stat = at::toAccumulateType(stat, /*is_cuda=*/true);
  else if (at::isReducedFloatingType(stat) && weight && weight->defined() &&
           weight->scalar_type() == at::kFloat)
    stat = at::kFloat;  // is_mixed_type: param_scalar_type is fp32
  auto mean = at::empty({M}, input.options().dtype(stat));
  auto rstd = at::empty({M}, input.options().dtype(stat));
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  for (int64_t i = axis; i < input.dim(); ++i) stat_shape.push_back(1);
  return {y, mean.view(stat_shape), rstd.view(stat_shape)};
}

// layer_norm_backward_{cuda,cpu}: X contiguous, dX like X, dgamma and dbeta like gamma, each
// when asked, then LayerNormBackwardKernelImpl's dY.contiguous(); the copies live until the
// kernel returns. CUDA's gamma/beta reduction over many rows may use a partial-sums buffer, and
// the CPU's per-thread gamma/beta buffers, that are not modelled.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef, const at::Tensor&,
    const at::Tensor&, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> mask) {
  const at::Tensor x = contiguous_copy(input);
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty_like(input, at::MemoryFormat::Contiguous);
  if (mask[1] && weight && weight->defined()) dw = at::empty_like(*weight, at::MemoryFormat::Contiguous);
  if (mask[2] && bias && bias->defined()) db = at::empty_like(*bias, at::MemoryFormat::Contiguous);
  const at::Tensor dy = contiguous_copy(grad_out);
  return {dx, dw, db};
}

// relu: CUDA and CPU run clamp_min(self, 0) (Activation.cpp relu): a new tensor like self.
at::Tensor relu(const at::Tensor& self) { return at::empty_like(self); }
at::Tensor& relu_(at::Tensor& self) { return self; }

// abs's composite (UnaryOps.cpp unary_op_impl) makes empty({0}) and resizes it in abs.out: on a
// device one allocation of self's size, made here directly; abs_ writes in place.
at::Tensor abs(const at::Tensor& self) { return at::empty(self.sizes(), self.options()); }
at::Tensor& abs_out(const at::Tensor&, at::Tensor& out) { return out; }

// arange: ATen's composite makes empty({0}) and resizes it in arange_out (RangeFactories.cpp),
// which on Meta grows the storage without the allocator (and Meta's arange_out leaves it
// empty); on a device that resize is the one allocation. Here the tensor is made at its size:
// RangeFactoriesKernel.cpp's size, ceil((end - start) / step).
at::Tensor arange_start_step(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                             std::optional<at::Device> device, std::optional<bool> pin) {
  const double n = std::ceil((end.toDouble() - start.toDouble()) / step.toDouble());
  const auto type = dtype ? *dtype
                          : (start.isFloatingPoint() || end.isFloatingPoint() || step.isFloatingPoint()
                                 ? c10::get_default_dtype_as_scalartype()
                                 : at::kLong);
  return at::empty({static_cast<int64_t>(std::max(0.0, n))},
                   at::TensorOptions().dtype(type).layout(layout).device(device).pinned_memory(pin));
}
at::Tensor arange_start(const at::Scalar& start, const at::Scalar& end,
                        std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                        std::optional<at::Device> device, std::optional<bool> pin) {
  return arange_start_step(start, end, 1, dtype, layout, device, pin);
}
at::Tensor arange(const at::Scalar& end, std::optional<at::ScalarType> dtype,
                  std::optional<at::Layout> layout, std::optional<at::Device> device,
                  std::optional<bool> pin) {
  return arange_start_step(0, end, 1, dtype, layout, device, pin);
}

// convolution (Convolution.cpp): the output of the conv's shape. On CUDA, cuDNN's workspace
// (chosen by its heuristics, through the caching allocator) is not modelled.
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>&, c10::SymIntArrayRef stride,
                       c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool,
                       c10::SymIntArrayRef, c10::SymInt) {
  const auto out = at::native::conv_output_size(input.sizes(), weight.sizes(),
                                                C10_AS_INTARRAYREF_SLOW(padding),
                                                C10_AS_INTARRAYREF_SLOW(stride),
                                                C10_AS_INTARRAYREF_SLOW(dilation));
  return at::empty(out, input.options());
}
// convolution_backward: the backend (cudnn_convolution_backward, ConvShared.cpp; the CPU's
// mkldnn and slow paths alike) takes grad_output in the input's memory format,
// `grad_output_t.to(input.suggest_memory_format())`: a copy of a non-contiguous gradient (Whisper's
// encoder: it comes back through permute(0, 2, 1) and GELU's backward in that layout), alive
// while the backend computes dX and dW; then Convolution.cpp sums the bias gradient itself.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalSymIntArrayRef, c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymIntArrayRef,
    bool, c10::SymIntArrayRef, c10::SymInt, std::array<bool, 3> mask) {
  at::Tensor gi, gw, gb;
  {
    const at::Tensor go = contiguous_copy(grad_output);
    if (mask[0]) gi = at::empty_like(input);
    if (mask[1]) gw = at::empty_like(weight);
  }
  if (mask[2]) gb = at::empty({grad_output.size(1)}, grad_output.options());
  return {gi, gw, gb};
}

// The CPU's flash attention (transformers/attention.cpp _scaled_dot_product_flash_attention_cpu
// and its backward): the output is `at::empty_like(query, query.options()).transpose(1, 2)`,
// returned transposed back, so it takes the query's layout: (B, L, H, D) storage for a query
// viewed from the projections (Llama, GPT-2), (B, H, L, D) for a contiguous one (Phi-3's, out
// of apply_rotary_pos_emb's torch.cat), which transformers' transpose(1, 2).contiguous() then
// copies. The logsumexp is allocated (B, L, H) and returned transposed; the backward's three
// gradients are zero-filled (B, L, H, D). The kernels' per-thread scratch buffers
// (cpu/FlashAttentionKernel.cpp) are not modelled.
std::tuple<at::Tensor, at::Tensor> flash_attention_for_cpu(
    const at::Tensor& q, const at::Tensor&, const at::Tensor&, double, bool,
    const std::optional<at::Tensor>&, std::optional<double>) {
  auto out = at::empty_like(q, q.options()).transpose(1, 2);
  auto lse = at::empty({q.size(0), q.size(2), q.size(1)},
                       q.options().dtype(at::toOpMathType(q.scalar_type())));
  return {out.transpose(1, 2), lse.transpose(1, 2)};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_for_cpu_backward(
    const at::Tensor&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor&, const at::Tensor&, double, bool, const std::optional<at::Tensor>&,
    std::optional<double>) {
  auto gq = at::zeros({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options());
  auto gk = at::zeros({k.size(0), k.size(2), k.size(1), k.size(3)}, k.options());
  auto gv = at::zeros({v.size(0), v.size(2), v.size(1), v.size(3)}, v.options());
  return {gq.transpose(1, 2), gk.transpose(1, 2), gv.transpose(1, 2)};
}

// _int_mm (the CPU's AVX512 path and cuBLASLt's int8 GEMM): an (n, m) int32 result. On a CUDA
// card cublas.cc registers it again, with the workspaces.
at::Tensor int_mm(const at::Tensor& a, const at::Tensor& b) {
  return at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kInt));
}

// bucketize (bitsandbytes' default quantize_4bit, the CPU's): indices of the input's shape,
// int32 with out_int32 (Bucketization.cpp bucketize_cpu: at::empty of the input's sizes).
at::Tensor bucketize(const at::Tensor& self, const at::Tensor&, bool out_int32, bool) {
  return at::empty(self.sizes(), self.options().dtype(out_int32 ? at::kInt : at::kLong));
}

// In-place ops with nothing to allocate: fused AdamW/Adam (one kernel over every tensor
// list), the loss scaler's check-and-unscale. They return nothing, or their first argument.
void in_place_void(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::drop(*stack, op.schema().arguments().size());
}
void in_place_self(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto n = op.schema().arguments().size();
  c10::IValue self = (*stack)[stack->size() - n];
  torch::jit::drop(*stack, n);
  stack->push_back(std::move(self));
}

}  // namespace

void register_meta_kernels() {
  static std::unique_ptr<torch::Library> lib;
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::Meta,
                                         __FILE__, __LINE__);
  lib->impl("index_select", TORCH_FN(index_select));
  lib->impl("bucketize.Tensor", TORCH_FN(bucketize));
  lib->impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
  lib->impl("native_layer_norm", TORCH_FN(native_layer_norm));
  lib->impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  lib->impl("relu", TORCH_FN(relu));
  lib->impl("relu_", TORCH_FN(relu_));
  lib->impl("abs", TORCH_FN(abs));
  lib->impl("abs.out", TORCH_FN(abs_out));
  lib->impl("arange", TORCH_FN(arange));
  lib->impl("arange.start", TORCH_FN(arange_start));
  lib->impl("arange.start_step", TORCH_FN(arange_start_step));
  lib->impl("convolution", TORCH_FN(convolution));
  lib->impl("convolution_backward", TORCH_FN(convolution_backward));
  lib->impl("_int_mm", TORCH_FN(int_mm));
  lib->impl("_scaled_dot_product_flash_attention_for_cpu", TORCH_FN(flash_attention_for_cpu));
  lib->impl("_scaled_dot_product_flash_attention_for_cpu_backward",
            TORCH_FN(flash_attention_for_cpu_backward));
  for (const char* op : {"_fused_adamw_", "_fused_adamw_.tensor_lr", "_fused_adam_",
                         "_fused_adam_.tensor_lr", "_amp_foreach_non_finite_check_and_unscale_"})
    lib->impl(op, torch::CppFunction::makeFromBoxedFunction<&in_place_void>());
  lib->impl("_amp_update_scale_", torch::CppFunction::makeFromBoxedFunction<&in_place_self>());
}

}  // namespace sweep::emu
