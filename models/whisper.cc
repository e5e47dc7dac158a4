// Whisper encoder + WhisperForAudioClassification head in LibTorch; see whisper.h.
#include "models/whisper.h"

#include <cmath>

#include "models/emulation.h"
#include "models/holder.h"

namespace sweep::models {
namespace {

// transformers' Whisper initialisation: N(0, init_std 0.02) weights, zero biases.
template <class M>
M init_normal(M m) {
  torch::NoGradGuard no_grad;
  m->weight.normal_(0, 0.02);
  if (m->bias.defined()) m->bias.zero_();
  return m;
}

torch::nn::Linear make_linear(torch::nn::Module& parent, const std::string& name, int64_t in,
                         int64_t out, bool bias = true) {
  return init_normal(
      parent.register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias))));
}

torch::nn::LayerNorm layer_norm(torch::nn::Module& parent, const std::string& name, int64_t d) {
  return parent.register_module(name, torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(1e-5)));
}

// Whisper's sinusoids(): sin over the first half of the channels, cos over the second.
torch::Tensor sinusoids(int64_t length, int64_t channels) {
  const double increment = std::log(10000.0) / static_cast<double>(channels / 2 - 1);
  auto inv = torch::exp(-increment * torch::arange(channels / 2, torch::kFloat));
  auto t = torch::arange(length, torch::kFloat).view({-1, 1}) * inv.view({1, -1});
  return torch::cat({t.sin(), t.cos()}, 1);
}

}  // namespace

WhisperEncoderLayerImpl::WhisperEncoderLayerImpl(const WhisperConfig& c) : c_(c) {
  const int64_t d = c.d_model;
  auto attn = holder(*this, "self_attn");
  k_proj = make_linear(*attn, "k_proj", d, d, /*bias=*/false);
  v_proj = make_linear(*attn, "v_proj", d, d);
  q_proj = make_linear(*attn, "q_proj", d, d);
  out_proj = make_linear(*attn, "out_proj", d, d);
  self_attn_layer_norm = layer_norm(*this, "self_attn_layer_norm", d);
  fc1 = make_linear(*this, "fc1", d, c.encoder_ffn_dim);
  fc2 = make_linear(*this, "fc2", c.encoder_ffn_dim, d);
  final_layer_norm = layer_norm(*this, "final_layer_norm", d);
}

// The forward code below is transcribed statement by statement from transformers 5.23's
// modeling_whisper.py (a Python temporary dies when consumed, a local when its function
// returns), so that the same tensors are alive at the same moments.
torch::Tensor WhisperEncoderLayerImpl::forward(const torch::Tensor& x) {
  const int64_t H = c_.encoder_attention_heads, hd = c_.d_model / H;
  const bool train = is_training();
  // WhisperEncoderLayer.forward
  const torch::Tensor& residual = x;
  auto hidden_states = self_attn_layer_norm(x);
  {
    // WhisperAttention.forward (self-attention): the query is scaled before the product
    // (Whisper's order), so SDPA runs with scale 1.
    const int64_t B = hidden_states.size(0), T = hidden_states.size(1);
    auto query_states = linear(q_proj, hidden_states);
    query_states = query_states * std::pow(static_cast<double>(hd), -0.5);
    query_states = query_states.view({B, T, -1, hd}).transpose(1, 2).contiguous();
    auto key_states = linear(k_proj, hidden_states);
    key_states = key_states.view({B, -1, H, hd}).transpose(1, 2).contiguous();
    auto value_states = linear(v_proj, hidden_states);
    value_states = value_states.view({B, -1, H, hd}).transpose(1, 2).contiguous();
    // sdpa_attention_forward
    auto out = sdpa(query_states, key_states, value_states,
                                                /*attn_mask=*/{},
                                                train ? c_.attention_dropout : 0.0,
                                                /*is_causal=*/false, /*scale=*/1.0);
    out = out.reshape({out.size(0), -1, T, value_states.size(-1)});
    out = out.transpose(1, 2).contiguous();
    auto attn_output = out.reshape({B, T, -1}).contiguous();
    out = torch::Tensor();
    attn_output = linear(out_proj, attn_output);
    hidden_states = attn_output;
  }
  hidden_states = apply_dropout(hidden_states, c_.dropout, train);
  hidden_states = residual + hidden_states;
  auto residual2 = hidden_states;
  hidden_states = final_layer_norm(hidden_states);
  // One Python statement: the norm's output is released only after the activation exists.
  hidden_states = torch::gelu(linear(fc1, hidden_states));
  hidden_states = apply_dropout(hidden_states, c_.activation_dropout, train);
  hidden_states = linear(fc2, hidden_states);
  hidden_states = apply_dropout(hidden_states, c_.dropout, train);
  hidden_states = residual2 + hidden_states;
  if (hidden_states.scalar_type() == torch::kHalf)
    hidden_states = torch::clamp(hidden_states, -64504.0, 64504.0);
  return hidden_states;
}

