// T5 (T5ForConditionalGeneration) in LibTorch; see t5.h.
#include "models/t5.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <limits>

#include "models/emulation.h"
#include "models/holder.h"

namespace sweep::models {
namespace {

torch::nn::Linear make_linear(torch::nn::Module& parent, const std::string& name, int64_t in,
                         int64_t out, double std) {
  auto l = parent.register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  torch::NoGradGuard no_grad;
  l->weight.normal_(0, std);
  return l;
}

// T5Attention._relative_position_bucket, statement by statement: half the buckets for exact
// small distances, the rest logarithmic up to max_distance; bidirectional splits them by sign.
torch::Tensor relative_position_bucket(torch::Tensor relative_position, bool bidirectional,
                                       int64_t num_buckets, int64_t max_distance) {
  torch::Tensor relative_buckets;  // the Python int 0 until the first +=
  if (bidirectional) {
    num_buckets /= 2;
    auto positive = (relative_position > 0).to(torch::kLong);
    positive = positive * num_buckets;
    relative_buckets = positive + 0;  // 0 + tensor: a new tensor
    relative_position = torch::abs(relative_position);
  } else {
    relative_position = -torch::min(relative_position, torch::zeros_like(relative_position));
  }
  const int64_t max_exact = num_buckets / 2;
  auto is_small = relative_position < max_exact;
  auto t = relative_position.to(torch::kFloat) / static_cast<double>(max_exact);
  t = torch::log(t);
  t = t / std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact));
  t = t * static_cast<double>(num_buckets - max_exact);
  auto relative_position_if_large = max_exact + t.to(torch::kLong);
  t = torch::Tensor();
  relative_position_if_large = torch::min(
      relative_position_if_large, torch::full_like(relative_position_if_large, num_buckets - 1));
  auto chosen = torch::where(is_small, relative_position, relative_position_if_large);
  // += on a tensor is in place; on the int 0 it makes a new tensor.
  return relative_buckets.defined() ? relative_buckets.add_(chosen) : chosen + 0;
}

// Hugging Face clamps fp16 hidden states after each sub-layer so that inf never propagates.
torch::Tensor clamp_fp16(const torch::Tensor& x) {
  if (x.scalar_type() != torch::kHalf) return x;
  const double max = 65504.0;
  auto limit = torch::where(torch::isinf(x).any(), torch::scalar_tensor(max - 1000, x.options()),
                            torch::scalar_tensor(max, x.options()));
  return torch::clamp(x, -limit, limit);
}

}  // namespace

T5LayerNormImpl::T5LayerNormImpl(int64_t d, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({d}));
}

// The forward code below is transcribed statement by statement from transformers 5.23's
// modeling_t5.py (a Python temporary dies when consumed, a local when its function returns),
// so that the same tensors are alive at the same moments.
torch::Tensor T5LayerNormImpl::forward(const torch::Tensor& hidden_states_in) {
  // variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
  torch::Tensor variance;
  {
    auto t = hidden_states_in.to(torch::kFloat);
    t = t.pow(2);
    variance = t.mean(-1, /*keepdim=*/true);
  }
  torch::Tensor hidden_states;
  {
    auto t = variance + eps_;
    t = torch::rsqrt(t);
    hidden_states = hidden_states_in * t;
  }
  if (weight.scalar_type() == torch::kHalf || weight.scalar_type() == torch::kBFloat16)
    hidden_states = hidden_states.to(weight.scalar_type());
  return weight * hidden_states;
}

T5AttentionImpl::T5AttentionImpl(const T5Config& c, bool has_relative_attention_bias,
                                 bool decoder_self)
    : c_(c), decoder_self_(decoder_self) {
  const int64_t d = c.d_model, inner = c.num_heads * c.d_kv;
  // Hugging Face's T5 initialisation (initializer_factor 1).
  q = make_linear(*this, "q", d, inner, std::pow(static_cast<double>(d * c.d_kv), -0.5));
  k = make_linear(*this, "k", d, inner, std::pow(static_cast<double>(d), -0.5));
  v = make_linear(*this, "v", d, inner, std::pow(static_cast<double>(d), -0.5));
  o = make_linear(*this, "o", inner, d, std::pow(static_cast<double>(inner), -0.5));
  if (has_relative_attention_bias) {
    relative_attention_bias = register_module(
        "relative_attention_bias", torch::nn::Embedding(c.relative_attention_num_buckets, c.num_heads));
    torch::NoGradGuard no_grad;
    relative_attention_bias->weight.normal_(0, std::pow(static_cast<double>(d), -0.5));
  }
}

