// Meta kernels for PyTorch 2.11's fused attention ops, which have none in C++ (a program calling
// each on Meta tensors fails with "no fake impl or Meta kernel registered"): each allocates what
// the CUDA kernel allocates through the caching allocator, in the same order, at the same sizes
// and dtypes, with the outputs' real strides, and frees its temporaries where the CUDA code lets
// them go. The sdpa-level kernels call the lower ops through the dispatcher as attention.cu and
// attention_backward.cu do. Sources: see sdpa_cuda.h. Kernel launches and sizes without memory
// (cudaFuncSetAttribute, philox state) are left out; zero_() and copies run on Meta as no-ops.
#include "sweeps/worker/emulate/sdpa_meta_kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <vector>

#include "models/emulation.h"

namespace sweep::emu {
namespace {

using at::Tensor;
using std::optional;

std::mutex& card_mutex() {
  static std::mutex m;
  return m;
}
EmulatedCard& card_storage() {
  static EmulatedCard card;  // sm_90, 132 SMs until set
  return card;
}

int64_t round_multiple(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// CUDA's limit on a grid's y and z dimensions; attention.cu's MAX_BATCH_SIZE for the
// memory-efficient kernel, whose grid puts the batch in z.
constexpr int64_t kMaxGridYZ = (int64_t{1} << 16) - 1;
constexpr int64_t kMaxEfficientBatch = kMaxGridYZ;

// flash_api.cpp mha_fwd, dense path (q: b x s_q x h x d, the transposed view attention.cu
// passes). Allocation order: out, softmax_lse, [p], [softmax_lse_accum, out_accum],
// rng_state, _unused, [dropout: a second rng_state, the first freed]; the split-KV buffers die
// when mha_fwd returns.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> mha_fwd(const Tensor& q, const Tensor& k,
                                                           const Tensor& v, double p_dropout,
                                                           bool return_softmax) {
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
              "FlashAttention only support fp16 and bf16 data type");
  TORCH_CHECK(q.stride(-1) == 1 && k.stride(-1) == 1 && v.stride(-1) == 1,
              "Input tensor must have contiguous last dimension");
  const int64_t batch = q.size(0), seqlen_q = q.size(1), heads = q.size(2);
  const int64_t head_size_og = q.size(3), seqlen_k = k.size(1);
  TORCH_CHECK(head_size_og % 8 == 0,
              "head_size must be a multiple of 8, this is ensured by padding!");
  TORCH_CHECK(head_size_og <= 256,
              "FlashAttention forward only supports head dimension at most 256");
  // seqlenq_ngroups_swapped (seqlen_q == 1, GQA, no dropout) only reshapes views.
  Tensor out = at::empty_like(q);  // keeps q's strides: the layout of the caller's query
  const int64_t head_size = round_multiple(head_size_og, 8);
  const int64_t head_size_rounded =
      round_multiple(head_size, 32) < 224 ? round_multiple(head_size, 32) : 256;
  const auto opts = q.options();
  Tensor softmax_lse = at::empty({batch, heads, seqlen_q}, opts.dtype(at::kFloat));
  Tensor p;
  if (return_softmax) {
    TORCH_CHECK(p_dropout > 0.0, "return_softmax is only supported when p_dropout > 0.0");
    p = at::empty({batch, heads, round_multiple(seqlen_q, 128), round_multiple(seqlen_k, 128)},
                  opts);
  }
  Tensor softmax_lse_accum, out_accum;  // set_params_splitkv: kept alive to the end of mha_fwd
  const int splits =
      flash_num_splits(batch, heads, seqlen_q, seqlen_k, head_size, p_dropout, sdpa_card().sms);
  if (splits > 1) {
    softmax_lse_accum = at::empty({splits, batch, heads, seqlen_q}, opts.dtype(at::kFloat));
    out_accum =
        at::empty({splits, batch, heads, seqlen_q, head_size_rounded}, opts.dtype(at::kFloat));
  }
  // [Note] BC breaking change to flash seed/offset: a uint64[2] device tensor and an unused one.
  Tensor rng_state = at::empty({2}, opts.dtype(c10::kUInt64));
  Tensor unused = at::empty({}, opts.dtype(c10::kUInt64));
  if (p_dropout > 0.0) rng_state = at::empty({2}, opts.dtype(c10::kUInt64));
  // run_mha_fwd's launch (flash_fwd_launch_template.h): grid (m blocks, b, h), or with split-KV
  // (m blocks, splits, b * h). CUDA caps a grid's y and z at 65535, so a larger batch (or head
  // count) fails at the launch check, after the allocations above.
  const bool grid_fits =
      splits > 1 ? batch * heads <= kMaxGridYZ : batch <= kMaxGridYZ && heads <= kMaxGridYZ;
  TORCH_CHECK(grid_fits,
              "CUDA error: invalid configuration argument (FlashAttention's grid puts batch ",
              batch, " and ", heads, " heads in its y and z dimensions, which CUDA caps at ",
              kMaxGridYZ, ")");
  // The accumulators are destroyed first element first (libstdc++ tuple), as here.
  softmax_lse_accum.reset();
  out_accum.reset();
  return {std::move(out), std::move(softmax_lse), std::move(rng_state), std::move(unused),
          std::move(p)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> flash_attention_forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const optional<Tensor>& cum_seq_q,
    const optional<Tensor>& cum_seq_k, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool /*is_causal*/, bool return_debug_mask, optional<double> /*scale*/,
    optional<c10::SymInt> /*window_left*/, optional<c10::SymInt> /*window_right*/,
    const optional<Tensor>& /*seqused_k*/, const optional<Tensor>& /*alibi_slopes*/) {
  TORCH_CHECK(!cum_seq_q.has_value() && !cum_seq_k.has_value(),
              "emulated _flash_attention_forward: the varlen (nested) path is not emulated");
  auto [output, logsumexp, rng_state, unused, p] =
      mha_fwd(query, key, value, dropout_p, return_debug_mask);
  // attention.cu: debug_attn_mask = return_debug_mask ? p : at::empty({0}, query.options())
  Tensor debug_attn_mask = return_debug_mask ? p : at::empty({0}, query.options());
  return {std::move(output), std::move(logsumexp), std::move(rng_state), std::move(unused),
          std::move(debug_attn_mask)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor>
sdpa_flash(const Tensor& query, const Tensor& key, const Tensor& value, double dropout_p,
           bool is_causal, bool return_debug_mask, optional<double> scale) {
  const int64_t max_q = query.size(2), max_k = key.size(2);
  TORCH_CHECK(max_k == value.size(2), "Key and Value must have the same sequence length");
  auto [output, logsumexp, philox_seed, philox_offset, debug_attn_mask] =
      at::_flash_attention_forward(query.transpose(1, 2), key.transpose(1, 2),
                                   value.transpose(1, 2), std::nullopt, std::nullopt, max_q, max_k,
                                   dropout_p, is_causal, return_debug_mask, scale);
  return {output.transpose(1, 2), logsumexp,      Tensor(), Tensor(), max_q, max_k, philox_seed,
          philox_offset,          debug_attn_mask};
}

// flash_api.cpp mha_bwd (dense): dq, dk, dv like q/k/v, softmax_d, dq_accum (fp32, seqlen
// rounded to 128, head dim to 32), [GQA: dk/dv expanded]; dq_accum dies with mha_bwd,
// softmax_d with _flash_attention_backward's structured binding.
std::tuple<Tensor, Tensor, Tensor> flash_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& /*logsumexp*/, const Tensor& cum_seq_q,
    const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout*/,
    bool /*is_causal*/, const Tensor& /*rng_state*/, const Tensor& /*unused*/,
    optional<double> /*scale*/, optional<c10::SymInt> /*wl*/, optional<c10::SymInt> /*wr*/) {
  TORCH_CHECK(!cum_seq_q.defined(), "emulated _flash_attention_backward: varlen not emulated");
  // "CUDA code assumes that dout is contiguous"
  Tensor contiguous_grad_out = grad_out.contiguous();
  Tensor contiguous_out = out.contiguous();
  const bool deterministic = at::globalContext().deterministicAlgorithms() &&
                             !at::globalContext().deterministicAlgorithmsWarnOnly();
  const int64_t batch = query.size(0), seqlen_q = query.size(1), heads = query.size(2);
  const int64_t head_size = query.size(3), seqlen_k = key.size(1), heads_k = key.size(2);
  TORCH_CHECK(head_size % 8 == 0, "head_size should be a multiple of 8");
  Tensor dq = at::empty_like(query), dk = at::empty_like(key), dv = at::empty_like(value);
  const int64_t head_size_rounded =
      round_multiple(head_size, 32) < 224 ? round_multiple(head_size, 32) : 256;
  const int64_t seqlen_q_rounded = round_multiple(seqlen_q, 128);
  const auto opts = query.options();
  Tensor softmax_d = at::empty({batch, heads, seqlen_q_rounded}, opts.dtype(at::kFloat));
  Tensor dq_accum;
  if (!deterministic) {
    dq_accum =
        at::empty({batch, seqlen_q_rounded, heads, head_size_rounded}, opts.dtype(at::kFloat));
  } else {
    const int64_t nsplits = ceil_div(sdpa_card().sms, batch * heads);
    dq_accum = at::zeros({nsplits, batch, seqlen_q_rounded, heads, head_size_rounded},
                         opts.dtype(at::kFloat));
  }
  if (heads_k != heads) {  // MQA / GQA: expanded grads, summed into dk/dv
    Tensor dk_expanded = at::empty({batch, seqlen_k, heads, head_size}, opts);
    Tensor dv_expanded = at::empty({batch, seqlen_k, heads, head_size}, opts);
    at::sum_out(dk, dk_expanded.reshape({batch, seqlen_k, heads_k, heads / heads_k, head_size}),
                {3});
    at::sum_out(dv, dv_expanded.reshape({batch, seqlen_k, heads_k, heads / heads_k, head_size}),
                {3});
  }
  dq_accum.reset();   // mha_bwd's local
  softmax_d.reset();  // dSoftmax of the structured binding
  return {std::move(dq), std::move(dk), std::move(dv)};
}

std::tuple<Tensor, Tensor, Tensor> sdpa_flash_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& logsumexp, const Tensor& cum_seq_q, const Tensor& cum_seq_k,
    c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    const Tensor& philox_seed, const Tensor& philox_offset, optional<double> scale) {
  if (!grad_out.defined()) return {};
  auto [grad_q, grad_k, grad_v] = at::_flash_attention_backward_symint(
      grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
      out.transpose(1, 2), logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
      philox_seed, philox_offset, scale);
  return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2)};
}

