// Optimizers with PyTorch's algorithms and memory behaviour: AdamW and SGD with momentum 0.9
// (the for-loop implementation on the CPU and the multi-tensor "foreach" one on CUDA, as
// torch.optim picks by default, temporaries included), fused AdamW (the ATen kernel), and
// Adafactor (torch.optim.Adafactor: factored second moments, no first moment; for-loop on
// every device, as torch.optim unless foreach=True is asked for). LibTorch's own torch::optim
// has neither the foreach nor the fused paths. bitsandbytes' AdamW8bit: sweeps/worker/optim8bit.h.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "reports/results/vocab.h"

namespace sweep {

class Optimizer {
 public:
  explicit Optimizer(std::vector<torch::Tensor> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  // grad_scale/found_inf: only for optimizers that take AMP scaling inside (fused).
  virtual void step(const torch::Tensor& grad_scale = {}, const torch::Tensor& found_inf = {}) = 0;
  virtual bool takes_amp_scaling() const { return false; }
  // zero_grad(set_to_none=True), PyTorch's default.
  void zero_grad();
  // Bytes of optimizer state tensors in the device's allocator.
  virtual int64_t state_bytes() const = 0;
  // Whether the state may live in CUDA unified memory (bitsandbytes' paged optimizers), and
  // the bytes of it that do: in none of the allocator's counters, nor in state_bytes().
  virtual bool paged() const { return false; }
  virtual int64_t paged_bytes() const { return 0; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // Parameters that have gradients, and those gradients.
  std::vector<torch::Tensor> grads() const;

 protected:
  std::vector<torch::Tensor> params_;
};

// Which implementation of AdamW and SGD runs. kDefault picks as torch.optim does by default
// (optimizer.py _default_to_fused_or_foreach): foreach on CUDA, the for-loop on the CPU. The
// others pin one (the tests check each against torch.optim on the CPU).
enum class Impl { kDefault, kForLoop, kForeach };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double weight_decay = 0.01;
  Impl impl = Impl::kDefault;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o,
                                          std::vector<torch::Tensor> params);

}  // namespace sweep
