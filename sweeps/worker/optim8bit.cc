// AdamW8bit (see optim8bit.h). One algorithm on both devices: bnb's CUDA kernels'
// (csrc/cuda/optimizers.cu, kOptimizerStatic8bit2StateBlockwise and kOptimizer32bit2State):
// the Adam step with eps scaled by the bias correction, then decoupled weight decay on the
// stepped parameter; moments requantised with the kernel's binary search. bnb's CPU backend
// (backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu, 0.50.2) takes weight decay first,
// adds eps after dividing by the bias correction and quantises with a table search
// (csrc/cpu_ops.cpp quantize_cpu) that picks a neighbouring code for a few per cent of values;
// tests/optim8bit_test.cc measures how far apart the two end up.
//
// Memory: the CPU path works through a parameter a chunk of blocks at a time, so its
// temporaries stay a few MiB whatever the parameter's size; bnb's CPU backend dequantises whole
// tensors (several float copies of a parameter at once), its CUDA kernel none. Bursts on the
// CPU therefore show the kernel's state memory, not bnb-on-CPU's peak.
#include "sweeps/worker/optim8bit.h"

#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <cmath>
#include <set>

#ifdef SWEEP_CUDA_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "sweeps/worker/adamw8bit_cuda.h"
#endif
#include "models/emulation.h"
#include "sweeps/measure/trackers.h"
#include "sweeps/worker/emulate/cost_record.h"