torch::Tensor T5AttentionImpl::compute_bias(int64_t query_length, int64_t key_length) {
  TORCH_CHECK(relative_attention_bias, "compute_bias on a layer without the bias table");
  const auto device = relative_attention_bias->weight.device();
  auto context_position =
      torch::arange(query_length, torch::dtype(torch::kLong).device(device)).unsqueeze(1) + 0;
  auto memory_position = torch::arange(key_length, torch::dtype(torch::kLong).device(device)).unsqueeze(0);
  auto relative_position = memory_position - context_position;  // (Tq, Tk)
  auto bucket = relative_position_bucket(relative_position, /*bidirectional=*/!decoder_self_,
                                         c_.relative_attention_num_buckets,
                                         c_.relative_attention_max_distance);
  auto values = relative_attention_bias(bucket);  // (Tq, Tk, H)
  // (1, H, Tq, Tk), not contiguous: every layer makes its own mask from it.
  return values.permute({2, 0, 1}).unsqueeze(0);
}

std::pair<torch::Tensor, torch::Tensor> T5AttentionImpl::forward(
    const torch::Tensor& hidden_states, const torch::Tensor& key_value_states,
    torch::Tensor position_bias, KVCache* cache, bool bias_requires_grad) {
  // T5Attention.forward
  const int64_t B = hidden_states.size(0), Tq = hidden_states.size(1);
  const bool is_cross_attention = key_value_states.defined();
  auto query_states = linear(q, hidden_states).view({B, Tq, -1, c_.d_kv}).transpose(1, 2);
  const torch::Tensor& current_states = is_cross_attention ? key_value_states : hidden_states;
  const int64_t Tk = current_states.size(1);
  auto key_states = linear(k, current_states).view({B, Tk, -1, c_.d_kv}).transpose(1, 2);
  auto value_states = linear(v, current_states).view({B, Tk, -1, c_.d_kv}).transpose(1, 2);
  if (cache) std::tie(key_states, value_states) = cache->update(key_states, value_states);
  if (!position_bias.defined()) {
    if (!relative_attention_bias) {
      position_bias = torch::zeros({1, c_.num_heads, Tq, Tk}, query_states.options());
      if (bias_requires_grad) position_bias.set_requires_grad(true);
    } else {
      position_bias = compute_bias(Tq, Tk);
    }
  }
  torch::Tensor attn_output;
  {
    // sdpa_attention_forward with create_position_bias_mask: the decoder's self-attention is
    // causal (for more than one query), so masked positions get the key dtype's minimum;
    // otherwise the bias is the mask as it is. A float mask keeps SDPA off the flash kernel,
    // as in transformers. T5 folds no 1/sqrt(d) into the scores (scale 1).
    torch::Tensor mask;
    if (decoder_self_ && Tq > 1) {
      auto causal_mask = torch::arange(Tq, torch::dtype(torch::kLong).device(key_states.device())).unsqueeze(1) >=
                         torch::arange(Tk, torch::dtype(torch::kLong).device(key_states.device())).unsqueeze(0);
      causal_mask = causal_mask.view({1, 1, Tq, Tk});
      double min = 0;
      switch (key_states.scalar_type()) {
        case torch::kHalf: min = -65504.0; break;
        case torch::kBFloat16: min = -3.3895313892515355e38; break;
        default: min = std::numeric_limits<float>::lowest();
      }
      mask = torch::where(causal_mask, position_bias, min);
    } else {
      mask = position_bias;
    }
    // transformers 5.17 (the version of the H100 reference, tests/fixtures/h100-public.jsonl)
    // passes the mask in the bias's layout (compute_bias's permute; torch.where follows it):
    // strides (4, 1, 32, 4) for 4 heads x 8 x 8, printed there. Its last dimension is not
    // contiguous, which on CUDA keeps SDPA off every fused kernel (sdp_utils_cpp.h
    // check_last_dim_stride_equals_1_dense) and on the math path; the CPU does not check it.
    // transformers 5.23 makes the mask contiguous (create_position_bias_mask ends in
    // .contiguous(), a copy of the (1, H, Tq, Tk) mask), and CUDA then runs the
    // memory-efficient kernel: docs/fidelity.md says by how much that lowers T5's peak.
    if (followed_transformers() == TransformersRelease::k5_23) mask = mask.contiguous();
    auto out = sdpa(query_states, key_states, value_states, mask,
                                                is_training() ? c_.dropout_rate : 0.0,
                                                /*is_causal=*/false, /*scale=*/1.0);
    out = out.reshape({out.size(0), -1, Tq, value_states.size(-1)});
    attn_output = out.transpose(1, 2).contiguous();
  }
  attn_output = attn_output.reshape({B, Tq, -1}).contiguous();
  attn_output = linear(o, attn_output);
  return {attn_output, position_bias};
}

