// The host-side rules of the fused attention kernels that decide how much memory they ask for:
// FlashAttention-2's split-KV heuristic (flash_api.cpp) and the memory-efficient (cutlass)
// backward kernel's choice and workspace (cutlassB.h, kernel_backward.h of the 2.11 wheel).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sweeps/worker/emulate/sdpa_meta_kernels.h"

namespace sweep::emu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }

// flash_api.cpp num_splits_heuristic: the smallest split count within 85% of the best wave
// efficiency, 1 when the blocks already nearly fill the SMs.
int num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits) {
  if (batch_nheads_mblocks >= 0.8f * num_sms) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  float max_efficiency = 0.f;
  std::vector<float> efficiency;
  efficiency.reserve(max_splits);
  auto cdiv = [](int a, int b) { return (a + b - 1) / b; };
  auto eligible = [&](int s) {
    return s == 1 || cdiv(num_n_blocks, s) != cdiv(num_n_blocks, s - 1);
  };
  for (int s = 1; s <= max_splits; s++) {
    if (!eligible(s)) {
      efficiency.push_back(0.f);
    } else {
      float n_waves = static_cast<float>(batch_nheads_mblocks * s) / num_sms;
      float eff = n_waves / std::ceil(n_waves);
      max_efficiency = std::max(max_efficiency, eff);
      efficiency.push_back(eff);
    }
  }
  for (int s = 1; s <= max_splits; s++) {
    if (eligible(s) && efficiency[s - 1] >= 0.85 * max_efficiency) return s;
  }
  return 1;
}

}  // namespace

// flash_api.cpp set_params_splitkv, called by mha_fwd with num_splits = 0: SplitKV is not
// implemented for dropout; block_n follows run_mha_fwd_splitkv_dispatch; "we multiply number of
// SMs by 2 to hard-code the fact that we're using 128 threads per block".
int flash_num_splits(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k,
                     int64_t head_size, double dropout_p, int sms) {
  if (dropout_p != 0.0) return 1;
  const int64_t block_n = head_size <= 64 ? 256 : (head_size <= 128 ? 128 : 64);
  const int64_t num_n_blocks = ceil_div(seqlen_k, block_n);
  const int64_t num_m_blocks = ceil_div(seqlen_q, 64);
  return num_splits_heuristic(static_cast<int>(batch * heads * num_m_blocks), sms * 2,
                              static_cast<int>(num_n_blocks), 128);
}

