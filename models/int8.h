// 8-bit frozen base weights as bitsandbytes 0.50.2's Linear8bitLt keeps and uses them
// (LLM.int8(): has_fp16_weights=False, threshold 6.0), loaded the way transformers 5.23's
// BitsAndBytesConfig(load_in_8bit=True) loads a model: each converted layer's weight becomes
// the int8 matrix CB (out, in) with a per-row float32 scale SCB (out), both held by the layer
// (and counted as weights). The forward is transcribed op for op from bitsandbytes:
//   * training on the CPU (autograd/_functions.py matmul -> MatMul8bitFp): the weight is
//     dequantised to the input's dtype and multiplied in floating point; the input is kept for
//     backward and the dequantised weight made again there. No outlier decomposition: bnb's
//     CPU training path has none, so neither has ours.
//   * everywhere else (CUDA, and eval on the CPU: MatMul8bitLt): the input is quantised per row
//     to int8 with columns holding |x| >= 6.0 set aside (int8_vectorwise_quant), the int8
//     product accumulates in int32 and is dequantised with both scales (int8_scaled_mm), and
//     the outlier columns are multiplied in the input's dtype against the dequantised weight
//     columns and added (int8_mixed_scaled_mm); backward dequantises the weight.
// On top, a LoRA adapter runs as PEFT 0.21's tuners/lora/bnb.py Linear8bitLt does (its cast
// order differs from the plain Linear's; see int8.cc).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace sweep::models {

// BitsAndBytesConfig.llm_int8_threshold's default: |x| at or above it is an outlier.
constexpr double kInt8Threshold = 6.0;

// The per-row quantisation of a weight (out, in) as Int8Params._quantize does it: the weight as
// float16, then int8_vectorwise_quant with no threshold. Returns {CB int8 (out, in), SCB fp32 (out)}.
std::pair<torch::Tensor, torch::Tensor> int8_quantize_weight(const torch::Tensor& weight);

// The layers transformers converts to Linear8bitLt in a family's model (names as
// lora_layer_names gives them): every Linear and GPT-2 Conv1D but the output embedding (tied
// here, so no layer of its own) and _keep_in_fp32_modules (T5's "wo"). Whisper's projector and
// classifier are converted: get_keys_to_not_convert skips only the last parameter's name,
// "classifier.bias", which names no module.
const std::vector<std::string>& int8_layer_names(const std::string& family);

// A layer transformers converts, as the model holds it: its name, the module, its weight
// (Linear (out, in); GPT-2's Conv1D (in, out), which is transposed before quantising).
struct Int8Layer {
  std::string name;
  torch::nn::Module* module;
  torch::Tensor weight;
  bool conv1d;
};
std::vector<Int8Layer> int8_layers(torch::nn::Module& model, const std::string& family);
// The layer's weight becomes CB in place (the same Parameter "weight", frozen) and the layer
// gains a buffer "SCB".
void set_int8_weight(Int8Layer& layer, const torch::Tensor& CB, const torch::Tensor& SCB);

// Loads the model in 8 bit where it is (the CPU, where host and device are one memory): every
// converted layer's weight (a Conv1D's transposed first, as transformers' Bnb8bitQuantize
// does) is quantised and set (set_int8_weight). Returns how many layers it converted. A GPU's
// load goes weight by weight from the host (sweeps/worker/load_int8.h).
int quantize_int8(torch::nn::Module& model, const std::string& family);

// Whether a layer holds an int8 weight.
inline bool is_int8(const torch::Tensor& weight) { return weight.scalar_type() == torch::kChar; }

// Linear8bitLt.forward (bnb.matmul with its state) on an int8 layer, then its LoRA adapter if
// it has one, as PEFT's Linear8bitLt wraps it. x: (..., in) -> (..., out).
torch::Tensor int8_linear(const torch::nn::Module& layer, const torch::Tensor& weight,
                          const torch::Tensor& bias, const torch::Tensor& x);

// bnb's fp32 fallback of the int8 GEMM (A (n, k) int8, B (m, k) int8 -> (n, m) int32), taken
// where neither torch's int8 GEMM nor the CPU's AVX-512 one applies; never under autocast.
torch::Tensor int8_matmul_fallback(const torch::Tensor& A, const torch::Tensor& B);

// The two matmuls without a layer (for tests): training selects bnb's path as matmul() does.
torch::Tensor int8_matmul(const torch::Tensor& x, const torch::Tensor& CB, const torch::Tensor& SCB,
                          const torch::Tensor& bias, bool training);

}  // namespace sweep::models