// attention.cu _efficient_attention_forward, CUDA path: seed/offset are host tensors outside
// graph capture (no device memory); res (b, m, h, kv) contiguous; logsumexp padded to
// kAlignLSE = 32 (kernel_forward.h:114); output_accum fp32 only for a half kernel that cannot
// keep the output in registers (kNeedsOutputAccumulatorBuffer, 119: kMaxK > kKeysPerBlock, the
// gmem kernels cutlassF.h lists for head dims above 128, e.g. dispatch_cutlassF_f16_sm80, 152).
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt> efficient_attention_forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const optional<Tensor>& bias,
    const optional<Tensor>& cu_seqlens_q, const optional<Tensor>& /*cu_seqlens_k*/,
    optional<c10::SymInt> /*max_seqlen_q*/, optional<c10::SymInt> /*max_seqlen_k*/,
    double /*dropout_p*/, int64_t /*custom_mask_type*/, bool compute_log_sumexp,
    optional<double> /*scale*/, const optional<Tensor>& /*seqlen_k*/,
    optional<int64_t> /*window_size*/) {
  TORCH_CHECK(!cu_seqlens_q.has_value(), "emulated _efficient_attention_forward: no varlen");
  TORCH_CHECK(query.dim() == 4 && query.stride(-1) == 1 && key.stride(-1) == 1 &&
              value.stride(-1) == 1);
  const int64_t batch = query.size(0), m = query.size(1), n = key.size(1);
  const int64_t heads = query.size(2), kv = value.size(3);
  (void)n;
  Tensor seed_t = at::empty({}, at::dtype(at::kLong));  // host: not in device memory
  Tensor offset_t = at::empty({}, at::dtype(at::kLong));
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == query.scalar_type(),
                "invalid dtype for bias - should match query's dtype");
    TORCH_CHECK(bias->dim() == 4, "Bias expected in BMHK format");
    TORCH_CHECK(bias->stride(3) == 1,
                "attn_bias: wrong alignment (last dimension must be contiguous)");
  }
  const bool is_half = query.scalar_type() != at::kFloat;
  const int64_t max_k = std::max(query.size(3), kv);
  Tensor res = at::empty({batch, m, heads, kv}, query.options());
  Tensor logsumexp = at::empty({batch, heads, compute_log_sumexp ? round_multiple(m, 32) : 0},
                               query.options().dtype(at::kFloat));
  if (is_half && max_k > 128) {  // the gmem kernels (kMaxK 65536): kNeedsOutputAccumulatorBuffer
    Tensor output_accum = at::empty({batch, m, heads, kv}, query.options().dtype(at::kFloat));
  }  // freed at the end of the launch lambda
  return {std::move(res), std::move(logsumexp), std::move(seed_t), std::move(offset_t), m,
          key.size(1)};
}