namespace sweep {
namespace {

constexpr int64_t kChunkBlocks = 1024;  // CPU path: 256 Ki elements per round of ATen ops

int64_t blocks_of(int64_t numel) { return (numel + k8bitBlock - 1) / k8bitBlock; }

// Bias corrections as the kernels compute them, in float (powf for bnb's __powf/powf).
struct Corrections {
  float c1, c2, step_size;
};
Corrections corrections(const AdamW8bitHyper& h, int64_t step) {
  const float c1 = 1.0f - std::pow(h.beta1, static_cast<float>(step));
  const float c2 = std::sqrt(1.0f - std::pow(h.beta2, static_cast<float>(step)));
  return {c1, c2, -h.lr * c2 / c1};
}

// The parameter's new values (float) from its old ones and the update term: rounded to the
// parameter's dtype after the step and again after the weight decay, as the kernels store T.
torch::Tensor stepped(const torch::Tensor& p_old, const torch::Tensor& update,
                      const AdamW8bitHyper& h, c10::ScalarType dtype) {
  auto p = p_old.to(torch::kFloat).add(update);
  if (dtype != torch::kFloat) p = p.to(dtype).to(torch::kFloat);
  if (h.weight_decay > 0.0f) {
    p.mul_(1.0f - h.lr * h.weight_decay);
    if (dtype != torch::kFloat) p = p.to(dtype).to(torch::kFloat);
  }
  return p;
}

// kOptimizer32bit2State's arithmetic: every element updated, finite or not.
void update_32bit_aten(const torch::Tensor& p, const torch::Tensor& grad, AdamW8bitState& s,
                       const AdamW8bitHyper& h) {
  const auto k = corrections(h, s.step);
  const auto g = grad.to(torch::kFloat);
  s.state1.mul_(h.beta1).add_(g * (1.0f - h.beta1));
  s.state2.mul_(h.beta2).add_(g * g * (1.0f - h.beta2));
  const auto update = (s.state1 / (s.state2.sqrt() + h.eps * k.c2)) * k.step_size;
  p.copy_(stepped(p, update, h, p.scalar_type()));
}

// kOptimizerStatic8bit2StateBlockwise's arithmetic over blocks [b0, b1) of a flat parameter.
void update_8bit_chunk(const torch::Tensor& p, const torch::Tensor& g, AdamW8bitState& s,
                       const QMaps& maps, const AdamW8bitHyper& h, const Corrections& k,
                       int64_t b0, int64_t b1) {
  const int64_t n = p.numel(), lo = b0 * k8bitBlock, hi = std::min(b1 * k8bitBlock, n);
  const int64_t padded = (b1 - b0) * k8bitBlock, pad = padded - (hi - lo);
  auto s1_codes = s.state1.view(-1).slice(0, lo, hi), s2_codes = s.state2.view(-1).slice(0, lo, hi);
  auto p_part = p.view(-1).slice(0, lo, hi);
  // A partial last block is padded as the kernel loads it: gradient 0, codes 128 and 0.
  auto gv = torch::constant_pad_nd(g.view(-1).slice(0, lo, hi).to(torch::kFloat), {0, pad}, 0)
                .view({b1 - b0, k8bitBlock});
  auto c1 = torch::constant_pad_nd(s1_codes, {0, pad}, 128).view({b1 - b0, k8bitBlock});
  auto c2 = torch::constant_pad_nd(s2_codes, {0, pad}, 0).view({b1 - b0, k8bitBlock});
  auto absmax1 = s.absmax1.slice(0, b0, b1), absmax2 = s.absmax2.slice(0, b0, b1);

  const auto finite = gv.isfinite();
  auto m2 = maps.qmap2.index({c2.to(torch::kLong)}) * absmax2.unsqueeze(1);
  m2 = m2 * h.beta2 + gv * (1.0f - h.beta2) * gv;
  auto m1 = maps.qmap1.index({c1.to(torch::kLong)}) * absmax1.unsqueeze(1);
  m1 = m1 * h.beta1 + gv * (1.0f - h.beta1);
  m1.masked_fill_(finite.logical_not(), 0.0f);
  m2.masked_fill_(finite.logical_not(), 0.0f);
  const auto new1 = std::get<0>(m1.abs().max(1)), new2 = std::get<0>(m2.abs().max(1));
  absmax1.copy_(new1);
  absmax2.copy_(new2);

  const auto update = (m1 / (m2.sqrt() + k.c2 * h.eps) * k.step_size).view(-1).slice(0, 0, hi - lo);
  const auto fin = finite.view(-1).slice(0, 0, hi - lo);
  p_part.copy_(torch::where(fin, stepped(p_part, update, h, p.scalar_type()), p_part.to(torch::kFloat)));

  auto q1 = quantize_codes(m1 / new1.unsqueeze(1), maps.qmap1);
  // The first moment keeps its sign: one code further where quantisation flipped it.
  const auto flipped = torch::signbit(maps.qmap1.index({q1})) != torch::signbit(m1);
  q1 = torch::where(flipped, torch::where(m1 > 0, q1 + 1, q1 - 1), q1).remainder(256);
  const auto q2 = quantize_codes(m2 / new2.unsqueeze(1), maps.qmap2);
  s1_codes.copy_(q1.view(-1).slice(0, 0, hi - lo));
  s2_codes.copy_(q2.view(-1).slice(0, 0, hi - lo));
}

#ifdef SWEEP_CUDA_KERNELS
cuda8bit::DType kernel_dtype(const torch::Tensor& p) {
  switch (p.scalar_type()) {
    case torch::kFloat: return cuda8bit::DType::kFloat;
    case torch::kHalf: return cuda8bit::DType::kHalf;
    case torch::kBFloat16: return cuda8bit::DType::kBFloat16;
    default: TORCH_CHECK(false, "adamw8bit: parameters must be float32, float16 or bfloat16, not ",
                         p.scalar_type());
  }
}

void update_cuda(const torch::Tensor& p, const torch::Tensor& g, AdamW8bitState& s,
                 const QMaps& maps, const AdamW8bitHyper& h) {
  TORCH_CHECK(g.scalar_type() == p.scalar_type(), "adamw8bit: gradient dtype ", g.scalar_type(),
              " differs from the parameter's ", p.scalar_type());
  const c10::cuda::CUDAGuard guard(p.device());
  const auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const cuda8bit::Hyper kh{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, static_cast<int>(s.step)};
  if (s.state1.scalar_type() == torch::kFloat) {
    C10_CUDA_CHECK(cuda8bit::adamw32bit(kernel_dtype(p), p.data_ptr(), g.data_ptr(),
                                        s.state1.data_ptr<float>(), s.state2.data_ptr<float>(), kh,
                                        p.numel(), stream));
  } else {
    C10_CUDA_CHECK(cuda8bit::adamw8bit_blockwise(
        kernel_dtype(p), p.data_ptr(), g.data_ptr(), s.state1.data_ptr<uint8_t>(),
        s.state2.data_ptr<uint8_t>(), maps.qmap1.data_ptr<float>(), maps.qmap2.data_ptr<float>(),
        s.absmax1.data_ptr<float>(), s.absmax2.data_ptr<float>(), kh, p.numel(), stream));
  }
}
#endif

// get_paged + F.fill(buff, 0) on a GPU: zeroed unified memory of the parameter's shape, freed
// with the tensor (bnb never frees it; within a burst the difference never shows).
torch::Tensor paged_zeros(const torch::Tensor& p, c10::ScalarType dtype) {
#ifdef SWEEP_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(p.device());
  void* ptr = nullptr;
  C10_CUDA_CHECK(cuda8bit::paged_zeros(&ptr, p.numel() * c10::elementSize(dtype)));
  return torch::from_blob(ptr, p.sizes(), [](void* q) { (void)cuda8bit::paged_free(q); },
                          p.options().dtype(dtype));
#else
  TORCH_CHECK(false, "a paged optimizer on CUDA needs sweep built with a CUDA compiler (nvcc); "
                     "this build found none. Its parameter: ", p.sizes(), " ", dtype);
#endif
}

// Optimizer2State "adam" with optim_bits 8 or 32, paged or not (BnbAdamW).
class BnbAdamWOptimizer final : public Optimizer {
 public:
  BnbAdamWOptimizer(std::vector<torch::Tensor> params, const AdamW8bitHyper& h, BnbAdamW kind,
                    ParamSync sync)
      : Optimizer(std::move(params)), h_(h), kind_(kind), sync_(std::move(sync)),
        state_(params_.size()) {}

