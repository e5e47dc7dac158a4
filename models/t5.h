// T5 v1.0 as Hugging Face's T5ForConditionalGeneration: encoder-decoder, relative position
// buckets (the bias table lives in the first block of each stack and is shared by the rest),
// scale-only LayerNorm, ReLU feed-forward, dropout 0.1, embeddings tied to the LM head with the
// d_model^-0.5 rescale, labels shifted right into the decoder inputs (start token 0).
// Attention is SDPA the way transformers' "sdpa" path calls it: scale 1, the position bias as
// an additive float mask (causal positions filled with the dtype's minimum in the decoder), and
// a zero mask for cross-attention, since those masks decide which SDPA kernel runs.
// Submodules carry Hugging Face's names (encoder.block.0.layer.0.SelfAttention.q.weight, ...).
#pragma once

#include "models/model.h"

namespace sweep::models {

struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 512;
  int64_t d_kv = 64;
  int64_t d_ff = 2048;
  int64_t num_layers = 6;          // encoder
  int64_t num_decoder_layers = 6;
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double dropout_rate = 0.1;
  double layer_norm_epsilon = 1e-6;
  int64_t decoder_start_token_id = 0;
};

// Root-mean-square norm with a scale and no bias; the variance is computed in fp32.
class T5LayerNormImpl : public torch::nn::Module {
 public:
  T5LayerNormImpl(int64_t d, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(T5LayerNorm);

class T5AttentionImpl : public torch::nn::Module {
 public:
  // decoder_self: the decoder's self-attention (causal, one-directional buckets).
  T5AttentionImpl(const T5Config& c, bool has_relative_attention_bias, bool decoder_self);
  // (1, H, Tq, Tk) bias from the bucketed relative positions (first block of a stack only).
  torch::Tensor compute_bias(int64_t query_length, int64_t key_length);
  // hidden_states: (B, Tq, d); key_value_states: (B, Tk, d) for cross-attention, undefined
  // for self-attention; position_bias broadcastable to (B, H, Tq, Tk), undefined in the first
  // block (which computes it: the relative bias, or zeros for cross-attention). Returns the
  // output and the bias. cache: this attention's DynamicCache, or null.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& hidden_states,
                                                  const torch::Tensor& key_value_states,
                                                  torch::Tensor position_bias, KVCache* cache,
                                                  bool bias_requires_grad);

 private:
  T5Config c_;
  bool decoder_self_;
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};
};
TORCH_MODULE(T5Attention);

// One block: self-attention, cross-attention (decoder only), feed-forward; each sub-layer is
// pre-norm with a residual and dropout, under Hugging Face's `layer.N` names.
class T5BlockImpl : public torch::nn::Module {
 public:
  T5BlockImpl(const T5Config& c, bool has_relative_attention_bias, bool is_decoder);
  // Returns {hidden, self-attention bias[, cross-attention bias]}; the biases are undefined
  // inputs in the first block, which computes them. Encoder: no encoder_hidden_states.
  std::vector<torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& position_bias,
                                     const torch::Tensor& encoder_hidden_states,
                                     const torch::Tensor& encoder_decoder_position_bias,
                                     KVCache* self_cache, KVCache* cross_cache,
                                     bool bias_requires_grad);
  T5Attention self_attention{nullptr};

 private:
  T5Config c_;
  T5Attention cross_attention{nullptr};
  T5LayerNorm self_norm{nullptr}, cross_norm{nullptr}, ff_norm{nullptr};
  torch::nn::Linear wi{nullptr}, wo{nullptr};
};
TORCH_MODULE(T5Block);

class T5ForConditionalGenerationImpl : public ModelImpl {
 public:
  explicit T5ForConditionalGenerationImpl(const T5Config& c);
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor logits(const Batch& batch) override;  // (B, target_seq, V)
  Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                        torch::Generator& gen) const override;
  Flops forward_flops(const BatchShape& shape) const override;
  const T5Config& config() const { return c_; }

 private:
  struct Stack {
    torch::nn::ModuleList block{nullptr};
    T5LayerNorm final_layer_norm{nullptr};
  };
  Stack make_stack(const std::string& name, int64_t layers, bool is_decoder);
  // What T5ForConditionalGeneration.forward holds until the loop has read the loss.
  struct Output {
    std::shared_ptr<KVCache> self_cache, cross_cache;  // the decoder's EncoderDecoderCache
    torch::Tensor encoder_last_hidden_state, decoder_input_ids, decoder_last_hidden_state,
        sequence_output, lm_logits;
  };
  Output forward(const Batch& batch);
  // T5Stack.forward: (B, T) ids -> (B, T, d) after the final norm and dropout.
  torch::Tensor run_stack(Stack& stack, const torch::Tensor& input_ids,
                          const torch::Tensor& encoder_hidden_states, KVCache* self_cache,
                          KVCache* cross_cache);
  torch::Tensor shift_right(const torch::Tensor& labels) const;

  T5Config c_;
  torch::nn::Embedding shared{nullptr};
  Stack encoder_, decoder_;
};

}  // namespace sweep::models
