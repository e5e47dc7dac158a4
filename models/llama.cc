// The Llama family of decoders (LlamaForCausalLM and its kin) in LibTorch; see llama.h.
#include "models/llama.h"

#include <cmath>
#include <map>

#include "models/emulation.h"
#include "models/fused_lm_head.h"
#include "models/holder.h"

namespace sweep::models {
namespace {

torch::nn::Linear make_linear(torch::nn::Module& parent, const std::string& name, int64_t in,
                              int64_t out, bool bias, double std) {
  auto l = parent.register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
  // PreTrainedModel._init_weights: normal(0, initializer_range), zero bias.
  torch::NoGradGuard no_grad;
  l->weight.normal_(0, std);
  if (bias) l->bias.zero_();
  return l;
}

// rotate_half: (-x2, x1) concatenated along the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.slice(-1, 0, half);
  auto x2 = x.slice(-1, half);
  return torch::cat({-x2, x1}, -1);
}

// (x * cos) + (rotate_half(x) * sin), one Python temporary at a time.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto a = x * cos;
  auto b = rotate_half(x);
  b = b * sin;
  return a + b;
}

// repeat_kv (integrations/sdpa_attention.py): (B, KV, T, D) -> (B, KV * n_rep, T, D), a copy.
torch::Tensor repeat_kv(const torch::Tensor& hidden_states, int64_t n_rep) {
  if (n_rep == 1) return hidden_states;
  const auto s = hidden_states.sizes();
  auto expanded = hidden_states.unsqueeze(2).expand({s[0], s[1], n_rep, s[2], s[3]});
  return expanded.reshape({s[0], s[1] * n_rep, s[2], s[3]});
}

// use_gqa_in_sdpa on CUDA and the CPU: SDPA's own GQA only without a mask and for head dims up
// to 256; otherwise repeat_kv.
bool use_gqa_in_sdpa(const torch::Tensor& mask, const torch::Tensor& key, const torch::Tensor& value) {
  return !mask.defined() && key.size(-1) == value.size(-1) && key.size(-1) <= 256;
}

// causal_mask_function (kv_idx <= q_idx), or for a sliding window
// sliding_window_causal_mask_function: and_masks(sliding_window_overlay, causal_mask_function),
// each step's result a new tensor, over broadcast indices.
torch::Tensor causal_mask_of(const torch::Tensor& q_idx, const torch::Tensor& kv_idx,
                             int64_t window) {
  if (window <= 0) return kv_idx <= q_idx;
  auto result = torch::ones({}, q_idx.options().dtype(torch::kBool));  // q_idx.new_ones(())
  {
    auto lower = q_idx - window;
    auto inside = kv_idx > lower;
    lower.reset();
    result = result & inside;
  }
  {
    auto causal = kv_idx <= q_idx;
    result = result & causal;
  }
  return result;
}

// create_sliding_window_causal_mask through sdpa_mask: None (SDPA's is_causal) while the
// sequence is shorter than the window, else the (1, 1, T, T) boolean mask of
// and_masks(sliding_window_overlay, causal_mask_function), expanded to (B, 1, T, T).
torch::Tensor sliding_window_mask(int64_t batch, int64_t length, int64_t window,
                                  torch::Device device) {
  if (window <= 0 || length < window) return {};
  auto opts = torch::dtype(torch::kLong).device(device);
  auto q_arange = torch::arange(length, opts) + 0;
  auto kv_arange = torch::arange(length, opts) + 0;
  auto q_idx = q_arange.view({1, 1, length, 1});
  auto kv_idx = kv_arange.view({1, 1, 1, length});
  return causal_mask_of(q_idx, kv_idx, window).expand({batch, -1, length, length});
}

// find_packed_sequence_indices (masking_utils.py): each token's sequence, from where the
// position_ids (1, L) do not step by one; None for one sequence. Its check reads the values
// (`.all()`), which a Meta tensor has not: the batch's count of sequences says it.
torch::Tensor packed_sequence_indices(const torch::Tensor& position_ids, int64_t sequences) {
  auto first_dummy_value = position_ids.slice(1, 0, 1) - 1;
  auto position_diff = at::diff(position_ids, 1, -1, first_dummy_value, std::nullopt);
  torch::Tensor packed_sequence_mask;
  {
    auto steps = position_diff != 1;
    packed_sequence_mask = steps.cumsum(-1);
  }
  {
    auto last = packed_sequence_mask.select(1, -1) == 0;
    auto all = last.all();
  }
  return sequences > 1 ? packed_sequence_mask : torch::Tensor();
}