T5BlockImpl::T5BlockImpl(const T5Config& c, bool has_relative_attention_bias, bool is_decoder)
    : c_(c) {
  auto layer = register_module("layer", torch::nn::ModuleList());
  auto self_layer = std::make_shared<torch::nn::Module>();
  self_attention = self_layer->register_module(
      "SelfAttention", T5Attention(c, has_relative_attention_bias, is_decoder));
  self_norm = self_layer->register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
  layer->push_back(self_layer);
  if (is_decoder) {
    auto cross_layer = std::make_shared<torch::nn::Module>();
    cross_attention =
        cross_layer->register_module("EncDecAttention", T5Attention(c, false, false));
    cross_norm =
        cross_layer->register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
    layer->push_back(cross_layer);
  }
  auto ff_layer = std::make_shared<torch::nn::Module>();
  auto dense = holder(*ff_layer, "DenseReluDense");
  wi = make_linear(*dense, "wi", c.d_model, c.d_ff, std::pow(static_cast<double>(c.d_model), -0.5));
  wo = make_linear(*dense, "wo", c.d_ff, c.d_model, std::pow(static_cast<double>(c.d_ff), -0.5));
  ff_norm = ff_layer->register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
  layer->push_back(ff_layer);
}

std::vector<torch::Tensor> T5BlockImpl::forward(const torch::Tensor& x,
                                                const torch::Tensor& position_bias,
                                                const torch::Tensor& encoder_hidden_states,
                                                const torch::Tensor& encoder_decoder_position_bias,
                                                KVCache* self_cache, KVCache* cross_cache,
                                                bool bias_requires_grad) {
  const bool train = is_training();
  // T5Block.forward, with T5LayerSelfAttention, T5LayerCrossAttention and T5LayerFF inlined.
  torch::Tensor hidden_states, self_attn_position_bias, cross_attn_position_bias;
  {
    auto normed_hidden_states = self_norm(x);
    auto [attention_output, bias] = self_attention->forward(normed_hidden_states, torch::Tensor(),
                                                            position_bias, self_cache,
                                                            bias_requires_grad);
    self_attn_position_bias = bias;
    attention_output = x + apply_dropout(attention_output, c_.dropout_rate, train);
    hidden_states = attention_output;
  }
  hidden_states = clamp_fp16(hidden_states);
  if (cross_attention && encoder_hidden_states.defined()) {
    auto normed_hidden_states = cross_norm(hidden_states);
    auto [attention_output, bias] =
        cross_attention->forward(normed_hidden_states, encoder_hidden_states,
                        encoder_decoder_position_bias, cross_cache, bias_requires_grad);
    cross_attn_position_bias = bias;
    auto layer_output = hidden_states + apply_dropout(attention_output, c_.dropout_rate, train);
    hidden_states = layer_output;
    hidden_states = clamp_fp16(hidden_states);
  }
  {
    // T5LayerFF
    auto forwarded_states = ff_norm(hidden_states);
    {
      // T5DenseActDense: transformers casts the activation to wo's dtype first (under
      // autocast that is an fp32 copy, which autocast casts back for the matmul).
      auto h = linear(wi, forwarded_states);
      h = torch::relu(h);
      h = apply_dropout(h, c_.dropout_rate, train);
      if (h.scalar_type() != wo->weight.scalar_type()) h = h.to(wo->weight.scalar_type());
      h = linear(wo, h);
      forwarded_states = h;
    }
    hidden_states = hidden_states + apply_dropout(forwarded_states, c_.dropout_rate, train);
  }
  hidden_states = clamp_fp16(hidden_states);
  std::vector<torch::Tensor> out{hidden_states, self_attn_position_bias};
  if (cross_attn_position_bias.defined()) out.push_back(cross_attn_position_bias);
  return out;
}