// attention.cu _scaled_dot_product_efficient_attention_cuda. The kernel's grid puts the batch in
// z, which CUDA caps at 65535, so a larger batch runs in chunks of 65535: the first chunk's
// output and logsumexp, then full-batch ones (the output with the chunk's strides, through
// empty_strided) that every chunk is copied into. The first chunk's results live until the
// function returns, each later chunk's until the end of its iteration. A chunked batch cannot
// keep one dropout seed and offset, and refuses dropout, with attention.cu's message.
std::tuple<Tensor, Tensor, Tensor, Tensor> sdpa_efficient(const Tensor& query, const Tensor& key,
                                                          const Tensor& value,
                                                          const optional<Tensor>& attn_bias,
                                                          bool compute_log_sumexp, double dropout_p,
                                                          bool is_causal, optional<double> scale) {
  const int64_t batch = query.size(0);
  TORCH_CHECK(batch <= kMaxEfficientBatch || dropout_p == 0.0,
              "Efficient attention cannot produce valid seed and offset outputs when the batch "
              "size exceeds (",
              kMaxEfficientBatch, ").");
  const int64_t mask_type = is_causal ? 1 /*CausalFromTopLeft*/ : 0 /*NoCustomMask*/;
  auto process_chunk =
      [&](const Tensor& q, const Tensor& k, const Tensor& v,
          const optional<Tensor>& bias) -> std::tuple<Tensor, Tensor, Tensor, Tensor> {
    auto [attention, log_sumexp, seed, offset, mq, mk] = at::_efficient_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), bias, std::nullopt, std::nullopt,
        std::nullopt, std::nullopt, dropout_p, mask_type, compute_log_sumexp, scale);
    return {attention.transpose(1, 2), std::move(log_sumexp), std::move(seed), std::move(offset)};
  };
  if (batch <= kMaxEfficientBatch) return process_chunk(query, key, value, attn_bias);
  auto bias_rows = [&](int64_t start, int64_t end) -> optional<Tensor> {
    if (!attn_bias.has_value()) return std::nullopt;
    return attn_bias->slice(0, start, end);
  };
  int64_t end = kMaxEfficientBatch;
  auto [attn, log_sumexp, seed, offset] = process_chunk(
      query.slice(0, 0, end), key.slice(0, 0, end), value.slice(0, 0, end), bias_rows(0, end));
  std::vector<int64_t> sizes = attn.sizes().vec();
  sizes[0] = batch;
  Tensor final_attention = at::empty_strided(sizes, attn.strides(), attn.options());
  final_attention.slice(0, 0, end).copy_(attn);
  Tensor final_log_sumexp;
  if (compute_log_sumexp && log_sumexp.numel() > 0) {
    std::vector<int64_t> lse_sizes = log_sumexp.sizes().vec();
    lse_sizes[0] = batch;
    final_log_sumexp = at::empty(lse_sizes, log_sumexp.options());
    final_log_sumexp.slice(0, 0, end).copy_(log_sumexp);
  }
  for (int64_t start = end; start < batch; start += kMaxEfficientBatch) {
    end = std::min(start + kMaxEfficientBatch, batch);
    auto [chunk_attn, chunk_log_sumexp, chunk_seed, chunk_offset] =
        process_chunk(query.slice(0, start, end), key.slice(0, start, end),
                      value.slice(0, start, end), bias_rows(start, end));
    final_attention.slice(0, start, end).copy_(chunk_attn);
    if (compute_log_sumexp && chunk_log_sumexp.numel() > 0)
      final_log_sumexp.slice(0, start, end).copy_(chunk_log_sumexp);
  }
  return {std::move(final_attention), std::move(final_log_sumexp), std::move(seed),
          std::move(offset)};
}

