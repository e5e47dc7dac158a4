// scaled_dot_product_attention as PyTorch 2.11 runs it on CUDA, emulated on Meta tensors: the
// backend each card picks (sdp_utils.cpp), and the exact storage allocations and frees of each
// backend forward and backward, seen by a counting allocator registered for Meta, against sizes
// computed by hand from the CUDA sources (flash_api.cpp, attention.cu, attention_backward.cu,
// kernel_backward.h, MHA.cpp; see sweeps/worker/emulate/sdpa_cuda.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "sweeps/worker/emulate/emulation.h"
#include "sweeps/worker/emulate/sdpa_cuda.h"
#include "sweeps/worker/emulate/sdpa_meta_kernels.h"

namespace sweep::emu {
namespace {

EmulatedCard card(const char* name, int major, int minor, int sms) {
  EmulatedCard c;
  c.name = name;
  c.cc_major = major;
  c.cc_minor = minor;
  c.sms = sms;
  return c;
}
const EmulatedCard kT4 = card("T4", 7, 5, 40);
const EmulatedCard kA100 = card("A100", 8, 0, 108);
const EmulatedCard kA10G = card("A10G", 8, 6, 80);
const EmulatedCard k4090 = card("RTX 4090", 8, 9, 128);
const EmulatedCard kH100 = card("H100", 9, 0, 132);

// Every storage the Meta device creates and releases while it is installed: +bytes, -bytes.
class CountingMetaAllocator final : public c10::Allocator {
 public:
  CountingMetaAllocator() : prev_(c10::GetAllocator(c10::DeviceType::Meta)) {
    c10::SetAllocator(c10::DeviceType::Meta, this, kPriority);
  }
  ~CountingMetaAllocator() override { c10::SetAllocator(c10::DeviceType::Meta, prev_, kPriority); }
  c10::DataPtr allocate(size_t n) override {
    log_->push_back(static_cast<int64_t>(n));
    return {nullptr, new Ctx{log_, static_cast<int64_t>(n)}, &release,
            c10::Device(c10::DeviceType::Meta)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {}
  // The events since the last take(), emptied.
  std::vector<int64_t> take() { return std::exchange(*log_, {}); }

 private:
  static constexpr uint8_t kPriority = 255;
  struct Ctx {
    std::shared_ptr<std::vector<int64_t>> log;
    int64_t bytes;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    ctx->log->push_back(-ctx->bytes);
    delete ctx;
  }
  c10::Allocator* prev_;
  std::shared_ptr<std::vector<int64_t>> log_ = std::make_shared<std::vector<int64_t>>();
};

std::string show(const std::vector<int64_t>& v) {
  std::ostringstream s;
  for (int64_t x : v) s << (x >= 0 ? "+" : "") << x << " ";
  return s.str();
}

at::TensorOptions meta(at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); }

// q, k, v as a GPT-2 block makes them: leaves (B, T, H, D) seen as (B, H, T, D) views.
struct Qkv {
  at::Tensor q_leaf, k_leaf, v_leaf, q, k, v;
};
Qkv gpt2_qkv(int64_t b, int64_t h, int64_t t, int64_t d, at::ScalarType dtype) {
  Qkv x;
  x.q_leaf = at::empty({b, t, h, d}, meta(dtype)).requires_grad_();
  x.k_leaf = at::empty({b, t, h, d}, meta(dtype)).requires_grad_();
  x.v_leaf = at::empty({b, t, h, d}, meta(dtype)).requires_grad_();
  x.q = x.q_leaf.transpose(1, 2);
  x.k = x.k_leaf.transpose(1, 2);
  x.v = x.v_leaf.transpose(1, 2);
  return x;
}

SdpBackend choose(const EmulatedCard& c, at::ScalarType dtype, bool causal, double dropout,
                  bool requires_grad, const std::optional<at::Tensor>& mask = std::nullopt,
                  int64_t d = 64, int64_t tq = 128, int64_t tk = 128) {
  auto q = at::empty({2, 12, tq, d}, meta(dtype)).requires_grad_(requires_grad);
  auto k = at::empty({2, 12, tk, d}, meta(dtype));
  auto v = at::empty({2, 12, tk, d}, meta(dtype));
  return choose_sdp_backend(c, q, k, v, mask, dropout, causal, false);
}

// sdp_utils.cpp select_sdp_backend with 2.11's defaults. Order {flash, efficient, math, cudnn}
// (Context.h 467-472) except on sm 9.x/10.x with cuDNN > 9.15 (check_prefer_cudnn_attention):
// {cudnn, flash, efficient, math}.
TEST(EmulatedSdpa, ChoiceGpt2TrainingPerCardAndDtype) {
  using enum SdpBackend;
  // fp16/bf16, causal, dropout 0.1: flash needs sm80+ (check_flash_attention_hardware_support);
  // sm75 has mem-efficient for fp16 only ({half, float} below sm80).
  EXPECT_EQ(choose(kT4, at::kHalf, true, 0.1, true), kEfficient);
  EXPECT_EQ(choose(kT4, at::kBFloat16, true, 0.1, true), kMath);
  for (const auto& c : {kA100, kA10G, k4090}) {
    EXPECT_EQ(choose(c, at::kHalf, true, 0.1, true), kFlash) << c.name;
    EXPECT_EQ(choose(c, at::kBFloat16, true, 0.1, true), kFlash) << c.name;
  }
  // H100: cuDNN first, and it takes dropout (multiples of anything: no 1/16 check in 2.11).
  EXPECT_EQ(choose(kH100, at::kBFloat16, true, 0.1, true), kCudnn);
  EXPECT_EQ(choose(kH100, at::kHalf, true, 0.0, false), kCudnn);
  // fp32: neither flash nor cuDNN (low-precision dtypes only) -> mem-efficient everywhere.
  for (const auto& c : {kT4, kA100, kA10G, k4090, kH100}) {
    EXPECT_EQ(choose(c, at::kFloat, true, 0.1, true), kEfficient) << c.name;
  }
  // Without cuDNN preferred, e.g. a CUDA 12.x wheel with cuDNN 9.10 on H100: flash.
  auto q = at::empty({2, 12, 128, 64}, meta(at::kHalf));
  EXPECT_EQ(choose_sdp_backend(kH100, q, q, q, std::nullopt, 0.1, true, false, {91000, 12800}),
            kFlash);
}

TEST(EmulatedSdpa, ChoiceWithMasksShapesAndHeadDims) {
  using enum SdpBackend;
  // T5: additive float mask (1, H, L, S). Flash refuses any mask (check_for_attn_mask); cuDNN
  // refuses a mask that requires grad (check_attn_mask_shape, sdp_utils_cpp.h 275).
  auto bias = at::empty({1, 12, 128, 128}, meta(at::kBFloat16));
  EXPECT_EQ(choose(kA100, at::kBFloat16, false, 0.1, true, bias), kEfficient);
  EXPECT_EQ(choose(kH100, at::kBFloat16, false, 0.1, true, bias.requires_grad_()), kEfficient);
  auto frozen = at::empty({1, 12, 128, 128}, meta(at::kBFloat16));
  EXPECT_EQ(choose(kH100, at::kBFloat16, false, 0.0, false, frozen), kCudnn);
  EXPECT_EQ(
      choose(kT4, at::kFloat, false, 0.1, true, at::empty({2, 12, 128, 128}, meta(at::kFloat))),
      kEfficient);
  // A mask whose last stride is not 1 fails check_last_dim_stride_equals_1_dense: math.
  auto strided = at::empty({1, 12, 128, 128}, meta(at::kFloat)).transpose(-1, -2);
  EXPECT_EQ(choose(kA100, at::kFloat, false, 0.0, false, strided), kMath);
  // Causal with seqlen_q != seqlen_k: check_flash_causal_non_square_seqlens.
  EXPECT_EQ(choose(kA100, at::kHalf, true, 0.0, false, std::nullopt, 64, 1, 128), kEfficient);
  // Head dim 200 in training on sm86/89 (192 < d <= 224): no flash; inference keeps it.
  EXPECT_EQ(choose(kA10G, at::kBFloat16, false, 0.0, true, std::nullopt, 200), kEfficient);
  EXPECT_EQ(choose(kA10G, at::kBFloat16, false, 0.0, false, std::nullopt, 200), kFlash);
  EXPECT_EQ(choose(kA100, at::kBFloat16, false, 0.0, true, std::nullopt, 200), kFlash);
  // Head dim 80 (whisper-sized heads elsewhere): flash on sm80.
  EXPECT_EQ(choose(kA100, at::kHalf, false, 0.0, true, std::nullopt, 80), kFlash);
  // Head dim 60 on T4 fp16: mem-efficient needs d % 8 == 0 for half there -> math.
  EXPECT_EQ(choose(kT4, at::kHalf, false, 0.0, true, std::nullopt, 60), kMath);
  // Whisper encoder (B, 20, 1500, 64), no mask, not causal, no dropout.
  auto w = at::empty({4, 20, 1500, 64}, meta(at::kHalf));
  EXPECT_EQ(choose_sdp_backend(kA10G, w, w, w, std::nullopt, 0.0, false, false), kFlash);
  EXPECT_EQ(choose_sdp_backend(kH100, w, w, w, std::nullopt, 0.0, false, false), kCudnn);
  // requires_grad under NoGradGuard is inference (input_requires_grad reads GradMode).
  at::NoGradGuard no_grad;
  EXPECT_EQ(choose(kA10G, at::kBFloat16, false, 0.0, true, std::nullopt, 200), kFlash);
}

// Grouped-query attention as transformers 5.23 hands it to SDPA (enable_gqa=True, no mask,
// causal): TinyLlama's 32 query and 4 kv heads. sdp_utils.cpp instantiates
// check_batch_size_and_num_heads_dense<true> for flash, <true, false> for cuDNN and <false> for
// the memory-efficient kernel, so fp32 (neither flash nor cuDNN) falls through to math. On an
// H200 (torch 2.11.0+cu130), our CUDA worker's TinyLlama QLoRA at fp32, b8 x 1024, peaked at
// 46,626.7 MiB allocated: the emulator said 23,128.7 with the efficient kernel and says
// 46,626.7 with math (docs/fidelity.md, "H200").
TEST(EmulatedSdpa, GroupedQueryAttentionSkipsTheMemoryEfficientKernel) {
  using enum SdpBackend;
  auto gqa = [](const EmulatedCard& c, at::ScalarType dtype, int64_t kv_heads) {
    auto q = at::empty({2, 32, 1024, 64}, meta(dtype)).requires_grad_();
    auto k = at::empty({2, kv_heads, 1024, 64}, meta(dtype)).requires_grad_();
    auto v = at::empty({2, kv_heads, 1024, 64}, meta(dtype)).requires_grad_();
    return choose_sdp_backend(c, q, k, v, std::nullopt, 0.0, true, true);
  };
  for (const auto& c : {kT4, kA100, kA10G, k4090, kH100}) {
    EXPECT_EQ(gqa(c, at::kFloat, 4), kMath) << c.name;
    EXPECT_EQ(gqa(c, at::kFloat, 32), kEfficient) << c.name;  // equal heads: no grouping
  }
  EXPECT_EQ(gqa(kA100, at::kBFloat16, 4), kFlash);
  EXPECT_EQ(gqa(kH100, at::kBFloat16, 4), kCudnn);
  EXPECT_EQ(gqa(kT4, at::kHalf, 4), kMath);  // no flash below sm80, no GQA in mem-efficient
}

// Flash on A100, GPT-2 layout (2, 12, 128, 64) bf16, causal, dropout 0.1.
// Forward, flash_api.cpp mha_fwd: out like q (2*128*12*64*2 = 393216), softmax_lse
// (2, 12, 128) fp32 = 12288, no split-KV with dropout, rng_state uint64[2] = 16, unused 8, a
// new rng_state 16 for dropout (the first freed); attention.cu: debug_attn_mask empty({0}),
// dropped by attention.cpp.
TEST(EmulatedSdpa, FlashForwardBackwardAllocations) {
  auto x = gpt2_qkv(2, 12, 128, 64, at::kBFloat16);
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kA100, x.q, x.k, x.v, std::nullopt, 0.1, true, std::nullopt);
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{393216, 12288, 16, 8, 16, -16, 0, -0}))
      << show(alloc.take());
  EXPECT_EQ(out.sizes(), (at::IntArrayRef{2, 12, 128, 64}));
  EXPECT_EQ(out.transpose(1, 2).is_contiguous(), true);  // (B, T, H, D) storage, as q
  // Backward, mha_bwd: dq, dk, dv like q/k/v (393216 each), softmax_d (2, 12, 128 rounded to
  // 128) fp32 = 12288, dq_accum (2, 128, 12, 64 rounded to 32) fp32 = 786432; dq_accum and
  // softmax_d die with mha_bwd. grad_out and out are already contiguous as (B, T, H, D): no
  // copies. Then autograd releases the saved logsumexp, rng_state, unused.
  at::Tensor grad = at::empty_like(out);
  alloc.take();
  torch::autograd::backward({out}, {grad});
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{393216, 393216, 393216, 12288, 786432, -786432,
                                                -12288, -12288, -16, -8}));
  EXPECT_TRUE(x.q_leaf.grad().defined());
}

