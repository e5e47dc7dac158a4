// GPT-2 (GPT2LMHeadModel) in LibTorch; see gpt2.h.
#include "models/gpt2.h"

#include <cmath>

#include "models/emulation.h"
#include "models/fused_lm_head.h"
#include "models/holder.h"
#include "models/int8.h"
#include "models/nf4.h"

namespace sweep::models {

Conv1DImpl::Conv1DImpl(int64_t nf, int64_t nx) {
  // Hugging Face initialises Conv1D with N(0, 0.02) and zero bias, in place.
  weight = register_parameter("weight", torch::empty({nx, nf}));
  bias = register_parameter("bias", torch::zeros({nf}));
  torch::NoGradGuard no_grad;
  weight.normal_(0, 0.02);
}

torch::Tensor Conv1DImpl::forward(const torch::Tensor& x) {
  // Loaded in 8 bit, the layer is bitsandbytes' Linear8bitLt (weight (out, in)) on x as it is.
  if (is_int8(weight)) return int8_linear(*this, weight, bias, x);
  // In 4 bit, bitsandbytes' Linear4bit (the weight quantised from its transpose, (out, in)).
  if (state_4bit(*this)) return linear_4bit(*this, weight, bias, x);
  auto size_out = x.sizes().vec();
  size_out.back() = weight.size(1);
  // transformers' Conv1D.forward: addmm on a view, then a view back (x = x.view(size_out):
  // the addmm's own handle is gone, so a LoRA wrapper's sum can free the base output).
  auto y = torch::addmm(bias, x.view({-1, x.size(-1)}), weight);
  y = y.view(size_out);
  return with_lora(*this, x, std::move(y));
}

GPT2BlockImpl::GPT2BlockImpl(const GPT2Config& c) : c_(c) {
  auto ln = [&](const char* name) {
    return register_module(
        name, torch::nn::LayerNorm(
                  torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_epsilon)));
  };
  ln_1 = ln("ln_1");
  auto attn = holder(*this, "attn");
  c_attn = attn->register_module("c_attn", Conv1D(3 * c.n_embd, c.n_embd));
  attn_c_proj = attn->register_module("c_proj", Conv1D(c.n_embd, c.n_embd));
  ln_2 = ln("ln_2");
  auto mlp = holder(*this, "mlp");
  c_fc = mlp->register_module("c_fc", Conv1D(4 * c.n_embd, c.n_embd));
  mlp_c_proj = mlp->register_module("c_proj", Conv1D(c.n_embd, 4 * c.n_embd));
}

// The model code below is transcribed statement by statement from transformers 5.23's
// modeling_gpt2.py: a Python temporary dies as soon as it is consumed and a local lives until
// its function returns, so each Python statement is one C++ statement and each Python local
// one C++ local, which keeps the same tensors alive at the same moments (what the peak sees).

// NewGELUActivation ("gelu_new"): the composite expression, not gelu(approximate="tanh").
// Autograd keeps 0.5*x, tanh(...) and 1+tanh(...) besides x: about 12 more bytes per element
// of the (B, T, 4C) activation than the fused op, and CUDA autocast runs pow in fp32.
torch::Tensor gelu_new(const torch::Tensor& input) {
  // 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 *
  // torch.pow(input, 3.0)))), evaluated left to right as Python does.
  auto half = 0.5 * input;
  auto t = torch::pow(input, 3.0);
  t = 0.044715 * t;
  t = input + t;
  t = std::sqrt(2.0 / M_PI) * t;
  t = torch::tanh(t);
  t = 1.0 + t;
  return half * t;
}

torch::Tensor GPT2BlockImpl::forward(const torch::Tensor& x, KVCache* cache) {
  const int64_t C = c_.n_embd, H = c_.n_head, D = C / H;
  const bool train = is_training();
  // GPT2Block.forward
  const torch::Tensor& residual = x;
  auto hidden_states = ln_1(x);
  torch::Tensor attn_output;
  {
    // GPT2Attention.forward (self-attention)
    auto qkv = c_attn(hidden_states).split(C, /*dim=*/2);
    auto query_states = qkv[0], key_states = qkv[1], value_states = qkv[2];
    qkv.clear();
    const int64_t B = key_states.size(0), T = key_states.size(1);
    key_states = key_states.view({B, T, -1, D}).transpose(1, 2);
    value_states = value_states.view({B, T, -1, D}).transpose(1, 2);
    query_states = query_states.view({B, T, -1, D}).transpose(1, 2);
    if (cache) std::tie(key_states, value_states) = cache->update(key_states, value_states);
    // sdpa_attention_forward: no mask for an unpadded batch, so is_causal; scaling head_dim^-0.5.
    auto out = sdpa(query_states, key_states, value_states,
                                                /*attn_mask=*/{}, train ? c_.attn_pdrop : 0.0,
                                                /*is_causal=*/true, std::pow(double(D), -0.5));
    out = out.reshape({out.size(0), -1, T, value_states.size(-1)});
    out = out.transpose(1, 2).contiguous();
    // back in GPT2Attention.forward
    attn_output = out.reshape({B, T, -1}).contiguous();
    attn_output = attn_c_proj(attn_output);
    attn_output = apply_dropout(attn_output, c_.resid_pdrop, train);
  }
  hidden_states = attn_output + residual;
  auto residual2 = hidden_states;
  hidden_states = ln_2(hidden_states);
  torch::Tensor feed_forward_hidden_states;
  {
    // GPT2MLP.forward
    auto h = c_fc(hidden_states);
    h = gelu_new(h);
    h = mlp_c_proj(h);
    feed_forward_hidden_states = apply_dropout(h, c_.resid_pdrop, train);
  }
  hidden_states = residual2 + feed_forward_hidden_states;
  return hidden_states;
}