  int64_t state_bytes() const override {
    int64_t n = maps_.qmap1.defined() ? maps_.qmap1.nbytes() + maps_.qmap2.nbytes() : 0;
    for (const auto& s : state_)
      for (const auto* t : {&s.state1, &s.state2, &s.absmax1, &s.absmax2})
        if (t->defined() && !is_paged(*t)) n += t->nbytes();
    return n;
  }
  bool paged() const override { return kind_.paged; }
  int64_t paged_bytes() const override {
    int64_t n = 0;
    for (const auto& s : state_)
      for (const auto* t : {&s.state1, &s.state2})
        if (t->defined() && is_paged(*t)) n += t->nbytes();
    return n;
  }

  // Optimizer8bit.step: one parameter at a time, its state created just before its first
  // update (not all states first, as torch.optim's _init_group), its paged state prefetched
  // to the device (prefetch_state), and the device synchronised after each update
  // (optim/optimizer.py Optimizer8bit.step: `self.update_step(...)` then `sync_gpu(p)` in the
  // loop over parameters with a gradient), which the step time includes.
  void step(const torch::Tensor&, const torch::Tensor&) override {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (!p.grad().defined()) continue;
      TORCH_CHECK(p.is_contiguous(), "adamw8bit: parameter ", i, " is not contiguous");
      auto& s = state_[i];
      if (!s.state1.defined()) init_state(p, s);
      prefetch(p, s);
      ++s.step;
      adamw8bit_update(p, p.grad().contiguous(), s, maps_, h_);
      sync_(p);
    }
  }

 private:
  // Optimizer2State.init_state: float state below min_8bit_size or with optim_bits 32, else
  // 8-bit codes with a float absmax per block (never paged: torch.zeros on the device).
  void init_state(const torch::Tensor& p, AdamW8bitState& s) {
    if (kind_.bits == 32 || p.numel() < kMin8bitSize) {
      s.state1 = state_buffer(p, torch::kFloat);
      s.state2 = state_buffer(p, torch::kFloat);
      return;
    }
    if (!maps_.qmap1.defined())
      maps_ = {dynamic_map(true).to(p.device()), dynamic_map(false).to(p.device())};
    s.state1 = state_buffer(p, torch::kByte);
    s.state2 = state_buffer(p, torch::kByte);
    s.absmax1 = torch::zeros({blocks_of(p.numel())}, p.options().dtype(torch::kFloat));
    s.absmax2 = torch::zeros({blocks_of(p.numel())}, p.options().dtype(torch::kFloat));
  }

  // Optimizer8bit.get_state_buffer.
  torch::Tensor state_buffer(const torch::Tensor& p, c10::ScalarType dtype) {
    if (!kind_.paged || !models::acts_cuda(p) || p.numel() < kPagedMinNumel)
      return torch::zeros_like(p, dtype);
    torch::Tensor t;
    if (p.is_meta()) {
      const UnifiedScope unified;  // the emulated card: outside its allocator
      t = torch::zeros_like(p, dtype);
    } else {
      t = paged_zeros(p, dtype);
    }
    paged_.insert(t.storage().unsafeGetStorageImpl());
    return t;
  }
  bool is_paged(const torch::Tensor& t) const {
    return paged_.count(t.storage().unsafeGetStorageImpl()) > 0;
  }

  // Optimizer8bit.prefetch_state: the paged states to the parameter's device before its update.
  void prefetch(const torch::Tensor& p, const AdamW8bitState& s) {
    if (!kind_.paged || !is_paged(s.state1) || p.is_meta()) return;
#ifdef SWEEP_CUDA_KERNELS
    for (const auto* t : {&s.state1, &s.state2})
      C10_CUDA_CHECK(cuda8bit::paged_prefetch(t->data_ptr(), t->nbytes(), p.get_device()));
#endif
  }

  AdamW8bitHyper h_;
  BnbAdamW kind_;
  ParamSync sync_;
  QMaps maps_;
  std::vector<AdamW8bitState> state_;
  std::set<const c10::StorageImpl*> paged_;
};

}  // namespace

