// Autocast scopes and the dynamic loss scaler; see precision.h.
#include "sweeps/worker/precision.h"

#include <ATen/autocast_mode.h>

#include "models/emulation.h"
#include "sweeps/worker/emulate/cost_record.h"
#include "sweeps/worker/emulate/emulation.h"
#include "sweeps/worker/optim.h"

namespace sweep {

namespace {
thread_local int t_emulated_nesting = 0;  // autocast_mode.cpp's nesting, for the emulated autocast
}

AutocastScope::AutocastScope(at::DeviceType device, bool enabled, at::ScalarType dtype)
    : device_(device),
      // kMeta: the emulated device's own autocast (Meta tensors stand for its tensors).
      emulated_(device == at::kMeta),
      prev_enabled_(emulated_ ? models::emulated_autocast().enabled
                              : at::autocast::is_autocast_enabled(device)),
      prev_dtype_(emulated_ ? models::emulated_autocast().dtype
                            : at::autocast::get_autocast_dtype(device)) {
  if (emulated_) {
    emu::set_emulated_autocast(enabled, dtype);
    ++t_emulated_nesting;
    return;
  }
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (emulated_) {
    if (--t_emulated_nesting == 0) emu::clear_autocast_cache();
    emu::set_emulated_autocast(prev_enabled_, prev_dtype_);
    return;
  }
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

GradScaler::GradScaler(torch::Device device, double init_scale)
    : scale_(torch::full({}, init_scale, torch::dtype(torch::kFloat).device(device))),
      growth_tracker_(torch::zeros({}, torch::dtype(torch::kInt).device(device))) {}

// grad_scaler.py GradScaler.step.
void GradScaler::step(Optimizer& opt) {
  auto grads = opt.grads();
  found_inf_ = torch::zeros({}, scale_.options());
  if (opt.takes_amp_scaling()) {
    // The `_step_supports_amp_scaling` branch: _check_inf_per_device checks for inf/nan with
    // inv_scale 1 (grads unchanged); the optimizer gets grad_scale = scale and found_inf,
    // unscales inside its kernel and skips the update when found_inf is set. No host read.
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, torch::ones_like(scale_));
    opt.step(scale_, found_inf_);
    if (!fused_skipped_.defined()) fused_skipped_ = torch::zeros_like(found_inf_);
    fused_skipped_.add_(found_inf_);
    return;
  }
  // unscale_ (inv_scale = 1/scale computed in double), then _maybe_opt_step: the one host
  // read of found_inf, which decides whether optimizer.step() runs.
  auto inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  // A Meta tensor (emulated device) holds no inf: the step runs, as with finite gradients.
  if (found_inf_.is_meta()) emu::note_sync();  // the read's wait, on the emulated card
  if (found_inf_.is_meta() || found_inf_.item<float>() == 0.0f) opt.step();
  else ++skipped_;
}

void GradScaler::update() {
  TORCH_CHECK(found_inf_.defined(), "GradScaler::update() before step()");
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, 2.0, 0.5, 2000);
}

int64_t GradScaler::skipped_steps() const {
  return skipped_ + (fused_skipped_.defined() && !fused_skipped_.is_meta() ? fused_skipped_.item<int64_t>() : 0);
}

}  // namespace sweep
