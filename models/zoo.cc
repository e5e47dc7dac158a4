// The zoo's table: configurations as published by Hugging Face for each checkpoint.
#include "models/zoo.h"

#include "models/gpt2.h"

namespace sweep::models {
namespace {

ModelSpec gpt2(std::string name, std::string hf_id, int64_t n_embd, int64_t n_layer,
               int64_t n_head, bool test_only = false, int64_t vocab = 50257,
               int64_t n_positions = 1024) {
  GPT2Config c;
  c.n_embd = n_embd;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.vocab_size = vocab;
  c.n_positions = n_positions;
  const int64_t C = n_embd;
  // Per block: two LayerNorms, c_attn, attn.c_proj, c_fc, mlp.c_proj (weights + biases).
  const int64_t block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) +
                        (4 * C * C + C);
  const int64_t params = vocab * C + n_positions * C + n_layer * block + 2 * C;
  return ModelSpec{std::move(name), "gpt2", std::move(hf_id), test_only, n_layer, n_embd, n_head,
                   params, {"seq"},
                   [c] { return std::make_shared<GPT2LMHeadModelImpl>(c); }};
}

std::vector<ModelSpec> build_zoo() {
  std::vector<ModelSpec> z;
  z.push_back(gpt2("gpt2", "openai-community/gpt2", 768, 12, 12));
  z.push_back(gpt2("gpt2-medium", "openai-community/gpt2-medium", 1024, 24, 16));
  z.push_back(gpt2("gpt2-large", "openai-community/gpt2-large", 1280, 36, 20));
  z.push_back(gpt2("gpt2-xl", "openai-community/gpt2-xl", 1600, 48, 25));
  // Test models: small enough for a 2-core CPU, same code paths.
  z.push_back(gpt2("gpt2-tiny", "", 64, 2, 4, /*test_only=*/true, /*vocab=*/1024,
                   /*n_positions=*/256));
  return z;
}

}  // namespace

const std::vector<ModelSpec>& zoo() {
  static const std::vector<ModelSpec> z = build_zoo();
  return z;
}

const ModelSpec* find_model(const std::string& name) {
  for (const auto& s : zoo())
    if (s.name == name) return &s;
  return nullptr;
}

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace sweep::models
