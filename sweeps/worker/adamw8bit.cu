// AdamW8bit's CUDA kernels, written for this project to do the arithmetic of bitsandbytes'
// "adam" kernels in csrc/cuda/optimizers.cu (bitsandbytes-foundation/bitsandbytes, read at
// commit 12297f3b): kOptimizerStatic8bit2StateBlockwise with BLOCKSIZE_2STATE 256 and one value
// per thread, and kOptimizer32bit2State. Same float expressions in the same order, the same
// fast intrinsics (__powf, __fdividef) where bnb uses them, the same treatment of a partial last
// block and of non-finite gradients; the CPU path (sweeps/worker/optim8bit.cc) repeats it with ATen.
// gnorm_scale is left out: AdamW8bit.step always passes 1.0 and g * 1.0f is g.
#include <cuda/std/functional>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/block/block_reduce.cuh>

#include "sweeps/worker/adamw8bit_cuda.h"

namespace sweep::cuda8bit {
namespace {

constexpr int kBlock = 256;  // elements per absmax block = threads per CUDA block

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// bnb's quantize_2D: a seven-step binary search over the 256 sorted codes starting at 127, then
// the nearer of the last pivot and its bracketing neighbour by midpoint; the bracket starts at
// -1 (signed) or 0 and at 1. (bnb reads the first step's value from a register copy of
// codes 63/127/191; it is the same value as code[pivot].)
template <bool kSigned>
__device__ __forceinline__ unsigned char quantize(const float* code, float x) {
  int pivot = 127, lower_pivot = 0, upper_pivot = 255;
  float lower = kSigned ? -1.0f : 0.0f, upper = 1.0f;
  float val = code[pivot];
  for (int half_width = 64; half_width > 0; half_width >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += half_width;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= half_width;
    }
    val = code[pivot];
  }
  if (x > val) {
    const float midpoint = (upper + val) * 0.5f;
    return x > midpoint ? upper_pivot : pivot;
  }
  const float midpoint = (lower + val) * 0.5f;
  return x < midpoint ? lower_pivot : pivot;
}

// One CUDA block per block of 256 elements, one element per thread.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    adamw8bit_kernel(T* p, const T* g, unsigned char* state1, unsigned char* state2,
                     const float* qmap1, const float* qmap2, float* absmax1, float* absmax2,
                     Hyper h, std::int64_t n) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage reduce1, reduce2;
  __shared__ float code1[256], code2[256], new_absmax[2];
  const int t = threadIdx.x;
  code1[t] = qmap1[t];
  code2[t] = qmap2[t];
  const std::int64_t block = blockIdx.x, i = block * kBlock + t;
  const bool valid = i < n;
  // A partial last block is loaded as bnb's BlockLoad pads it: gradient 0, state1 code 128,
  // state2 code 0. The padding takes part in the absmax reduction, as in bnb.
  const float gv = valid ? to_float(g[i]) : 0.0f;
  const unsigned char c1 = valid ? state1[i] : 128, c2 = valid ? state2[i] : 0;
  // Every thread reads the old absmax before thread 0 overwrites it (after the reductions).
  const float old1 = absmax1[block], old2 = absmax2[block];
  __syncthreads();

  const float correction1 = 1.0f - __powf(h.beta1, h.step);
  const float correction2 = sqrtf(1.0f - __powf(h.beta2, h.step));
  const float step_size = __fdividef(-h.lr * correction2, correction1);
  const bool finite = !isnan(gv) && !isinf(gv);
  float s1 = 0.0f, s2 = 0.0f;  // bnb zeroes both moments where the gradient is not finite
  if (finite) {
    s2 = code2[c2] * old2;
    s2 = (s2 * h.beta2) + ((1.0f - h.beta2) * gv * gv);
    s1 = code1[c1] * old1;
    s1 = (s1 * h.beta1) + ((1.0f - h.beta1) * gv);
  }
  // The new absmax of each moment over the block (max is exact in any order).
  const float max1 = Reduce(reduce1).Reduce(fabsf(s1), ::cuda::maximum<>{});
  const float max2 = Reduce(reduce2).Reduce(fabsf(s2), ::cuda::maximum<>{});
  if (t == 0) {
    new_absmax[0] = max1;
    new_absmax[1] = max2;
    absmax1[block] = max1;
    absmax2[block] = max2;
  }
  __syncthreads();
  const float m1 = new_absmax[0], m2 = new_absmax[1];

  // The Adam step, then decoupled weight decay on the stepped parameter (bnb's order on CUDA),
  // each rounded to the parameter's dtype.
  if (valid && finite) {
    T pv = from_float<T>(to_float(p[i]) +
                         (step_size * __fdividef(s1, sqrtf(s2) + (correction2 * h.eps))));
    if (h.weight_decay > 0.0f) pv = from_float<T>(to_float(pv) * (1.0f - (h.lr * h.weight_decay)));
    p[i] = pv;
  }

  unsigned char q1 = quantize<true>(code1, __fdividef(s1, m1));
  // The first moment keeps its sign through quantisation (one code towards zero's other side).
  if (signbit(code1[q1]) != signbit(s1)) q1 = s1 > 0.0f ? q1 + 1 : q1 - 1;
  const unsigned char q2 = quantize<false>(code2, __fdividef(s2, m2));
  if (valid) {
    state1[i] = q1;
    state2[i] = q2;
  }
}

