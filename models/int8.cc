// bitsandbytes' LLM.int8() linear layer in ATen; see int8.h. Each function names the
// bitsandbytes 0.50.2 function it transcribes (bitsandbytes/<file>:<function>); as in the
// models, a Python temporary dies when consumed and a local when its function returns, so each
// Python statement is one C++ statement here.
#include "models/int8.h"

#include <ATen/Version.h>

#include <map>

#include "models/emulation.h"
#include "models/gpt2.h"
#include "models/lora.h"

namespace sweep::models {
namespace {

using torch::indexing::Slice;

struct Quantized {
  torch::Tensor CA, SCA, outlier_cols;  // int8 (rows, cols), fp32 (rows), int64 (k) or undefined
};

// backends/default/ops.py:int8_vectorwise_quant (bnb's CPU kernel; its CUDA kernel computes the
// same values, see the README). The original zeroes the outliers in A in place and restores
// them afterwards; A may be a tensor autograd saved (MatMul8bitLt quantises A.to(float16),
// which under fp16 autocast is its input itself, an attention output that SDPA's backward
// reads), and an in-place write bumps its version, so backward then refuses it. The outliers
// are zeroed in a copy instead: the same values, the input untouched (bnb's CUDA kernel zeroes
// them in registers and never writes A either); the copy (A's size) lives while the row
// maxima are taken, only where a row holds an outlier.
Quantized vectorwise_quant(torch::Tensor A, double threshold) {
  const int64_t rows = A.numel() / A.size(-1);
  torch::Tensor outlier_cols, outliers;
  if (threshold > 0.0) {
    outliers = A.abs() >= threshold;
    if (any_value(outliers)) {  // a Meta tensor (emulated device) has none
      // Columns holding an outlier; the outliers are zeroed before the row maxima are taken.
      outlier_cols = torch::argwhere(outliers.any(0)).view(-1);
      A = A.masked_fill(outliers, 0);
    } else {
      outlier_cols = torch::empty({0}, A.options().dtype(torch::kLong));
    }
  }
  // torch.max(A.abs(), dim=1).values.float(): the (values, indices) pair lives to the .float().
  auto row_stats = std::get<0>(torch::max(A.abs(), 1)).to(torch::kFloat);
  // torch.round(A * (127.0 / row_stats.unsqueeze(-1))).to(torch.int8); Python's 127.0 / t is
  // t.reciprocal() * 127.0 (torch/_tensor.py __rdiv__).
  torch::Tensor out_row;
  {
    auto scale = row_stats.unsqueeze(-1).reciprocal();
    scale = scale * 127.0;
    auto t = A * scale;
    scale.reset();
    t = torch::round(t);
    out_row = t.to(torch::kChar);
  }
  if (rows > 1 && outlier_cols.defined()) out_row.index_put_({Slice(), outlier_cols}, 0);
  return {out_row, row_stats, outlier_cols};
}

// int8_linear_matmul (A (n, k) int8, B (m, k) int8 -> (n, m) int32).
torch::Tensor int8_linear_matmul(const torch::Tensor& A, const torch::Tensor& B) {
  if (acts_cuda(A)) {
    // backends/cuda/ops.py:_int8_linear_matmul_impl runs cuBLASLt's igemmlt (cigemmlt_32) into
    // an int32 output, falling back to an fp32 matmul when k % 4 != 0. Here torch's cuBLASLt
    // int8 GEMM, at::_int_mm, under its own shape rules (n > 16, k and m multiples of 8), and
    // bnb's fp32 fallback otherwise.
    if (A.size(0) > 16 && A.size(1) % 8 == 0 && B.size(0) % 8 == 0) return at::_int_mm(A, B.t());
  } else if (at::get_cpu_capability() == "AVX512") {
    // backends/cpu/ops.py: int8_linear_matmul where _has_avx512 (torch.backends.cpu.
    // get_cpu_capability() == "AVX512", which is at::get_cpu_capability()).
    return at::_int_mm(A.reshape({-1, A.size(-1)}), B.t()).reshape({A.size(0), B.size(0)});
  }
  return int8_matmul_fallback(A, B);
}

// backends/default/ops.py:int8_mm_dequant: the int32 product times both scales / 127^2.
torch::Tensor int8_mm_dequant(const torch::Tensor& A, const torch::Tensor& row_stats,
                              const torch::Tensor& col_stats, at::ScalarType dtype,
                              const torch::Tensor& bias) {
  auto A_calc = A.view({-1, A.size(-1)});
  auto row = row_stats.reshape(-1).unsqueeze(-1);
  auto col = col_stats.reshape(-1).unsqueeze(0);
  torch::Tensor out;
  {
    auto scale = row * col;  // A_calc * (row_stats * col_stats) * 6.200124e-05
    out = A_calc * scale;
    scale.reset();
    out = out * 6.200124e-05;
  }
  if (bias.defined()) out += bias;
  return out.to(dtype);
}

// backends/default/ops.py:int8_scaled_mm.
torch::Tensor int8_scaled_mm(const torch::Tensor& A, const torch::Tensor& B,
                             const torch::Tensor& row_stats, const torch::Tensor& col_stats,
                             const torch::Tensor& bias, at::ScalarType dtype) {
  auto out_i32 = int8_linear_matmul(A, B);
  return int8_mm_dequant(out_i32, row_stats, col_stats, dtype, bias);
}

// The weight in the input's dtype: state.CB.to(dtype).mul_(state.SCB.unsqueeze(1).mul(1/127))
// (MatMul8bitFp.forward and both backwards).
torch::Tensor dequantize(const torch::Tensor& CB, const torch::Tensor& SCB, at::ScalarType dtype) {
  auto W = CB.to(dtype, /*non_blocking=*/false, /*copy=*/true);
  W.mul_(SCB.unsqueeze(1).mul(1.0 / 127.0));
  return W;
}

// MatMul8bitFp.backward and MatMul8bitLt.backward's grad_A (the weight is frozen, so grad_B is
// never asked for; the bias is frozen, so no grad_bias).
torch::Tensor grad_input(torch::Tensor grad_output, const torch::Tensor& CB,
                         const torch::Tensor& SCB, at::ScalarType dtype_A,
                         at::IntArrayRef grad_shape) {
  if (grad_output.dim() == 3)
    grad_output = grad_output.reshape({-1, grad_output.size(-1)}).contiguous();
  auto W = dequantize(CB, SCB, dtype_A);
  return torch::matmul(grad_output.to(dtype_A), W).view(grad_shape);
}

// autograd/_functions.py:MatMul8bitFp, bnb's path for training on the CPU. Keeps the input
// itself (ctx.A, not save_for_backward: autograd never releases it early, and so neither does
// saved_data) and the state's CB and SCB; the dequantised weight dies with the forward.
struct MatMul8bitFp : torch::autograd::Function<MatMul8bitFp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& A,
                               const torch::Tensor& CB, const torch::Tensor& SCB,
                               const std::optional<at::Tensor>& bias) {
    auto W = dequantize(CB, SCB, A.scalar_type());
    auto output = at::linear(A, W, bias);
    ctx->saved_data["A"] = A;
    ctx->saved_data["CB"] = CB;
    ctx->saved_data["SCB"] = SCB;
    return output;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto A = ctx->saved_data["A"].toTensor();
    torch::Tensor grad_A;
    if (ctx->needs_input_grad(0))
      grad_A = grad_input(grads[0], ctx->saved_data["CB"].toTensor(),
                          ctx->saved_data["SCB"].toTensor(), A.scalar_type(), A.sizes());
    return {grad_A, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// autograd/_functions.py:MatMul8bitLt with has_fp16_weights=False and threshold 6.0: the int8
// path with the outlier columns in floating point. Keeps (subA, A) for backward (ctx.tensors;
// CAt is None since the weight needs no gradient).
struct MatMul8bitLt : torch::autograd::Function<MatMul8bitLt> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& A_in,
                               const torch::Tensor& CB, const torch::Tensor& SCB,
                               const std::optional<at::Tensor>& bias) {
    const auto input_shape = A_in.sizes().vec();
    torch::Tensor A = A_in.dim() == 3 ? A_in.reshape({-1, A_in.size(-1)}) : A_in;
    // 1. Quantize A (the fast path: needs_input_grad[1] is false for a frozen weight).
    Quantized q = vectorwise_quant(A.to(torch::kHalf), kInt8Threshold);
    // int8_mixed_scaled_mm (backends/default/ops.py), the threshold being > 0.
    torch::Tensor subA, subB;
    if (q.outlier_cols.defined() && q.outlier_cols.numel()) {
      subA = A.index({Slice(), q.outlier_cols}).contiguous();
      // int8_vectorwise_dequant: A * stats.view(-1, 1) * 7.874015718698502e-3, then .to().t()
      auto cols = CB.index({Slice(), q.outlier_cols}).contiguous();
      auto t = cols * SCB.view({-1, 1});
      cols.reset();
      t = t * 7.874015718698502e-3;
      subB = t.to(A.scalar_type()).t();
    } else {
      subA = torch::empty({0}, A.options());
    }
    auto output = int8_scaled_mm(q.CA, CB, q.SCA, SCB, bias.value_or(torch::Tensor()),
                                 A.scalar_type());
    if (subB.defined()) output = output.addmm(subA, subB);
    subB.reset();
    ctx->saved_data["idx"] = q.outlier_cols.defined() ? q.outlier_cols : torch::Tensor();  // state.idx
    q = Quantized{};
    ctx->saved_data["subA"] = subA;
    ctx->saved_data["A"] = A;
    ctx->saved_data["CB"] = CB;
    ctx->saved_data["SCB"] = SCB;
    ctx->saved_data["grad_shape"] = input_shape;
    if (input_shape.size() == 3) {
      auto output_shape = input_shape;
      output_shape.back() = CB.size(0);
      return output.reshape(output_shape);
    }
    return output;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto A = ctx->saved_data["A"].toTensor();
    torch::Tensor grad_A;
    if (ctx->needs_input_grad(0))
      grad_A = grad_input(grads[0], ctx->saved_data["CB"].toTensor(),
                          ctx->saved_data["SCB"].toTensor(), A.scalar_type(),
                          ctx->saved_data["grad_shape"].toIntVector());
    return {grad_A, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor int8_matmul_fallback(const torch::Tensor& A, const torch::Tensor& B) {
  // backends/default/ops.py:_int8_linear_matmul_impl (and backends/cuda/ops.py's fallback for
  // k % 4 != 0): torch.matmul(A.float(), B.float().t()).to(torch.int32). Under autocast that
  // matmul would run in bf16 or fp16 (off by hundreds in bf16; fp16 overflows past 65504), where
  // bnb's CUDA path, which this stands in for at these shapes (fewer than 17 rows, or sizes
  // that are no multiples of 8: Whisper's 2-label head always), multiplies exactly in int32
  // with cuBLASLt. So autocast is off for it, on every device, as torch's own autocast wrappers
  // turn it off for the ops they run (ExcludeDispatchKeyGuard on the autocast keys); the
  // emulated device's autocast (a key of that set) too. fp32 sums are exact while
  // 127 * 127 * k < 2^24, k <= 1040.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  auto result = torch::matmul(A.to(torch::kFloat), B.to(torch::kFloat).t());
  return result.to(torch::kInt);
}

std::pair<torch::Tensor, torch::Tensor> int8_quantize_weight(const torch::Tensor& weight) {
  // nn/modules.py:Int8Params._quantize: B = self.data.contiguous().to(dtype=torch.float16);
  // .data: no autograd history (a weight that requires grad would keep B alive in SCB's graph).
  torch::NoGradGuard no_grad;
  auto B = weight.contiguous().to(torch::kHalf);
  Quantized q = vectorwise_quant(B, 0.0);
  return {q.CA, q.SCA};
}

const std::vector<std::string>& int8_layer_names(const std::string& family) {
  // Checked against transformers' from_pretrained(quantization_config=BitsAndBytesConfig(
  // load_in_8bit=True)) on the test models by tests/fixtures/make_int8_reference.py.
  static const std::map<std::string, std::vector<std::string>> kLayers = [] {
    std::map<std::string, std::vector<std::string>> m;
    for (const char* f : {"gpt2", "t5", "whisper", "whisper-cls", "llama", "phi3"})
      for (const auto& name : lora_layer_names(f))
        if (name != "DenseReluDense.wo") m[f].push_back(name);  // T5 _keep_in_fp32_modules
    return m;
  }();
  return kLayers.at(family);
}

std::vector<Int8Layer> int8_layers(torch::nn::Module& model, const std::string& family) {
  const auto& names = int8_layer_names(family);
  std::vector<Int8Layer> layers;
  for (const auto& item : model.named_modules()) {
    bool match = false;
    for (const auto& n : names) match = match || lora_target_matches(item.key(), n);
    if (!match) continue;
    auto& layer = *item.value();
    if (auto* lin = layer.as<torch::nn::Linear>()) {
      layers.push_back({item.key(), &layer, lin->weight, false});
    } else if (auto* conv = layer.as<Conv1D>()) {
      layers.push_back({item.key(), &layer, conv->weight, true});
    } else {
      TORCH_CHECK(false, "int8 layer ", item.key(), " is not a Linear or Conv1D");
    }
  }
  TORCH_CHECK(!layers.empty(), "no layer of ", family, " converted to int8");
  return layers;
}

void set_int8_weight(Int8Layer& layer, const torch::Tensor& CB, const torch::Tensor& SCB) {
  // The layer keeps its Parameter "weight", now int8 and frozen (Int8Params, requires_grad
  // False), and the scales beside it.
  layer.weight.set_requires_grad(false);
  layer.weight.set_data(CB);
  layer.module->register_buffer("SCB", SCB);
}

int quantize_int8(torch::nn::Module& model, const std::string& family) {
  auto layers = int8_layers(model, family);
  for (auto& layer : layers) {
    // Bnb8bitQuantize.convert: a Conv1D's (in, out) weight is transposed first.
    auto [CB, SCB] = int8_quantize_weight(layer.conv1d ? layer.weight.t() : layer.weight);
    set_int8_weight(layer, CB, SCB);
  }
  return static_cast<int>(layers.size());
}

torch::Tensor int8_matmul(const torch::Tensor& x, const torch::Tensor& CB, const torch::Tensor& SCB,
                          const torch::Tensor& bias, bool training) {
  // autograd/_functions.py:matmul: MatMul8bitFp when training on the CPU (or XPU). The bias
  // is an optional argument, not an input (a frozen one has no gradient either way).
  const auto b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  if (training && device_type_of(x) == c10::kCPU) return MatMul8bitFp::apply(x, CB, SCB, b);
  return MatMul8bitLt::apply(x, CB, SCB, b);
}

torch::Tensor int8_linear(const torch::nn::Module& layer, const torch::Tensor& weight,
                          const torch::Tensor& bias, const torch::Tensor& x) {
  // nn/modules.py:Linear8bitLt.forward: "the bias has to be cast manually", in place (its
  // .data), whenever it differs from the input's dtype (under autocast, between layers), then
  // bnb.matmul with the layer's state.
  if (bias.defined() && bias.scalar_type() != x.scalar_type()) {
    torch::NoGradGuard no_grad;
    torch::Tensor(bias).set_data(bias.to(x.scalar_type()));
  }
  auto result = int8_matmul(x, weight, *layer.named_buffers(false).find("SCB"), bias,
                            layer.is_training());
  const auto children = layer.named_children();
  const auto* lora = children.find("lora");
  if (!lora) return result;
  return (*lora)->as<LoraImpl>()->forward_bnb8(x, std::move(result));
}

}  // namespace sweep::models