// A (B, H, T, D)-contiguous query makes flash's backward copy grad_out and out to the layout
// the kernel reads ("CUDA code assumes that dout is contiguous", attention_backward.cu).
TEST(EmulatedSdpa, FlashBackwardCopiesNonContiguousGradAndOut) {
  auto q = at::empty({2, 12, 128, 64}, meta(at::kHalf)).requires_grad_();
  auto k = at::empty({2, 12, 128, 64}, meta(at::kHalf)).requires_grad_();
  auto v = at::empty({2, 12, 128, 64}, meta(at::kHalf)).requires_grad_();
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kA10G, q, k, v, std::nullopt, 0.0, false, std::nullopt);
  // No dropout: one rng_state; split-KV: 2*12*2 m-blocks = 48 < 0.8 * (80 SMs * 2), so the
  // heuristic runs, but 128 keys make one 256-key block: max_splits 1, no accumulators.
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{393216, 12288, 16, 8, 0, -0}));
  at::Tensor grad = at::empty_like(out);  // contiguous (B, H, T, D): transposed, it is not
  alloc.take();
  torch::autograd::backward({out}, {grad});
  auto ev = alloc.take();
  ASSERT_GE(ev.size(), 9u) << show(ev);
  EXPECT_EQ(std::vector<int64_t>(ev.begin(), ev.begin() + 9),
            (std::vector<int64_t>{393216, 393216, 393216, 393216, 393216, 12288, 786432, -786432,
                                  -12288}))
      << show(ev);
}