// dispatch_cutlassB (cutlassB.h): sm80..sm120 take the Sm80 lists (bf16 228, f16 318, f32 869),
// sm75 the Sm75 ones (f16 707, f32 800; their aligned kernels: the zoo's strides are aligned);
// within a list the first kernel that passes launchKernel's tests (attention_backward.cu) runs:
// kMaxK >= max(K, Kv); a kernel without dropout is skipped when dropout is on; the
// kKeysQueriesAlignedToBlockSize variants need M % kBlockSizeI == 0 and N % kBlockSizeJ == 0;
// stride alignment (taken as met: the zoo's head dims are multiples of 8); shared memory.
// Assumed from shared memory alone (sizeof(SharedStorage) needs CUTLASS, not in the wheel): the
// 128x128 kernels fit only sm80/sm90 (163/227 KiB opt-in), which is why cutlassB.h adds a
// 128x64 k96 kernel for sm86/sm89 (99 KiB); the 64x64 and 128x64 ones fit every card here.
MemEffBackwardKernel mem_eff_backward_kernel(int sm, bool is_half, int64_t max_k, bool dropout,
                                             int64_t num_queries, int64_t num_keys) {
  struct Candidate {
    bool dropout;
    int bi, bj, max_k;
    bool aligned_to_block;
  };
  std::vector<Candidate> list;
  const bool big_smem = sm == 80 || sm == 90;
  if (sm >= 80 && is_half) {  // dispatch_cutlassB_{f16,bf16}_sm80
    list = {{false, 64, 64, 32, true},
            {false, 64, 64, 32, false},
            {false, 64, 64, 64, true},
            {false, 64, 64, 64, false}};
    if (sm == 86 || sm == 89) list.push_back({false, 128, 64, 96, false});
    list.insert(list.end(), {{false, 128, 128, 128, true},
                             {false, 128, 128, 128, false},
                             {false, 64, 64, 128, true},
                             {false, 64, 64, 128, false},
                             {false, 128, 64, 65536, false},
                             {false, 64, 64, 65536, false},
                             {true, 64, 64, 32, false},
                             {true, 64, 64, 64, false},
                             {true, 128, 128, 128, false},
                             {true, 64, 64, 128, false},
                             {true, 128, 64, 65536, false},
                             {true, 64, 64, 65536, false}});
  } else if (sm >= 80) {  // dispatch_cutlassB_f32_sm80
    list = {
        {false, 64, 64, 32, false},  {false, 64, 64, 64, false},     {false, 128, 64, 128, false},
        {false, 64, 64, 128, false}, {false, 128, 64, 65536, false}, {false, 64, 64, 65536, false},
        {true, 64, 64, 32, false},   {true, 64, 64, 64, false},      {true, 128, 64, 128, false},
        {true, 64, 64, 128, false},  {true, 128, 64, 65536, false},  {true, 64, 64, 65536, false}};
  } else if (is_half) {  // dispatch_cutlassB_f16_sm75 (aligned part)
    list = {
        {false, 64, 64, 32, false},  {false, 64, 64, 64, false},     {false, 128, 64, 128, false},
        {false, 64, 64, 128, false}, {false, 128, 64, 65536, false}, {false, 64, 64, 65536, false},
        {true, 64, 64, 32, false},   {true, 64, 64, 64, false},      {true, 128, 64, 128, false},
        {true, 64, 64, 128, false},  {true, 128, 64, 65536, false},  {true, 64, 64, 65536, false}};
  } else {  // dispatch_cutlassB_f32_sm75 (aligned part)
    list = {{false, 64, 64, 32, false},    {false, 64, 64, 64, false},  {false, 64, 64, 128, false},
            {false, 64, 64, 65536, false}, {true, 64, 64, 32, false},   {true, 64, 64, 64, false},
            {true, 64, 64, 128, false},    {true, 64, 64, 65536, false}};
  }
  for (const Candidate& c : list) {
    if (c.max_k < max_k) continue;
    if (dropout && !c.dropout) continue;
    if (c.aligned_to_block && (num_queries % c.bi || num_keys % c.bj)) continue;
    if (c.bi == 128 && c.bj == 128 && !big_smem) continue;
    MemEffBackwardKernel k;
    k.block_i = c.bi;
    k.block_j = c.bj;
    k.max_k = c.max_k;
    k.output_in_rf = is_half && c.max_k <= c.bi;  // kOutputInRF (kernel_backward.h:251)
    // kKernelComputesDelta = kIsHalf && (kOutputInRF || kMinComputeCapability != 70) (272)
    k.computes_delta = is_half;
    k.needs_accum_grad_q = true;  // kEnableSplitKeys (kMinSm >= 70) || ... (614-620)
    k.needs_accum_grad_kv = !k.output_in_rf && is_half;  // and output_accum_t (float) != scalar_t
    return k;
  }
  return {};
}

// kernel_backward.h Params::workspace_size (857-893) with attention_backward.cu's num_splits_key
// heuristic (num_splits_key not given, deterministic mode off). GradQTempStorage holds
// {lock, counter, pad[2]} and an fp32 tile of kNumThreads * FragmentC::kElements = kBlockSizeI
// * kBlockSizeJ elements (32x32 warp tiles, one warp per 32x32 of the block).
MemEffWorkspace mem_eff_backward_workspace(const MemEffBackwardKernel& kernel, int64_t batch,
                                           int64_t heads, int64_t num_queries, int64_t num_keys,
                                           int64_t head_dim, int64_t head_dim_value) {
  const int64_t parallelism_without_split_key = heads * batch;  // grid (1, heads, batches)
  int64_t splits = ceil_div(num_keys, kernel.block_j);
  if (parallelism_without_split_key >= 256 && num_keys <= 2 * kernel.block_j) splits = 1;
  if (kernel.needs_accum_grad_kv) {
    splits = std::min<int64_t>(splits, 200 / (batch * heads));
  }
  if (splits < 1) splits = 1;
  const int64_t gk =
      kernel.needs_accum_grad_kv ? splits * kernel.block_j * align_up(head_dim, kernel.block_i) : 0;
  const int64_t gv = kernel.needs_accum_grad_kv
                         ? splits * kernel.block_j * align_up(head_dim_value, kernel.block_i)
                         : 0;
  int64_t gq = 0;
  if (kernel.needs_accum_grad_q) {
    const int64_t temp_storage_bytes = 16 + 4 * int64_t{kernel.block_i} * kernel.block_j;
    gq = ceil_div(num_queries, kernel.block_i) * ceil_div(head_dim, kernel.block_j) *
         temp_storage_bytes / 4;
  }
  const int64_t stride_bh = align_up(gk + gv + gq, 4);
  return {batch * heads * stride_bh * 4, splits};
}

}  // namespace sweep::emu
