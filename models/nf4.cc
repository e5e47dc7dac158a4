// bitsandbytes' 4-bit linear layer (QLoRA) in ATen; see nf4.h. Each function names the
// bitsandbytes 0.50.2 function it transcribes (bitsandbytes/<file>:<function>); as in the
// models, a Python temporary dies when consumed and a local when its function returns, so each
// Python statement is one C++ statement here.
#include "models/nf4.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "models/emulation.h"
#include "models/gpt2.h"
#include "models/int8.h"
#include "models/lora.h"

namespace sweep::models {
namespace {

using torch::indexing::None;
using torch::indexing::Slice;

constexpr int64_t kNestedBlocksize = 256;  // quantize_4bit: quantize_blockwise(..., blocksize=256)

std::atomic<int> g_sms{0}, g_major{0}, g_minor{0};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A float tensor from host values, on `like`'s device (Meta: sizes only): torch.tensor(data,
// device=...) as get_4bit_type makes the table, or create_dynamic_map().to(device).
torch::Tensor host_values(const std::vector<float>& v, const torch::Tensor& like) {
  auto out = torch::empty({static_cast<int64_t>(v.size())}, like.options().dtype(torch::kFloat));
  if (!out.is_meta()) {
    auto host = torch::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())},
                                 torch::kFloat);
    out.copy_(host);
  }
  return out;
}

// A CPU tensor's floating elements as float (reading) and from float (writing, rounded to
// nearest even for bf16 as bnb's float_to_bf16 does), dispatched once per call.
template <class F>
void with_elements(const torch::Tensor& t, F&& f) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, t.scalar_type(), "4bit",
                                  [&] { f(t.data_ptr<scalar_t>()); });
}

// csrc/cpu_ops.cpp quantize_cpu: per block of `blocksize`, absmax = max |A|, each element the
// index of the nearest code value to A / absmax (bnb's binary search over the sorted code).
// Fills the preallocated `out` (uint8) and `absmax`.
void quantize_blockwise_values(const torch::Tensor& A, const std::vector<float>& code,
                               int64_t blocksize, torch::Tensor& out, torch::Tensor& absmax) {
  const int64_t n = A.numel();
  auto* q = out.data_ptr<uint8_t>();
  auto* am = absmax.data_ptr<float>();
  const auto* a = A.data_ptr<float>();  // the centred absmax: fp32
  for (int64_t b = 0; b * blocksize < n; ++b) {
    const int64_t lo = b * blocksize, hi = std::min(n, lo + blocksize);
    float m = 0;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(a[i]));
    am[b] = m;
    for (int64_t i = lo; i < hi; ++i) {
      const float x = m == 0 ? 0.f : a[i] / m;
      const auto it = std::lower_bound(code.begin(), code.end(), x);
      int64_t j = it - code.begin();
      if (j == static_cast<int64_t>(code.size())) j = code.size() - 1;
      if (j > 0 && std::fabs(code[j - 1] - x) <= std::fabs(code[j] - x)) --j;
      q[i] = static_cast<uint8_t>(j);
    }
  }
}

// csrc/cpu_ops.cpp dequantizeBlockwise8bitCpu (fp32): out[i] = code[A[i]] * absmax[i / bs].
void dequantize_blockwise_values(const torch::Tensor& A, const torch::Tensor& absmax,
                                 const torch::Tensor& code, int64_t blocksize, torch::Tensor& out) {
  const auto* a = A.data_ptr<uint8_t>();
  const auto* am = absmax.data_ptr<float>();
  const auto* c = code.data_ptr<float>();
  auto* o = out.data_ptr<float>();  // dequantize_blockwise(..., dtype=float32)
  for (int64_t i = 0; i < A.numel(); ++i) o[i] = c[a[i]] * am[i / blocksize];
}