// Split-KV (flash_api.cpp set_params_splitkv): inference, one short query block and long keys
// on an A100 (108 SMs): 12 heads * 1 m-block < 0.8 * 216, 16 n-blocks of 256 keys; the best
// eligible split count within 85% of the best efficiency is 16. softmax_lse_accum
// (16, 1, 12, 64) fp32 = 49152 and out_accum (16, 1, 12, 64, 64) fp32 = 3145728 live for the
// kernel only.
TEST(EmulatedSdpa, FlashSplitKvAccumulatorsDependOnSms) {
  EXPECT_EQ(flash_num_splits(1, 12, 64, 4096, 64, 0.0, 108), 16);
  EXPECT_EQ(flash_num_splits(1, 12, 64, 4096, 64, 0.1, 108), 1);   // not with dropout
  EXPECT_EQ(flash_num_splits(4, 20, 1500, 1500, 64, 0.0, 80), 1);  // whisper: SMs already full
  auto q = at::empty({1, 12, 64, 64}, meta(at::kHalf));
  auto kv = at::empty({1, 12, 4096, 64}, meta(at::kHalf));
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kA100, q, kv, kv, std::nullopt, 0.0, false, std::nullopt);
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{98304, 3072, 49152, 3145728, 16, 8, -49152,
                                                -3145728, 0, -3072, -16, -8, -0}));
}

