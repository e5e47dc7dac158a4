// Emulated devices (device: emulated): the models run on Meta tensors that stand for another
// device's tensors (a CUDA card's, or the CPU's for the differential tests), with no compute.
// What model and training code asks of "its device" (is it CUDA? is autocast on?) is answered
// here, so that the same code makes the choices that device would make. The worker sets it up
// once per process (sweeps/worker/emulate/emulation.h); without it every answer is the
// tensor's own.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace sweep::models {

// The device type Meta tensors stand for from now on (kCUDA or kCPU); once per process.
void set_emulated_device(c10::DeviceType as);
bool emulating();
c10::DeviceType emulated_device();  // kMeta when not emulating

// The device type a tensor stands for: its own, or the emulated one for a Meta tensor.
c10::DeviceType device_type_of(const at::Tensor& t);
inline bool acts_cuda(const at::Tensor& t) { return t.defined() && device_type_of(t) == c10::kCUDA; }

// The emulated autocast's thread state (torch.autocast on the emulated device), kept by the
// worker's AutocastScope and applied by sweeps/worker/emulate/autocast.cc.
struct EmulatedAutocast {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
};
EmulatedAutocast& emulated_autocast();
// torch.is_autocast_enabled(device) / get_autocast_dtype(device), the emulated device's own
// autocast included.
bool autocast_enabled(c10::DeviceType device);
at::ScalarType autocast_dtype(c10::DeviceType device);

// torch.nn.functional.scaled_dot_product_attention as the device runs it: ATen's own, or the
// emulated device's (which picks the backend the emulated device would pick).
// enable_gqa: key and value carry fewer heads than the query (grouped-query attention).
using AttentionFn = at::Tensor (*)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::optional<at::Tensor>& mask, double dropout_p,
                                   bool is_causal, std::optional<double> scale, bool enable_gqa);
void set_attention(AttentionFn fn);
at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                std::optional<double> scale, bool enable_gqa = false);

// The count of true elements of a boolean mask, which a Meta tensor has no values to count:
// noted where the model knows it (the fused head's scored labels, from the batch), read by the
// emulated device's masked_select (the gradient of masked_scatter). nullopt for a mask never
// noted, or no longer alive.
void note_mask_count(const at::Tensor& mask, int64_t count);
std::optional<int64_t> mask_count(const at::Tensor& mask);

// torch.nn.functional.dropout (at::dropout) as the device runs it: on CUDA the fused kernel
// (native_dropout, which keeps a bool mask), elsewhere ATen's composite (which keeps the
// scaled noise in the input's dtype); at::native::dropout's is_fused_kernel_acceptable, which
// asks input.is_cuda(), so a Meta tensor standing for CUDA's takes the fused path here.
at::Tensor apply_dropout(const at::Tensor& input, double p, bool train);

// A one-element tensor's value on the host (Tensor.item()). A Meta tensor has no value: 1.0
// there, which only steers arithmetic (a learning-rate factor), never what is allocated.
double scalar_value(const at::Tensor& t);
// Whether any element is non-zero (Tensor.any().item()); false for a Meta tensor, as for
// data without outliers or infs.
bool any_value(const at::Tensor& t);
// Both reads make the host wait for the device (a CUDA tensor's item() synchronises its
// stream); for a Meta tensor they call what the worker registers here (the step-time
// recorder's synchronisation, sweeps/worker/emulate/cost_record.h).
using DeviceReadFn = void (*)();
void set_device_read(DeviceReadFn fn);

}  // namespace sweep::models
