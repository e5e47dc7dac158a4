// 4-bit frozen base weights (QLoRA) as bitsandbytes 0.50.2's Linear4bit keeps and uses them,
// loaded the way transformers 5.23's BitsAndBytesConfig(load_in_4bit=True,
// bnb_4bit_quant_type="nf4" or "fp4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=
// bf16 or fp16) loads a model: each converted layer's weight becomes Params4bit, the packed
// 4-bit codes (two a byte, the even element in the high nibble) as a uint8 ((n + 1) / 2, 1)
// tensor, with its QuantState beside it:
//   absmax   the per-64-block scales, themselves quantised (double quantisation) to uint8 by
//            quantize_blockwise with blocksize 256 after their mean (`offset`) is taken off;
//   state2   that nested quantisation's fp32 absmax (one per 256 blocks) and its 256-entry
//            dynamic code (a copy per layer: QuantState(code=code.to(device, copy=True)));
//   code     the 16-value NF4 or FP4 table (get_4bit_type: a tensor per layer).
// The forward is Linear4bit.forward (the input cast to the compute dtype, the bias cast in
// place, the output cast back) over bnb.matmul_4bit: MatMul4Bit keeps only the packed weight
// for backward, where it dequantises the weight again (functional.dequantize_4bit) and
// multiplies. The product itself is the gemm_4bit op each backend registers:
//   * the CPU: the default implementation, the nested absmax dequantised (bnb's CPU kernel,
//     an fp32 tensor of the block count), plus the offset (another), then the whole weight
//     dequantised to the input's dtype (N, K) and F.linear;
//   * CUDA: bnb's fused kernel (output only) where _gemm_4bit_use_custom_cuda picks it for
//     the card's SMs, compute capability and the shape, else _dequant_linear_fallback (the
//     same temporaries as the CPU's, the dequantised absmax alive to the end).
// On top, a LoRA adapter runs as PEFT 0.21's tuners/lora/bnb.py Linear4bit does (a clone of
// the base output first, "as per Tim Dettmers"; then as on an 8-bit layer).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

namespace sweep::models {

enum class Quant4 { kNf4, kFp4 };

// What a layer quantised to 4 bit holds besides its packed weight (bnb's QuantState with
// state2), and the layer's compute dtype. A child module named "bnb4" of the layer.
class Quant4StateImpl : public torch::nn::Module {
 public:
  std::vector<int64_t> shape;          // the weight's (out, in)
  at::ScalarType dtype = at::kFloat;   // the weight's dtype when quantised (dequantize's output)
  at::ScalarType compute_dtype = at::kBFloat16;
  Quant4 type = Quant4::kNf4;
  int64_t blocksize = 64;
  torch::Tensor absmax;   // uint8 (blocks): double-quantised block scales
  torch::Tensor offset;   // fp32 0-dim: their mean, taken off before quantising
  torch::Tensor absmax2;  // fp32 (ceil(blocks / 256)): state2.absmax
  torch::Tensor code2;    // fp32 (256): state2.code, the dynamic map (a copy)
  torch::Tensor code;     // fp32 (16): the 4-bit table
};
TORCH_MODULE(Quant4State);

// The 4-bit table (get_4bit_type, normalised to [-1, 1]) and the dynamic 8-bit map
// (create_dynamic_map(signed=True), with quantize_cpu's code[0] = -1), as host vectors.
const std::vector<float>& table_4bit(Quant4 type);
const std::vector<float>& dynamic_map();

// The layers a family converts (the same as for 8 bit: get_modules_to_not_convert leaves the
// output embedding and _keep_in_fp32_modules; models/int8.h int8_layer_names).
struct Layer4 {
  std::string name;
  torch::nn::Module* module;
  torch::Tensor weight;  // the layer's Parameter "weight"
  bool conv1d;           // GPT-2's Conv1D: (in, out), transposed before quantising
};
std::vector<Layer4> layers_4bit(torch::nn::Module& model, const std::string& family);

struct Quant4Settings {
  Quant4 type = Quant4::kNf4;
  at::ScalarType compute_dtype = at::kBFloat16;
};

// Params4bit._quantize on a weight (out, in) where it is (functional.quantize_4bit with
// compress_statistics=True, blocksize 64): on the CPU bnb's default quantize_4bit op (ATen,
// every temporary as it makes them) and its CPU quantize_blockwise kernel (the uint8 codes and
// fp32 absmax only); on CUDA (and on Meta standing for it) bnb's kernels, which allocate only
// their outputs. Sets the layer's weight to the packed codes (frozen) and gives it its state.
void quantize_4bit_layer(Layer4& layer, const torch::Tensor& weight, const Quant4Settings& s);

// Loads the model in 4 bit where it is (the CPU, host and device being one): every converted
// layer's weight, in natural key order, as it is (the load's dtype). Returns how many.
int quantize_4bit(torch::nn::Module& model, const std::string& family, const Quant4Settings& s);

// Whether a layer holds a 4-bit weight (has its "bnb4" state).
const Quant4StateImpl* state_4bit(const torch::nn::Module& layer);

// Linear4bit.forward on a 4-bit layer, then its LoRA adapter if it has one (PEFT's
// Linear4bit). x: (..., in) -> (..., out).
torch::Tensor linear_4bit(const torch::nn::Module& layer, const torch::Tensor& weight,
                          const torch::Tensor& bias, const torch::Tensor& x);

// The packed codes dequantised into `out` (its dtype) by ATen on their own device, 2^20 at a
// time: how a real GPU makes bnb's kernel's values here (the CPU's are bnb's CPU kernel's).
torch::Tensor dequantize_4bit_chunked(const torch::Tensor& packed, const torch::Tensor& absmax,
                                      const torch::Tensor& table, int64_t blocksize, torch::Tensor& out);

// The weight dequantised (functional.dequantize_4bit): (out, in) in the state's dtype.
torch::Tensor dequantize_4bit(const torch::Tensor& packed, const Quant4StateImpl& s);

// The CUDA card bnb's gemm_4bit dispatch asks about (_gpu_dispatch_props): its SMs and compute
// capability. The worker sets it for a CUDA device or an emulated card.
struct CudaDispatchProps {
  int sms = 0, major = 0, minor = 0;
};
void set_cuda_dispatch_props(const CudaDispatchProps& p);
// backends/cuda/ops.py _gemm_4bit_use_custom_cuda and the M > 1536 / K % blocksize rules
// before it: whether the fused kernel runs for an (M, K) x (N, K)^T product in `dtype`.
bool gemm_4bit_uses_custom_kernel(const CudaDispatchProps& p, at::ScalarType dtype, int64_t M,
                                  int64_t N, int64_t K, int64_t blocksize);

}  // namespace sweep::models