WhisperForAudioClassificationImpl::WhisperForAudioClassificationImpl(const WhisperConfig& c)
    : c_(c) {
  const int64_t d = c.d_model;
  auto encoder = holder(*this, "encoder");
  conv1 = init_normal(encoder->register_module(
      "conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(c.num_mel_bins, d, 3).padding(1))));
  conv2 = init_normal(encoder->register_module(
      "conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(d, d, 3).stride(2).padding(1))));
  embed_positions = encoder->register_module(
      "embed_positions", torch::nn::Embedding(c.max_source_positions, d));
  {
    torch::NoGradGuard no_grad;
    embed_positions->weight.copy_(sinusoids(c.max_source_positions, d));
  }
  // Frozen, as transformers' requires_grad_(False): no gradient, no optimizer state.
  embed_positions->weight.set_requires_grad(false);
  layers = encoder->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.encoder_layers; ++i) layers->push_back(WhisperEncoderLayer(c));
  layer_norm = ::sweep::models::layer_norm(*encoder, "layer_norm", d);
  projector = make_linear(*this, "projector", d, c.classifier_proj_size);
  classifier = make_linear(*this, "classifier", c.classifier_proj_size, c.num_labels);
}

int64_t WhisperForAudioClassificationImpl::frames(double audio_s) {
  return static_cast<int64_t>(std::llround(audio_s * 100));
}

torch::Tensor WhisperForAudioClassificationImpl::encode(const torch::Tensor& input_features) {
  // WhisperEncoder.forward. inputs_embeds (a view of the stem's output) is a local there: it
  // stays alive while every layer runs.
  TORCH_CHECK(input_features.size(1) == c_.num_mel_bins, "whisper expects ", c_.num_mel_bins,
              " mel bins, got ", input_features.size(1));
  auto inputs_embeds = torch::gelu(input_embeddings_hook(conv1(input_features)));
  inputs_embeds = torch::gelu(conv2(inputs_embeds));
  inputs_embeds = inputs_embeds.permute({0, 2, 1});  // (B, T, d)
  const int64_t T = inputs_embeds.size(1);
  TORCH_CHECK(T <= c_.max_source_positions, "audio of ", input_features.size(2),
              " frames exceeds the ", 2 * c_.max_source_positions, "-frame window");
  // The whole position table is looked up (a copy); transformers takes only full 30 s
  // windows, we take shorter audio too and use the first T rows.
  auto all_positions = torch::arange(c_.max_source_positions, input_features.options().dtype(torch::kLong));
  auto hidden_states = inputs_embeds + embed_positions(all_positions).slice(0, 0, T);
  hidden_states = apply_dropout(hidden_states, c_.dropout, is_training());
  for (auto& m : *layers) {
    auto* layer = m->as<WhisperEncoderLayerImpl>();
    hidden_states = run_block([layer](const std::vector<torch::Tensor>& in) {
                      return std::vector<torch::Tensor>{layer->forward(in[0])};
                    },
                    {hidden_states})[0];
  }
  hidden_states = layer_norm(hidden_states);
  return hidden_states;
}

torch::Tensor WhisperForAudioClassificationImpl::logits(const Batch& batch) {
  auto encoder_output = encode(batch.tensors[0]);
  auto hidden_states = linear(projector, encoder_output);
  auto pooled_output = hidden_states.mean(1);  // (B, 256)
  return linear(classifier, pooled_output);
}

torch::Tensor WhisperForAudioClassificationImpl::loss(const Batch& batch) {
  // WhisperForAudioClassification.forward: encoder_outputs (its last hidden state) and the
  // locals stay alive until the loss is computed.
  auto encoder_output = encode(batch.tensors[0]);
  auto hidden_states = linear(projector, encoder_output);
  auto pooled_output = hidden_states.mean(1);  // (B, 256)
  auto logits = linear(classifier, pooled_output);
  return torch::nn::functional::cross_entropy(logits.view({-1, c_.num_labels}),
                                              batch.tensors[1].view({-1}));
}

Batch WhisperForAudioClassificationImpl::synthetic_batch(const BatchShape& s, torch::Device device,
                                                         torch::Generator& gen) const {
  const int64_t n = frames(s.audio_s);
  TORCH_CHECK(n > 0, "whisper needs audio_s > 0");
  auto features = torch::randn({s.batch, c_.num_mel_bins, n}, gen, torch::kFloat).to(device);
  auto labels = torch::randint(c_.num_labels, {s.batch}, gen, torch::kLong).to(device);
  return Batch{{features, labels}, s.batch * positions(n), s.batch};
}

WhisperForAudioClassificationImpl::Flops WhisperForAudioClassificationImpl::forward_flops(
    const BatchShape& s) const {
  const double F = frames(s.audio_s), T = positions(frames(s.audio_s)), d = c_.d_model,
               f = c_.encoder_ffn_dim;
  const double stem = matmul_flops(F, 3.0 * c_.num_mel_bins, d) + matmul_flops(T, 3 * d, d);
  const double block = 4 * matmul_flops(T, d, d) + 2 * matmul_flops(T, T, d) + 2 * matmul_flops(T, d, f);
  const double blocks = c_.encoder_layers * block;
  return Flops{stem + blocks + matmul_flops(T, d, c_.classifier_proj_size), blocks};
}

}  // namespace sweep::models
