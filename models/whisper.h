// Whisper as transformers 5.23 builds it, two ways:
// - WhisperForConditionalGeneration (the zoo's whisper-*, what the Hub ids name and what the
//   fine-tuning guides train with Seq2SeqTrainer): the encoder, then a decoder of learned
//   positions, causal self-attention, cross-attention over the encoder's output and a GELU MLP,
//   and proj_out tied to the decoder's token embedding; labels of target_seq tokens, the
//   decoder's inputs shifted right from them, cross-entropy over the vocabulary.
// - WhisperForAudioClassification (whisper-*-cls): the encoder, a projection to 256, a mean
//   over time and a linear classifier.
// The encoder: two Conv1d+GELU layers (the second with stride 2), fixed sinusoidal positions
// (a frozen parameter, counted as transformers counts it), pre-LayerNorm blocks with exact
// GELU, a final LayerNorm. Attention is SDPA with the query pre-scaled by head_dim^-0.5 and
// scale 1, as transformers calls it. Input: log-mel features (B, mels, frames), 100 frames per
// second of audio. transformers accepts only the full window (2 x max_source_positions
// frames); we also take shorter audio, using the first positions (see the README's fidelity
// notes).
#pragma once

#include "models/model.h"

namespace sweep::models {

struct WhisperConfig {
  int64_t num_mel_bins = 80;  // large-v3: 128
  int64_t d_model = 768;
  int64_t encoder_layers = 12;
  int64_t encoder_attention_heads = 12;
  int64_t encoder_ffn_dim = 3072;
  int64_t max_source_positions = 1500;  // 30 s: 3000 frames, halved by the stride-2 conv
  int64_t classifier_proj_size = 256;
  int64_t num_labels = 2;
  // The decoder (WhisperForConditionalGeneration only): WhisperConfig's defaults are tiny's.
  int64_t vocab_size = 51865;  // large-v3 and large-v3-turbo: 51866
  int64_t decoder_layers = 12;
  int64_t decoder_attention_heads = 12;
  int64_t decoder_ffn_dim = 3072;
  int64_t max_target_positions = 448;
  int64_t pad_token_id = 50256;            // the token embedding's padding_idx
  int64_t decoder_start_token_id = 50257;
  // All of OpenAI's checkpoints train with these at zero.
  double dropout = 0.0;
  double attention_dropout = 0.0;
  double activation_dropout = 0.0;
};

class WhisperEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit WhisperEncoderLayerImpl(const WhisperConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, d)

 private:
  WhisperConfig c_;
  torch::nn::Linear k_proj{nullptr}, v_proj{nullptr}, q_proj{nullptr}, out_proj{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm{nullptr}, final_layer_norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(WhisperEncoderLayer);

class WhisperDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit WhisperDecoderLayerImpl(const WhisperConfig& c);
  // x: (B, L, d); encoder_hidden_states: (B, T, d); the caches: the forward pass's
  // EncoderDecoderCache (self- and cross-attention), or null when use_cache is off.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& encoder_hidden_states,
                        KVCache* self_cache, KVCache* cross_cache);

 private:
  struct Attention {
    torch::nn::Linear k_proj{nullptr}, v_proj{nullptr}, q_proj{nullptr}, out_proj{nullptr};
  };
  // WhisperAttention.forward: self-attention (causal) when key_value_states is undefined.
  torch::Tensor attend(Attention& a, const torch::Tensor& hidden_states,
                       const torch::Tensor& key_value_states, KVCache* cache);
  WhisperConfig c_;
  Attention self_attn, encoder_attn;
  torch::nn::LayerNorm self_attn_layer_norm{nullptr}, encoder_attn_layer_norm{nullptr},
      final_layer_norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(WhisperDecoderLayer);

// WhisperEncoder, shared by both heads; its modules are registered under `encoder` of the
// classifier itself, or of WhisperModel (`model`, which also holds the decoder).
class WhisperEncoderModelImpl : public ModelImpl {
 public:
  // WhisperEncoder.forward: (B, mels, frames) -> (B, T, d) after the final layer norm.
  torch::Tensor encode(const torch::Tensor& input_features);
  const WhisperConfig& config() const { return c_; }
  // Frames for `audio_s` seconds, and the encoder positions they become after the stem.
  static int64_t frames(double audio_s);
  static int64_t positions(int64_t frames) { return (frames + 1) / 2; }

 protected:
  // under: "" (the encoder is the model's own `encoder`) or "model" (WhisperModel's).
  WhisperEncoderModelImpl(const WhisperConfig& c, const std::string& under);
  // The stem's and the encoder blocks' forward FLOPs for T positions of F frames.
  double encoder_flops(double frames, double positions) const;
  double encoder_blocks_flops(double positions) const;
  WhisperConfig c_;
  std::shared_ptr<torch::nn::Module> model_;  // WhisperModel (`model`), or null

 private:
  torch::nn::Conv1d conv1{nullptr}, conv2{nullptr};
  torch::nn::Embedding embed_positions{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
};

class WhisperForAudioClassificationImpl : public WhisperEncoderModelImpl {
 public:
  explicit WhisperForAudioClassificationImpl(const WhisperConfig& c);
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor logits(const Batch& batch) override;  // (B, num_labels)
  Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                        torch::Generator& gen) const override;
  Flops forward_flops(const BatchShape& shape) const override;

 private:
  torch::nn::Linear projector{nullptr}, classifier{nullptr};
};

class WhisperForConditionalGenerationImpl : public WhisperEncoderModelImpl {
 public:
  explicit WhisperForConditionalGenerationImpl(const WhisperConfig& c);
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor logits(const Batch& batch) override;  // (B, L, V)
  // Batch: input features (B, mels, frames) and labels (B, target_seq).
  Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                        torch::Generator& gen) const override;
  Flops forward_flops(const BatchShape& shape) const override;

 private:
  // What WhisperForConditionalGeneration.forward holds until the loop has read the loss.
  struct Output {
    std::shared_ptr<KVCache> self_cache, cross_cache;
    torch::Tensor decoder_input_ids, encoder_last_hidden_state, last_hidden_state, lm_logits;
  };
  Output forward(const Batch& batch);
  torch::Tensor decode(const torch::Tensor& input_ids, const torch::Tensor& encoder_hidden_states,
                       KVCache* self_cache, KVCache* cross_cache);
  torch::nn::Embedding embed_tokens{nullptr}, embed_positions{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
};

}  // namespace sweep::models
