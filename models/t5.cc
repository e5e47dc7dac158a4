// T5 (T5ForConditionalGeneration) in LibTorch; see t5.h.
#include "models/t5.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <limits>

#include "models/holder.h"

namespace sweep::models {
namespace {

torch::nn::Linear linear(torch::nn::Module& parent, const std::string& name, int64_t in,
                         int64_t out, double std) {
  auto l = parent.register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  torch::NoGradGuard no_grad;
  l->weight.normal_(0, std);
  return l;
}

// Hugging Face's _relative_position_bucket: half the buckets for exact small distances, the
// rest logarithmic up to max_distance; bidirectional splits them by sign.
torch::Tensor relative_position_bucket(torch::Tensor rel, bool bidirectional, int64_t num_buckets,
                                       int64_t max_distance) {
  auto buckets = torch::zeros_like(rel);
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + (rel > 0).to(torch::kLong) * num_buckets;
    rel = rel.abs();
  } else {
    rel = -torch::min(rel, torch::zeros_like(rel));
  }
  const int64_t max_exact = num_buckets / 2;
  auto is_small = rel < max_exact;
  auto large = max_exact + (torch::log(rel.to(torch::kFloat) / static_cast<double>(max_exact)) /
                            std::log(static_cast<double>(max_distance) / max_exact) *
                            static_cast<double>(num_buckets - max_exact))
                               .to(torch::kLong);
  large = torch::min(large, torch::full_like(large, num_buckets - 1));
  return buckets + torch::where(is_small, rel, large);
}

// The dtype attention computes in: the autocast dtype when autocast is on for the device.
torch::ScalarType compute_dtype(const torch::Tensor& like) {
  const auto type = like.device().type();
  return at::autocast::is_autocast_enabled(type) ? at::autocast::get_autocast_dtype(type)
                                                 : like.scalar_type();
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

torch::Tensor T5LayerNormImpl::forward(const torch::Tensor& x) {
  auto variance = x.to(torch::kFloat).pow(2).mean(-1, /*keepdim=*/true);
  auto h = x * torch::rsqrt(variance + eps_);
  if (weight.scalar_type() == torch::kHalf || weight.scalar_type() == torch::kBFloat16)
    h = h.to(weight.scalar_type());
  return weight * h;
}

T5AttentionImpl::T5AttentionImpl(const T5Config& c, bool has_relative_attention_bias,
                                 bool decoder_self)
    : c_(c), decoder_self_(decoder_self) {
  const int64_t d = c.d_model, inner = c.num_heads * c.d_kv;
  // Hugging Face's T5 initialisation (initializer_factor 1).
  q = linear(*this, "q", d, inner, std::pow(static_cast<double>(d * c.d_kv), -0.5));
  k = linear(*this, "k", d, inner, std::pow(static_cast<double>(d), -0.5));
  v = linear(*this, "v", d, inner, std::pow(static_cast<double>(d), -0.5));
  o = linear(*this, "o", inner, d, std::pow(static_cast<double>(inner), -0.5));
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
  auto context = torch::arange(query_length, torch::dtype(torch::kLong).device(device)).unsqueeze(1);
  auto memory = torch::arange(key_length, torch::dtype(torch::kLong).device(device)).unsqueeze(0);
  auto bucket = relative_position_bucket(memory - context, /*bidirectional=*/!decoder_self_,
                                         c_.relative_attention_num_buckets,
                                         c_.relative_attention_max_distance);
  // (Tq, Tk, H) -> (1, H, Tq, Tk), not contiguous: every layer makes its own mask from it.
  return relative_attention_bias(bucket).permute({2, 0, 1}).unsqueeze(0);
}

torch::Tensor T5AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& kv,
                                       const torch::Tensor& position_bias) {
  const int64_t B = x.size(0), Tq = x.size(1), Tk = kv.size(1), H = c_.num_heads;
  auto heads = [&](const torch::Tensor& t, int64_t T) {
    return t.view({B, T, H, c_.d_kv}).transpose(1, 2);
  };
  auto query = heads(q(x), Tq);
  auto key = heads(k(kv), Tk);
  auto value = heads(v(kv), Tk);
  // transformers' create_position_bias_mask: self-attention in the decoder is causal (for more
  // than one query), so masked positions get the key dtype's minimum; otherwise the bias is
  // the mask as it is. A float mask keeps SDPA off the flash kernel, as in transformers.
  torch::Tensor mask;
  const bool causal = decoder_self_ && Tq > 1;
  if (causal) {
    auto allowed = torch::arange(Tq, torch::dtype(torch::kLong).device(x.device())).unsqueeze(1) >=
                   torch::arange(Tk, torch::dtype(torch::kLong).device(x.device())).unsqueeze(0);
    double min = 0;
    switch (key.scalar_type()) {
      case torch::kHalf: min = -65504.0; break;
      case torch::kBFloat16: min = -3.3895313892515355e38; break;
      default: min = std::numeric_limits<float>::lowest();
    }
    mask = torch::where(allowed.view({1, 1, Tq, Tk}), position_bias, min).contiguous();
  } else {
    mask = position_bias.contiguous();
  }
  // T5 folds no 1/sqrt(d) into the scores (scale 1); dropout on the probabilities in training.
  auto y = at::scaled_dot_product_attention(query, key, value, mask,
                                            is_training() ? c_.dropout_rate : 0.0,
                                            /*is_causal=*/false, /*scale=*/1.0);
  return o(y.transpose(1, 2).reshape({B, Tq, H * c_.d_kv}));
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
  wi = linear(*dense, "wi", c.d_model, c.d_ff, std::pow(static_cast<double>(c.d_model), -0.5));
  wo = linear(*dense, "wo", c.d_ff, c.d_model, std::pow(static_cast<double>(c.d_ff), -0.5));
  ff_norm = ff_layer->register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
  layer->push_back(ff_layer);
}

torch::Tensor T5BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& self_bias,
                                   const torch::Tensor& encoder_out,
                                   const torch::Tensor& cross_bias) {
  const bool train = is_training();
  auto normed = self_norm(x);
  auto h = clamp_fp16(x + torch::dropout(self_attention(normed, normed, self_bias), c_.dropout_rate, train));
  if (cross_attention) {
    auto a = cross_attention(cross_norm(h), encoder_out, cross_bias);
    h = clamp_fp16(h + torch::dropout(a, c_.dropout_rate, train));
  }
  // DenseReluDense: wo(dropout(relu(wi(x)))); transformers casts the activation to wo's dtype
  // first (under autocast that is an fp32 copy, which autocast casts back for the matmul).
  auto f = torch::dropout(torch::relu(wi(ff_norm(h))), c_.dropout_rate, train);
  if (f.scalar_type() != wo->weight.scalar_type()) f = f.to(wo->weight.scalar_type());
  return clamp_fp16(h + torch::dropout(wo(f), c_.dropout_rate, train));
}

