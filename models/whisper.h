// The Whisper encoder with Hugging Face's WhisperForAudioClassification head: two Conv1d+GELU
// layers (the second with stride 2), fixed sinusoidal positions (a frozen parameter, counted
// as transformers counts it), pre-LayerNorm blocks with exact GELU, a final LayerNorm, then a
// projection to 256, a mean over time and a linear classifier, whose cross-entropy is the loss.
// Attention is SDPA with the query pre-scaled by head_dim^-0.5 and scale 1, as transformers
// calls it. Input: log-mel features (B, mels, frames), 100 frames per second of audio.
// transformers accepts only the full window (2 x max_source_positions frames); we also take
// shorter audio, using the first positions (see the README's fidelity notes).
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

class WhisperForAudioClassificationImpl : public ModelImpl {
 public:
  explicit WhisperForAudioClassificationImpl(const WhisperConfig& c);
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor logits(const Batch& batch) override;  // (B, num_labels)
  // WhisperEncoder.forward: (B, mels, frames) -> (B, T, d) after the final layer norm.
  torch::Tensor encode(const torch::Tensor& input_features);
  Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                        torch::Generator& gen) const override;
  Flops forward_flops(const BatchShape& shape) const override;
  const WhisperConfig& config() const { return c_; }
  // Frames for `audio_s` seconds, and the encoder positions they become after the stem.
  static int64_t frames(double audio_s);
  static int64_t positions(int64_t frames) { return (frames + 1) / 2; }

 private:
  WhisperConfig c_;
  torch::nn::Conv1d conv1{nullptr}, conv2{nullptr};
  torch::nn::Embedding embed_positions{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
  torch::nn::Linear projector{nullptr}, classifier{nullptr};
};

}  // namespace sweep::models
