// The kernels of one emulated training step, for the step-time prediction (issue 35;
// the rules in reports/results/cost_rules.h). A thread-local RecordFunction callback sees
// every op the burst dispatches on this thread with its inputs and outputs: on Meta tensors
// the dispatcher runs the same RecordFunction hooks as on CUDA (Dispatcher::call), and the
// emulated backward runs on the calling thread (emulation.h, BackwardThread). Each op becomes
// at most one kernel record:
// - an op with a CompositeImplicitAutograd kernel and none of its own for Meta (linear, matmul,
//   layer_norm, dropout, conv1d...) launches nothing itself: what it calls is recorded;
// - a view (its schema's outputs alias an input, none written) or a factory that only
//   allocates launches nothing: host time only;
// - every other op is one kernel (a GEMM, a convolution, a fused attention kernel, a foreach
//   kernel or a memory-bound one), and what it calls inside is not recorded again: on CUDA it
//   is one kernel (cuBLAS's GEMM, the SDPA backend's kernel, multi_tensor_apply), while Meta
//   may implement it by other ops (the foreach ops' per-tensor fallback, the emulated
//   backends' inner calls); except an op that calls itself, as an autocast wrapper does
//   (autocast.cc): its casts and the call at the cast dtype are its kernels;
// - an op in a HostScope (offload's host side) is host work: its copies cross PCIe.
// What dispatches nothing on Meta is noted by the code that stands in for it (note_kernel:
// bitsandbytes' 8-bit update; note_sync: a host read of a device value; note_hook: a
// checkpointing hook, sweeps/worker/checkpoint.cc).
#pragma once

#include <vector>

#include "reports/results/cost_rules.h"

namespace sweep::emu {

// While alive, records the kernels this thread's ops launch.
class CostRecorder {
 public:
  CostRecorder();
  ~CostRecorder();
  CostRecorder(const CostRecorder&) = delete;
  CostRecorder& operator=(const CostRecorder&) = delete;
  // The kernels recorded so far, in launch order.
  const std::vector<cost::Kernel>& kernels() const;

 private:
  uint64_t handle_;
};

// For code that stands in for a kernel or a synchronisation Meta cannot see; nothing when no
// recorder is alive on this thread.
void note_kernel(const cost::Kernel& kernel);
void note_sync();
// A saved-tensor hook of checkpointing ran (cost::Kind::kHook): noted even inside an op, as
// hooks run within the op that saves or unpacks the tensor.
void note_hook();

}  // namespace sweep::emu
