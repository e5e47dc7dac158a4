// LoRA as PEFT 0.21's tuners/lora does it with LoraConfig's defaults (bias="none", no
// modules_to_save, init_lora_weights=True, use_rslora=False): each target layer keeps its
// frozen base weight and gains lora_A (r, in) and lora_B (out, r), and its output becomes
//   result = base(x); result = result + lora_B(lora_A(dropout(x))) * (alpha / r)
// (peft/tuners/lora/layer.py Linear.forward). Every other parameter of the model is frozen.
// Adapters stay fp32 on a bf16 model, as get_peft_model's autocast_adapter_dtype=True keeps
// them; the input is then cast to fp32 for them and the sum back to the base's dtype.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace sweep::models {

struct LoraSettings {
  int64_t r = 8;          // LoraConfig.r
  double alpha = 8;       // LoraConfig.lora_alpha
  double dropout = 0;     // LoraConfig.lora_dropout (0: nn.Identity)
  std::vector<std::string> targets;  // LoraConfig.target_modules, matched as PEFT does
};

// PEFT's default target modules for a family (peft/utils/constants.py; Whisper has no entry
// there and its users name q_proj and v_proj, as for BART): {"c_attn"}, {"q", "v"}, ...
const std::vector<std::string>& default_lora_targets(const std::string& family);

// The layers of a family LoRA can adapt, by their names inside the model (each block's
// "attn.c_attn", ...; whole-model ones like Whisper's "projector"): what a target must match.
const std::vector<std::string>& lora_layer_names(const std::string& family);

// PEFT's shorthand for every linear layer (peft/utils/constants.py
// INCLUDE_LINEAR_LAYERS_SHORTHAND), given alone as LoraConfig(target_modules="all-linear").
inline constexpr const char* kAllLinear = "all-linear";

// The target modules a point's setting means for a family: the family's defaults when it names
// none; for {"all-linear"}, every layer of lora_layer_names (peft/tuners/tuners_utils.py
// _maybe_include_all_linear_layers: each nn.Linear and Conv1D, bitsandbytes' 8- and 4-bit ones
// among them, but the output embedding); otherwise the names as given.
std::vector<std::string> lora_targets_of(const std::string& family, const std::vector<std::string>& targets);

// Whether a target names some layer of the family (all-linear names them all), and those
// layers as a comma-separated list, for the errors of a config and of fit's flags.
bool names_lora_layer(const std::string& family, const std::string& target);
std::string lora_layer_list(const std::string& family);

// PEFT's check_target_module_exists for a list: the module's name is the target, or ends in
// "." + target.
bool lora_target_matches(const std::string& module_name, const std::string& target);

class LoraImpl : public torch::nn::Module {
 public:
  LoraImpl(int64_t in_features, int64_t out_features, const LoraSettings& s);
  // x: the base layer's input (..., in); result: its output (..., out).
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor result);
  // The same on an 8-bit base layer (peft/tuners/lora/bnb.py Linear8bitLt.forward): the
  // adapter's output is cast to the base's dtype before the sum, not the sum after it, and
  // neither cast happens under CUDA autocast.
  torch::Tensor forward_bnb8(const torch::Tensor& x, torch::Tensor result);

  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};

 private:
  double dropout_, scaling_;
};
TORCH_MODULE(Lora);

// get_peft_model on a built model: freezes every parameter, then gives each Linear (or GPT-2
// Conv1D, or either holding an int8 weight: (out, in) then, see int8.h; or a 4-bit one, its
// quant state's (out, in), nf4.h) whose name matches a target a Lora child named "lora", on the layer's device, in
// fp32, in the model's train/eval mode. Returns how many layers it adapted (at least one;
// PEFT fails when no module matches, and so does this).
int add_lora(torch::nn::Module& model, const LoraSettings& s);

// The layer's output with its adapter applied, if it has one (what PEFT's wrapper returns).
torch::Tensor with_lora(const torch::nn::Module& layer, const torch::Tensor& x,
                        torch::Tensor result);

}  // namespace sweep::models
