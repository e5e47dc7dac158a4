// Meta kernels for the fused attention ops of PyTorch 2.11 that have none in C++, each
// allocating what its CUDA kernel allocates (sdpa_meta_kernels.cc), and the facts of the
// emulated card they read. Internal to sdpa_cuda.cc and its tests.
#pragma once

#include <cstdint>

#include "sweeps/measure/emulated_card.h"

namespace sweep::emu {

// The card the Meta kernels emulate. A process emulates one card; backward may run on an
// autograd worker thread, so this is process-wide, not thread-local. Setting it also makes sure
// the registrations of sdpa_meta_kernels.cc are linked in.
void set_sdpa_card(const EmulatedCard& card);
EmulatedCard sdpa_card();

// flash_api.cpp set_params_splitkv: the number of split-KV blocks mha_fwd uses (1: none).
int flash_num_splits(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k,
                     int64_t head_size, double dropout_p, int sms);

// The memory-efficient (cutlass) backward kernel dispatch_cutlassB picks, and what its
// workspace and delta cost (kernel_backward.h, cutlassB.h).
struct MemEffBackwardKernel {
  int block_i = 64, block_j = 64, max_k = 64;
  bool output_in_rf = true;        // kOutputInRF
  bool computes_delta = true;      // kKernelComputesDelta
  bool needs_accum_grad_q = true;  // kNeedsAccumGradQ
  bool needs_accum_grad_kv = false;
};
MemEffBackwardKernel mem_eff_backward_kernel(int sm, bool is_half, int64_t max_k, bool dropout,
                                             int64_t num_queries, int64_t num_keys);
// Workspace bytes of _efficient_attention_backward (Params::workspace_size) and the
// num_splits_key it is computed with.
struct MemEffWorkspace {
  int64_t bytes = 0;
  int64_t num_splits_key = 1;
};
MemEffWorkspace mem_eff_backward_workspace(const MemEffBackwardKernel& kernel, int64_t batch,
                                           int64_t heads, int64_t num_queries, int64_t num_keys,
                                           int64_t head_dim, int64_t head_dim_value);

}  // namespace sweep::emu