// attention_backward.cu _efficient_attention_backward, CUDA path. Order: grad_out copy if not
// contiguous, grad_q/k/v (b, m, h, k) contiguous, grad_bias (last dim padded to 16, sliced),
// delta (fp32 (b, h, m), or computed by ops for the f32 kernels), workspace (bytes); delta dies
// with the launch lambda, then the workspace and the grad_out copy when the function returns.
std::tuple<Tensor, Tensor, Tensor, Tensor> efficient_attention_backward(
    const Tensor& grad_out_, const Tensor& query, const Tensor& key, const Tensor& value,
    const optional<Tensor>& kernel_bias, const Tensor& out, const optional<Tensor>& cu_seqlens_q,
    const optional<Tensor>& /*cu_seqlens_k*/, c10::SymInt /*max_seqlen_q*/,
    c10::SymInt /*max_seqlen_k*/, const Tensor& /*logsumexp*/, double dropout_p,
    const Tensor& /*philox_seed*/, const Tensor& /*philox_offset*/, int64_t /*custom_mask_type*/,
    bool bias_requires_grad, optional<double> /*scale*/, optional<int64_t> num_splits_key,
    optional<int64_t> window_size, bool shared_storage_dqdkdv) {
  if (!grad_out_.defined()) return {};
  TORCH_CHECK(!(cu_seqlens_q.has_value() && cu_seqlens_q->defined()),
              "emulated _efficient_attention_backward: no varlen");
  TORCH_CHECK(!num_splits_key.has_value() && !window_size.has_value(),
              "emulated _efficient_attention_backward: num_splits_key/window_size not emulated");
  optional<Tensor> bias =
      kernel_bias.has_value() && !kernel_bias->defined() ? std::nullopt : kernel_bias;
  Tensor grad_out = grad_out_.contiguous();  // "handle potentially non-contiguous grad_out"
  const int64_t batch = query.size(0), m = query.size(1), n = key.size(1);
  const int64_t heads = query.size(2), k = query.size(3), kv = value.size(3);
  Tensor grad_q, grad_k, grad_v, grad_bias;
  if (shared_storage_dqdkdv) {
    Tensor chunk = at::empty({batch, m, 3, heads, k}, query.options());
    grad_q = chunk.select(2, 0);
    grad_k = chunk.select(2, 1);
    grad_v = chunk.select(2, 2);
  } else {
    grad_q = at::empty(query.sizes(), query.options());
    grad_k = at::empty(key.sizes(), key.options());
    grad_v = at::empty(value.sizes(), value.options());
  }
  if (bias_requires_grad) {  // "force alignment for the last dim"
    std::vector<int64_t> sz = bias->sizes().vec();
    const int64_t last = sz.back();
    sz.back() = round_multiple(last, 16);
    grad_bias = at::empty(sz, bias->options()).slice(-1, 0, last);
  }
  const bool is_half = query.scalar_type() != at::kFloat;
  const MemEffBackwardKernel kernel =
      mem_eff_backward_kernel(sdpa_card().sm(), is_half, std::max(k, kv), dropout_p != 0.0, m, n);
  Tensor workspace;
  {
    Tensor delta =
        kernel.computes_delta
            ? at::empty({batch, heads, m}, query.options().dtype(at::kFloat))
            : (grad_out.to(at::kFloat) * out.to(at::kFloat)).sum(-1).transpose(-2, -1).contiguous();
    const MemEffWorkspace ws = mem_eff_backward_workspace(kernel, batch, heads, m, n, k, kv);
    if (ws.bytes) workspace = at::empty({ws.bytes}, query.options().dtype(at::kByte));
  }
  workspace.reset();
  return {std::move(grad_q), std::move(grad_k), std::move(grad_v), std::move(grad_bias)};
}