GPT2LMHeadModelImpl::GPT2LMHeadModelImpl(const GPT2Config& c) : c_(c) {
  auto transformer = holder(*this, "transformer");
  wte = transformer->register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
  wpe = transformer->register_module("wpe", torch::nn::Embedding(c.n_positions, c.n_embd));
  h = transformer->register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(GPT2Block(c));
  ln_f = transformer->register_module(
      "ln_f",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_epsilon)));
  torch::NoGradGuard no_grad;
  wte->weight.normal_(0, 0.02);
  wpe->weight.normal_(0, 0.02);
  // lm_head is tied to wte (one parameter), as with tie_word_embeddings=True. transformers
  // first builds it as a Linear of its own and ties it in post_init(): that (V, C) matrix
  // exists for a moment at the end of the build, and so it does here.
  auto untied_lm_head = torch::empty({c.vocab_size, c.n_embd});
}

torch::Tensor GPT2LMHeadModelImpl::hidden(const torch::Tensor& input_ids, KVCache* cache) {
  // GPT2Model.forward. inputs_embeds and position_embeds are locals there: they stay alive
  // until the whole stack has run.
  const int64_t T = input_ids.size(1);
  TORCH_CHECK(T <= c_.n_positions, "sequence length ", T, " exceeds n_positions ",
              c_.n_positions);
  auto inputs_embeds = input_embeddings_hook(wte(input_ids));
  auto position_ids = torch::arange(T, input_ids.options()) + 0;  // + past_seen_tokens
  position_ids = position_ids.unsqueeze(0);
  auto position_embeds = wpe(position_ids);
  auto hidden_states = inputs_embeds + position_embeds;
  hidden_states = apply_dropout(hidden_states, c_.embd_pdrop, is_training());  // (B, T, C)
  for (auto& m : *h) {
    auto* block = m->as<GPT2BlockImpl>();
    hidden_states = run_block([block, cache](const std::vector<torch::Tensor>& in) {
                      return std::vector<torch::Tensor>{block->forward(in[0], cache)};
                    },
                    {hidden_states})[0];
  }
  hidden_states = ln_f(hidden_states);
  return hidden_states;
}

torch::Tensor GPT2LMHeadModelImpl::logits(const Batch& batch) {
  return at::linear(hidden(batch.tensors[0], nullptr), wte->weight);  // (B, T, V)
}

torch::Tensor GPT2LMHeadModelImpl::loss(const Batch& batch) {
  // GPT2LMHeadModel.forward: the cache (use_cache, off under checkpointing in training) and
  // the logits are in the returned output, which the loop drops only after reading .loss:
  // both stay alive while the loss is computed.
  // TRL's fused forward (SFTTrainer): the backbone with use_cache=False, then its LM head.
  if (fused_lm_head())
    return fused_lm_head_loss(hidden(batch.tensors[0], nullptr), wte->weight, batch.tensors[1],
                              batch.scored);
  std::optional<KVCache> cache;
  if (use_cache() && !(checkpointing() && is_training())) cache.emplace();
  // transformer_outputs.last_hidden_state is referenced until the function returns.
  auto last_hidden_state = hidden(batch.tensors[0], cache ? &*cache : nullptr);
  auto logits = at::linear(last_hidden_state, wte->weight);  // (B, T, V)
  return causal_lm_loss(logits, batch.tensors[1], c_.vocab_size);
}

Batch GPT2LMHeadModelImpl::synthetic_batch(const BatchShape& s, torch::Device device,
                                           torch::Generator& gen) const {
  // GPT2Model reads packed sequences' position_ids too, but sweep's GPT-2 does not follow it.
  TORCH_CHECK(!s.padding_free,
              "gpt2 has no padding-free batches in sweep (a decoder from a config.json has)");
  return causal_lm_batch(c_.vocab_size, s, device, gen, "gpt2");
}

GPT2LMHeadModelImpl::Flops GPT2LMHeadModelImpl::forward_flops(const BatchShape& s) const {
  const double T = s.seq, C = c_.n_embd, L = c_.n_layer, V = c_.vocab_size;
  // Per block: qkv, out-proj, two MLP matmuls, and attention scores + weighted sum (QK^T
  // and PV over the full T x T; causal kernels skip about half, we count it all like MFU
  // conventions do).
  const double block = matmul_flops(T, C, 3 * C) + matmul_flops(T, C, C) +
                       2 * matmul_flops(T, C, 4 * C) + 2 * matmul_flops(T, T, C);
  const double head = matmul_flops(T, C, V);
  return Flops{L * block + head, L * block};
}

}  // namespace sweep::models
