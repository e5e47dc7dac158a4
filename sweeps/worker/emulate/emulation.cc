// The emulated device's set-up, the model's build on Meta and its move; see emulation.h.
#include "sweeps/worker/emulate/emulation.h"

#include <ATen/ops/empty_ops.h>
#include <ATen/ops/empty_strided_ops.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <mutex>

#include "models/emulation.h"
#include "models/nf4.h"
#include "sweeps/measure/trackers.h"
#include "sweeps/worker/emulate/cost_record.h"
#include "sweeps/worker/emulate/sdpa_cuda.h"

namespace sweep::emu {
namespace {

EmulatedCard g_card;
thread_local bool t_meta_factories = false;
thread_local bool t_backward = false;

std::optional<c10::Device> redirect(std::optional<c10::Device> device) {
  if (t_meta_factories && (!device || device->is_cpu())) return c10::Device(c10::kMeta);
  return device;
}

// The BackendSelect kernels of the two factories every other one ends in (zeros, full,
// arange, the initialisers' tensors... all call empty or empty_strided), as generated in
// RegisterBackendSelect.cpp: the dispatch key from the options, then a redispatch; here with
// the device redirected first.
at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  device = redirect(device);
  const c10::DispatchKeySet ks(c10::computeDispatchKey(dtype, layout, device));
  return at::_ops::empty_memory_format::redispatch(ks, size, dtype, layout, device, pin_memory,
                                                   memory_format);
}
at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  device = redirect(device);
  const c10::DispatchKeySet ks(c10::computeDispatchKey(dtype, layout, device));
  return at::_ops::empty_strided::redispatch(ks, size, stride, dtype, layout, device, pin_memory);
}

// The CPU's choice in scaled_dot_product_attention (attention.cpp; sdp_utils_cpp.cpp
// select_sdp_backend_cpp: flash, then math; use_flash_attention_cpp's gates that can fail in
// the zoo: check_for_dropout (dropout must be 0), check_attn_mask_shape, 4-D inputs with a
// contiguous last dimension; check_batch_size_and_num_heads_dense takes grouped-query heads
// under enable_gqa, as a probe of the 2.11 wheel showed: the flash kernel with key and value's
// own heads). Meta's own choice (_fused_sdp_choice_meta) is always math. A boolean mask is made
// additive first (convert_boolean_attn_mask), as attention.cpp does before either.
at::Tensor cpu_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const std::optional<at::Tensor>& mask_, double dropout_p, bool is_causal,
                    std::optional<double> scale, bool enable_gqa) {
  const std::optional<at::Tensor> mask = convert_boolean_attn_mask(mask_, q.scalar_type());
  const bool flash = dropout_p == 0.0 && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
                     q.stride(-1) == 1 && k.stride(-1) == 1 && v.stride(-1) == 1 &&
                     (!mask || mask->dim() == 4 || mask->dim() == 2);
  if (flash)
    return std::get<0>(
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, mask, scale));
  return std::get<0>(at::_scaled_dot_product_attention_math(q, k, v, mask, dropout_p, is_causal,
                                                            std::nullopt, scale, enable_gqa));
}

at::Tensor card_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa) {
  return cuda_sdpa(g_card, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

class Silent final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

void register_factories() {
  static std::unique_ptr<torch::Library> lib;
  QuietOverrides quiet;
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                         c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
  lib->impl("empty.memory_format", TORCH_FN(empty_memory_format));
  lib->impl("empty_strided", TORCH_FN(empty_strided));
}

// Module::to_impl (torch/nn/module.h): children, then parameters, then buffers.
void move_impl(torch::nn::Module& m) {
  for (auto& child : m.children()) move_impl(*child);
  auto move = [](torch::Tensor& t) {
    if (!t.defined() || !t.is_meta()) return;
    auto moved = at::empty_strided(t.sizes(), t.strides(), t.options());
    // Variable::set_data without its same-backend check (Meta to Meta here): the tensor, and
    // every module member holding it, now has the device's storage.
    t.unsafeGetTensorImpl()->shallow_copy_from(moved.getIntrusivePtr());
  };
  for (auto& p : m.named_parameters(/*recurse=*/false)) move(p.value());
  for (auto& b : m.named_buffers(/*recurse=*/false)) move(b.value());
}

}  // namespace

void start_emulation(const EmulatedCard& card) {
  static std::once_flag once;
  std::call_once(once, [&] {
    g_card = card;
    models::set_emulated_device(card.cpu ? c10::kCPU : c10::kCUDA);
    // bitsandbytes' gemm_4bit picks its kernel by the card's SMs and compute capability.
    models::set_cuda_dispatch_props({card.sms, card.cc_major, card.cc_minor});
    models::dynamic_map();  // computed on the host, before any Meta factory scope
    register_factories();
    register_meta_kernels();
    register_autocast(/*cuda_lists=*/!card.cpu);
    if (!card.cpu) register_cublas_workspaces();
    models::set_attention(card.cpu ? &cpu_sdpa : &card_sdpa);
    if (!card.cpu) models::set_device_read(&note_sync);  // item() waits for the card
  });
}

const EmulatedCard& emulated_card() { return g_card; }

QuietOverrides::QuietOverrides()
    : silent_(std::make_unique<Silent>()),
      guard_(std::make_unique<c10::WarningUtils::WarningHandlerGuard>(silent_.get())) {}
QuietOverrides::~QuietOverrides() = default;

MetaFactories::MetaFactories() : prev_(t_meta_factories) { t_meta_factories = true; }
MetaFactories::~MetaFactories() { t_meta_factories = prev_; }

void move_to_device(torch::nn::Module& module) { move_impl(module); }

BackwardThread::BackwardThread() : prev_(t_backward) { t_backward = true; }
BackwardThread::~BackwardThread() { t_backward = prev_; }
bool on_backward_thread() { return t_backward; }

}  // namespace sweep::emu