// attention_backward.cu _scaled_dot_product_efficient_attention_backward_cuda: above 65535 the
// same chunks as the forward. Full-batch grads first (empty_strided with q, k and v's own
// strides, so a view into a fused projection allocates its whole span; grad_bias zeros_like
// the bias), then each chunk's _efficient_attention_backward, copied in (grad_bias summed), its
// grads freed at the end of the iteration.
std::tuple<Tensor, Tensor, Tensor, Tensor> sdpa_efficient_backward(
    const Tensor& grad_out_, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& attn_bias, const Tensor& out, const Tensor& logsumexp, const Tensor& philox_seed,
    const Tensor& philox_offset, double dropout_p, std::array<bool, 4> grad_input_mask, bool causal,
    optional<double> scale) {
  if (!grad_out_.defined()) return {};
  const int64_t batch = query.size(0);
  TORCH_CHECK(batch <= kMaxEfficientBatch || dropout_p == 0.0,
              "Efficient attention backward cannot handle dropout when the batch size exceeds (",
              kMaxEfficientBatch, ").");
  auto process_chunk = [&](const Tensor& grad_out, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& bias, const Tensor& o,
                           const Tensor& lse) -> std::tuple<Tensor, Tensor, Tensor, Tensor> {
    optional<Tensor> kernel_bias;
    if (bias.defined()) kernel_bias = bias;
    auto [grad_q, grad_k, grad_v, grad_bias] = at::_efficient_attention_backward(
        grad_out.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        kernel_bias, o.transpose(1, 2), std::nullopt, std::nullopt, q.size(2), k.size(2), lse,
        dropout_p, philox_seed, philox_offset, causal ? 1 : 0, grad_input_mask[3], scale,
        std::nullopt);
    return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2),
            std::move(grad_bias)};
  };
  if (batch <= kMaxEfficientBatch)
    return process_chunk(grad_out_, query, key, value, attn_bias, out, logsumexp);
  auto full_batch_like = [&](const Tensor& t) {
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[0] = batch;
    return at::empty_strided(sizes, t.strides(), t.options());
  };
  Tensor final_grad_q, final_grad_k, final_grad_v, final_grad_bias;
  if (grad_input_mask[0]) final_grad_q = full_batch_like(query);
  if (grad_input_mask[1]) final_grad_k = full_batch_like(key);
  if (grad_input_mask[2]) final_grad_v = full_batch_like(value);
  if (grad_input_mask[3] && attn_bias.defined()) final_grad_bias = at::zeros_like(attn_bias);
  for (int64_t start = 0; start < batch; start += kMaxEfficientBatch) {
    const int64_t end = std::min(start + kMaxEfficientBatch, batch);
    auto rows = [&](const Tensor& t) { return t.defined() ? t.slice(0, start, end) : Tensor(); };
    const Tensor lse = logsumexp.numel() > 0 ? rows(logsumexp) : logsumexp;
    auto [chunk_grad_q, chunk_grad_k, chunk_grad_v, chunk_grad_bias] = process_chunk(
        rows(grad_out_), rows(query), rows(key), rows(value), rows(attn_bias), rows(out), lse);
    if (grad_input_mask[0] && chunk_grad_q.defined()) rows(final_grad_q).copy_(chunk_grad_q);
    if (grad_input_mask[1] && chunk_grad_k.defined()) rows(final_grad_k).copy_(chunk_grad_k);
    if (grad_input_mask[2] && chunk_grad_v.defined()) rows(final_grad_v).copy_(chunk_grad_v);
    if (grad_input_mask[3] && chunk_grad_bias.defined()) final_grad_bias.add_(chunk_grad_bias);
  }
  return {std::move(final_grad_q), std::move(final_grad_k), std::move(final_grad_v),
          std::move(final_grad_bias)};
}