// Memory-efficient on A100, GPT-2 layout fp32 (2, 12, 128, 64), causal, dropout 0.1.
// Forward, attention.cu _efficient_attention_forward: seed/offset are host tensors (not seen),
// res (2, 128, 12, 64) fp32 = 786432, logsumexp (2, 12, 128 padded to 32) fp32 = 12288.
// Backward, attention_backward.cu: grad_q/k/v (786432 each); the f32 kernel
// (cutlassB f32 sm80, first with dropout and kMaxK >= 64: 64x64 k64) does not compute delta:
// (grad_out * out) 786432, .sum(-1) 12288, .contiguous() 12288, the first two freed; workspace
// kernel_backward.h: gq = ceil(128/64) * ceil(64/64) * (16 + 4*64*64) / 4 = 8200 floats per
// (b, h), 24 * 8200 * 4 = 787200 bytes; delta dies with the launch lambda, the workspace on
// return; autograd then releases logsumexp.
TEST(EmulatedSdpa, EfficientForwardBackwardAllocations) {
  auto x = gpt2_qkv(2, 12, 128, 64, at::kFloat);
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kA100, x.q, x.k, x.v, std::nullopt, 0.1, true, std::nullopt);
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{786432, 12288}));
  at::Tensor grad = at::empty_like(out);
  alloc.take();
  torch::autograd::backward({out}, {grad});
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{786432, 786432, 786432, 786432, 12288, 12288,
                                                -12288, -786432, 787200, -12288, -787200, -12288}));
}

