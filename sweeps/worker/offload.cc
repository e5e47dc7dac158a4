// Optimizer offload; see offload.h. DeepSpeed's deepspeed/runtime/zero/stage_1_and_2.py
// (cpu_offload) is the model for where each buffer lives and when it moves:
// - single_partition_of_fp32_groups: the fp32 master parameters, pinned host memory;
// - their .grad: an fp32 host buffer, pinned, made once (initialize_optimizer_states);
// - async_inplace_copy_grad_to_fp32_buffer_from_gpu: the gradient, cast to fp32 on the device
//   (`src_tensor.float()`), copied into that buffer with non_blocking=True;
// - DeepSpeedCPUAdam (deepspeed/ops/adam/cpu_adam.py): state['exp_avg'] and ['exp_avg_sq']
//   are torch.zeros_like(p.data) of the host master (zeros_like does not pin: pageable),
//   state['step'] a Python number;
// - step(): the CPU step, then `bit16_partitions[partition_id].data.copy_(fp32_partition.data)`,
//   a blocking host -> device copy in the training dtype.
// What we do differently: one tensor per parameter where DeepSpeed flattens a partition
// (same bytes, more copies), torch.optim's for-loop AdamW on the host where DeepSpeed runs its
// own SIMD kernel (same arithmetic), and no overlap of the gradient copies with backward
// (DeepSpeed's overlap_comm): gradients move after backward, so the transfer is all cost.
#include "sweeps/worker/offload.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <c10/util/llvmMathExtras.h>

#include <chrono>

#include "models/emulation.h"
#include "sweeps/measure/trackers.h"
#include "sweeps/worker/emulate/cost_record.h"

namespace sweep {

// at::empty(..., pinned_memory(true)) takes its allocator from Context::
// getPinnedMemoryAllocator (ATen/Context.h), the CUDA hooks' caching host allocator, the one
// at::getHostAllocator(at::kCUDA) returns (ATen/cuda/CachingHostAllocator.h forwards its old
// names to it). It rounds every block up to a power of two (ATen/core/CachingHostAllocator.h,
// allocate: roundSize = PowerOf2Ceil(size)) and HostStats::allocated_bytes counts blocks in
// use and free, so this is what is pinned, not what was asked for.
int64_t pinned_held() {
  return at::getHostAllocator(at::kCUDA)->get_stats().allocated_bytes.current;
}

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

OffloadOptimizer::OffloadOptimizer(std::vector<torch::Tensor> params, double lr,
                                   double weight_decay)
    : Optimizer(std::move(params)) {
  cuda_ = !params_.empty() && models::acts_cuda(params_[0]);
  // An emulated card: the host side is Meta tensors in a host scope (counted as host memory
  // by the emulated device's allocator), pinned memory's rounding computed below.
  emulated_ = cuda_ && params_[0].is_meta();
  // On CUDA the tracking allocator is not c10's CPU allocator yet: install it so that the host
  // scope counts the moments, counters and temporaries (pinned memory is counted apart).
  if (cuda_) install_cpu_tracking();
  reset_host_peak();
  host_base_ = host_allocated();
  const int64_t pinned_before = cuda_ && !emulated_ ? pinned_held() : 0;
  {
    torch::NoGradGuard no_grad;
    HostScope host;
    const auto host_fp32 = emulated_ ? torch::TensorOptions().dtype(torch::kFloat).device(torch::kMeta)
                                     : torch::TensorOptions().dtype(torch::kFloat).pinned_memory(cuda_);
    for (const auto& p : params_) {
      master_.push_back(at::empty(p.sizes(), host_fp32));
      master_.back().copy_(p);  // the fp32 master copy, once, as the model is built
      grad_buf_.push_back(at::empty(p.sizes(), host_fp32));
    }
  }
  if (cuda_ && !emulated_) pinned_bytes_ = pinned_held() - pinned_before;
  if (emulated_) {
    // The pinned buffers were counted at their size; the caching host allocator holds each at
    // the next power of two (CachingHostAllocator.h allocate: PowerOf2Ceil).
    for (const auto* bufs : {&master_, &grad_buf_})
      for (const auto& t : *bufs) {
        const auto n = static_cast<int64_t>(t.nbytes());
        pinned_bytes_ += n > 0 ? static_cast<int64_t>(c10::llvm::PowerOf2Ceil(n)) - n : 0;
      }
  }
  // The host step is torch.optim.AdamW's CPU default (the for-loop); its state is made on the
  // first step, inside the host scope, so it is host memory.
  host_adamw_ = make_optimizer({OptimizerKind::kAdamW, lr, weight_decay, Impl::kForLoop}, master_);
}

void OffloadOptimizer::wait_for_device() const {
  if (cuda_ && !emulated_) c10::cuda::getCurrentCUDAStream().synchronize();
  if (emulated_) emu::note_sync();  // the emulated card's step waits there too
}

void OffloadOptimizer::step(const torch::Tensor&, const torch::Tensor&) {
  using clock = std::chrono::steady_clock;
  torch::NoGradGuard no_grad;
  // The CPU step needs the gradients, so the host waits for backward in any case; waiting
  // here first keeps backward out of the transfer time.
  wait_for_device();
  const auto t0 = clock::now();
  {
    HostScope host;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& g = params_[i].grad();
      if (!g.defined()) {
        master_[i].mutable_grad() = torch::Tensor();  // AdamW skips a parameter without one
        continue;
      }
      // Copy.cu (copy_kernel_cuda): a non-blocking copy that changes dtype converts on the
      // device first, as DeepSpeed's `.float()`; fp32 into pinned memory is one async memcpy.
      grad_buf_[i].copy_(g, /*non_blocking=*/true);
      master_[i].mutable_grad() = grad_buf_[i];
    }
  }
  wait_for_device();  // the host reads the gradients next
  const auto t1 = clock::now();
  {
    HostScope host;
    host_adamw_->step();
  }
  const auto t2 = clock::now();
  {
    // Same dtype: an async memcpy from pinned memory. Another dtype (pure bf16): blocking, as
    // DeepSpeed's copy_, which Copy.cu converts on the host (a host temporary, in the scope).
    HostScope host;
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (master_[i].grad().defined())
        params_[i].copy_(master_[i], /*non_blocking=*/params_[i].scalar_type() == torch::kFloat);
  }
  wait_for_device();
  transfer_ms_ += ms_between(t0, t1) + ms_between(t2, clock::now());
  ++transfer_steps_;
}

int64_t OffloadOptimizer::host_peak_bytes() const {
  return pinned_bytes_ + host_peak() - host_base_;
}

}  // namespace sweep
