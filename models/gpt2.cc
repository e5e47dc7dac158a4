// GPT-2 (GPT2LMHeadModel) in LibTorch; see gpt2.h.
#include "models/gpt2.h"

#include <cmath>

#include "models/holder.h"

namespace sweep::models {

Conv1DImpl::Conv1DImpl(int64_t nf, int64_t nx) {
  // Hugging Face initialises Conv1D with N(0, 0.02) and zero bias.
  weight = register_parameter("weight", torch::randn({nx, nf}) * 0.02);
  bias = register_parameter("bias", torch::zeros({nf}));
}

torch::Tensor Conv1DImpl::forward(const torch::Tensor& x) {
  auto out_shape = x.sizes().vec();
  out_shape.back() = weight.size(1);
  return torch::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(out_shape);
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

torch::Tensor GPT2BlockImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = c_.n_embd, H = c_.n_head;
  const bool train = is_training();
  // Attention: q, k, v: (B, H, T, C/H); SDPA with the causal flag, as HF's "sdpa" path.
  auto qkv = c_attn(ln_1(x)).split(C, /*dim=*/2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, C / H}).transpose(1, 2); };
  auto y = at::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                            /*attn_mask=*/{}, train ? c_.attn_pdrop : 0.0,
                                            /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, C});  // (B, T, C)
  auto h = x + torch::dropout(attn_c_proj(y), c_.resid_pdrop, train);
  // MLP with GELU's tanh approximation ("gelu_new").
  auto m = mlp_c_proj(torch::gelu(c_fc(ln_2(h)), "tanh"));
  return h + torch::dropout(m, c_.resid_pdrop, train);
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
  // lm_head is tied to wte (one parameter), as with tie_word_embeddings=True.
}

torch::Tensor GPT2LMHeadModelImpl::hidden(const torch::Tensor& input_ids) {
  const int64_t T = input_ids.size(1);
  TORCH_CHECK(T <= c_.n_positions, "sequence length ", T, " exceeds n_positions ",
              c_.n_positions);
  auto pos = torch::arange(T, input_ids.options());
  auto x = torch::dropout(wte(input_ids) + wpe(pos), c_.embd_pdrop, is_training());  // (B, T, C)
  for (auto& m : *h) {
    auto* block = m->as<GPT2BlockImpl>();
    x = run_block([block](const std::vector<torch::Tensor>& in) {
          return std::vector<torch::Tensor>{block->forward(in[0])};
        },
        {x})[0];
  }
  return ln_f(x);
}

torch::Tensor GPT2LMHeadModelImpl::logits(const Batch& batch) {
  return torch::nn::functional::linear(hidden(batch.tensors[0]), wte->weight);  // (B, T, V)
}

torch::Tensor GPT2LMHeadModelImpl::loss(const Batch& batch) {
  // Hugging Face's ForCausalLMLoss: upcast logits to fp32 (a full (B, T, V) fp32 copy under
  // mixed precision: a large share of peak memory at big batches), shift labels left.
  auto logits_f = logits(batch).to(torch::kFloat);
  const auto& labels = batch.tensors[1];
  auto shifted = torch::constant_pad_nd(labels, {0, 1}, -100).slice(1, 1);
  return torch::nn::functional::cross_entropy(
      logits_f.view({-1, c_.vocab_size}), shifted.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}

Batch GPT2LMHeadModelImpl::synthetic_batch(const BatchShape& s, torch::Device device,
                                           torch::Generator& gen) const {
  TORCH_CHECK(s.seq > 0, "gpt2 needs seq > 0");
  auto ids = torch::randint(c_.vocab_size, {s.batch, s.seq}, gen, torch::kLong);
  ids = ids.to(device);
  // Labels = inputs, as in causal-LM fine-tuning; the loss shifts them.
  return Batch{{ids, ids}, s.batch * s.seq, s.batch};
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