// T5 on A100: bf16, learned position bias (1, H, L, S) requiring grad, dropout 0.1.
// preprocess_mask expands the bias to (B, H, L, S) (strides multiples of 8: no padding).
// Backward: grad_bias is allocated for the expanded bias, last dim padded to 16:
// 2*12*128*128*2 = 786432, then autograd sums it back to (1, H, L, S) = 393216. The half
// kernel computes delta itself: (2, 12, 128) fp32 = 12288.
TEST(EmulatedSdpa, EfficientWithLearnedBiasAllocatesExpandedBiasGrad) {
  auto x = gpt2_qkv(2, 12, 128, 64, at::kBFloat16);
  auto bias = at::empty({1, 12, 128, 128}, meta(at::kBFloat16)).requires_grad_();
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kA100, x.q, x.k, x.v, bias, 0.1, false, std::nullopt);
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{393216, 12288}));
  at::Tensor grad = at::empty_like(out);
  alloc.take();
  torch::autograd::backward({out}, {grad});
  auto ev = alloc.take();
  // grad_q/k/v, grad_bias, delta, workspace (bf16 64x64 k64 dropout kernel: 787200), frees.
  ASSERT_GE(ev.size(), 9u) << show(ev);
  EXPECT_EQ(std::vector<int64_t>(ev.begin(), ev.begin() + 9),
            (std::vector<int64_t>{393216, 393216, 393216, 786432, 12288, 787200, -12288, -787200,
                                  -12288}))
      << show(ev);
  // autograd's ExpandBackward then sums grad_bias to the bias' shape (393216) and frees it.
  EXPECT_NE(std::find(ev.begin() + 9, ev.end(), 393216), ev.end()) << show(ev);
  EXPECT_NE(std::find(ev.begin() + 9, ev.end(), -786432), ev.end()) << show(ev);
  EXPECT_EQ(bias.grad().sizes(), (at::IntArrayRef{1, 12, 128, 128}));
}

