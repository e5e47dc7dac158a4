// GPT-2 as Hugging Face's GPT2LMHeadModel: learned positions, pre-LayerNorm blocks,
// gelu_new MLP (the composite expression), SDPA causal attention, tied embeddings, dropout 0.1 in train mode.
// Submodules carry Hugging Face's names (transformer.h.0.attn.c_attn.weight, ...) and its
// Conv1D layout (weight is (in, out)), so reference weights load by name.
#pragma once

#include "models/model.h"

namespace sweep::models {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;   // gpt2-medium: 1024
  int64_t n_layer = 12;   // gpt2-medium: 24
  int64_t n_head = 12;    // gpt2-medium: 16
  double layer_norm_epsilon = 1e-5;
  double embd_pdrop = 0.1;
  double attn_pdrop = 0.1;
  double resid_pdrop = 0.1;
};

// Hugging Face's Conv1D: y = x @ weight + bias with weight stored (in, out).
class Conv1DImpl : public torch::nn::Module {
 public:
  Conv1DImpl(int64_t nf, int64_t nx);
  torch::Tensor forward(const torch::Tensor& x);  // x: (..., nx) -> (..., nf)
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

class GPT2BlockImpl : public torch::nn::Module {
 public:
  explicit GPT2BlockImpl(const GPT2Config& c);
  // x: (B, T, C); cache: the forward pass's DynamicCache, or null when use_cache is off.
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache);

 private:
  GPT2Config c_;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Conv1D c_attn{nullptr}, attn_c_proj{nullptr}, c_fc{nullptr}, mlp_c_proj{nullptr};
};
TORCH_MODULE(GPT2Block);

class GPT2LMHeadModelImpl : public ModelImpl {
 public:
  explicit GPT2LMHeadModelImpl(const GPT2Config& c);
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor logits(const Batch& batch) override;
  Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                        torch::Generator& gen) const override;
  Flops forward_flops(const BatchShape& shape) const override;
  const GPT2Config& config() const { return c_; }

 private:
  // (B, T) -> (B, T, C) after ln_f
  torch::Tensor hidden(const torch::Tensor& input_ids, KVCache* cache);
  GPT2Config c_;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};

}  // namespace sweep::models