// MHA.cpp alloc_with_matching_layout: the output in q's dimension order.
Tensor alloc_with_matching_layout(const Tensor& q, std::vector<int64_t> shape) {
  if (q.sizes() == at::IntArrayRef(shape)) return at::empty_like(q);
  std::vector<int64_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  std::vector<int64_t> permuted(shape.size()), back(shape.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted[i] = shape[order[i]];
    back[order[i]] = static_cast<int64_t>(i);
  }
  return at::empty(permuted, q.options()).permute(back);
}

// attention.cu _cudnn_attention_forward + MHA.cpp run_cudnn_SDP_fprop (dense): seed and offset
// (int64 device scalars, always), o, softmaxstats (b, h, s_q, 1) fp32 when asked, then cuDNN's
// workspace (mha_graph.get_workspace_size(), through the caching allocator, freed on return):
// not known without cuDNN; taken as 0 bytes here.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor>
cudnn_attention_forward(const Tensor& query, const Tensor& /*key*/, const Tensor& value,
                        const optional<Tensor>& /*attn_bias*/, const optional<Tensor>& cum_seq_q,
                        const optional<Tensor>& /*cum_seq_k*/, c10::SymInt max_q, c10::SymInt max_k,
                        bool compute_log_sumexp, double /*dropout_p*/, bool /*is_causal*/,
                        bool /*return_debug_mask*/, optional<double> /*scale*/) {
  TORCH_CHECK(!cum_seq_q.has_value(), "emulated _cudnn_attention_forward: no nested tensors");
  const auto opts = query.options();
  Tensor cudnn_seed = at::empty({}, opts.dtype(at::kLong));
  Tensor cudnn_offset = at::empty({}, opts.dtype(at::kLong));
  Tensor attention = alloc_with_matching_layout(
      query, {query.size(0), query.size(1), query.size(2), value.size(3)});
  Tensor log_sumexp;
  if (compute_log_sumexp) {
    log_sumexp =
        at::empty({query.size(0), query.size(1), query.size(2), 1}, opts.dtype(at::kFloat));
  }
  return {std::move(attention),  std::move(log_sumexp),   Tensor(), Tensor(), max_q, max_k,
          std::move(cudnn_seed), std::move(cudnn_offset), Tensor()};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor>
sdpa_cudnn(const Tensor& query, const Tensor& key, const Tensor& value,
           const optional<Tensor>& attn_bias, bool compute_log_sumexp, double dropout_p,
           bool is_causal, bool return_debug_mask, optional<double> scale) {
  return at::_cudnn_attention_forward(query, key, value, attn_bias, std::nullopt, std::nullopt,
                                      query.size(2), key.size(2), compute_log_sumexp, dropout_p,
                                      is_causal, return_debug_mask, scale);
}

// attention_backward.cu _cudnn_attention_backward + MHA.cpp run_cudnn_SDP_bprop (dense,
// cuDNN >= 9.5.1): dq, dk, dv like q, k, v; dO re-laid out only if its last stride is not 1;
// then the workspace. The graph is cudnn_frontend's composite SDPA backward, whose own
// workspace holds dQ_accum (fp32 b*h*s_q*d_qk) and softmax_sum (fp32 b*h*s_q) when it does not
// take the dP-workspace variant; the backend engine's share is unknown here. Modelled as those
// two, in one block, freed on return.
std::tuple<Tensor, Tensor, Tensor> cudnn_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& /*logsumexp*/, const Tensor& /*philox_seed*/,
    const Tensor& /*philox_offset*/, const Tensor& /*attn_bias*/, const Tensor& cum_seq_q,
    const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout_p*/,
    bool /*is_causal*/, optional<double> /*scale*/) {
  TORCH_CHECK(!cum_seq_q.defined(), "emulated _cudnn_attention_backward: no nested tensors");
  Tensor dq = at::empty_like(query), dk = at::empty_like(key), dv = at::empty_like(value);
  Tensor dO = grad_out;
  if (grad_out.stride(-1) != 1) dO = alloc_with_matching_layout(out, grad_out.sizes().vec());
  const int64_t b = query.size(0), h = query.size(1), s_q = query.size(2), d = query.size(3);
  const int64_t workspace_bytes = b * h * s_q * d * 4 + b * h * s_q * 4;
  Tensor workspace = at::empty({workspace_bytes}, query.options().dtype(at::kByte));
  workspace.reset();
  return {std::move(dq), std::move(dk), std::move(dv)};
}