// A batch above CUDA's 65535 grid limit (attention.cu MAX_BATCH_SIZE): fp32 on an A100 takes
// the memory-efficient kernel in chunks of 65535. (b, 1 head, 16 tokens, d 8): a sample's
// output is 16*8*4 = 512 bytes, its logsumexp (1, 32 rows: kAlignLSE) 128. Forward: chunk 1's
// output and logsumexp, the full-batch ones, chunk 2's (freed with its iteration), then chunk
// 1's when the function returns. Backward: three full-batch grads, then each chunk's own
// backward (the same events as an unchunked one of that batch), its grads freed after the copy.
TEST(EmulatedSdpa, EfficientBatchAboveTheGridLimitRunsInChunks) {
  constexpr int64_t kChunk = 65535, kBatch = kChunk + 5;
  auto x = gpt2_qkv(kBatch, 1, 16, 8, at::kFloat);
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kA100, x.q, x.k, x.v, std::nullopt, 0.0, true, std::nullopt);
  EXPECT_EQ(alloc.take(),
            (std::vector<int64_t>{kChunk * 512, kChunk * 128, kBatch * 512, kBatch * 128, 5 * 512,
                                  5 * 128, -5 * 512, -5 * 128, -kChunk * 512, -kChunk * 128}));
  EXPECT_EQ(out.sizes(), (at::IntArrayRef{kBatch, 1, 16, 8}));

  // Each chunk's backward events, from an unchunked run at that batch: its kernel's, then
  // autograd releasing the saved logsumexp (here the full batch's, once, at the end).
  auto unchunked_backward = [&](int64_t b) {
    auto y = gpt2_qkv(b, 1, 16, 8, at::kFloat);
    at::Tensor o = cuda_sdpa(kA100, y.q, y.k, y.v, std::nullopt, 0.0, true, std::nullopt);
    at::Tensor g = at::empty_like(o);
    alloc.take();
    torch::autograd::backward({o}, {g});
    std::vector<int64_t> ev = alloc.take();
    EXPECT_EQ(ev.back(), -b * 128) << show(ev);
    ev.pop_back();
    return ev;
  };
  const std::vector<int64_t> first = unchunked_backward(kChunk), last = unchunked_backward(5);
  ASSERT_GE(first.size(), 3u) << show(first);
  EXPECT_EQ(std::vector<int64_t>(first.begin(), first.begin() + 3),
            (std::vector<int64_t>{kChunk * 512, kChunk * 512, kChunk * 512}));
  std::vector<int64_t> want = {kBatch * 512, kBatch * 512, kBatch * 512};
  want.insert(want.end(), first.begin(), first.end());
  want.insert(want.end(), {-kChunk * 512, -kChunk * 512, -kChunk * 512});
  want.insert(want.end(), last.begin(), last.end());
  want.insert(want.end(), {-5 * 512, -5 * 512, -5 * 512, -kBatch * 128});
  at::Tensor grad = at::empty_like(out);
  alloc.take();
  torch::autograd::backward({out}, {grad});
  EXPECT_EQ(alloc.take(), want);
  EXPECT_EQ(x.q_leaf.grad().sizes(), (at::IntArrayRef{kBatch, 16, 1, 8}));
}

// What the card does with such a batch, with attention.cu's and the launch check's messages:
// dropout cannot be chunked; flash (fp16 on an A100) puts the batch in its grid's y dimension.
TEST(EmulatedSdpa, BatchAboveTheGridLimitFailsWhereTheCardFails) {
  constexpr int64_t kBatch = 65536;
  auto error_of = [](const Qkv& x, double dropout) -> std::string {
    try {
      cuda_sdpa(kA100, x.q, x.k, x.v, std::nullopt, dropout, true, std::nullopt);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "";
  };
  EXPECT_NE(error_of(gpt2_qkv(kBatch, 1, 16, 8, at::kFloat), 0.1)
                .find("Efficient attention cannot produce valid seed and offset outputs when the "
                      "batch size exceeds (65535)."),
            std::string::npos);
  auto f16 = gpt2_qkv(kBatch, 1, 16, 8, at::kHalf);
  ASSERT_EQ(choose_sdp_backend(kA100, f16.q, f16.k, f16.v, std::nullopt, 0.0, true, false),
            SdpBackend::kFlash);
  EXPECT_NE(error_of(f16, 0.0).find("CUDA error: invalid configuration argument"),
            std::string::npos);
  EXPECT_EQ(error_of(gpt2_qkv(kBatch - 1, 1, 16, 8, at::kHalf), 0.0), "");
}

TEST(EmulatedSdpa, EfficientBackwardKernelAndWorkspaceRules) {
  // f16 on A100 without dropout, M, N multiples of 64: the aligned-to-block 64x64 k64 kernel.
  auto k = mem_eff_backward_kernel(80, true, 64, false, 128, 128);
  EXPECT_EQ(k.block_i, 64);
  EXPECT_TRUE(k.output_in_rf);
  EXPECT_FALSE(k.needs_accum_grad_kv);
  // Head dim 128: the 128x128 kernel on A100; on A10G it does not fit (99 KiB), the sm86/89
  // 128x64 kernel stops at k96, so 64x64 k128 runs, keeping dK/dV in global memory
  // (kNeedsAccumGradK/V).
  EXPECT_EQ(mem_eff_backward_kernel(80, true, 128, false, 128, 128).block_j, 128);
  auto sm86 = mem_eff_backward_kernel(86, true, 128, false, 128, 128);
  EXPECT_EQ(sm86.block_i, 64);
  EXPECT_TRUE(sm86.needs_accum_grad_kv);
  // GPT-2 (8, 12, 1024, 64) bf16: 96 (b, h) < 256 -> 16 key splits; gq = 16 * 1 * 4100.
  auto ws = mem_eff_backward_workspace(k, 8, 12, 1024, 1024, 64, 64);
  EXPECT_EQ(ws.num_splits_key, 16);
  EXPECT_EQ(ws.bytes, 96 * 16 * 4100 * 4);
}

// cuDNN on H100, GPT-2 layout bf16 (2, 12, 128, 64), causal, dropout 0.1.
// Forward, attention.cu _cudnn_attention_forward: seed and offset int64 device scalars (8 + 8,
// always), MHA.cpp run_cudnn_SDP_fprop: o in q's layout (393216), softmaxstats (2, 12, 128, 1)
// fp32 = 12288; cuDNN's fprop workspace is not modelled (0).
// Backward: dq, dk, dv (393216 each), grad_out's last stride is 1 (no re-layout), workspace
// modelled as cudnn_frontend's dQ_accum (2*12*128*64*4 = 786432) + softmax_sum (12288).
TEST(EmulatedSdpa, CudnnForwardBackwardAllocations) {
  auto x = gpt2_qkv(2, 12, 128, 64, at::kBFloat16);
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kH100, x.q, x.k, x.v, std::nullopt, 0.1, true, std::nullopt);
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{8, 8, 393216, 12288}));
  at::Tensor grad = at::empty_like(out);
  alloc.take();
  torch::autograd::backward({out}, {grad});
  EXPECT_EQ(alloc.take(),
            (std::vector<int64_t>{393216, 393216, 393216, 798720, -798720, -12288, -8, -8}));
}