// create_causal_mask / create_sliding_window_causal_mask for a padding-free row (1, L)
// (position_ids given, no attention mask): packed sequences make sdpa_mask build the mask of
// packed_sequence_compatibility_function, and_masks(packed_sequence_mask_function,
// remap_positions_for_packed_sequence(the causal or sliding function)), over the broadcast
// indices of _non_vmap_expansion_sdpa: a (1, 1, L, L) boolean mask. One sequence is the
// unpacked case.
torch::Tensor packed_mask(const torch::Tensor& position_ids, int64_t sequences, int64_t window) {
  const int64_t L = position_ids.size(1);
  auto packed_sequence_mask = packed_sequence_indices(position_ids, sequences);
  if (!packed_sequence_mask.defined())
    return sliding_window_mask(1, L, window, position_ids.device());
  auto opts = position_ids.options().dtype(torch::kLong);
  auto batch_arange = torch::arange(1, opts);
  auto head_arange = torch::arange(1, opts);
  auto q_arange = torch::arange(L, opts) + 0;
  auto kv_arange = torch::arange(L, opts) + 0;
  const auto batch_idx = batch_arange.view({1, 1, 1, 1});
  const auto q_idx = q_arange.view({1, 1, L, 1});
  const auto kv_idx = kv_arange.view({1, 1, 1, L});
  auto result = torch::ones({}, opts.dtype(torch::kBool));  // and_mask's q_idx.new_ones(())
  {
    // packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx]
    torch::Tensor same;
    {
      auto at_q = at::index(packed_sequence_mask, {batch_idx, q_idx});
      auto at_kv = at::index(packed_sequence_mask, {batch_idx, kv_idx});
      same = at_q == at_kv;
    }
    result = result & same;
  }
  {
    // The causal (or sliding) function at position_ids[batch_idx, q_idx] and [batch_idx, kv_idx].
    torch::Tensor inner;
    {
      auto q_position = at::index(position_ids, {batch_idx, q_idx});
      auto kv_position = at::index(position_ids, {batch_idx, kv_idx});
      inner = causal_mask_of(q_position, kv_position, window);
    }
    result = result & inner;
  }
  return result.expand({1, -1, L, L});
}

}  // namespace

std::pair<torch::Tensor, double> rope_inv_freq(const LlamaConfig& c) {
  const auto& r = c.rope;
  const int64_t dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * r.partial_rotary_factor);
  // base ** (arange(0, dim, 2).float() / dim), then 1 / that.
  auto exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(dim);
  auto inv_freq = 1.0 / torch::pow(r.theta, exponent);
  double attention_factor = 1.0;
  if (r.type == "linear") {
    inv_freq = inv_freq / r.factor;
  } else if (r.type == "llama3") {
    // _compute_llama3_parameters: wavelengths beyond the original context divided by factor,
    // short ones kept, the band between smoothed.
    const double old_context_len = static_cast<double>(r.original_max_position_embeddings);
    const double low_freq_wavelen = old_context_len / r.low_freq_factor;
    const double high_freq_wavelen = old_context_len / r.high_freq_factor;
    auto wavelen = 2 * M_PI / inv_freq;
    auto inv_freq_llama = torch::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
    auto smooth_factor = (old_context_len / wavelen - r.low_freq_factor) /
                         (r.high_freq_factor - r.low_freq_factor);
    auto smoothed = (1 - smooth_factor) * inv_freq_llama / r.factor + smooth_factor * inv_freq_llama;
    // is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen), as
    // transformers writes it (bitwise_not and mul have Meta kernels; logical_and has none).
    auto is_medium = (wavelen < high_freq_wavelen).bitwise_not() * (wavelen > low_freq_wavelen).bitwise_not();
    inv_freq = torch::where(is_medium, smoothed, inv_freq_llama);
  } else if (r.type == "longrope") {
    // _compute_longrope_parameters at training lengths (up to original_max_position_embeddings:
    // the short factor); attention_factor from max_position_embeddings' ratio when not given.
    const double orig = static_cast<double>(r.original_max_position_embeddings);
    const double factor = r.factor > 1.0 ? r.factor : static_cast<double>(c.max_position_embeddings) / orig;
    if (factor > 1.0) attention_factor = std::sqrt(1 + std::log(factor) / std::log(orig));
    // torch.tensor(short_factor, dtype=torch.float32, device=device). from_blob is no factory:
    // an emulated build (emu::MetaFactories) copies the values to Meta, keeping the size only.
    auto ext = torch::from_blob(const_cast<double*>(r.short_factor.data()),
                                {static_cast<int64_t>(r.short_factor.size())}, torch::kDouble)
                   .to(exponent.device(), torch::kFloat);
    inv_freq = 1.0 / (ext * torch::pow(r.theta, exponent));
  }
  return {inv_freq.to(torch::kFloat), attention_factor};
}

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t hidden_size, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({hidden_size}));
}