torch::Tensor dynamic_map(bool is_signed) {
  // create_dynamic_map with max_exponent_bits 7, total_bits 8: additional_items is 0, so the
  // map is 0, 1 and, for each exponent i, the midpoints of linspace(0.1, 1, fraction_items)
  // times 10^(i-6), and times -10^(i-6) for the signed map: float32 tensor products, as in
  // Python (means is a float32 tensor).
  std::vector<double> data;
  for (int i = 0; i < 7; ++i) {
    const int64_t items = is_signed ? (int64_t{1} << i) + 1 : (int64_t{1} << (i + 1)) + 1;
    const auto b = torch::linspace(0.1, 1, items, torch::kFloat);
    const auto means = (b.slice(0, 0, -1) + b.slice(0, 1)) / 2.0;
    const double scale = std::pow(10.0, -(7 - 1) + i);
    for (const auto& t : is_signed ? std::vector{means * scale, means * -scale}
                                   : std::vector{means * scale}) {
      const auto v = t.contiguous();
      data.insert(data.end(), v.data_ptr<float>(), v.data_ptr<float>() + v.numel());
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  TORCH_CHECK(data.size() == 256, "dynamic map has ", data.size(), " entries");
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kDouble).to(torch::kFloat);
}

torch::Tensor quantize_codes(const torch::Tensor& x, const torch::Tensor& code) {
  // quantize_2D's search ends on an even code p with code[p-1] < x <= code[p+1] and picks p or
  // the neighbour on x's side by the midpoint of the two, p where x is on it. So: the bracket
  // code[i] < x <= code[i+1] (searchsorted), the nearer by their midpoint, the even one of the
  // two on a tie. Below code[0] (and for NaN, from 0/0 in an all-zero block) the search ends
  // at 0. Pinned against a one-value-at-a-time transcription by optim8bit_test.
  const auto i = torch::searchsorted(code, x) - 1;
  const auto lo = i.clamp(0, 254);
  const auto hi = lo + 1;
  const auto mid = (code.index({lo}) + code.index({hi})) * 0.5f;
  auto q = torch::where(x > mid, hi, torch::where(x < mid, lo, lo + lo.remainder(2)));
  return q.masked_fill_(i.lt(0).logical_or_(x.isnan()), 0);
}

int64_t adamw8bit_param_state_bytes(int64_t numel) {
  if (numel < kMin8bitSize) return 2 * numel * 4;  // float32 state1, state2
  return 2 * numel + 2 * blocks_of(numel) * 4;     // uint8 state1, state2; float absmax1, 2
}

void adamw8bit_update(const torch::Tensor& p, const torch::Tensor& g, AdamW8bitState& s,
                      const QMaps& maps, const AdamW8bitHyper& h, bool force_cpu_arithmetic) {
  if (models::acts_cuda(p) && !force_cpu_arithmetic) {
    // An emulated card: bitsandbytes' kernel updates in place and allocates nothing. Its
    // time: one pass reading the parameter, the gradient and both 8-bit states, writing the
    // parameter and the states (kOptimizer8bitBlockwise, csrc/kernels.cu); absmax is 1/256 of that.
    // The 32-bit kernel (kOptimizer32bit2State) reads and writes two float states instead.
    if (p.is_meta()) {
      const int64_t state = s.state1.scalar_type() == torch::kFloat ? 16 : 4;
      emu::note_kernel({.kind = cost::Kind::kMemory,
                        .bytes = static_cast<double>(2 * p.nbytes() + g.nbytes() + state * p.numel())});
      return;
    }
#ifdef SWEEP_CUDA_KERNELS
    update_cuda(p, g, s, maps, h);
    return;
#else
    TORCH_CHECK(false, "adamw8bit on CUDA needs sweep built with a CUDA compiler (nvcc); this "
                       "build found none, so its kernel was not compiled");
#endif
  }
  if (s.state1.scalar_type() == torch::kFloat) return update_32bit_aten(p, g, s, h);
  const auto k = corrections(h, s.step);
  const int64_t blocks = blocks_of(p.numel());
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks)
    update_8bit_chunk(p, g, s, maps, h, k, b0, std::min(blocks, b0 + kChunkBlocks));
}

void sync_device_of(const torch::Tensor& t) {
  // utils.py sync_gpu: torch.cuda.synchronize() (the current device) for a CUDA tensor, nothing
  // elsewhere; a Meta tensor standing for a card's has no device work to wait for.
  if (t.is_cuda()) c10::cuda::device_synchronize();
  else if (t.is_meta()) emu::note_sync();  // the emulated card's step waits there too
}

std::unique_ptr<Optimizer> make_bnb_adamw(double lr, double weight_decay,
                                          std::vector<torch::Tensor> params, BnbAdamW kind,
                                          ParamSync sync) {
  TORCH_CHECK(kind.bits == 8 || kind.bits == 32, "bitsandbytes' AdamW has 8 or 32 bits, not ",
              kind.bits);
  AdamW8bitHyper h;
  h.lr = static_cast<float>(lr);
  h.weight_decay = static_cast<float>(weight_decay);
  return std::make_unique<BnbAdamWOptimizer>(std::move(params), h, kind, std::move(sync));
}

}  // namespace sweep
