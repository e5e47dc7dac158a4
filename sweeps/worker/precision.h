// Mixed precision the way PyTorch users get it: autocast scopes (torch.autocast) and a
// dynamic loss scaler with torch.amp.GradScaler's semantics, built on the same ATen ops.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace sweep {

// RAII torch.autocast(device_type, dtype, enabled): sets and restores the state, and
// clears the cast cache when the outermost scope closes. kMeta: the emulated device's autocast
// (sweeps/worker/emulate/autocast.cc), whichever device it emulates.
class AutocastScope {
 public:
  AutocastScope(at::DeviceType device, bool enabled, at::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType device_;
  bool emulated_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

class Optimizer;

// torch.amp.GradScaler with its defaults: init_scale 2^16, growth 2, backoff 0.5,
// growth_interval 2000. step() unscales and skips the step when any gradient is inf/nan, or
// hands the scale and the inf flag to an optimizer that takes them (fused AdamW), which
// unscales and skips inside its kernel; update() grows or backs off the scale. Host syncs as
// in grad_scaler.py: one found_inf read per step on the unscale path, none on the fused one.
class GradScaler {
 public:
  explicit GradScaler(torch::Device device, double init_scale = 65536.0);
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  void step(Optimizer& opt);
  void update();
  // Reads the device (a sync): call outside timed code.
  double current_scale() const { return scale_.item<double>(); }
  // Steps skipped for inf/nan gradients so far. Reads the device on the fused path (a sync):
  // call outside timed code.
  int64_t skipped_steps() const;

 private:
  torch::Tensor scale_, growth_tracker_, found_inf_;
  int64_t skipped_ = 0;           // unscale path: counted where found_inf is read anyway
  torch::Tensor fused_skipped_;   // fused path: found_inf summed on the device, read on demand
};

}  // namespace sweep