// csrc/cpu_ops.cpp dequantizeBlockwise4bitCpu: element 2i is the high nibble of byte i.
void dequantize_4bit_values(const torch::Tensor& packed, const torch::Tensor& absmax,
                            const std::vector<float>& table, int64_t blocksize, torch::Tensor& out) {
  const auto* p = packed.data_ptr<uint8_t>();
  const auto* am = absmax.data_ptr<float>();
  const int64_t n = out.numel();
  with_elements(out, [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t byte = p[i / 2];
      const int nib = i % 2 == 0 ? byte >> 4 : byte & 0xF;
      o[i] = static_cast<T>(table[nib] * am[i / blocksize]);
    }
  });
}

// backends/default/ops.py quantize_4bit (the CPU's: bnb registers no CPU kernel for it), ATen
// op for op. Returns {packed uint8 ((n + 1) / 2, 1), absmax fp32 (blocks)}.
std::pair<torch::Tensor, torch::Tensor> quantize_4bit_default(const torch::Tensor& A, Quant4 type,
                                                              int64_t blocksize) {
  // _get_4bit_quantize_bounds (cached per device in bnb: made here, a few bytes).
  const auto& table = table_4bit(type);
  auto code = host_values(table, A);
  auto order = torch::argsort(code);
  auto midpoints = (code.index({order.index({Slice(None, -1)})}) +
                    code.index({order.index({Slice(1, None)})})) / 2;
  auto A_flat = A.reshape(-1).to(torch::kFloat);
  const int64_t n = A_flat.numel(), rem = n % blocksize, full = n - rem, blocks = full / blocksize;
  auto A_com = A_flat.index({Slice(None, full)}).reshape({blocks, blocksize});
  auto absmax = std::get<0>(A_com.abs().max(-1));
  torch::Tensor scaled;
  {
    // torch.clamp(A_com * (1.0 / absmax.clamp(min=1e-38).view(-1, 1)), -1, 1).reshape(-1);
    // Python's 1.0 / t is t.reciprocal() * 1.0 (torch/_tensor.py __rdiv__).
    auto r = absmax.clamp_min(1e-38).reciprocal();
    r = r * 1.0;
    auto prod = A_com * r.view({-1, 1});
    r.reset();
    scaled = torch::clamp(prod, -1, 1).reshape(-1);
  }
  if (rem) {
    auto am = A_flat.index({Slice(full, None)}).abs().max().clamp_min(1e-38);
    absmax = torch::cat({absmax, am.unsqueeze(0)});
    scaled = torch::cat({scaled, torch::clamp(A_flat.index({Slice(full, None)}) / am, -1, 1)});
  }
  // Every local (A_flat, scaled, q, q8) lives until the function returns, as in Python.
  if (scaled.numel() % 2) scaled = torch::constant_pad_nd(scaled, {0, 1});
  auto q = torch::bucketize(scaled, midpoints, /*out_int32=*/true);
  if (type != Quant4::kNf4) q = order.index({q});
  auto q8 = q.to(torch::kByte);
  // ((q8[::2] << 4) | q8[1::2]).unsqueeze(1): the shifted half a temporary.
  auto packed = torch::bitwise_left_shift(q8.index({Slice(None, None, 2)}), 4)
                    .bitwise_or(q8.index({Slice(1, None, 2)}))
                    .unsqueeze(1);
  return {packed, absmax};
}

// The nested quantisation (functional.quantize_4bit, compress_statistics=True): offset, then
// quantize_blockwise(_absmax - offset, blocksize=256) with the dynamic map. bnb's kernel (CPU
// and CUDA alike) allocates the nested absmax and the codes; QuantState copies the map.
void double_quantize(Quant4StateImpl& s, const torch::Tensor& absmax) {
  s.offset = absmax.mean();
  auto centred = absmax - s.offset;
  const auto& map = dynamic_map();
  auto dynamic = host_values(map, centred);  // name2qmap["dynamic"] (cached in bnb)
  s.absmax2 = torch::empty({ceil_div(centred.numel(), kNestedBlocksize)},
                           centred.options().dtype(torch::kFloat));
  s.absmax = torch::empty(centred.sizes(), centred.options().dtype(torch::kByte));
  if (!centred.is_meta()) {
    auto host = centred.to(torch::kCPU);
    auto q = s.absmax.to(torch::kCPU), am = s.absmax2.to(torch::kCPU);
    quantize_blockwise_values(host, map, kNestedBlocksize, q, am);
    if (!s.absmax.is_cpu()) {
      s.absmax.copy_(q);
      s.absmax2.copy_(am);
    }
  }
  s.code2 = dynamic.clone();  // code.to(A.device, copy=True)
}

}  // namespace