// The forward code below is transcribed statement by statement from transformers 5.23's
// modeling_llama.py (and the kin named in llama.h): a Python temporary dies as soon as it is
// consumed and a local lives until its function returns, so each Python statement is one C++
// statement and each local one local, which keeps the same tensors alive at the same moments.
torch::Tensor LlamaRMSNormImpl::forward(const torch::Tensor& input) {
  const auto input_dtype = input.scalar_type();
  auto hidden_states = input.to(torch::kFloat);
  torch::Tensor variance;
  {
    auto t = hidden_states.pow(2);
    variance = t.mean(-1, /*keepdim=*/true);
  }
  {
    auto t = variance + eps_;
    t = torch::rsqrt(t);
    hidden_states = hidden_states * t;
  }
  auto cast = hidden_states.to(input_dtype);
  return weight * cast;
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& c, int64_t layer_idx) : c_(c) {
  (void)layer_idx;
  const int64_t C = c.hidden_size, D = c.head_dim, H = c.num_attention_heads,
                KV = c.num_key_value_heads, I = c.intermediate_size;
  const double std = c.initializer_range;
  auto attn = holder(*this, "self_attn");
  if (c.fused_projections) {
    o_proj = make_linear(*attn, "o_proj", H * D, C, false, std);
    qkv_proj = make_linear(*attn, "qkv_proj", C, H * D + 2 * KV * D, false, std);
  } else {
    q_proj = make_linear(*attn, "q_proj", C, H * D, c.attention_bias, std);
    k_proj = make_linear(*attn, "k_proj", C, KV * D, c.attention_bias, std);
    v_proj = make_linear(*attn, "v_proj", C, KV * D, c.attention_bias, std);
    o_proj = make_linear(*attn, "o_proj", H * D, C, c.o_proj_bias, std);
  }
  if (c.qk_norm) {
    q_norm = attn->register_module("q_norm", LlamaRMSNorm(D, c.rms_norm_eps));
    k_norm = attn->register_module("k_norm", LlamaRMSNorm(D, c.rms_norm_eps));
  }
  auto mlp = holder(*this, "mlp");
  if (c.fused_projections) {
    gate_up_proj = make_linear(*mlp, "gate_up_proj", C, 2 * I, false, std);
  } else {
    gate_proj = make_linear(*mlp, "gate_proj", C, I, c.mlp_bias, std);
    up_proj = make_linear(*mlp, "up_proj", C, I, c.mlp_bias, std);
  }
  down_proj = make_linear(*mlp, "down_proj", I, C, c.mlp_bias, std);
  input_layernorm = register_module("input_layernorm", LlamaRMSNorm(C, c.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", LlamaRMSNorm(C, c.rms_norm_eps));
}

torch::Tensor LlamaDecoderLayerImpl::attention(const torch::Tensor& hidden_states,
                                               const torch::Tensor& cos_in,
                                               const torch::Tensor& sin_in,
                                               const torch::Tensor& mask, KVCache* cache) {
  // LlamaAttention.forward (Phi3Attention.forward with the fused projection)
  const int64_t B = hidden_states.size(0), T = hidden_states.size(1), D = c_.head_dim;
  const int64_t H = c_.num_attention_heads, KV = c_.num_key_value_heads;
  torch::Tensor qkv, query_states, key_states, value_states;
  if (c_.fused_projections) {
    qkv = linear(qkv_proj, hidden_states);
    const int64_t query_pos = H * D;
    query_states = qkv.slice(-1, 0, query_pos);
    key_states = qkv.slice(-1, query_pos, query_pos + KV * D);
    value_states = qkv.slice(-1, query_pos + KV * D);
    query_states = query_states.view({B, T, -1, D}).transpose(1, 2);
    key_states = key_states.view({B, T, -1, D}).transpose(1, 2);
    value_states = value_states.view({B, T, -1, D}).transpose(1, 2);
  } else if (c_.qk_norm) {
    // Qwen3: the norm over head_dim, on the (B, T, H, D) view, before the transpose.
    query_states = q_norm(linear(q_proj, hidden_states).view({B, T, -1, D})).transpose(1, 2);
    key_states = k_norm(linear(k_proj, hidden_states).view({B, T, -1, D})).transpose(1, 2);
    value_states = linear(v_proj, hidden_states).view({B, T, -1, D}).transpose(1, 2);
  } else {
    query_states = linear(q_proj, hidden_states).view({B, T, -1, D}).transpose(1, 2);
    key_states = linear(k_proj, hidden_states).view({B, T, -1, D}).transpose(1, 2);
    value_states = linear(v_proj, hidden_states).view({B, T, -1, D}).transpose(1, 2);
  }
  {
    // apply_rotary_pos_emb
    auto cos = cos_in.unsqueeze(1);
    auto sin = sin_in.unsqueeze(1);
    if (c_.fused_projections) {
      // Phi-3's: the rotary part and the rest, concatenated back (a copy even when the rest
      // is empty).
      const int64_t rotary_dim = cos.size(-1);
      auto q_rot = query_states.slice(-1, 0, rotary_dim), q_pass = query_states.slice(-1, rotary_dim);
      auto k_rot = key_states.slice(-1, 0, rotary_dim), k_pass = key_states.slice(-1, rotary_dim);
      auto q_embed = torch::cat({rotate(q_rot, cos, sin), q_pass}, -1);
      auto k_embed = torch::cat({rotate(k_rot, cos, sin), k_pass}, -1);
      query_states = q_embed;
      key_states = k_embed;
    } else {
      auto q_embed = rotate(query_states, cos, sin);
      auto k_embed = rotate(key_states, cos, sin);
      query_states = q_embed;
      key_states = k_embed;
    }
  }
  if (cache) std::tie(key_states, value_states) = cache->update(key_states, value_states);
  torch::Tensor attn_output;
  {
    // sdpa_attention_forward: grouped-query attention through SDPA's enable_gqa when there is
    // no mask (use_gqa_in_sdpa), else repeat_kv; is_causal when there is no mask.
    const int64_t n_rep = H / KV, q_length = T;
    torch::Tensor query = query_states, key = key_states, value = value_states, attention_mask = mask;
    bool enable_gqa = false;
    if (n_rep > 1) {
      if (use_gqa_in_sdpa(attention_mask, key, value)) {
        enable_gqa = true;
      } else if (q_length == 1) {
        // pack_gqa: (B, H, 1, D) -> (B, KV, n_rep, D); a mask shared by the heads stays.
        query = query.reshape({B, H / n_rep, n_rep, query.size(-1)});
        if (attention_mask.defined() && attention_mask.size(1) != 1)
          attention_mask = attention_mask.reshape({B, H / n_rep, n_rep, attention_mask.size(-1)});
      } else {
        key = repeat_kv(key, n_rep);
        value = repeat_kv(value, n_rep);
      }
    }
    const bool is_causal = q_length > 1 && !attention_mask.defined();
    auto out = sdpa(query, key, value,
                    attention_mask.defined() ? std::optional<at::Tensor>(attention_mask) : std::nullopt,
                    is_training() ? c_.attention_dropout : 0.0, is_causal,
                    std::pow(static_cast<double>(D), -0.5), enable_gqa);
    out = out.reshape({out.size(0), -1, q_length, value.size(-1)});
    attn_output = out.transpose(1, 2).contiguous();
  }
  attn_output = attn_output.reshape({B, T, -1}).contiguous();
  attn_output = linear(o_proj, attn_output);
  return attn_output;
}

torch::Tensor LlamaDecoderLayerImpl::mlp(const torch::Tensor& x) {
  if (c_.fused_projections) {
    // Phi3MLP.forward: one projection, chunked; `up_states * act(gate)`.
    auto up_states = linear(gate_up_proj, x);
    auto chunks = up_states.chunk(2, -1);
    auto gate = chunks[0];
    up_states = chunks[1];
    chunks.clear();
    auto act = torch::silu(gate);
    up_states = up_states * act;
    act.reset();
    return linear(down_proj, up_states);
  }
  // LlamaMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x))
  auto g = linear(gate_proj, x);
  g = torch::silu(g);
  auto u = linear(up_proj, x);
  g = g * u;
  u.reset();
  return linear(down_proj, g);
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                             const torch::Tensor& sin, const torch::Tensor& mask,
                                             KVCache* cache) {
  // LlamaDecoderLayer.forward (Phi-3: residual dropout on each branch)
  const bool train = is_training();
  torch::Tensor residual = x;
  auto hidden_states = input_layernorm(x);
  hidden_states = attention(hidden_states, cos, sin, mask, cache);
  if (c_.fused_projections) hidden_states = apply_dropout(hidden_states, c_.resid_pdrop, train);
  hidden_states = residual + hidden_states;
  residual = hidden_states;
  hidden_states = post_attention_layernorm(hidden_states);
  hidden_states = mlp(hidden_states);
  if (c_.fused_projections) hidden_states = apply_dropout(hidden_states, c_.resid_pdrop, train);
  hidden_states = residual + hidden_states;
  return hidden_states;
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& c) : c_(c) {
  auto model = holder(*this, "model");
  auto embedding = torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size);
  if (c.pad_token_id >= 0) embedding.padding_idx(c.pad_token_id);  // nn.Embedding(..., padding_idx)
  embed_tokens = model->register_module("embed_tokens", torch::nn::Embedding(embedding));
  {
    torch::NoGradGuard no_grad;
    embed_tokens->weight.normal_(0, c.initializer_range);
    if (c.pad_token_id >= 0) embed_tokens->weight[c.pad_token_id].zero_();
  }
  layers = model->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(LlamaDecoderLayer(c, i));
  norm = model->register_module("norm", LlamaRMSNorm(c.hidden_size, c.rms_norm_eps));
  // LlamaRotaryEmbedding: inv_freq and a clone, non-persistent buffers (they follow .to()).
  {
    auto [f, scaling] = rope_inv_freq(c);
    attention_scaling_ = scaling;
    auto rotary = holder(*model, "rotary_emb");
    inv_freq = rotary->register_buffer("inv_freq", f);
    original_inv_freq = rotary->register_buffer("original_inv_freq", f.clone());
  }
  // lm_head is built as a Linear of its own; with tie_word_embeddings post_init() ties it to
  // embed_tokens (one parameter), so that (V, C) matrix exists only for a moment, as here.
  if (c.tie_word_embeddings) {
    auto untied_lm_head = torch::empty({c.vocab_size, c.hidden_size});
  } else {
    lm_head = make_linear(*this, "lm_head", c.hidden_size, c.vocab_size, false, c.initializer_range);
  }
}

const torch::Tensor& LlamaForCausalLMImpl::lm_head_weight() const {
  return lm_head ? lm_head->weight : embed_tokens->weight;
}

std::pair<torch::Tensor, torch::Tensor> LlamaForCausalLMImpl::rotary(
    const torch::Tensor& x, const torch::Tensor& position_ids) const {
  // LlamaRotaryEmbedding.forward, under no_grad.
  torch::NoGradGuard no_grad;
  auto pos = position_ids.unsqueeze(-1).to(torch::kFloat);
  auto freqs = pos * inv_freq.to(torch::kFloat);
  pos.reset();
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos();
  cos = cos * attention_scaling_;
  auto sin = emb.sin();
  sin = sin * attention_scaling_;
  return {cos.to(x.scalar_type()), sin.to(x.scalar_type())};
}

torch::Tensor LlamaForCausalLMImpl::hidden(const torch::Tensor& input_ids, KVCache* cache) {
  return hidden(input_ids, cache, torch::Tensor(), input_ids.size(0));
}

torch::Tensor LlamaForCausalLMImpl::hidden(const torch::Tensor& input_ids, KVCache* cache,
                                           const torch::Tensor& given_position_ids,
                                           int64_t sequences) {
  // LlamaModel.forward: inputs_embeds, position_ids, the masks and position_embeddings are
  // locals there, alive until the whole stack has run.
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  auto inputs_embeds = input_embeddings_hook(embed_tokens(input_ids));
  auto position_ids = given_position_ids;
  if (!position_ids.defined()) {
    position_ids = torch::arange(T, input_ids.options()) + 0;  // + past_seen_tokens
    position_ids = position_ids.unsqueeze(0);
  }
  // One mask per window size the layers use (full attention: none unless the row is packed).
  std::map<int64_t, torch::Tensor> masks;
  for (int64_t w : c_.layer_window)
    if (!masks.count(w))
      masks[w] = given_position_ids.defined() ? packed_mask(position_ids, sequences, w)
                                              : sliding_window_mask(B, T, w, input_ids.device());
  auto hidden_states = inputs_embeds;
  const auto position_embeddings = rotary(hidden_states, position_ids);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = layers[i]->as<LlamaDecoderLayerImpl>();
    // The layer is checkpointed with hidden_states as its one positional input; the rest are
    // keyword arguments held by the checkpoint until the recompute (functools.partial), as
    // GradientCheckpointingLayer does it.
    const torch::Tensor cos = position_embeddings.first, sin = position_embeddings.second,
                        mask = masks[c_.layer_window[i]];
    hidden_states = run_block([layer, cos, sin, mask, cache](const std::vector<torch::Tensor>& in) {
                      return std::vector<torch::Tensor>{layer->forward(in[0], cos, sin, mask, cache)};
                    },
                    {hidden_states})[0];
  }
  hidden_states = norm(hidden_states);
  return hidden_states;
}

