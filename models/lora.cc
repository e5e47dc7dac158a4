// LoRA adapters on the zoo's models; see lora.h.
#include "models/lora.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/autocast_mode.h>

#include "models/emulation.h"
#include "models/gpt2.h"
#include "models/int8.h"
#include "models/nf4.h"

namespace sweep::models {

const std::vector<std::string>& default_lora_targets(const std::string& family) {
  static const std::map<std::string, std::vector<std::string>> kDefaults = {
      {"gpt2", {"c_attn"}}, {"t5", {"q", "v"}}, {"whisper", {"q_proj", "v_proj"}},
      {"whisper-cls", {"q_proj", "v_proj"}},
      // llama, qwen2, qwen3 and mistral all map to q_proj and v_proj there. Phi-3 has no
      // entry (PEFT asks for target_modules); its fused qkv_proj is what its users name.
      {"llama", {"q_proj", "v_proj"}}, {"phi3", {"qkv_proj"}}};
  return kDefaults.at(family);
}

const std::vector<std::string>& lora_layer_names(const std::string& family) {
  // Names relative to a block (as named_modules() writes them) and the top-level heads; a
  // test checks them against the built test models.
  static const std::map<std::string, std::vector<std::string>> kLayers = {
      {"gpt2", {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}},
      {"t5",
       {"SelfAttention.q", "SelfAttention.k", "SelfAttention.v", "SelfAttention.o",
        "EncDecAttention.q", "EncDecAttention.k", "EncDecAttention.v", "EncDecAttention.o",
        "DenseReluDense.wi", "DenseReluDense.wo"}},
      {"whisper",
       {"self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj", "self_attn.out_proj",
        "encoder_attn.k_proj", "encoder_attn.v_proj", "encoder_attn.q_proj",
        "encoder_attn.out_proj", "fc1", "fc2"}},
      {"whisper-cls",
       {"self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj", "self_attn.out_proj", "fc1",
        "fc2", "projector", "classifier"}},
      {"llama",
       {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}},
      {"phi3", {"self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"}}};
  return kLayers.at(family);
}

std::vector<std::string> lora_targets_of(const std::string& family, const std::vector<std::string>& targets) {
  if (targets.empty()) return default_lora_targets(family);
  if (targets.size() == 1 && targets[0] == kAllLinear) return lora_layer_names(family);
  return targets;
}

bool names_lora_layer(const std::string& family, const std::string& target) {
  if (target == kAllLinear) return true;
  const auto& layers = lora_layer_names(family);
  return std::any_of(layers.begin(), layers.end(),
                     [&](const std::string& layer) { return lora_target_matches(layer, target); });
}

std::string lora_layer_list(const std::string& family) {
  std::string s;
  for (const auto& layer : lora_layer_names(family)) s += (s.empty() ? "" : ", ") + layer;
  return s;
}

bool lora_target_matches(const std::string& module_name, const std::string& target) {
  if (module_name == target) return true;
  return module_name.size() > target.size() &&
         module_name.compare(module_name.size() - target.size(), target.size(), target) == 0 &&
         module_name[module_name.size() - target.size() - 1] == '.';
}

LoraImpl::LoraImpl(int64_t in_features, int64_t out_features, const LoraSettings& s)
    : dropout_(s.dropout), scaling_(s.alpha / static_cast<double>(s.r)) {
  // LoraLayer.update_layer: nn.Linear(in, r, bias=False), nn.Linear(r, out, bias=False), then
  // reset_lora_parameters: A kaiming_uniform_(a=sqrt(5)), B zeros (the adapter starts as 0).
  lora_A = register_module(
      "lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_features, s.r).bias(false)));
  lora_B = register_module(
      "lora_B", torch::nn::Linear(torch::nn::LinearOptions(s.r, out_features).bias(false)));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
  torch::nn::init::zeros_(lora_B->weight);
}

torch::Tensor LoraImpl::forward(const torch::Tensor& x, torch::Tensor result) {
  // peft/tuners/lora/layer.py Linear.forward. A Python temporary dies as soon as it is
  // consumed, a C++ one only at the end of its full expression, so the nested expression
  // `result + lora_B(lora_A(apply_dropout(x))) * scaling` is one statement per call here: each
  // intermediate is released as the next one exists, as in Python. The cast input is a local
  // there and lives until the function returns.
  const auto torch_result_dtype = result.scalar_type();
  // _cast_input_dtype: a copy only when the dtypes differ (a bf16 model's fp32 adapters).
  const torch::Tensor xc = x.scalar_type() == lora_A->weight.scalar_type()
                               ? x
                               : x.to(lora_A->weight.scalar_type());
  // nn.Dropout when lora_dropout > 0 (F.dropout in the module's mode), else nn.Identity;
  // nn.Linear is F.linear, i.e. at::linear.
  torch::Tensor t = at::linear(dropout_ > 0 ? apply_dropout(xc, dropout_, is_training()) : xc,
                               lora_A->weight);
  t = at::linear(t, lora_B->weight);
  t = t * scaling_;
  result = result + t;
  t.reset();
  return result.to(torch_result_dtype);
}

torch::Tensor LoraImpl::forward_bnb8(const torch::Tensor& x, torch::Tensor result) {
  // requires_conversion = not torch.is_autocast_enabled(): the CUDA autocast state only.
  const bool requires_conversion = !autocast_enabled(at::kCUDA);
  const auto expected_dtype = result.scalar_type();
  const torch::Tensor xc = requires_conversion && x.scalar_type() != lora_A->weight.scalar_type()
                               ? x.to(lora_A->weight.scalar_type())
                               : x;
  // output = lora_B(lora_A(apply_dropout(x))) * scaling
  torch::Tensor output =
      at::linear(dropout_ > 0 ? apply_dropout(xc, dropout_, is_training()) : xc, lora_A->weight);
  output = at::linear(output, lora_B->weight);
  output = output * scaling_;
  if (requires_conversion) output = output.to(expected_dtype);
  result = result + output;
  return result;
}

int add_lora(torch::nn::Module& model, const LoraSettings& s) {
  TORCH_CHECK(s.r >= 1 && s.alpha > 0 && s.dropout >= 0 && s.dropout < 1, "bad LoRA settings");
  // _mark_only_adapters_as_trainable: every parameter not of an adapter is frozen.
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  struct Target {
    std::shared_ptr<torch::nn::Module> layer;
    int64_t in, out;
    torch::Tensor weight;
  };
  std::vector<Target> found;
  for (const auto& item : model.named_modules()) {
    bool match = false;
    for (const auto& t : s.targets) match = match || lora_target_matches(item.key(), t);
    if (!match) continue;
    const auto& m = item.value();
    torch::Tensor w;
    if (auto* lin = m->as<torch::nn::Linear>())
      w = lin->weight;
    else if (auto* conv = m->as<Conv1D>())
      w = conv->weight;
    else
      TORCH_CHECK(false, "LoRA target ", item.key(), " is not a Linear or Conv1D layer");
    // A Conv1D's weight is (in, out) (PEFT sets fan_in_fan_out); a Linear's, and an int8
    // layer's (bnb's Linear8bitLt, which replaced the Conv1D), is (out, in).
    // A 4-bit layer's weight is its packed codes; its (out, in) is the quant state's.
    if (const auto* q = state_4bit(*m)) {
      found.push_back({m, q->shape[1], q->shape[0], w});
      continue;
    }
    const bool in_out = m->as<Conv1D>() && !is_int8(w);
    found.push_back({m, w.size(in_out ? 0 : 1), w.size(in_out ? 1 : 0), w});
  }
  TORCH_CHECK(!found.empty(), "no layer matches the LoRA targets");
  for (auto& t : found) {
    // Built on the CPU in fp32, then moved to the base layer's device (PEFT's
    // _move_adapter_to_device_of_base_layer; autocast_adapter_dtype keeps fp32 over bf16).
    auto lora = t.layer->register_module("lora", Lora(t.in, t.out, s));
    lora->to(t.weight.device());
    lora->train(model.is_training());
  }
  return static_cast<int>(found.size());
}

torch::Tensor with_lora(const torch::nn::Module& layer, const torch::Tensor& x,
                        torch::Tensor result) {
  const auto children = layer.named_children();
  const auto* lora = children.find("lora");
  if (!lora) return result;
  return (*lora)->as<LoraImpl>()->forward(x, std::move(result));
}

}  // namespace sweep::models