torch::Tensor dequantize_4bit_chunked(const torch::Tensor& packed, const torch::Tensor& absmax,
                                      const torch::Tensor& table, int64_t blocksize, torch::Tensor& out) {
  // Chunks of 2^20 weights (whole blocks, an even count): each chunk's codes split from their
  // bytes, looked up and scaled by ATen on the tensors' device, then written into `out`.
  constexpr int64_t kChunk = int64_t{1} << 20;
  auto flat = out.view(-1);
  const auto bytes = packed.reshape(-1);
  const int64_t n = flat.numel();
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t len = std::min(kChunk, n - start);
    auto b = bytes.slice(0, start / 2, (start + len + 1) / 2);
    auto codes = torch::stack({torch::bitwise_right_shift(b, 4), b.bitwise_and(15)}, 1).view(-1);
    auto vals = table.index({codes.slice(0, 0, len).to(torch::kLong)});
    auto scales = absmax.slice(0, start / blocksize, ceil_div(start + len, blocksize))
                      .repeat_interleave(blocksize)
                      .slice(0, 0, len);
    flat.slice(0, start, start + len).copy_(vals * scales);
  }
  return out;
}

namespace {

// The nested absmax on a GPU: code2[absmax] * absmax2 per 256, by ATen (a block count's
// temporaries).
void dequantize_4bit_chunked_blockwise(const Quant4StateImpl& s, torch::Tensor& dq) {
  const int64_t n = s.absmax.numel();
  auto scales = s.absmax2.repeat_interleave(kNestedBlocksize).slice(0, 0, n);
  dq.copy_(s.code2.index({s.absmax.to(torch::kLong)}) * scales);
}

// The nested absmax dequantised, plus the offset (gemm_4bit's default implementation and
// _dequant_linear_fallback; functional.dequantize_4bit adds it in place).
torch::Tensor dequantized_absmax(const Quant4StateImpl& s) {
  auto dq = torch::empty(s.absmax.sizes(), s.absmax.options().dtype(torch::kFloat));
  if (!dq.is_meta()) {
    if (dq.is_cpu()) dequantize_blockwise_values(s.absmax, s.absmax2, s.code2, kNestedBlocksize, dq);
    else dequantize_4bit_chunked_blockwise(s, dq);
  }
  return dq;
}

// The weight (out, in) in `dtype` from the packed codes and fp32 block scales (bnb's
// dequantize_4bit kernels: the output is the only allocation).
torch::Tensor dequantize_packed(const torch::Tensor& packed, const torch::Tensor& absmax,
                                const Quant4StateImpl& s, at::ScalarType dtype) {
  auto out = torch::empty(s.shape, packed.options().dtype(dtype));
  if (out.is_meta()) return out;
  if (out.is_cpu()) {
    dequantize_4bit_values(packed, absmax, table_4bit(s.type), s.blocksize, out);
  } else {
    // A real GPU: bnb's CUDA kernel is not ours to call; ATen computes the values in chunks
    // (a few MB of temporaries beside the output, which bnb's kernel does not have).
    dequantize_4bit_chunked(packed, absmax, s.code, s.blocksize, out);
  }
  return out;
}

// bitsandbytes::gemm_4bit as the device's backend runs it (nested statistics).
torch::Tensor gemm_4bit(const torch::Tensor& A, const torch::Tensor& B, const Quant4StateImpl& s,
                        const torch::Tensor& bias) {
  const auto b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  if (!acts_cuda(A)) {
    // backends/default/ops.py _gemm_4bit_default_impl: the dequantised nested absmax (the
    // CPU kernel's output) plus the offset, the first freed as the second exists.
    torch::Tensor absmax;
    {
      auto dq = dequantized_absmax(s);
      absmax = dq + s.offset;
    }
    auto B_dq = dequantize_packed(B, absmax, s, A.scalar_type());
    return at::linear(A, B_dq, b);
  }
  const int64_t K = A.size(-1), M = A.numel() / K, N = s.shape[0];
  const CudaDispatchProps props{g_sms.load(), g_major.load(), g_minor.load()};
  if (gemm_4bit_uses_custom_kernel(props, A.scalar_type(), M, N, K, s.blocksize)) {
    // _gemm_4bit_kernel_impl: A made contiguous, the output, and the offset as fp32 (it is).
    auto Ac = A.contiguous();
    auto shape = Ac.sizes().vec();
    shape.back() = N;
    auto out = torch::empty(shape, Ac.options());
    if (!out.is_meta()) {
      // The fused kernel's values, made as the fallback makes them (a real GPU only).
      auto absmax = dequantized_absmax(s) + s.offset;
      out.copy_(at::linear(Ac, dequantize_packed(B, absmax, s, Ac.scalar_type()), b));
    }
    return out;
  }
  // backends/cuda/ops.py _dequant_linear_fallback: absmax_dq lives to the end.
  auto absmax_dq = dequantized_absmax(s);
  auto absmax = absmax_dq + s.offset;
  auto B_dq = dequantize_packed(B, absmax, s, A.scalar_type());
  return at::linear(A, B_dq, b);
}

// autograd/_functions.py MatMul4Bit: keeps only the packed weight (ctx.tensors = (None, B)).
struct MatMul4Bit : torch::autograd::Function<MatMul4Bit> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& A,
                               const torch::Tensor& B, const std::optional<at::Tensor>& bias,
                               int64_t state) {
    const auto* s = reinterpret_cast<const Quant4StateImpl*>(state);
    auto output = gemm_4bit(A, B.view({-1, 1}), *s, bias.value_or(torch::Tensor()));
    ctx->saved_data["state"] = state;
    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1)) ctx->saved_data["B"] = B.view({-1, 1});
    return output;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* s = reinterpret_cast<const Quant4StateImpl*>(ctx->saved_data["state"].toInt());
    torch::Tensor grad_A;
    if (ctx->needs_input_grad(0)) {
      // torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype))
      auto W = dequantize_4bit(ctx->saved_data["B"].toTensor(), *s);
      W = W.to(grads[0].scalar_type());
      grad_A = torch::matmul(grads[0], W);
    }
    return {grad_A, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// autograd/_functions.py matmul_4bit: without a gradient to make, the op itself.
torch::Tensor matmul_4bit(const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& bias,
                          const Quant4StateImpl& s) {
  const bool needs_grad = torch::GradMode::is_enabled() &&
                          (A.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (!needs_grad) return gemm_4bit(A, B.view({-1, 1}), s, bias);
  // The bias is an optional argument, not an input (a frozen one has no gradient either way).
  const auto b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  return MatMul4Bit::apply(A, B, b, reinterpret_cast<int64_t>(&s));
}

}  // namespace

const std::vector<float>& table_4bit(Quant4 type) {
  // functional.py get_4bit_type: NF4's table as bnb hard-codes it; FP4's bit patterns divided
  // by their largest magnitude (12).
  static const std::vector<float> kNf4 = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
      0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  static const std::vector<float> kFp4 = [] {
    std::vector<float> v = {0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0,
                            -0.0f, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0};
    for (auto& x : v) x /= 12.0f;
    return v;
  }();
  return type == Quant4::kNf4 ? kNf4 : kFp4;
}

const std::vector<float>& dynamic_map() {
  // functional.py create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), its
  // means in fp32 as torch.linspace makes them, sorted (from -0.993 to 1: 0.50.2's CPU kernel
  // leaves the map as it is, the QuantState's copy shows).
  static const std::vector<float> kMap = [] {
    // torch.linspace itself (its CPU kernel's values depend on the vector width it runs at,
    // as bnb's do); a CPU computation, so the first call must not come under the emulated
    // device's Meta factories: start_emulation makes it first.
    std::vector<float> data;
    const int max_exp = 7, non_sign = 7;
    for (int i = 0; i < max_exp; ++i) {
      const int64_t items = (int64_t{1} << (i + non_sign - max_exp)) + 1;
      auto bounds = torch::linspace(0.1, 1, items, torch::kFloat);
      TORCH_CHECK(bounds.is_cpu(), "dynamic_map under Meta factories");
      auto means = (bounds.index({Slice(None, -1)}) + bounds.index({Slice(1, None)})) / 2.0;
      const double scale = std::pow(10.0, -(max_exp - 1) + i);
      auto pos = (means * scale).contiguous(), neg = (means * -scale).contiguous();
      for (int64_t j = 0; j < pos.numel(); ++j) data.push_back(pos.data_ptr<float>()[j]);
      for (int64_t j = 0; j < neg.numel(); ++j) data.push_back(neg.data_ptr<float>()[j]);
    }
    data.push_back(0);
    data.push_back(1.0f);
    while (data.size() < 256) data.push_back(0);
    std::sort(data.begin(), data.end());
    return data;
  }();
  return kMap;
}

std::vector<Layer4> layers_4bit(torch::nn::Module& model, const std::string& family) {
  std::vector<Layer4> out;
  for (auto& l : int8_layers(model, family)) out.push_back({l.name, l.module, l.weight, l.conv1d});
  return out;
}

void quantize_4bit_layer(Layer4& layer, const torch::Tensor& weight, const Quant4Settings& settings) {
  torch::NoGradGuard no_grad;
  auto state = Quant4State();
  auto& s = *state;
  s.shape = weight.sizes().vec();
  s.dtype = weight.scalar_type();
  s.compute_dtype = settings.compute_dtype;
  s.type = settings.type;
  const auto w = weight.contiguous();  // Params4bit._quantize: self.data.contiguous()
  torch::Tensor packed, absmax;
  if (acts_cuda(w)) {
    // backends/cuda/ops.py quantize_4bit: absmax, then the packed codes; nothing else.
    const int64_t n = w.numel();
    absmax = torch::empty({ceil_div(n, s.blocksize)}, w.options().dtype(torch::kFloat));
    packed = torch::empty({(n + 1) / 2, 1}, w.options().dtype(torch::kByte));
    if (!w.is_meta()) {
      auto [p, a] = quantize_4bit_default(w.cpu(), s.type, s.blocksize);
      packed.copy_(p);
      absmax.copy_(a);
    }
  } else {
    std::tie(packed, absmax) = quantize_4bit_default(w, s.type, s.blocksize);
  }
  s.code = host_values(table_4bit(s.type), w);  // get_4bit_type(quant_type, device)
  double_quantize(s, absmax);
  absmax.reset();  // del _absmax
  layer.weight.set_requires_grad(false);
  layer.weight.set_data(packed);
  layer.module->register_module("bnb4", state);
}

int quantize_4bit(torch::nn::Module& model, const std::string& family, const Quant4Settings& s) {
  auto layers = layers_4bit(model, family);
  for (auto& l : layers) {
    // Bnb4bitQuantize.convert: a Conv1D's (in, out) weight is transposed first (a view).
    quantize_4bit_layer(l, l.conv1d ? l.weight.t() : l.weight, s);
  }
  return static_cast<int>(layers.size());
}

const Quant4StateImpl* state_4bit(const torch::nn::Module& layer) {
  const auto children = layer.named_children();
  const auto* s = children.find("bnb4");
  return s ? (*s)->as<Quant4StateImpl>() : nullptr;
}

torch::Tensor dequantize_4bit(const torch::Tensor& packed, const Quant4StateImpl& s) {
  // functional.py dequantize_4bit: absmax = dequantize_blockwise(absmax, state2); absmax +=
  // offset (in place); then the op into a new (out, in) tensor of the state's dtype.
  auto absmax = dequantized_absmax(s);
  absmax += s.offset;
  return dequantize_packed(packed, absmax, s, s.dtype);
}

torch::Tensor linear_4bit(const torch::nn::Module& layer, const torch::Tensor& weight,
                          const torch::Tensor& bias, const torch::Tensor& x) {
  const Quant4StateImpl& s = *state_4bit(layer);
  torch::Tensor result;
  {
    // nn/modules.py Linear4bit.forward: x = x.to(compute_dtype) (a local to the return), the
    // bias cast in place when its dtype differs, the product cast back to the input's dtype.
    const auto inp_dtype = x.scalar_type();
    const auto xc = x.to(s.compute_dtype);
    if (bias.defined() && bias.scalar_type() != xc.scalar_type()) {
      torch::NoGradGuard no_grad;
      torch::Tensor(bias).set_data(bias.to(xc.scalar_type()));
    }
    auto out = matmul_4bit(xc, weight, bias, s);
    result = out.to(inp_dtype);
  }
  const auto children = layer.named_children();
  const auto* lora = children.find("lora");
  if (!lora) return result;
  // peft/tuners/lora/bnb.py Linear4bit.forward: result = result.clone(), then the adapter as on
  // an 8-bit layer.
  result = result.clone();
  return (*lora)->as<LoraImpl>()->forward_bnb8(x, std::move(result));
}

void set_cuda_dispatch_props(const CudaDispatchProps& p) {
  g_sms = p.sms;
  g_major = p.major;
  g_minor = p.minor;
}

}  // namespace sweep::models