T5ForConditionalGenerationImpl::T5ForConditionalGenerationImpl(const T5Config& c) : c_(c) {
  shared = register_module("shared", torch::nn::Embedding(c.vocab_size, c.d_model));
  {
    torch::NoGradGuard no_grad;
    shared->weight.normal_(0, 1.0);
  }
  // encoder.embed_tokens, decoder.embed_tokens and lm_head are `shared` (tied, counted once).
  // transformers builds each as a matrix of its own (T5Stack's nn.Embedding, the nn.Linear
  // head) and ties them in post_init(): the three (V, d) matrices are alive until the end of
  // the build, and so they are here.
  std::vector<torch::Tensor> untied;
  untied.push_back(torch::empty({c.vocab_size, c.d_model}));  // encoder.embed_tokens
  encoder_ = make_stack("encoder", c.num_layers, /*is_decoder=*/false);
  untied.push_back(torch::empty({c.vocab_size, c.d_model}));  // decoder.embed_tokens
  decoder_ = make_stack("decoder", c.num_decoder_layers, /*is_decoder=*/true);
  untied.push_back(torch::empty({c.vocab_size, c.d_model}));  // lm_head
}

T5ForConditionalGenerationImpl::Stack T5ForConditionalGenerationImpl::make_stack(
    const std::string& name, int64_t layers, bool is_decoder) {
  auto stack = holder(*this, name);
  Stack s;
  s.block = stack->register_module("block", torch::nn::ModuleList());
  for (int64_t i = 0; i < layers; ++i) s.block->push_back(T5Block(c_, i == 0, is_decoder));
  s.final_layer_norm =
      stack->register_module("final_layer_norm", T5LayerNorm(c_.d_model, c_.layer_norm_epsilon));
  return s;
}

torch::Tensor T5ForConditionalGenerationImpl::run_stack(Stack& stack,
                                                        const torch::Tensor& input_ids,
                                                        const torch::Tensor& encoder_hidden_states,
                                                        KVCache* self_cache, KVCache* cross_cache) {
  // T5Stack.forward. inputs_embeds is a local there: it stays alive while every block runs.
  const bool train = is_training();
  const bool bias_requires_grad = checkpointing() && train;
  auto inputs_embeds = input_embeddings_hook(shared(input_ids));
  auto hidden_states = apply_dropout(inputs_embeds, c_.dropout_rate, train);
  // The first block computes the position biases (relative for self-attention, zeros for
  // cross-attention) and every later block takes them as inputs, as in transformers: under
  // checkpointing they are outputs of the first checkpointed block.
  torch::Tensor position_bias, encoder_decoder_position_bias;
  for (auto& m : *stack.block) {
    auto* block = m->as<T5BlockImpl>();
    std::vector<torch::Tensor> in{hidden_states, position_bias};
    if (encoder_hidden_states.defined()) {
      in.push_back(encoder_hidden_states);
      in.push_back(encoder_decoder_position_bias);
    }
    auto out = run_block(
        [block, self_cache, cross_cache, bias_requires_grad](const std::vector<torch::Tensor>& in) {
          const torch::Tensor none;
          return block->forward(in[0], in[1], in.size() > 2 ? in[2] : none,
                                in.size() > 3 ? in[3] : none, self_cache, cross_cache,
                                bias_requires_grad);
        },
        in);
    hidden_states = out[0];
    position_bias = out[1];
    if (out.size() > 2) encoder_decoder_position_bias = out[2];
  }
  hidden_states = stack.final_layer_norm(hidden_states);
  hidden_states = apply_dropout(hidden_states, c_.dropout_rate, train);
  return hidden_states;
}

