// Optimizer offload (`offload: optimizer`): ZeRO-Offload on one device, as DeepSpeed's stage
// 1/2 `offload_optimizer: {device: cpu}` with DeepSpeedCPUAdam does it. fp32 master
// parameters and an fp32 gradient buffer live in host memory (pinned on CUDA), the Adam
// moments and step counters beside them; after backward each gradient is copied to the host,
// AdamW steps the host fp32 parameters on the CPU, and the updated parameters are copied back
// in the training dtype. The device holds no optimizer state.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "sweeps/worker/optim.h"

namespace sweep {

// What the CUDA host allocator holds (in use and cached): the pinned memory of this process.
int64_t pinned_held();

class OffloadOptimizer final : public Optimizer {
 public:
  // `params`: the device parameters a training loop updates (under LoRA, the adapters only).
  OffloadOptimizer(std::vector<torch::Tensor> params, double lr, double weight_decay);
  void step(const torch::Tensor& grad_scale = {}, const torch::Tensor& found_inf = {}) override;
  int64_t state_bytes() const override { return 0; }  // on the device: none
  // Host memory the technique held at most since it was made: the pinned buffers (as the CUDA
  // host allocator holds them, power-of-two blocks) plus what the tracking allocator counted
  // in its host scope (on the CPU everything; on CUDA the moments, counters and temporaries).
  int64_t host_peak_bytes() const;
  // Gradients device -> host plus parameters host -> device, summed over the steps since the
  // last reset_transfer(), and the number of those steps.
  double transfer_ms() const { return transfer_ms_; }
  int64_t transfer_steps() const { return transfer_steps_; }
  void reset_transfer() { transfer_ms_ = 0, transfer_steps_ = 0; }

 private:
  void wait_for_device() const;
  std::vector<torch::Tensor> master_, grad_buf_;  // host, fp32, one per parameter
  std::unique_ptr<Optimizer> host_adamw_;         // torch.optim.AdamW's for-loop, on master_
  bool cuda_ = false;
  bool emulated_ = false;  // Meta tensors standing for a CUDA card's: nothing to wait for
  int64_t pinned_bytes_ = 0, host_base_ = 0;
  double transfer_ms_ = 0;
  int64_t transfer_steps_ = 0;
};

}  // namespace sweep
