// The Llama family of decoders as transformers 5.23 builds them from a config.json:
// LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM and Phi3ForCausalLM
// (modeling_llama.py, modeling_qwen2.py, modeling_qwen3.py, modeling_mistral.py,
// modeling_phi3.py), with the default attn_implementation "sdpa". One class, switched by what
// the architectures differ in: QKV bias (Qwen2, or Llama's attention_bias), q/k RMSNorm over the
// head dimension (Qwen3), the sliding-window mask (where the config turns it on), and Phi-3's
// fused qkv_proj / gate_up_proj, its residual dropout and its partial-rotary-capable
// apply_rotary_pos_emb. Pre-RMSNorm blocks, rotary positions (default, llama3 and longrope
// inverse frequencies), the SwiGLU MLP, grouped-query attention as sdpa_attention_forward hands
// it to SDPA, tied or untied lm_head, and ForCausalLMLoss (logits upcast to fp32).
// Submodules carry Hugging Face's names (model.layers.0.self_attn.q_proj.weight, ...).
#pragma once

#include <string>
#include <vector>

#include "models/model.h"

namespace sweep::models {

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";  // config.json's architectures[0]
  int64_t vocab_size = 32000;           // Qwen2.5-0.5B: 151936
  int64_t hidden_size = 4096;           // Qwen2.5-0.5B: 896
  int64_t intermediate_size = 11008;    // Qwen2.5-0.5B: 4864
  int64_t num_hidden_layers = 32;       // Qwen2.5-0.5B: 24
  int64_t num_attention_heads = 32;     // Qwen2.5-0.5B: 14
  int64_t num_key_value_heads = 32;     // Qwen2.5-0.5B: 2
  int64_t head_dim = 128;               // hidden_size / heads unless the config says (Qwen3: 128)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double initializer_range = 0.02;
  bool attention_bias = false;          // Qwen2: q, k, v biases (o_proj none)
  bool o_proj_bias = false;             // Llama's attention_bias also gives o_proj a bias
  bool mlp_bias = false;
  bool qk_norm = false;                 // Qwen3
  bool fused_projections = false;       // Phi-3: qkv_proj, gate_up_proj
  double attention_dropout = 0.0;
  double resid_pdrop = 0.0;             // Phi-3's residual dropout
  bool tie_word_embeddings = false;
  bool use_cache = true;
  int64_t pad_token_id = -1;            // the embedding's padding_idx (-1: none)                // the config's default for the forward's use_cache
  // The sliding window each layer attends through (0: full attention), from the config's
  // sliding_window, use_sliding_window / max_window_layers or layer_types.
  std::vector<int64_t> layer_window;
  // Rotary embedding: rope_parameters (or the older rope_theta + rope_scaling).
  struct Rope {
    std::string type = "default";  // "default" | "llama3" | "linear" | "longrope"
    double theta = 10000.0;
    double factor = 1.0;
    double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
    int64_t original_max_position_embeddings = 0;          // llama3, longrope
    std::vector<double> short_factor, long_factor;         // longrope
    double partial_rotary_factor = 1.0;                    // Phi-3 family
  } rope;
};

// The SwiGLU activation's name (hidden_act) is "silu" in every config of the family; the
// parser refuses others.

// RMSNorm as LlamaRMSNorm (= T5LayerNorm): fp32 variance, scale after the cast back.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t hidden_size, double eps);
  torch::Tensor forward(const torch::Tensor& hidden_states);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(LlamaRMSNorm);

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& c, int64_t layer_idx);
  // x: (B, T, C); cos, sin: (1, T, rotary dim); mask: the layer's boolean mask or undefined
  // (is_causal); cache: the forward pass's DynamicCache, or null.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, KVCache* cache);

 private:
  torch::Tensor attention(const torch::Tensor& hidden_states, const torch::Tensor& cos,
                          const torch::Tensor& sin, const torch::Tensor& mask, KVCache* cache);
  torch::Tensor mlp(const torch::Tensor& x);
  LlamaConfig c_;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, qkv_proj{nullptr},
      o_proj{nullptr};
  LlamaRMSNorm q_norm{nullptr}, k_norm{nullptr};
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, gate_up_proj{nullptr},
      down_proj{nullptr};
  LlamaRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

class LlamaForCausalLMImpl : public ModelImpl {
 public:
  explicit LlamaForCausalLMImpl(const LlamaConfig& c);
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor logits(const Batch& batch) override;
  Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                        torch::Generator& gen) const override;
  Flops forward_flops(const BatchShape& shape) const override;
  const LlamaConfig& config() const { return c_; }

 private:
  // LlamaModel.forward: (B, T) ids -> (B, T, C) after the final norm; a padding-free batch's
  // ids (1, B * T) with its position_ids and count of sequences.
  torch::Tensor hidden(const torch::Tensor& input_ids, KVCache* cache);
  torch::Tensor hidden(const torch::Tensor& input_ids, KVCache* cache,
                       const torch::Tensor& position_ids, int64_t sequences);
  // The rotary embedding's (cos, sin), each (1, T, rotary dim), in the hidden states' dtype.
  std::pair<torch::Tensor, torch::Tensor> rotary(const torch::Tensor& x,
                                                 const torch::Tensor& position_ids) const;
  const torch::Tensor& lm_head_weight() const;
  LlamaConfig c_;
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  LlamaRMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied to embed_tokens
  torch::Tensor inv_freq, original_inv_freq;
  double attention_scaling_ = 1.0;
};

// The rotary embedding's inverse frequencies and attention scaling, as ROPE_INIT_FUNCTIONS
// computes them (modeling_rope_utils.py) for the config's rope type, at the sequence lengths
// training uses (longrope: the short factor below original_max_position_embeddings).
std::pair<torch::Tensor, double> rope_inv_freq(const LlamaConfig& c);

}  // namespace sweep::models