// Math on T4 (bf16 has no fused kernel below sm80): q, k, v upcast to fp32 first
// (attention.cpp: allowFP16BF16ReductionMathSDP is off), and dropout keeps CUDA's bool mask
// (native_dropout: 2*12*128*128 = 393216 bytes), not a mask of the scores' dtype.
TEST(EmulatedSdpa, MathUpcastsAndKeepsBoolDropoutMask) {
  auto x = gpt2_qkv(2, 12, 128, 64, at::kBFloat16);
  CountingMetaAllocator alloc;
  at::Tensor out = cuda_sdpa(kT4, x.q, x.k, x.v, std::nullopt, 0.1, true, std::nullopt);
  auto ev = alloc.take();
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(std::vector<int64_t>(ev.begin(), ev.begin() + 3),
            (std::vector<int64_t>{786432, 786432, 786432}))
      << show(ev);
  // Dropout on the (2, 12, 128, 128) fp32 probabilities: native_dropout allocates the bool mask
  // (393216) and then the output (1572864), adjacent; at::dropout's unfused path (what Meta
  // tensors would take) would allocate an fp32 noise tensor instead.
  const std::vector<int64_t> mask_then_out{393216, 2 * 12 * 128 * 128 * 4};
  EXPECT_NE(std::search(ev.begin(), ev.end(), mask_then_out.begin(), mask_then_out.end()), ev.end())
      << show(ev);
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  at::Tensor grad = at::empty_like(out);
  torch::autograd::backward({out}, {grad});
  EXPECT_TRUE(x.v_leaf.grad().defined());
}

// The emulated device configured as the CPU: the CPU's flash attention allocates its output as
// empty_like(query), so its layout follows the query's. A query viewed from (B, L, H, D)
// storage (Llama's, GPT-2's) gives (B, L, H, D) storage and transformers'
// transpose(1, 2).contiguous() copies nothing; a contiguous (B, H, L, D) query (Phi-3's, out of
// apply_rotary_pos_emb's torch.cat) gives (B, H, L, D) storage, which it copies: one hidden-size
// tensor more per layer, alive as o_proj's saved input (found by a random fixture case, Phi-3
// 5 x 14 in fp32: the emulated CPU read 1.3-1.9% low).
TEST(EmulatedSdpa, CpuFlashOutputTakesTheQuerysLayout) {
  register_meta_kernels();
  for (const bool contiguous : {false, true}) {
    auto query = [&](at::TensorOptions o) {
      return contiguous ? at::empty({2, 4, 14, 16}, o) : at::empty({2, 14, 4, 16}, o).transpose(1, 2);
    };
    const auto cpu = at::TensorOptions().dtype(at::kFloat);
    const at::Tensor q = query(cpu).normal_(), k = query(cpu).normal_(), v = query(cpu).normal_();
    const auto real = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, true);
    const at::Tensor mq = query(meta(at::kFloat)), mk = query(meta(at::kFloat)), mv = query(meta(at::kFloat));
    const auto emulated = at::_scaled_dot_product_flash_attention_for_cpu(mq, mk, mv, 0.0, true);
    EXPECT_EQ(std::get<0>(emulated).strides(), std::get<0>(real).strides()) << "contiguous query: " << contiguous;
    EXPECT_EQ(std::get<1>(emulated).strides(), std::get<1>(real).strides()) << "contiguous query: " << contiguous;
    EXPECT_EQ(std::get<0>(real).transpose(1, 2).is_contiguous(), !contiguous);
  }
}