torch::Tensor T5ForConditionalGenerationImpl::shift_right(const torch::Tensor& input_ids) const {
  // T5PreTrainedModel._shift_right: the start token, then the labels without their last
  // token (-100 becomes the pad token 0).
  auto shifted_input_ids = input_ids.new_zeros(input_ids.sizes());
  shifted_input_ids.slice(-1, 1).copy_(input_ids.slice(-1, 0, input_ids.size(-1) - 1).clone());
  shifted_input_ids.select(-1, 0).fill_(c_.decoder_start_token_id);
  shifted_input_ids.masked_fill_(shifted_input_ids == -100, 0);
  return shifted_input_ids;
}

torch::Tensor T5ForConditionalGenerationImpl::logits(const Batch& batch) {
  return forward(batch).lm_logits;
}

T5ForConditionalGenerationImpl::Output T5ForConditionalGenerationImpl::forward(const Batch& batch) {
  // T5ForConditionalGeneration.forward: every local lives until the function returns, and the
  // returned output (logits, the decoder's cache, the encoder's last hidden state) until the
  // loop has read the loss.
  const auto& input_ids = batch.tensors[0];
  const auto& labels = batch.tensors[1];
  Output o;
  if (use_cache() && !(checkpointing() && is_training())) {
    o.self_cache = std::make_shared<KVCache>();
    o.cross_cache = std::make_shared<KVCache>();
  }
  o.encoder_last_hidden_state = run_stack(encoder_, input_ids, {}, nullptr, nullptr);
  o.decoder_input_ids = shift_right(labels);
  o.decoder_last_hidden_state = run_stack(decoder_, o.decoder_input_ids, o.encoder_last_hidden_state,
                                          o.self_cache.get(), o.cross_cache.get());
  // Tied embeddings: rescale by d_model^-0.5 before the LM head (scale_decoder_outputs).
  o.sequence_output = o.decoder_last_hidden_state * std::pow(static_cast<double>(c_.d_model), -0.5);
  o.lm_logits = at::linear(o.sequence_output, shared->weight);  // (B, T, V)
  return o;
}

torch::Tensor T5ForConditionalGenerationImpl::loss(const Batch& batch) {
  // transformers' T5 applies CrossEntropyLoss to the logits as they are (no explicit upcast;
  // under autocast the log-softmax runs in fp32 all the same).
  const Output o = forward(batch);
  const auto& labels = batch.tensors[1];
  return torch::nn::functional::cross_entropy(
      o.lm_logits.view({-1, o.lm_logits.size(-1)}), labels.view({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}

Batch T5ForConditionalGenerationImpl::synthetic_batch(const BatchShape& s, torch::Device device,
                                                      torch::Generator& gen) const {
  TORCH_CHECK(s.seq > 0 && s.target_seq > 0, "t5 needs seq > 0 and target_seq > 0");
  auto ids = torch::randint(c_.vocab_size, {s.batch, s.seq}, gen, torch::kLong).to(device);
  auto labels = torch::randint(c_.vocab_size, {s.batch, s.target_seq}, gen, torch::kLong).to(device);
  return Batch{{ids, labels}, s.batch * (s.seq + s.target_seq), s.batch};
}

T5ForConditionalGenerationImpl::Flops T5ForConditionalGenerationImpl::forward_flops(
    const BatchShape& s) const {
  const double S = s.seq, T = s.target_seq, d = c_.d_model, inner = c_.num_heads * c_.d_kv,
               f = c_.d_ff, V = c_.vocab_size;
  // q, k, v, o projections; scores and weighted sum; the two feed-forward matmuls.
  const double enc = 3 * matmul_flops(S, d, inner) + matmul_flops(S, inner, d) +
                     2 * matmul_flops(S, S, inner) + 2 * matmul_flops(S, d, f);
  const double dec_self = 3 * matmul_flops(T, d, inner) + matmul_flops(T, inner, d) +
                          2 * matmul_flops(T, T, inner);
  const double dec_cross = matmul_flops(T, d, inner) + 2 * matmul_flops(S, d, inner) +
                           matmul_flops(T, inner, d) + 2 * matmul_flops(T, S, inner);
  const double dec = dec_self + dec_cross + 2 * matmul_flops(T, d, f);
  const double blocks = c_.num_layers * enc + c_.num_decoder_layers * dec;
  return Flops{blocks + matmul_flops(T, d, V), blocks};
}

}  // namespace sweep::models
