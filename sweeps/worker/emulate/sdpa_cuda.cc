// TEMPORARY until the CUDA SDPA emulation lands: the math path.
#include "sweeps/worker/emulate/sdpa_cuda.h"
namespace sweep::emu {
SdpBackend choose_sdp_backend(const EmulatedCard&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const std::optional<at::Tensor>&, double, bool, bool) {
  return SdpBackend::kMath;
}
at::Tensor cuda_sdpa(const EmulatedCard&, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const std::optional<at::Tensor>& mask, double dropout_p,
                     bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return std::get<0>(at::_scaled_dot_product_attention_math(q, k, v, mask, dropout_p, is_causal,
                                                            std::nullopt, scale, enable_gqa));
}
}  // namespace sweep::emu