std::tuple<Tensor, Tensor, Tensor> sdpa_cudnn_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& logsumexp, const Tensor& philox_seed,
    const Tensor& philox_offset, const Tensor& attn_bias, const Tensor& cum_seq_q,
    const Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    optional<double> scale) {
  return at::_cudnn_attention_backward_symint(grad_out, query, key, value, out, logsumexp,
                                              philox_seed, philox_offset, attn_bias, cum_seq_q,
                                              cum_seq_k, max_q, max_k, dropout_p, is_causal, scale);
}

// where.self has no Meta kernel in C++ (aten's is a TensorIterator kernel for CPU/CUDA/MPS):
// the output at its final size and the promoted dtype, as TensorIterator allocates it on CUDA
// (Meta's resize_ would bypass the allocator, so no empty({0}) + resize here). 0-dim inputs may
// be host tensors (wrapped scalars), as CUDA's where accepts.
Tensor where_self(const Tensor& condition, const Tensor& self, const Tensor& other) {
  const auto dtype = at::result_type(self, other);
  auto shape = at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  const Tensor& like = self.dim() > 0 ? self : (other.dim() > 0 ? other : condition);
  at::TensorOptions opts = like.options().dtype(dtype).device(at::kMeta);
  if (like.sizes() == at::IntArrayRef(shape)) return at::empty_like(like, opts);
  return at::empty(shape, opts);
}

Tensor& where_self_out(const Tensor& condition, const Tensor& self, const Tensor& other,
                       Tensor& out) {
  auto shape = at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  TORCH_CHECK(out.sizes() == at::IntArrayRef(shape),
              "emulated where.self_out: resizing the output on Meta would bypass the allocator");
  return out;
}

