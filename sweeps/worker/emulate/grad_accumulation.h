// The autograd engine's gradient accumulation, as a real device runs it. When a tensor feeds
// several ops, the engine adds their gradients in its InputBuffer (torch/csrc/autograd/
// input_buffer.cpp accumulate): in place into the first when the buffer holds its last
// reference (can_accumulate_inplace), else out of place. can_accumulate_inplace also requires
// that the tensor is no "tensor subclass", and ATen counts every Meta tensor as one
// (ATen/TensorSubclassLikeUtils.h: kTensorSubclassLike holds BackendComponent::MetaBit), so on
// the emulated device every such sum was a new tensor beside both addends: a tied embedding's
// two gradients under autocast held one embedding-sized fp32 tensor more at the end of the
// backward than the CPU and CUDA do. While an InPlaceAccumulation is alive on a thread, each
// such sum that a real device would make in place takes the first addend's block
// (reuse_for_next_allocation, sweeps/measure/trackers.h) instead of a new one.
#pragma once

#include <ATen/record_function.h>

namespace sweep::emu {

class InPlaceAccumulation {
 public:
  InPlaceAccumulation();
  ~InPlaceAccumulation();
  InPlaceAccumulation(const InPlaceAccumulation&) = delete;
  InPlaceAccumulation& operator=(const InPlaceAccumulation&) = delete;

 private:
  at::CallbackHandle handle_ = 0;
};

}  // namespace sweep::emu
