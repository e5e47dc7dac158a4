// Mixed precision the way PyTorch users get it: autocast scopes (torch.autocast) and a
// dynamic loss scaler with torch.amp.GradScaler's semantics, built on the same ATen ops.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace sweep {

// RAII torch.autocast(device_type, dtype, enabled): sets and restores the state, and
// clears the cast cache when the outermost scope closes.
class AutocastScope {
 public:
  AutocastScope(at::DeviceType device, bool enabled, at::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType device_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

class Optimizer;

// torch.amp.GradScaler with its defaults: init_scale 2^16, growth 2, backoff 0.5,
// growth_interval 2000. step() unscales (or hands the scale to a fused optimizer), skips
// the step when any gradient is inf/nan; update() grows or backs off the scale.
class GradScaler {
 public:
  explicit GradScaler(torch::Device device, double init_scale = 65536.0);
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Returns false when the step was skipped for non-finite gradients.
  bool step(Optimizer& opt);
  void update();
  double current_scale() const { return scale_.item<double>(); }

 private:
  torch::Tensor scale_, growth_tracker_, found_inf_;
};

}  // namespace sweep
