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

// The forward code below follows transformers 5.23's WhisperAttention: the query (scaled, then
// made contiguous in (B, H, L, hd)), the keys and values of `current` (contiguous copies),
// the cache's copies when there is one, SDPA with scale 1, and the output's (B, L, d) copy.
torch::Tensor whisper_attention(const torch::nn::Linear& q_proj, const torch::nn::Linear& k_proj,
                                const torch::nn::Linear& v_proj, const torch::nn::Linear& out_proj,
                                const torch::Tensor& hidden_states, const torch::Tensor& current,
                                int64_t heads, KVCache* cache, bool is_causal, double dropout_p) {
  const int64_t B = hidden_states.size(0), L = hidden_states.size(1);
  const int64_t hd = hidden_states.size(2) / heads;
  auto query_states = linear(q_proj, hidden_states);
  query_states = query_states * std::pow(static_cast<double>(hd), -0.5);
  query_states = query_states.view({B, L, -1, hd}).transpose(1, 2).contiguous();
  auto key_states = linear(k_proj, current);
  key_states = key_states.view({B, -1, heads, hd}).transpose(1, 2).contiguous();
  auto value_states = linear(v_proj, current);
  value_states = value_states.view({B, -1, heads, hd}).transpose(1, 2).contiguous();
  if (cache) std::tie(key_states, value_states) = cache->update(key_states, value_states);
  // sdpa_attention_forward: is_causal for more than one query and no mask (the decoder's
  // create_causal_mask returns None for unpadded labels, and SDPA's causal flag stands in).
  auto out = sdpa(query_states, key_states, value_states, /*attn_mask=*/{}, dropout_p,
                  /*is_causal=*/is_causal && L > 1, /*scale=*/1.0);
  out = out.reshape({out.size(0), -1, L, value_states.size(-1)});
  out = out.transpose(1, 2).contiguous();
  auto attn_output = out.reshape({B, L, -1}).contiguous();
  out = torch::Tensor();
  return linear(out_proj, attn_output);
}

// The layers' fully connected block: the residual (x, alive throughout), the norm, fc1 and
// GELU, fc2, and the sum.
torch::Tensor feed_forward(torch::nn::LayerNorm& norm, const torch::nn::Linear& fc1,
                           const torch::nn::Linear& fc2, const torch::Tensor& x,
                           const WhisperConfig& c, bool train) {
  auto hidden_states = norm(x);
  // One Python statement: the norm's output is released only after the activation exists.
  hidden_states = torch::gelu(linear(fc1, hidden_states));
  hidden_states = apply_dropout(hidden_states, c.activation_dropout, train);
  hidden_states = linear(fc2, hidden_states);
  hidden_states = apply_dropout(hidden_states, c.dropout, train);
  return x + hidden_states;
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
  const bool train = is_training();
  // WhisperEncoderLayer.forward
  const torch::Tensor& residual = x;
  auto hidden_states = self_attn_layer_norm(x);
  // WhisperAttention.forward (self-attention, not causal, no cache).
  hidden_states = whisper_attention(q_proj, k_proj, v_proj, out_proj, hidden_states, hidden_states,
                                    c_.encoder_attention_heads, /*cache=*/nullptr,
                                    /*is_causal=*/false, train ? c_.attention_dropout : 0.0);
  hidden_states = apply_dropout(hidden_states, c_.dropout, train);
  hidden_states = residual + hidden_states;
  hidden_states = feed_forward(final_layer_norm, fc1, fc2, hidden_states, c_, train);
  if (hidden_states.scalar_type() == torch::kHalf)
    hidden_states = torch::clamp(hidden_states, -64504.0, 64504.0);
  return hidden_states;
}


WhisperDecoderLayerImpl::WhisperDecoderLayerImpl(const WhisperConfig& c) : c_(c) {
  const int64_t d = c.d_model;
  auto make_attention = [&](const std::string& name) {
    auto attn = holder(*this, name);
    Attention a;
    a.k_proj = make_linear(*attn, "k_proj", d, d, /*bias=*/false);
    a.v_proj = make_linear(*attn, "v_proj", d, d);
    a.q_proj = make_linear(*attn, "q_proj", d, d);
    a.out_proj = make_linear(*attn, "out_proj", d, d);
    return a;
  };
  self_attn = make_attention("self_attn");
  self_attn_layer_norm = layer_norm(*this, "self_attn_layer_norm", d);
  encoder_attn = make_attention("encoder_attn");
  encoder_attn_layer_norm = layer_norm(*this, "encoder_attn_layer_norm", d);
  fc1 = make_linear(*this, "fc1", d, c.decoder_ffn_dim);
  fc2 = make_linear(*this, "fc2", c.decoder_ffn_dim, d);
  final_layer_norm = layer_norm(*this, "final_layer_norm", d);
}

