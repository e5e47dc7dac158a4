// The choice of sdp_utils.cpp and the dispatch of attention.cpp, PyTorch 2.11 on CUDA, for
// Meta tensors (see sdpa_cuda.h for the sources). Functions of sdp_utils.cpp (at 001f694aef6f)
// are cited by name; line numbers are those of the 2.11.0 wheel's sdp_utils_cpp.h and
// ATen/Context.h, and of attention.cpp as numbered in an annotated copy of it (720-916).
#include "sweeps/worker/emulate/sdpa_cuda.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <array>
#include <cmath>
#include <limits>

#include "sweeps/worker/emulate/sdpa_meta_kernels.h"

namespace sweep::emu {
namespace {

using at::Tensor;
using std::optional;

struct Params {  // sdp::sdp_params
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const optional<Tensor>& attn_mask;
  double dropout;
  bool is_causal;
  bool enable_gqa;
};

bool is_half(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// sdp_utils_cpp.h:59 input_requires_grad
bool input_requires_grad(const Params& p) {
  return (p.q.requires_grad() || p.k.requires_grad() || p.v.requires_grad()) &&
         at::GradMode::is_enabled();
}

bool same_dtype_in(const Params& p, std::initializer_list<at::ScalarType> allowed) {
  const auto t = p.q.scalar_type();
  if (t != p.k.scalar_type() || t != p.v.scalar_type()) return false;
  return std::find(allowed.begin(), allowed.end(), t) != allowed.end();
}

// What sdp_utils.cpp instantiates check_batch_size_and_num_heads_dense with, per backend:
// flash <supports_gqa, same kv heads>, cuDNN <supports_gqa, kv heads may differ>, the
// memory-efficient kernel <no GQA> (its dense_constraints): a grouped-query call with fewer kv
// heads goes to flash or cuDNN, or to math (fp32 on any card).
enum class Gqa { kNone, kSameKvHeads, kAnyKvHeads };

// sdp_utils_cpp.h check_tensor_shapes (304), check_batch_size_and_num_heads_dense (379, with
// check_grouped_query_attention 331), check_nonzero_sequence_lengths_dense (477),
// check_last_dim_stride_equals_1_dense (493: the mask's last stride too on GPU).
bool dense_checks(const Params& p, bool ignore_singleton_dim, Gqa gqa) {
  if (p.q.dim() != 4 || p.k.dim() != 4 || p.v.dim() != 4) return false;
  if (p.q.size(0) != p.k.size(0) || p.q.size(0) != p.v.size(0)) return false;
  const int64_t hq = p.q.size(1), hk = p.k.size(1), hv = p.v.size(1);
  if (p.enable_gqa && gqa != Gqa::kNone) {
    if (gqa == Gqa::kSameKvHeads && hk != hv) return false;
    if (hq % hk != 0 || (gqa == Gqa::kAnyKvHeads && hq % hv != 0)) return false;
  } else if (hq != hk || hq != hv) {
    return false;
  }
  if (p.q.size(2) == 0 || p.k.size(2) == 0) return false;
  bool strides_1 = p.q.stride(-1) == 1 && p.k.stride(-1) == 1 && p.v.stride(-1) == 1;
  if (ignore_singleton_dim) strides_1 = strides_1 || p.q.size(-1) == 1;
  const bool mask_ok = !p.attn_mask.has_value() || p.attn_mask->stride(-1) == 1;
  return strides_1 && mask_ok;
}

// sdp_utils.cpp check_sm_version<lower, upper> on major * 10 + minor.
bool sm_in(const EmulatedCard& c, int lo, int hi) { return c.sm() >= lo && c.sm() <= hi; }

// sdp_utils.cpp can_use_flash_attention: its general constraints in order, then the dense ones. FA3
// is off by default (userEnabledFA3SDP), so the dtypes are the sm80 ones.
bool can_use_flash(const EmulatedCard& card, const Params& p) {
  if (p.q.dim() != 4 || p.k.dim() != 4 || p.v.dim() != 4) return false;  // check_tensor_shapes
  if (p.attn_mask.has_value()) return false;                             // check_for_attn_mask
  const int64_t d = p.q.size(-1);  // check_head_dim_size_flash: equal and <= 256
  if (d != p.k.size(-1) || d != p.v.size(-1) || d > 256) return false;
  if (!sm_in(card, 80, 121)) return false;  // check_flash_attention_hardware_support
  // check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120
  if (input_requires_grad(p) && (sm_in(card, 86, 89) || sm_in(card, 120, 121))) {
    const bool ok = d <= 192 || (p.dropout <= 0.0 && d > 224);
    if (!ok) return false;
  }
  // check_flash_causal_non_square_seqlens
  if (p.is_causal && p.q.size(-2) != p.k.size(-2)) return false;
  // check_dtypes_flash_attention -> check_dtypes_low_precision
  if (card.cc_major >= 8 ? !same_dtype_in(p, {at::kHalf, at::kBFloat16})
                         : !same_dtype_in(p, {at::kHalf})) {
    return false;
  }
  return dense_checks(p, /*ignore_singleton_dim=*/true, Gqa::kSameKvHeads);
}

// sdp_utils.cpp minimum_gemm_alignment: tensor cores on sm80+, and on sm70+ for half.
int64_t minimum_gemm_alignment(const EmulatedCard& card, const Params& p) {
  const bool half = is_half(p.q.scalar_type());
  const bool use_tc = card.cc_major >= 8 || (card.cc_major >= 7 && half);
  int64_t align = card.cc_major >= 8 ? 4 : 1;
  if (use_tc) align = std::max<int64_t>(align, 128 / (half ? 16 : 32));
  return align;
}

// sdp_utils.cpp can_use_mem_efficient_attention. The 2.11 binary has no storage-offset
// alignment check (check_data_ptr_alignment_mem_efficient: its warning string is absent).
bool can_use_mem_efficient(const EmulatedCard& card, const Params& p) {
  if (!sm_in(card, 50, 121)) return false;  // check_mem_efficient_hardware_support
  if (p.q.dim() != 4 || p.k.dim() != 4 || p.v.dim() != 4) return false;
  const int64_t align = minimum_gemm_alignment(card, p);  // check_head_dim_size_mem_efficient
  const int64_t dq = p.q.size(-1), dv = p.v.size(-1);
  if (dq != p.k.size(-1) || dq % align != 0 || dq <= 0 || dv % align != 0 || dv <= 0) {
    return false;
  }
  if (!dense_checks(p, /*ignore_singleton_dim=*/false, Gqa::kNone)) return false;
  return card.cc_major >= 8 ? same_dtype_in(p, {at::kHalf, at::kFloat, at::kBFloat16})
                            : same_dtype_in(p, {at::kHalf, at::kFloat});
}

// sdp_utils_cpp.h:270-302 check_attn_mask_shape: a mask that requires grad (275) rules cuDNN out
// (the cuDNN op is not differentiable in attn_bias).
bool cudnn_mask_ok(const Params& p) {
  if (!p.attn_mask.has_value()) return true;
  const Tensor& m = *p.attn_mask;
  if (m.requires_grad()) return false;
  const int64_t b = p.q.size(0), h = p.q.size(1), sq = p.q.size(2), sk = p.k.size(2);
  if (m.size(-2) != sq && m.size(-2) != 1) return false;
  if (m.size(-1) != sk && m.size(-1) != 1) return false;
  if (m.dim() == 2) return true;
  return m.dim() == 4 && (m.size(0) == 1 || m.size(0) == b) && (m.size(1) == 1 || m.size(1) == h);
}

// sdp_utils.cpp can_use_cudnn_attention and check_cudnn_tensor_shapes, as the 2.11 binary has them:
// no 1/16 dropout check and no d256-backward check (strings absent).
bool can_use_cudnn(const EmulatedCard& card, const Params& p, const SdpSoftware& sw) {
  if (p.dropout > 0.0 && sw.cudnn_version > 91100 && sw.cudnn_version < 91400) return false;
  if (p.q.dim() != 4 || p.k.dim() != 4 || p.v.dim() != 4) return false;
  if (card.cc_major >= 8 ? !same_dtype_in(p, {at::kHalf, at::kBFloat16})
                         : !same_dtype_in(p, {at::kHalf})) {
    return false;
  }
  if (!cudnn_mask_ok(p)) return false;
  if (!sm_in(card, 80, 121)) return false;  // check_cudnn_hardware_support
  if (!dense_checks(p, /*ignore_singleton_dim=*/true, Gqa::kAnyKvHeads)) return false;
  // check_cudnn_tensor_shapes
  const int64_t b = p.q.size(0), h = p.q.size(1), s_q = p.q.size(2), s_k = p.k.size(2);
  const int64_t d_qk = p.q.size(3), d_v = p.v.size(3);
  if (b > 65535 || h > 65535) return false;
  const bool sm90_or_10x = (card.cc_major == 9 && card.cc_minor == 0) || card.cc_major == 10;
  int64_t limit = 128;  // 256 needs a cuDNN frontend >= 1.24 that the choice cannot see here
  if (sm90_or_10x && sw.cudnn_version > 92200) limit = 256;
  if (d_qk > limit || d_v > limit || d_qk % 8 != 0 || d_v % 8 != 0) return false;
  if (s_k == 1) return false;
  if (p.dropout != 0.0 && s_q == 1) return false;
  return true;
}

// sdp_utils.cpp check_prefer_cudnn_attention: CUDA >= 13 wheels put cuDNN first on sm 9.x and
// 10.x when the runtime cuDNN is newer than 9.15.0 (CUDA < 13: also only minor 0 or 3).
bool prefer_cudnn(const EmulatedCard& card, const SdpSoftware& sw) {
  const bool major_ok = card.cc_major == 9 || card.cc_major == 10;
  const bool minor_ok = sw.cuda_version >= 13000 || card.cc_minor == 0 || card.cc_minor == 3;
  return sw.cudnn_version > 91500 && major_ok && minor_ok;
}

}  // namespace

// See sdpa_cuda.h.
optional<Tensor> convert_boolean_attn_mask(const optional<Tensor>& mask, at::ScalarType dtype) {
  if (!mask.has_value() || mask->scalar_type() != at::kBool) return mask;
  return at::where(mask->logical_not(), -std::numeric_limits<double>::infinity(),
                   at::scalar_tensor(0.0, mask->options().dtype(dtype)));
}

namespace {

// attention.cpp preprocess_mask: pad the bias' last dim when a stride is not a multiple of 8
// (pad_bias pads to a multiple of 8 and slices back), then expand to (B, H, L, S).
Tensor preprocess_mask(const Tensor& mask, const Tensor& q, const Tensor& k) {
  Tensor m = mask;
  bool aligned = mask.stride(-1) == 1;
  for (int64_t i = 0; i + 1 < mask.dim(); ++i) aligned = aligned && mask.stride(i) % 8 == 0;
  if (!aligned) {
    const int64_t last = mask.size(-1);
    m = at::pad(mask, {0, 8 - last % 8}).slice(-1, 0, last);
  }
  return m.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// attention.cpp pad_last_dim<8, false>: flash needs head dims that are multiples of 8.
Tensor pad_last_dim_8(const Tensor& t) {
  const int64_t last = t.size(-1);
  if (last % 8 == 0) return t;
  return at::pad(t, {0, 8 - last % 8});
}

}  // namespace

const char* sdp_backend_name(SdpBackend backend) {
  switch (backend) {
    case SdpBackend::kMath:
      return "math";
    case SdpBackend::kFlash:
      return "flash_attention";
    case SdpBackend::kEfficient:
      return "efficient_attention";
    case SdpBackend::kCudnn:
      return "cudnn_attention";
  }
  return "?";
}

// sdp_utils.cpp select_sdp_backend: the first backend of the priority order that the user has
// not turned off (at::Context's userEnabled*SDP flags, which torch.nn.attention.sdpa_kernel
// sets; each can_use_* begins with check_runtime_disabled_*) and whose checks pass. Order:
// at::Context's default {flash, efficient, math, cudnn} (Context.h 467-472), or {cudnn, flash,
// efficient, math} when check_prefer_cudnn_attention holds (priority_order). None: the error
// _fused_sdp_choice_cuda raises.
SdpBackend choose_sdp_backend(const EmulatedCard& card, const Tensor& q, const Tensor& k,
                              const Tensor& v, const optional<Tensor>& attn_mask, double dropout_p,
                              bool is_causal, bool enable_gqa, const SdpSoftware& software) {
  const Params p{q, k, v, attn_mask, dropout_p, is_causal, enable_gqa};
  const auto& ctx = at::globalContext();
  const std::array<SdpBackend, 4> order =
      prefer_cudnn(card, software) ? std::array{SdpBackend::kCudnn, SdpBackend::kFlash,
                                                SdpBackend::kEfficient, SdpBackend::kMath}
                                   : std::array{SdpBackend::kFlash, SdpBackend::kEfficient,
                                                SdpBackend::kMath, SdpBackend::kCudnn};
  for (SdpBackend b : order) {
    switch (b) {
      case SdpBackend::kCudnn:
        if (ctx.userEnabledCuDNNSDP() && can_use_cudnn(card, p, software)) return b;
        break;
      case SdpBackend::kFlash:
        if (ctx.userEnabledFlashSDP() && can_use_flash(card, p)) return b;
        break;
      case SdpBackend::kEfficient:
        if (ctx.userEnabledMemEfficientSDP() && can_use_mem_efficient(card, p)) return b;
        break;
      case SdpBackend::kMath:
        if (ctx.userEnabledMathSDP()) return b;
        break;
    }
  }
  TORCH_CHECK(false, "No available kernel. Aborting execution.");
}

std::tuple<Tensor, Tensor> sdpa_math_as_on_cuda(const Tensor& query_, const Tensor& key,
                                                const Tensor& value,
                                                const optional<Tensor>& attn_mask_,
                                                double dropout_p, bool is_causal,
                                                optional<double> scale, bool enable_gqa) {
  const auto origin_dtype = query_.scalar_type();
  // "Keep query, key, value in high precision for accuracy" (allowFP16BF16ReductionMathSDP
  // is off by default)
  const bool upcast = !at::globalContext().allowFP16BF16ReductionMathSDP();
  auto acc = [&](const Tensor& t) {
    return upcast && is_half(t.scalar_type()) ? t.to(at::kFloat) : t;
  };
  const Tensor query_acc = acc(query_), key_acc = acc(key), value_acc = acc(value);
  optional<Tensor> attn_mask = attn_mask_;
  const bool negative = scale.has_value() && *scale < 0.0;
  const double softmax_scale =
      negative ? std::abs(*scale)
               : scale.value_or(1.0 / std::sqrt(static_cast<double>(query_acc.size(-1))));
  const double scaling_factor = std::sqrt(softmax_scale);
  const Tensor query = query_acc * (negative ? -scaling_factor : scaling_factor);
  if (is_causal) {
    TORCH_CHECK(!attn_mask.has_value(),
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
                "is_causal=True");
    attn_mask =
        at::ones({query.size(-2), key_acc.size(-2)}, query.options().dtype(at::kBool)).tril();
    attn_mask = convert_boolean_attn_mask(attn_mask, query.scalar_type());
  }
  Tensor key_expanded = key_acc, value_expanded = value_acc;  // MQA/GQA handling
  if (enable_gqa && query.size(-3) != key_acc.size(-3)) {
    key_expanded = key_acc.repeat_interleave(query.size(-3) / key_acc.size(-3), -3);
    value_expanded = value_acc.repeat_interleave(query.size(-3) / value_acc.size(-3), -3);
  }
  Tensor attn = at::matmul(query, key_expanded.transpose(-2, -1) * scaling_factor);
  if (attn_mask.has_value()) attn.add_(*attn_mask);
  attn = at::_safe_softmax(attn, -1);
  if (dropout_p > 0.0) {
    // at::dropout(attn, p, train=true) on CUDA: is_fused_kernel_acceptable -> native_dropout
    // (Dropout.cpp), which keeps a bool mask; the unfused path would keep a mask of attn's dtype.
    if (dropout_p < 1.0 && attn.numel() > 0) {
      attn = std::get<0>(at::native_dropout(attn, dropout_p, true));
    } else {
      attn = at::dropout(attn, dropout_p, true);
    }
  }
  return {at::matmul(attn, value_expanded).to(origin_dtype), attn.to(origin_dtype)};
}

// attention.cpp scaled_dot_product_attention, CUDA device.
Tensor cuda_sdpa(const EmulatedCard& card, const Tensor& q, const Tensor& k, const Tensor& v,
                 const optional<Tensor>& attn_mask_, double dropout_p, bool is_causal,
                 optional<double> scale, bool enable_gqa) {
  // validate_sdpa_input
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "Expected query, key, and value to have the same dtype");
  TORCH_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
              "Expected query, key, and value to all be at least 2 dimensional");
  if (attn_mask_.has_value()) {
    const auto t = attn_mask_->scalar_type();
    TORCH_CHECK(t == at::kBool || t == at::kFloat || t == q.scalar_type(),
                "Expected attn_mask dtype to be bool or float or to match query dtype");
  }
  set_sdpa_card(card);
  const SdpBackend backend =
      choose_sdp_backend(card, q, k, v, attn_mask_, dropout_p, is_causal, enable_gqa);
  optional<Tensor> attn_mask = convert_boolean_attn_mask(attn_mask_, q.scalar_type());
  const bool compute_logsumexp =
      (q.requires_grad() || k.requires_grad() || v.requires_grad()) && at::GradMode::is_enabled();
  switch (backend) {
    case SdpBackend::kCudnn:
      return std::get<0>(at::_scaled_dot_product_cudnn_attention(
          q, k, v, attn_mask, compute_logsumexp, dropout_p, is_causal, false, scale));
    case SdpBackend::kFlash: {
      const int64_t og_size = q.size(-1);
      // "We need to calculate the scale based off the OG head dim size"
      const double og_scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(og_size)));
      Tensor out = std::get<0>(at::_scaled_dot_product_flash_attention(
          pad_last_dim_8(q), pad_last_dim_8(k), pad_last_dim_8(v), dropout_p, is_causal, false,
          og_scale));
      return out.size(-1) != og_size ? out.slice(-1, 0, og_size) : out;  // post_process
    }
    case SdpBackend::kEfficient: {
      if (attn_mask.has_value()) attn_mask = preprocess_mask(*attn_mask, q, k);
      return std::get<0>(at::_scaled_dot_product_efficient_attention(
          q, k, v, attn_mask, compute_logsumexp, dropout_p, is_causal, scale));
    }
    case SdpBackend::kMath:
      return std::get<0>(
          sdpa_math_as_on_cuda(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa));
  }
  return {};
}

}  // namespace sweep::emu