T5ForConditionalGenerationImpl::T5ForConditionalGenerationImpl(const T5Config& c) : c_(c) {
  shared = register_module("shared", torch::nn::Embedding(c.vocab_size, c.d_model));
  {
    torch::NoGradGuard no_grad;
    shared->weight.normal_(0, 1.0);
  }
  // encoder.embed_tokens, decoder.embed_tokens and lm_head are `shared` (tied, counted once).
  encoder_ = make_stack("encoder", c.num_layers, /*is_decoder=*/false);
  decoder_ = make_stack("decoder", c.num_decoder_layers, /*is_decoder=*/true);
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

torch::Tensor T5ForConditionalGenerationImpl::encode(const torch::Tensor& input_ids) {
  const int64_t T = input_ids.size(1);
  const bool train = is_training();
  auto x = torch::dropout(shared(input_ids), c_.dropout_rate, train);
  // The first block's table gives the bias every block of the stack uses.
  auto bias = encoder_.block[0]->as<T5BlockImpl>()->self_attention->compute_bias(T, T);
  for (auto& m : *encoder_.block) {
    auto* block = m->as<T5BlockImpl>();
    x = run_block([block](const std::vector<torch::Tensor>& in) {
          return std::vector<torch::Tensor>{block->forward(in[0], in[1])};
        },
        {x, bias})[0];
  }
  return torch::dropout(encoder_.final_layer_norm(x), c_.dropout_rate, train);
}

torch::Tensor T5ForConditionalGenerationImpl::decode(const torch::Tensor& ids,
                                                     const torch::Tensor& encoder_out) {
  const int64_t T = ids.size(1), S = encoder_out.size(1);
  const bool train = is_training();
  auto y = torch::dropout(shared(ids), c_.dropout_rate, train);
  auto self_bias = decoder_.block[0]->as<T5BlockImpl>()->self_attention->compute_bias(T, T);
  // Cross-attention has no relative bias: transformers passes zeros in the query's dtype.
  auto cross_bias = torch::zeros({1, c_.num_heads, T, S},
                                 encoder_out.options().dtype(compute_dtype(shared->weight)));
  for (auto& m : *decoder_.block) {
    auto* block = m->as<T5BlockImpl>();
    y = run_block([block](const std::vector<torch::Tensor>& in) {
          return std::vector<torch::Tensor>{block->forward(in[0], in[2], in[1], in[3])};
        },
        {y, encoder_out, self_bias, cross_bias})[0];
  }
  return torch::dropout(decoder_.final_layer_norm(y), c_.dropout_rate, train);
}

torch::Tensor T5ForConditionalGenerationImpl::logits(const Batch& batch) {
  const auto& input_ids = batch.tensors[0];
  const auto& labels = batch.tensors[1];
  // _shift_right: the start token, then the labels without their last token (-100 -> pad 0).
  auto start = torch::full({labels.size(0), 1}, c_.decoder_start_token_id, labels.options());
  auto dec_in = torch::cat({start, labels.slice(1, 0, labels.size(1) - 1)}, 1);
  dec_in = dec_in.masked_fill(dec_in == -100, 0);
  auto out = decode(dec_in, encode(input_ids));
  // Tied embeddings: rescale by d_model^-0.5 before the LM head (scale_decoder_outputs).
  out = out * std::pow(static_cast<double>(c_.d_model), -0.5);
  return torch::nn::functional::linear(out, shared->weight);  // (B, T, V)
}

torch::Tensor T5ForConditionalGenerationImpl::loss(const Batch& batch) {
  // transformers' T5 applies CrossEntropyLoss to the logits as they are (no explicit upcast;
  // under autocast the log-softmax runs in fp32 all the same).
  auto lm_logits = logits(batch);
  return torch::nn::functional::cross_entropy(
      lm_logits.view({-1, lm_logits.size(-1)}), batch.tensors[1].reshape({-1}),
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