namespace sweep::models {

bool gemm_4bit_uses_custom_kernel(const CudaDispatchProps& p, at::ScalarType dtype, int64_t M,
                                  int64_t N, int64_t K, int64_t blocksize) {
  // backends/cuda/ops.py gemm_4bit (CUDA): past _gemm_4bit_custom_max_m, or K not a multiple
  // of the blocksize, the fallback; else _gemm_4bit_use_custom_cuda, transcribed below.
  if (M > 1536 || K % blocksize != 0) return false;
  if (M <= 4) return true;  // _GEMM_4BIT_CUSTOM_FLOOR_M
  const int64_t num_sms = p.sms, major = p.major, minor = p.minor;
  const int64_t n_blocks = (N + 63) / 64;
  if (dtype == at::kFloat || major < 7) return M < 8;
  if (major == 7 && (minor < 5 || dtype != at::kHalf)) return M < 8;
  if ((major == 8 && minor == 7) || major == 11) return false;
  if (major == 10) {
    if (n_blocks >= num_sms * 3) return M <= 32;
    if (n_blocks >= num_sms) return K >= N ? false : M <= 8;
    return false;
  }
  const bool is_sm75 = major == 7 && minor == 5, is_sm80 = major == 8 && minor == 0,
             is_sm86 = major == 8 && minor == 6, is_sm90 = major == 9,
             is_sm120 = major == 12 && minor == 0, is_sm121 = major == 12 && minor == 1;
  const bool is_hbm = is_sm80 || is_sm90, tall_k_2xn = K > N * 2;
  if (N * K < 4 * 1024 * 1024) {  // small-weight path
    if (K * 2 < N) {
      if (is_hbm) {
        const bool low_wave = n_blocks * 3 < num_sms;
        if (is_sm80) return M <= (low_wave ? 1536 : 512);
        return M <= (low_wave ? 512 : 320);
      }
      if (is_sm75) {
        if (n_blocks >= num_sms * 3) return M <= 320;
        if (K >= 1024) return M <= 64;
        if (K >= 704) return M <= 96;
        return M <= 320;
      }
      if (n_blocks >= num_sms) return M <= 320;
      return n_blocks * K > num_sms * 320 ? M <= 192 : M <= 320;
    }
    const bool quarter_wave = n_blocks * 4 <= num_sms;
    if (is_sm80 && quarter_wave) {
      if (K >= N) return M <= (n_blocks * 8 <= num_sms ? 32 : 128);
      return M <= 384;
    }
    if (is_sm75 && n_blocks < num_sms && M > 8) return M <= 64;
    if (quarter_wave) return M <= ((K < N || is_hbm) ? 32 : 23);
    if (n_blocks * 2 <= num_sms) return M <= 16;
    return false;
  }
  if (M > 512) return false;
  if (M < 8) {
    const int64_t hbm_m67_thresh = is_sm90 ? 36 : 48;
    if (is_hbm && M >= 6 && n_blocks >= hbm_m67_thresh) {
      const bool lt_75pct_wave = n_blocks * 4 < num_sms * 3, lt_60pct_wave = n_blocks * 5 < num_sms * 3;
      if (K > N && lt_75pct_wave) return false;
      if (K == N) {
        if (is_sm80 && lt_60pct_wave) return false;
        if (is_sm90 && lt_75pct_wave && !lt_60pct_wave) return false;
      }
    }
    return true;
  }
  if (is_sm75) {
    if (n_blocks >= num_sms * 3) return M <= (K < N ? 128 : 64);
    if (n_blocks >= num_sms / 2) return M <= 64;
    return M <= 32;
  }
  if (is_sm80) {
    if (n_blocks >= num_sms * 3) return M <= 128;
    if (n_blocks >= num_sms) return M <= (K < N ? 64 : 32);
    if (K >= N * 3 && n_blocks * 4 > num_sms) return false;
    if (K == N && n_blocks >= 48 && n_blocks * 5 < num_sms * 3) return false;
    if (n_blocks * 2 < num_sms) {
      if (K <= N) return M <= 128;
      if (n_blocks * 3 >= num_sms) return false;
    }
    if (n_blocks >= num_sms / 2 && K < N) return M <= 128;
    return M <= 16;
  }
  if (is_sm86) {
    if (n_blocks >= num_sms) return M <= 128;
    if (n_blocks >= num_sms / 2) return M <= 64;
    return M <= 16;
  }
  if (is_sm90) {
    if (n_blocks >= num_sms * 3) return M <= 64;
    if (n_blocks >= num_sms * 2) return M <= 48;
    if (n_blocks >= num_sms) return M <= 32;
    if (n_blocks >= num_sms / 2) {
      if (K >= N && n_blocks * 4 < num_sms * 3) return false;
      return M <= 16;
    }
    return false;
  }
  if (is_sm121 && n_blocks >= num_sms) return M <= 256;
  if (is_sm120) {
    if (n_blocks >= num_sms * 3) return M <= 256;
    if (n_blocks >= num_sms * 2) return M <= 128;
    if (n_blocks * 5 >= num_sms * 4) return M <= (K >= N ? 96 : 64);
    if (n_blocks >= num_sms) return M <= 64;
    if (n_blocks >= num_sms / 2) return M <= ((K * 2 >= N && n_blocks >= 128) ? 64 : 8);
    if (tall_k_2xn && n_blocks > 64) return M <= 16;
    return M <= 8;
  }
  // sm89 and the rest.
  if (n_blocks >= num_sms * 3) return M <= 256;
  if (n_blocks >= num_sms * 2) return M <= 128;
  if (n_blocks * 5 >= num_sms * 4) {
    if (tall_k_2xn || n_blocks >= 200) return M <= 128;
    if (K >= N) return M <= (num_sms >= 60 ? 128 : 32);
    return M <= 64;
  }
  if (n_blocks >= num_sms / 2) {
    if (tall_k_2xn) return M <= 64;
    if (n_blocks >= 64) return M <= 8;
    return M <= 32;
  }
  if (K > N && n_blocks <= 48) return M <= (K >= N * 3 ? 12 : 10);
  return M <= ((tall_k_2xn || n_blocks < 48) ? 16 : 8);
}

}  // namespace sweep::models