// logical_not has no Meta kernel either: at::native::logical_not is empty({0}) + logical_not_out,
// whose resize allocates on CUDA; here the bool result is allocated at its size, laid out as
// TensorIterator lays out a unary op's output (like the input).
Tensor logical_not(const Tensor& self) {
  return at::empty_like(self, self.options().dtype(at::kBool));
}

Tensor& logical_not_out(const Tensor& self, Tensor& out) {
  TORCH_CHECK(out.sizes() == self.sizes(),
              "emulated logical_not.out: resizing the output on Meta would bypass the allocator");
  return out;
}

// native_dropout has no Meta kernel in C++: aten/src/ATen/native/cuda/Dropout.cu
// native_dropout_cuda -> dropout_cuda<bool>: the bool mask first, then the output, both like the
// input; train=false clones and returns a ones mask; p == 1 returns zeros.
std::tuple<Tensor, Tensor> native_dropout(const Tensor& self, double p, optional<bool> train) {
  const auto bool_opts = self.options().dtype(at::kBool);
  if (train.has_value() && !*train) return {self.clone(), at::ones_like(self, bool_opts)};
  if (p == 1) return {at::zeros_like(self), at::zeros_like(self, bool_opts)};
  Tensor mask = at::empty_like(self, bool_opts);
  if (self.numel() == 0) return {self.clone(), mask};
  Tensor ret = at::empty_like(self);
  return {std::move(ret), std::move(mask)};
}

// Dropout.cu native_dropout_backward_cuda -> masked_scale_cuda: one output,
// empty_like(grad, grad.suggest_memory_format()).
Tensor native_dropout_backward(const Tensor& grad, const Tensor& mask, double /*scale*/) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type");
  return at::empty_like(grad, grad.suggest_memory_format());
}

}  // namespace

void set_sdpa_card(const EmulatedCard& card) {
  std::lock_guard<std::mutex> lock(card_mutex());
  card_storage() = card;
}

EmulatedCard sdpa_card() {
  std::lock_guard<std::mutex> lock(card_mutex());
  return card_storage();
}

namespace {

// CUDA's masked_select (masked_select_out_cuda_impl: the input indexed with the boolean mask,
// nonzero's (count, dims) positions first), the source gradient of masked_scatter (TRL's fused
// LM head scatters its per-token outputs back: models/fused_lm_head.cc). A Meta tensor has no
// values to count: the count the model noted for the mask (the batch's scored labels), else
// every element.
Tensor masked_select(const Tensor& self, const Tensor& mask) {
  const auto shape = at::infer_size(self.sizes(), mask.sizes());
  const int64_t count = models::mask_count(mask).value_or(c10::multiply_integers(shape));
  {
    auto positions = at::empty({count, static_cast<int64_t>(shape.size())}, mask.options().dtype(at::kLong));
  }
  return at::empty({count}, self.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_scaled_dot_product_flash_attention", TORCH_FN(sdpa_flash));
  m.impl("_flash_attention_forward", TORCH_FN(flash_attention_forward));
  m.impl("_scaled_dot_product_flash_attention_backward", TORCH_FN(sdpa_flash_backward));
  m.impl("_flash_attention_backward", TORCH_FN(flash_attention_backward));
  m.impl("_scaled_dot_product_efficient_attention", TORCH_FN(sdpa_efficient));
  m.impl("_efficient_attention_forward", TORCH_FN(efficient_attention_forward));
  m.impl("_scaled_dot_product_efficient_attention_backward", TORCH_FN(sdpa_efficient_backward));
  m.impl("_efficient_attention_backward", TORCH_FN(efficient_attention_backward));
  m.impl("_scaled_dot_product_cudnn_attention", TORCH_FN(sdpa_cudnn));
  m.impl("_cudnn_attention_forward", TORCH_FN(cudnn_attention_forward));
  m.impl("_scaled_dot_product_cudnn_attention_backward", TORCH_FN(sdpa_cudnn_backward));
  m.impl("_cudnn_attention_backward", TORCH_FN(cudnn_attention_backward));
  m.impl("where.self", TORCH_FN(where_self));
  m.impl("where.self_out", TORCH_FN(where_self_out));
  m.impl("logical_not", TORCH_FN(logical_not));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
  m.impl("logical_not.out", TORCH_FN(logical_not_out));
  m.impl("masked_select", TORCH_FN(masked_select));
}

}  // namespace sweep::emu