// bnb's kOptimizer32bit2State for ADAM with max_unorm 0 (update_scale 1) and skip_zeros off:
// elementwise, so any launch shape gives bnb's values.
template <typename T>
__global__ void adamw32bit_kernel(T* p, const T* g, float* state1, float* state2, Hyper h,
                                  std::int64_t n) {
  const float correction1 = 1.0f - powf(h.beta1, h.step);
  const float correction2 = sqrtf(1.0f - powf(h.beta2, h.step));
  const float step_size = -h.lr * correction2 / correction1;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float gv = to_float(g[i]);
    const float s1 = state1[i] * h.beta1 + ((1.0f - h.beta1) * gv);
    const float s2 = state2[i] * h.beta2 + ((1.0f - h.beta2) * (gv * gv));
    T pv = from_float<T>(to_float(p[i]) + (1.0f * step_size * (s1 / (sqrtf(s2) + (h.eps * correction2)))));
    if (h.weight_decay > 0.0f) pv = from_float<T>(to_float(pv) * (1.0f - (h.lr * h.weight_decay)));
    p[i] = pv;
    state1[i] = s1;
    state2[i] = s2;
  }
}

template <typename T>
cudaError_t launch8(void* p, const void* g, std::uint8_t* s1, std::uint8_t* s2, const float* q1,
                    const float* q2, float* a1, float* a2, const Hyper& h, std::int64_t n,
                    cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kBlock - 1) / kBlock);
  adamw8bit_kernel<T><<<blocks, kBlock, 0, stream>>>(static_cast<T*>(p), static_cast<const T*>(g),
                                                      s1, s2, q1, q2, a1, a2, h, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch32(void* p, const void* g, float* s1, float* s2, const Hyper& h, std::int64_t n,
                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  adamw32bit_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(p),
                                                         static_cast<const T*>(g), s1, s2, h, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t adamw8bit_blockwise(DType dtype, void* p, const void* g, std::uint8_t* state1,
                                std::uint8_t* state2, const float* qmap1, const float* qmap2,
                                float* absmax1, float* absmax2, const Hyper& h, std::int64_t n,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat:
      return launch8<float>(p, g, state1, state2, qmap1, qmap2, absmax1, absmax2, h, n, stream);
    case DType::kHalf:
      return launch8<__half>(p, g, state1, state2, qmap1, qmap2, absmax1, absmax2, h, n, stream);
    case DType::kBFloat16:
      return launch8<__nv_bfloat16>(p, g, state1, state2, qmap1, qmap2, absmax1, absmax2, h, n,
                                    stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t adamw32bit(DType dtype, void* p, const void* g, float* state1, float* state2,
                       const Hyper& h, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat: return launch32<float>(p, g, state1, state2, h, n, stream);
    case DType::kHalf: return launch32<__half>(p, g, state1, state2, h, n, stream);
    case DType::kBFloat16: return launch32<__nv_bfloat16>(p, g, state1, state2, h, n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t paged_zeros(void** ptr, std::size_t bytes) {
  if (const auto e = cudaMallocManaged(ptr, bytes, cudaMemAttachHost); e != cudaSuccess) return e;
  if (const auto e = cudaMemsetAsync(*ptr, 0, bytes, 0); e != cudaSuccess) return e;
  return cudaDeviceSynchronize();
}

cudaError_t paged_prefetch(const void* ptr, std::size_t bytes, int device) {
  int concurrent = 0;
  if (const auto e = cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device);
      e != cudaSuccess)
    return e;
  if (concurrent == 0) return cudaSuccess;
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = device;
  return cudaMemPrefetchAsync(ptr, bytes, loc, 0u, 0);
}

cudaError_t paged_free(void* ptr) { return cudaFree(ptr); }

}  // namespace sweep::cuda8bit