torch::Tensor WhisperDecoderLayerImpl::attend(Attention& a, const torch::Tensor& hidden_states,
                                              const torch::Tensor& key_value_states,
                                              KVCache* cache) {
  const bool cross = key_value_states.defined();
  return whisper_attention(a.q_proj, a.k_proj, a.v_proj, a.out_proj, hidden_states,
                           cross ? key_value_states : hidden_states, c_.decoder_attention_heads,
                           cache, /*is_causal=*/!cross, is_training() ? c_.attention_dropout : 0.0);
}

torch::Tensor WhisperDecoderLayerImpl::forward(const torch::Tensor& x,
                                               const torch::Tensor& encoder_hidden_states,
                                               KVCache* self_cache, KVCache* cross_cache) {
  // WhisperDecoderLayer.forward
  const bool train = is_training();
  torch::Tensor hidden_states;
  {
    const torch::Tensor& residual = x;
    auto h = self_attn_layer_norm(x);
    h = attend(self_attn, h, torch::Tensor(), self_cache);
    h = apply_dropout(h, c_.dropout, train);
    hidden_states = residual + h;
  }
  {
    auto residual = hidden_states;
    auto h = encoder_attn_layer_norm(hidden_states);
    h = attend(encoder_attn, h, encoder_hidden_states, cross_cache);
    h = apply_dropout(h, c_.dropout, train);
    hidden_states = residual + h;
  }
  return feed_forward(final_layer_norm, fc1, fc2, hidden_states, c_, train);
}

WhisperEncoderModelImpl::WhisperEncoderModelImpl(const WhisperConfig& c, const std::string& under)
    : c_(c) {
  const int64_t d = c.d_model;
  if (!under.empty()) model_ = holder(*this, under);
  auto encoder = holder(model_ ? *model_ : static_cast<torch::nn::Module&>(*this), "encoder");
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
}

WhisperForAudioClassificationImpl::WhisperForAudioClassificationImpl(const WhisperConfig& c)
    : WhisperEncoderModelImpl(c, "") {
  projector = make_linear(*this, "projector", c.d_model, c.classifier_proj_size);
  classifier = make_linear(*this, "classifier", c.classifier_proj_size, c.num_labels);
}

int64_t WhisperEncoderModelImpl::frames(double audio_s) {
  return static_cast<int64_t>(std::llround(audio_s * 100));
}

torch::Tensor WhisperEncoderModelImpl::encode(const torch::Tensor& input_features) {
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

double WhisperEncoderModelImpl::encoder_blocks_flops(double T) const {
  const double d = c_.d_model, f = c_.encoder_ffn_dim;
  const double block = 4 * matmul_flops(T, d, d) + 2 * matmul_flops(T, T, d) + 2 * matmul_flops(T, d, f);
  return c_.encoder_layers * block;
}

double WhisperEncoderModelImpl::encoder_flops(double F, double T) const {
  const double d = c_.d_model;
  const double stem = matmul_flops(F, 3.0 * c_.num_mel_bins, d) + matmul_flops(T, 3 * d, d);
  return stem + encoder_blocks_flops(T);
}

WhisperForAudioClassificationImpl::Flops WhisperForAudioClassificationImpl::forward_flops(
    const BatchShape& s) const {
  const double F = frames(s.audio_s), T = positions(frames(s.audio_s));
  return Flops{encoder_flops(F, T) + matmul_flops(T, c_.d_model, c_.classifier_proj_size),
               encoder_blocks_flops(T)};
}

WhisperForConditionalGenerationImpl::WhisperForConditionalGenerationImpl(const WhisperConfig& c)
    : WhisperEncoderModelImpl(c, "model") {
  const int64_t d = c.d_model;
  auto decoder = holder(*model_, "decoder");
  embed_tokens = decoder->register_module(
      "embed_tokens",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab_size, d).padding_idx(c.pad_token_id)));
  embed_positions =
      decoder->register_module("embed_positions", torch::nn::Embedding(c.max_target_positions, d));
  {
    torch::NoGradGuard no_grad;
    embed_tokens->weight.normal_(0, 0.02);
    embed_tokens->weight[c.pad_token_id].zero_();
    embed_positions->weight.normal_(0, 0.02);
  }
  layers = decoder->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.decoder_layers; ++i) layers->push_back(WhisperDecoderLayer(c));
  layer_norm = ::sweep::models::layer_norm(*decoder, "layer_norm", d);
  // proj_out is tied to decoder.embed_tokens (counted once). transformers builds it as an
  // nn.Linear of its own and ties it in post_init(): its (V, d) matrix is alive until the end
  // of the build, and so it is here.
  auto untied_proj_out = torch::empty({c.vocab_size, d});
}