// LayerNorm on both kernels (layer_norm.cpp, cuda/layer_norm_kernel.cu) starts with
// input.expect_contiguous(): a non-contiguous input is copied first and the copy lives until
// the kernel returns; the backward copies the input again, then dY (LayerNormBackwardKernelImpl's
// dY.contiguous()). Whisper's encoder keeps its residual stream in the convolution's (B, C, T)
// storage, so each of its LayerNorms copies: without the copies the emulated H100 read
// whisper-small's reserved memory up to 6% low and three of its capped batches wrongly
// (docs/tables/rtx3060-results.csv).
TEST(EmulatedMetaKernels, LayerNormCopiesANonContiguousInputAsTheKernelsDo) {
  register_meta_kernels();
  auto x = at::empty({2, 8, 10}, meta(at::kFloat)).transpose(1, 2);  // (2, 10, 8), not contiguous
  auto w = at::empty({8}, meta(at::kFloat)), b = at::empty({8}, meta(at::kFloat));
  CountingMetaAllocator alloc;
  auto [y, mean, rstd] = at::native_layer_norm(x, {8}, w, b, 1e-5);
  // The copy (640), Y (640), mean and rstd (20 rows, fp32), the copy freed.
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{640, 640, 80, 80, -640}));
  const at::Tensor grad = at::empty({2, 8, 10}, meta(at::kFloat)).transpose(1, 2);  // not contiguous
  alloc.take();
  {
    auto grads = at::native_layer_norm_backward(grad, x, {8}, mean, rstd, w, b, {true, true, true});
    // The input's copy, dX, dgamma, dbeta, dY's copy; both copies freed when the kernel returns.
    EXPECT_EQ(alloc.take(), (std::vector<int64_t>{640, 640, 32, 32, 640, -640, -640}));
  }
  // Contiguous inputs are not copied.
  auto c = at::empty({2, 10, 8}, meta(at::kFloat));
  alloc.take();
  auto yc = at::native_layer_norm(c, {8}, w, b, 1e-5);
  EXPECT_EQ(alloc.take(), (std::vector<int64_t>{640, 80, 80}));
}

// convolution_backward's backend takes grad_output in the input's memory format: a
// non-contiguous gradient (Whisper's, back through permute(0, 2, 1)) is copied for dX and dW,
// and the copy is freed before Convolution.cpp sums the bias gradient.
TEST(EmulatedMetaKernels, ConvolutionBackwardCopiesANonContiguousGradient) {
  register_meta_kernels();
  auto input = at::empty({2, 4, 10}, meta(at::kFloat));
  auto weight = at::empty({6, 4, 3}, meta(at::kFloat));
  const at::Tensor grad = at::empty({2, 10, 6}, meta(at::kFloat)).transpose(1, 2);  // (2, 6, 10)
  const at::Tensor contiguous = at::empty({2, 6, 10}, meta(at::kFloat));
  CountingMetaAllocator alloc;
  for (const bool copied : {true, false}) {
    {
      auto grads = at::convolution_backward(copied ? grad : contiguous, input, weight, {{6}}, {1},
                                            {1}, {1}, false, {0}, 1, {true, true, true});
      // dX (320), dW (288), dbias (24); a copy of the gradient (480) first when it is not contiguous.
      const std::vector<int64_t> expected =
          copied ? std::vector<int64_t>{480, 320, 288, -480, 24} : std::vector<int64_t>{320, 288, 24};
      EXPECT_EQ(alloc.take(), expected) << "copied: " << copied;
    }
    alloc.take();
  }
}

}  // namespace
}  // namespace sweep::emu
