// The CUDA side of AdamW8bit (sweeps/worker/adamw8bit.cu): launchers for our two kernels, which do
// what bitsandbytes' kOptimizerStatic8bit2StateBlockwise and kOptimizer32bit2State do for
// "adam" (csrc/cuda/optimizers.cu). Free of torch headers so nvcc compiles the .cu quickly; the
// caller passes raw pointers and its current stream and checks the returned error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sweep::cuda8bit {

enum class DType { kFloat, kHalf, kBFloat16 };  // of the parameter and its gradient

struct Hyper {
  float lr, beta1, beta2, eps, weight_decay;
  int step;  // after the increment, as bnb passes state["step"]
};

// state1/state2: codes into qmap1 (signed) / qmap2 (unsigned), 256 floats each;
// absmax1/absmax2: one float per block of 256 elements, rewritten by the update.
cudaError_t adamw8bit_blockwise(DType dtype, void* p, const void* g, std::uint8_t* state1,
                                std::uint8_t* state2, const float* qmap1, const float* qmap2,
                                float* absmax1, float* absmax2, const Hyper& h, std::int64_t n,
                                cudaStream_t stream);

// 32-bit state for parameters below min_8bit_size.
cudaError_t adamw32bit(DType dtype, void* p, const void* g, float* state1, float* state2,
                       const Hyper& h, std::int64_t n, cudaStream_t stream);

// Paged state, as bitsandbytes makes it: get_paged (csrc/pythonInterface.cpp cget_managed_ptr:
// cudaMallocManaged with cudaMemAttachHost), then F.fill(buff, 0) (its fill kernel on the legacy
// default stream, then torch.cuda.synchronize()); and prefetch (cprefetch: to `device` on the
// legacy default stream, where the device supports concurrent managed access), which
// Optimizer8bit.prefetch_state does before each update. paged_free is ours: bnb never frees a
// paged buffer (the process's end does).
cudaError_t paged_zeros(void** ptr, std::size_t bytes);
cudaError_t paged_prefetch(const void* ptr, std::size_t bytes, int device);
cudaError_t paged_free(void* ptr);

}  // namespace sweep::cuda8bit