torch::Tensor LlamaForCausalLMImpl::logits(const Batch& batch) {
  return at::linear(hidden(batch.tensors[0], nullptr), lm_head_weight());  // (B, T, V)
}

torch::Tensor LlamaForCausalLMImpl::loss(const Batch& batch) {
  // LlamaForCausalLM.forward: the cache (use_cache, the config's value unless the point turns
  // it off; under checkpointing in training GradientCheckpointingLayer passes the layers none,
  // so it stays empty) and the logits are in the returned output, which the loop drops only
  // after reading .loss.
  // TRL's fused forward (SFTTrainer): the backbone with use_cache=False, then its LM head.
  // A padding-free batch's position_ids (tensors[2]) go to the model, as the collator's do.
  const torch::Tensor position_ids = batch.tensors.size() > 2 ? batch.tensors[2] : torch::Tensor();
  if (fused_lm_head())
    return fused_lm_head_loss(hidden(batch.tensors[0], nullptr, position_ids, batch.samples),
                              lm_head_weight(), batch.tensors[1], batch.scored);
  std::optional<KVCache> cache;
  if (use_cache() && c_.use_cache && !(checkpointing() && is_training())) cache.emplace();
  auto last_hidden_state =
      hidden(batch.tensors[0], cache ? &*cache : nullptr, position_ids, batch.samples);
  // slice_logits_to_keep(hidden_states, 0): a view of all of it; lm_head is F.linear.
  auto logits = lm_head ? linear(lm_head, last_hidden_state)
                        : at::linear(last_hidden_state, embed_tokens->weight);  // (B, T, V)
  return causal_lm_loss(logits, batch.tensors[1], c_.vocab_size);
}

Batch LlamaForCausalLMImpl::synthetic_batch(const BatchShape& s, torch::Device device,
                                            torch::Generator& gen) const {
  return causal_lm_batch(c_.vocab_size, s, device, gen, "a causal language model");
}

LlamaForCausalLMImpl::Flops LlamaForCausalLMImpl::forward_flops(const BatchShape& s) const {
  const double T = s.seq, C = c_.hidden_size, L = c_.num_hidden_layers, V = c_.vocab_size;
  const double q = c_.num_attention_heads * c_.head_dim, kv = c_.num_key_value_heads * c_.head_dim;
  const double I = c_.intermediate_size;
  // Per layer: q, k, v, o projections; scores and weighted sum over the full T x T (as MFU
  // conventions count them); gate, up and down.
  const double block = matmul_flops(T, C, q) + 2 * matmul_flops(T, C, kv) + matmul_flops(T, q, C) +
                       2 * matmul_flops(T, T, q) + 3 * matmul_flops(T, C, I);
  return Flops{L * block + matmul_flops(T, C, V), L * block};
}

}  // namespace sweep::models