torch::Tensor WhisperForConditionalGenerationImpl::decode(const torch::Tensor& input_ids,
                                                          const torch::Tensor& encoder_hidden_states,
                                                          KVCache* self_cache, KVCache* cross_cache) {
  // WhisperDecoder.forward. inputs_embeds, position_ids and positions are locals there: they
  // stay alive while every layer runs.
  const bool train = is_training();
  auto inputs_embeds = input_embeddings_hook(embed_tokens(input_ids));
  const int64_t B = inputs_embeds.size(0), L = inputs_embeds.size(1);
  TORCH_CHECK(L <= c_.max_target_positions, "labels of ", L, " tokens exceed Whisper's ",
              c_.max_target_positions, " target positions");
  auto position_ids = torch::arange(L, input_ids.options()) + 0;  // + past_key_values_length
  position_ids = position_ids.unsqueeze(0).repeat({B, 1});
  // WhisperPositionalEmbedding with position_ids: self.weight[position_ids], a (B, L, d) gather.
  auto positions = embed_positions->weight.index({position_ids});
  auto hidden_states = inputs_embeds + positions;
  hidden_states = apply_dropout(hidden_states, c_.dropout, train);
  for (auto& m : *layers) {
    auto* layer = m->as<WhisperDecoderLayerImpl>();
    hidden_states = run_block([layer, self_cache, cross_cache](const std::vector<torch::Tensor>& in) {
                      return std::vector<torch::Tensor>{layer->forward(in[0], in[1], self_cache, cross_cache)};
                    },
                    {hidden_states, encoder_hidden_states})[0];
  }
  hidden_states = layer_norm(hidden_states);
  return hidden_states;
}

WhisperForConditionalGenerationImpl::Output WhisperForConditionalGenerationImpl::forward(
    const Batch& batch) {
  // WhisperForConditionalGeneration.forward: every local lives until the function returns, and
  // the returned output (logits, the decoder's cache, the encoder's last hidden state) until
  // the loop has read the loss.
  const auto& input_features = batch.tensors[0];
  const auto& labels = batch.tensors[1];
  Output o;
  // shift_tokens_right: the start token, then the labels without their last token (-100
  // becomes the pad token).
  o.decoder_input_ids = labels.new_zeros(labels.sizes());
  o.decoder_input_ids.slice(1, 1).copy_(labels.slice(1, 0, labels.size(1) - 1).clone());
  o.decoder_input_ids.select(1, 0).fill_(c_.decoder_start_token_id);
  o.decoder_input_ids.masked_fill_(o.decoder_input_ids == -100, c_.pad_token_id);
  // WhisperModel.forward: the encoder, then the decoder over its output. The cache is an
  // EncoderDecoderCache (self- and cross-attention); off in layers that checkpoint in training.
  if (use_cache() && !(checkpointing() && is_training())) {
    o.self_cache = std::make_shared<KVCache>();
    o.cross_cache = std::make_shared<KVCache>();
  }
  o.encoder_last_hidden_state = encode(input_features);
  o.last_hidden_state = decode(o.decoder_input_ids, o.encoder_last_hidden_state,
                               o.self_cache.get(), o.cross_cache.get());
  o.lm_logits = at::linear(o.last_hidden_state, embed_tokens->weight);  // proj_out: (B, L, V)
  return o;
}

torch::Tensor WhisperForConditionalGenerationImpl::logits(const Batch& batch) {
  return forward(batch).lm_logits;
}

torch::Tensor WhisperForConditionalGenerationImpl::loss(const Batch& batch) {
  // CrossEntropyLoss over the logits as they are (no upcast; under autocast the log-softmax
  // runs in fp32 all the same), every label counted (-100 ignored).
  const Output o = forward(batch);
  return torch::nn::functional::cross_entropy(o.lm_logits.view({-1, c_.vocab_size}),
                                              batch.tensors[1].reshape({-1}));
}

Batch WhisperForConditionalGenerationImpl::synthetic_batch(const BatchShape& s,
                                                           torch::Device device,
                                                           torch::Generator& gen) const {
  const int64_t n = frames(s.audio_s);
  TORCH_CHECK(n > 0 && s.target_seq > 0, "whisper needs audio_s > 0 and target_seq > 0");
  auto features = torch::randn({s.batch, c_.num_mel_bins, n}, gen, torch::kFloat).to(device);
  auto labels =
      torch::randint(c_.vocab_size, {s.batch, s.target_seq}, gen, torch::kLong).to(device);
  return Batch{{features, labels}, s.batch * (positions(n) + s.target_seq), s.batch};
}

WhisperForConditionalGenerationImpl::Flops WhisperForConditionalGenerationImpl::forward_flops(
    const BatchShape& s) const {
  const double F = frames(s.audio_s), T = positions(frames(s.audio_s)), L = s.target_seq,
               d = c_.d_model, f = c_.decoder_ffn_dim, V = c_.vocab_size;
  // Self-attention (q, k, v, o; scores and weighted sum), cross-attention (q, o over the
  // labels, k, v over the encoder's positions), the MLP.
  const double self = 4 * matmul_flops(L, d, d) + 2 * matmul_flops(L, L, d);
  const double cross = 2 * matmul_flops(L, d, d) + 2 * matmul_flops(T, d, d) + 2 * matmul_flops(L, T, d);
  const double decoder = c_.decoder_layers * (self + cross + 2 * matmul_flops(L, d, f));
  return Flops{encoder_flops(F, T) + decoder + matmul_flops(L, d, V),
               encoder_blocks_flops(T) + decoder};
}

}  // namespace sweep::models
