// AdamW8bit (sweeps/worker/optim8bit.cc) against bitsandbytes' AdamW8bit run on the CPU
// (tests/fixtures/adamw8bit-reference.pt, written by make_adamw8bit_reference.py): the
// quantisation maps, the state layout and bytes, the parameters after ten steps; the state
// bytes of the tiny models through a burst; and, on a GPU host, our kernel against the ATen path.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/zoo.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/optim8bit.h"
#include "pickle_fixture.h"
#include "test_util.h"

namespace sweep {
namespace {

const c10::Dict<c10::IValue, c10::IValue>& fixture() {
  static const auto blob = read_fixture("adamw8bit-reference.pt");
  return blob;
}

// bnb's rules (Optimizer2State.init_state), written out here independently of the optimizer:
// under min_8bit_size two float32 tensors like the parameter; otherwise two uint8 tensors like
// it and two float32 absmax vectors of ceil(n / 256); plus, once, the two 256-float maps.
int64_t bnb_state_bytes(const std::vector<int64_t>& numels) {
  int64_t bytes = 0;
  bool any_8bit = false;
  for (int64_t n : numels) {
    if (n < 4096) {
      bytes += 8 * n;
    } else {
      any_8bit = true;
      bytes += 2 * n + 2 * 4 * ((n + 255) / 256);
    }
  }
  return bytes + (any_8bit ? 2 * 256 * 4 : 0);
}

// The fixture's steps with our optimizer from its initial parameters.
struct Run {
  std::vector<torch::Tensor> params;
  std::unique_ptr<Optimizer> opt;
};

Run run_fixture_steps() {
  const auto& blob = fixture();
  Run r;
  for (const auto& t : tensors(blob.at("init"))) r.params.push_back(t.clone().requires_grad_(true));
  r.opt = make_optimizer({OptimizerKind::kAdamW8bit, 1e-2, 0.1}, r.params);  // make_adamw8bit_reference.py HYPER
  for (const auto& step_grads : blob.at("grads").toList()) {
    const auto g = tensors(step_grads.get());
    auto loss = torch::zeros({});
    for (std::size_t i = 0; i < r.params.size(); ++i) loss = loss + (r.params[i] * g[i]).sum();
    loss.backward();
    r.opt->step();
    r.opt->zero_grad();
  }
  return r;
}

TEST(AdamW8bit, DynamicMapsEqualBitsandbytes) {
  const auto& blob = fixture();
  EXPECT_TRUE(torch::equal(dynamic_map(true), blob.at("qmap_signed").toTensor()));
  EXPECT_TRUE(torch::equal(dynamic_map(false), blob.at("qmap_unsigned").toTensor()));
}

// quantize_codes against the fixture script's one-value-at-a-time transcription of the
// kernel's quantize_2D, on every code, every midpoint (the ties) and the floats either side of
// it, random values, the ends and NaN.
TEST(AdamW8bit, QuantisationEqualsTheKernelSearch) {
  const auto cases = fixture().at("quantised").toGenericDict();
  for (bool is_signed : {true, false}) {
    const auto c = cases.at(is_signed ? "signed" : "unsigned").toGenericDict();
    const auto x = c.at("x").toTensor();
    const auto got = quantize_codes(x, dynamic_map(is_signed));
    const auto differ = got.ne(c.at("codes").toTensor()).sum().item<int64_t>();
    EXPECT_EQ(differ, 0) << (is_signed ? "signed" : "unsigned") << " map, of " << x.numel();
  }
}

TEST(AdamW8bit, StateLayoutAndBytesEqualBitsandbytes) {
  const auto [params, opt] = run_fixture_steps();
  const auto& states = fixture().at("states").toList();
  ASSERT_EQ(states.size(), params.size());
  std::vector<int64_t> numels;
  int64_t bnb_bytes = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    numels.push_back(params[i].numel());
    const auto s = states.get(i).toGenericDict();
    int64_t bytes = 0;
    for (const auto& kv : s) bytes += kv.value().toTensor().nbytes();
    const bool eight_bit = s.contains("absmax1");
    EXPECT_EQ(eight_bit, params[i].numel() >= kMin8bitSize) << "parameter " << i;
    EXPECT_EQ(s.at("state1").toTensor().scalar_type(), eight_bit ? torch::kByte : torch::kFloat);
    EXPECT_EQ(bytes, adamw8bit_param_state_bytes(params[i].numel())) << "parameter " << i;
    bnb_bytes += bytes;
  }
  EXPECT_EQ(opt->state_bytes(), bnb_bytes + 2 * 256 * 4);  // the maps, shared
  EXPECT_EQ(opt->state_bytes(), bnb_state_bytes(numels));
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[i].detach() - b[i]).abs().max().item<double>());
  return d;
}

// Three references, each with its tolerance (lr 1e-2, weight decay 0.1, ten steps):
// - the float32 reference of bnb's kernel algorithm in the fixture script: the same
//   arithmetic, so equal up to float rounding of vectorised ops (1e-6);
// - bnb's AdamW8bit on the CPU with its quantiser swapped for the nearest code (what the
//   kernel's search picks): left is bnb-CPU's order, weight decay before the step and eps added
//   after the bias correction, about lr * weight_decay * |update| = 1e-5 a step (2e-4);
// - bnb's AdamW8bit on the CPU as it is: its table-search quantiser also picks a coarser code
//   for many second moments far below their block's absmax, which moves parameters by up to
//   7e-3 here, as much as bnb's own distance from fp32 AdamW (1e-2).
TEST(AdamW8bit, ParametersAfterStepsMatchBitsandbytesOnTheCpu) {
  const auto params = run_fixture_steps().params;
  const auto& blob = fixture();
  const double vs_kernel = max_diff(params, tensors(blob.at("kernel_params")));
  const double vs_nearest = max_diff(params, tensors(blob.at("params_nearest_quantiser")));
  const double vs_bnb = max_diff(params, tensors(blob.at("params")));
  const double bnb_vs_fp32 =
      max_diff(tensors(blob.at("params")), tensors(blob.at("adamw_fp32_params")));
  std::printf("bitsandbytes %s (CPU), torch %s, max |parameter difference| after 10 steps:\n"
              "  ours vs the kernel algorithm's float reference  %.3g\n"
              "  ours vs bnb with the nearest-code quantiser       %.3g\n"
              "  ours vs bnb                                       %.3g\n"
              "  bnb vs fp32 AdamW                                 %.3g\n",
              blob.at("bitsandbytes").toStringRef().c_str(), blob.at("torch").toStringRef().c_str(),
              vs_kernel, vs_nearest, vs_bnb, bnb_vs_fp32);
  EXPECT_LT(vs_kernel, 1e-6);
  EXPECT_LT(vs_nearest, 2e-4);
  EXPECT_LT(vs_bnb, 1e-2);
}

// The Ledger's optimizer bytes after the first step of a burst equal bnb's rules applied to
// each tiny model's trainable parameters.
class StateBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(StateBytes, OfTheTinyModelsFollowBitsandbytesRules) {
  auto model = models::find_model(GetParam())->make();
  std::vector<int64_t> numels;
  for (const auto& t : model->parameters())
    if (t.requires_grad()) numels.push_back(t.numel());
  Point p = tiny_point(GetParam(), Device::kCpu, Precision::kFp32, OptimizerKind::kAdamW8bit);
  p.steps = 1;
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  const auto m = run_burst(p, *mem, *timer);
  ASSERT_EQ(m.status, Status::kOk) << m.message;
  std::printf("%s: %zu parameters, optimizer state %lld bytes\n", GetParam().c_str(), numels.size(),
              static_cast<long long>(m.optimizer_bytes));
  EXPECT_EQ(m.optimizer_bytes, bnb_state_bytes(numels));
}

INSTANTIATE_TEST_SUITE_P(Zoo, StateBytes, ::testing::Values("gpt2-test", "t5-test", "whisper-test"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Optimizer8bit.step synchronises the device after each parameter it updates (sync_gpu(p) in
// its loop, skipping parameters without a gradient): the sync runs once per updated parameter,
// after that parameter's update and before the next one's.
TEST(AdamW8bit, SynchronisesAfterEachParameterAsBitsandbytes) {
  torch::manual_seed(2);
  std::vector<torch::Tensor> params = {torch::randn({5000}).requires_grad_(true),
                                       torch::randn({10}).requires_grad_(true),
                                       torch::randn({300}).requires_grad_(true)};
  std::vector<torch::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());
  std::vector<std::size_t> synced;
  auto changed = [&](std::size_t i) { return !torch::equal(params[i].detach(), before[i]); };
  auto opt = make_bnb_adamw(1e-2, 0.0, params, {8, false}, [&](const torch::Tensor& t) {
    std::size_t i = 0;
    while (i < params.size() && !params[i].is_same(t)) ++i;
    ASSERT_LT(i, params.size()) << "synced on a tensor that is no parameter";
    synced.push_back(i);
    for (std::size_t j = 0; j < params.size(); ++j)
      EXPECT_EQ(changed(j), j <= i && j != 1) << "parameter " << j << " at the sync after " << i;
  });
  (params[0].sum() + params[2].sum()).backward();  // parameter 1 gets no gradient
  opt->step();
  EXPECT_EQ(synced, (std::vector<std::size_t>{0, 2}));
}

// Paged optimizers on the CPU: bitsandbytes' get_state_buffer falls back to ordinary zeros
// there ("Paged optimizers are not supported on CPU"), so the 8-bit one's state is AdamW8bit's
// to the byte and nothing is paged; the 32-bit one keeps two float moments for every
// parameter, stepped as kOptimizer32bit2State: the Adam step with eps scaled by the bias
// correction, then decoupled weight decay (written out here in double).
TEST(PagedAdamW, OnTheCpuTheStateIsOrdinaryMemoryAndThe32BitStepIsTheKernels) {
  const std::vector<int64_t> numels = {200000, 5000, 10};
  for (const int bits : {8, 32}) {
    torch::manual_seed(3);
    std::vector<torch::Tensor> params;
    for (int64_t n : numels) params.push_back(torch::randn({n}).requires_grad_(true));
    std::vector<torch::Tensor> before;
    for (const auto& p : params) before.push_back(p.detach().to(torch::kDouble));
    const double lr = 1e-2, wd = 0.1;
    auto opt = make_bnb_adamw(lr, wd, params, {bits, true});
    auto loss = torch::zeros({});
    for (const auto& p : params) loss = loss + (p * p).sum();
    loss.backward();
    opt->step();
    EXPECT_TRUE(opt->paged());
    EXPECT_EQ(opt->paged_bytes(), 0) << bits;
    int64_t all = 0;
    for (int64_t n : numels) all += n;
    EXPECT_EQ(opt->state_bytes(), bits == 8 ? bnb_state_bytes(numels) : 8 * all) << bits;
    if (bits != 32) continue;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto g = 2 * before[i];
      const double b1 = 0.9, b2 = 0.999, eps = 1e-8, c1 = 1 - b1, c2 = std::sqrt(1 - b2);
      const auto m = (1 - b1) * g, v = (1 - b2) * g * g;
      const auto expected = (before[i] + (-lr * c2 / c1) * m / (v.sqrt() + eps * c2)) * (1 - lr * wd);
      EXPECT_TRUE(torch::allclose(params[i].detach().to(torch::kDouble), expected, 1e-6, 1e-6))
          << "parameter " << i;
    }
  }
}

// On an emulated card (an H100) the states of parameters of 1e5 elements or more go to
// unified memory: out of the allocator's peaks and of optimizer_bytes, into paged_bytes and the
// device's use. GPT-2 (124M) trains all of its weights: its 124,318,464 elements in matrices
// (wte, wpe and the four of each block) are paged, the biases and norms are not.
nlohmann::json emulated_gpt2(const std::string& optimizer) {
  const nlohmann::json p = {
      {"model", "gpt2"}, {"family", "gpt2"}, {"batch", 1}, {"seq", 128}, {"precision", "fp32"},
      {"checkpointing", "none"}, {"optimizer", optimizer}, {"device", "emulated"}, {"steps", 1},
      {"warmup_steps", 1}, {"repetitions", 1},
      {"card", {{"name", "H100"}, {"memory_bytes", 85017493504}, {"context_bytes", 536870912},
                {"cc_major", 9}, {"cc_minor", 0}, {"sms", 132}}}};
  return testing::run_worker_point(p);
}

TEST(PagedAdamW, OnAnEmulatedCardLargeStatesLeaveTheAllocator) {
  constexpr int64_t kPagedElements = 124318464;
  const auto plain = emulated_gpt2("adamw8bit");
  const auto paged8 = emulated_gpt2("paged-adamw8bit");
  const auto paged32 = emulated_gpt2("paged-adamw32bit");
  ASSERT_TRUE(plain.contains("optimizer_bytes") && paged8.contains("paged_bytes") &&
              paged32.contains("paged_bytes"));
  EXPECT_FALSE(plain.contains("paged_bytes"));
  auto i = [](const nlohmann::json& j, const char* k) { return j.at(k).get<int64_t>(); };
  EXPECT_EQ(i(paged8, "paged_bytes"), 2 * kPagedElements);
  EXPECT_EQ(i(paged8, "optimizer_bytes") + i(paged8, "paged_bytes"), i(plain, "optimizer_bytes"));
  EXPECT_EQ(i(paged32, "paged_bytes"), 8 * kPagedElements);
  // fp32 training of every weight: the gradients are the parameters' bytes, the 32-bit moments twice that.
  EXPECT_EQ(i(paged32, "optimizer_bytes") + i(paged32, "paged_bytes"), 2 * i(paged32, "grads_bytes"));
  for (const auto* j : {&paged8, &paged32}) {
    EXPECT_EQ(i(*j, "at_peak_optimizer_bytes"), i(*j, "optimizer_bytes")) << j->dump();
    EXPECT_EQ(i(*j, "device_used_bytes"),
              i(*j, "peak_reserved_bytes") + 536870912 + i(*j, "paged_bytes")) << j->dump();
  }
  // The peak drops by the paged state, give or take what the allocator's blocks carry beyond
  // their requests (a block keeps a remainder of up to 1 MiB unsplit: 8 MiB apart here).
  EXPECT_NEAR(i(plain, "peak_allocated_bytes") - i(paged8, "peak_allocated_bytes"), i(paged8, "paged_bytes"),
              16 << 20);
}

// On a GPU the sync is the device's: when step() returns, the last parameter's kernel (and
// every one before it) has finished, though a parameter of 64 Mi elements takes milliseconds.
TEST(AdamW8bit, StepReturnsWithTheDeviceIdle_CUDA) {
  const auto dev = torch::Device(torch::kCUDA, 0);
  std::vector<torch::Tensor> params = {
      torch::randn({64 << 20}, torch::TensorOptions().device(dev)).requires_grad_(true)};
  auto opt = make_optimizer({OptimizerKind::kAdamW8bit, 1e-3, 0.01}, params);
  params[0].sum().backward();
  opt->step();
  EXPECT_EQ(cudaStreamQuery(c10::cuda::getCurrentCUDAStream().stream()), cudaSuccess);
}

// On a GPU a paged state is unified memory: the caching allocator grows by the rest of the
// state only, and the parameters step exactly as with the same state in the allocator.
TEST(PagedAdamW, LargeStatesOutsideTheCachingAllocator_CUDA) {
  const auto dev = torch::Device(torch::kCUDA, 0);
  auto allocated = [] {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  };
  for (const int bits : {8, 32}) {
    torch::manual_seed(4);
    auto a = torch::randn({300000}, torch::TensorOptions().device(dev)).requires_grad_(true);
    auto b = a.detach().clone().requires_grad_(true);
    auto paged = make_bnb_adamw(1e-3, 0.01, {a}, {bits, true});
    auto plain = make_bnb_adamw(1e-3, 0.01, {b}, {bits, false});
    (a * a).sum().backward();
    (b * b).sum().backward();
    const int64_t before = allocated();
    paged->step();
    // What stays in the caching allocator, each tensor in its 512-byte blocks (the H200 run
    // measured 12,288 for 11,424 bytes at 8 bits): the two absmax arrays and the two code maps
    // at 8 bits; at 32 bits both states are paged.
    const auto rounded = [](int64_t bytes) { return (bytes + 511) / 512 * 512; };
    const int64_t absmax = 4 * ((300000 + 255) / 256), qmap = 4 * 256;
    EXPECT_EQ(paged->state_bytes(), bits == 8 ? 2 * absmax + 2 * qmap : 0) << bits;
    EXPECT_EQ(allocated() - before, bits == 8 ? 2 * rounded(absmax) + 2 * rounded(qmap) : 0) << bits;
    plain->step();
    EXPECT_TRUE(torch::equal(a.detach(), b.detach())) << bits;
    EXPECT_EQ(paged->paged_bytes(), (bits == 8 ? 2 : 8) * 300000) << bits;
    EXPECT_EQ(paged->state_bytes() + paged->paged_bytes(), plain->state_bytes()) << bits;
  }
}

// The kernels exist for every architecture the torch 2.11.0+cu130 wheel runs on
// (torch._C._cuda_getArchFlags(): sm_75 sm_80 sm_86 sm_90 sm_100 sm_120): machine code of the
// same major at or below it (sm_80 code runs on sm_86), or PTX at or below it, which the driver
// compiles at first launch (Blackwell gets compute_90 PTX). From the architectures CMake built
// the target for (SWEEP_CUDA_ARCHITECTURES: its CUDA_ARCHITECTURES, "75-real,...,90").
TEST(AdamW8bit, KernelsRunOnEveryArchitectureTheWheelRuns) {
#ifndef SWEEP_CUDA_ARCHITECTURES
  GTEST_SKIP() << "built without a CUDA compiler: no adamw8bit kernels";
#else
  std::vector<int> sass, ptx;
  std::stringstream list(SWEEP_CUDA_ARCHITECTURES);
  for (std::string a; std::getline(list, a, ',');) {
    const int sm = std::stoi(a);
    const bool real = a.find("-virtual") == std::string::npos;
    const bool virt = a.find("-real") == std::string::npos;
    if (real) sass.push_back(sm);
    if (virt) ptx.push_back(sm);
  }
  for (int wheel : {75, 80, 86, 90, 100, 120}) {
    std::string how;
    for (int s : sass)
      if (s / 10 == wheel / 10 && s <= wheel) how = "sm_" + std::to_string(s) + " code";
    for (int v : ptx)
      if (how.empty() && v <= wheel) how = "compute_" + std::to_string(v) + " PTX, JIT-compiled";
    std::printf("sm_%d: %s\n", wheel, how.empty() ? "nothing (no kernel image)" : how.c_str());
    EXPECT_FALSE(how.empty()) << "sm_" << wheel << " has no adamw8bit kernel (" SWEEP_CUDA_ARCHITECTURES ")";
  }
#endif
}

// Our kernel against the ATen path on the same CUDA tensors. The kernel uses bnb's fast
// intrinsics (__powf, __fdividef) and nvcc contracts to FMA, so a moment that sits on the
// midpoint between two codes can land on the other one: the codes are compared (all but a
// small fraction equal, and those one code apart), and the parameters where neither moment's
// code ever differed and their block's scales agreed, to rounding (1e-5 at lr 1e-3). A flipped
// code moves its parameter by up to a code step of one update, so the parameters as a whole are
// not held to 1e-5 (a CPU emulation of the kernel's arithmetic put them 6.6e-5 apart).
// A code that flipped at a midpoint puts that element's moments on their own path: the next
// steps dequantise the two sides' codes to different values (one code is up to a third of the
// value where the dynamic map is coarse, near zero), so its later codes can part by more than
// one. The H200 runs (2026-11-27, -28) saw it for bf16 at n=300000 only, from step 2 on (never
// at step 1), with equal block scales; most likely because bf16 gradients put products exactly
// on a midpoint far more often than fp32's. So "at most one code apart" holds for the elements that
// had not parted before the step. Where it fails: the first such element, its codes, its
// gradient and its block's scales on both sides.
std::string first_parting(const torch::Tensor& apart, const torch::Tensor& k, const torch::Tensor& a,
                          const torch::Tensor& g, const AdamW8bitState& sk, const AdamW8bitState& sa) {
  const auto far = (apart > 1).nonzero();
  if (far.size(0) == 0) return "";
  const int64_t i = far[0][0].item<int64_t>(), b = i / 256;
  std::ostringstream out;
  out << far.size(0) << " elements more than one code apart; the first, " << i << ": codes "
      << k[i].item<int>() << " (kernel) and " << a[i].item<int>() << " (ATen), gradient "
      << g[i].item<float>() << ", block " << b << " absmax1 " << sk.absmax1[b].item<float>() << " / "
      << sa.absmax1[b].item<float>() << ", absmax2 " << sk.absmax2[b].item<float>() << " / "
      << sa.absmax2[b].item<float>();
  return out.str();
}

TEST(AdamW8bit, KernelMatchesTheAtenPath_CUDA) {
  torch::manual_seed(3);
  const auto dev = torch::Device(torch::kCUDA, 0);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t n : {int64_t{1000}, int64_t{70 * 90}, int64_t{300000}}) {
      const auto init = torch::randn({n}, torch::TensorOptions().device(dev)).to(dtype);
      auto p_kernel = init.clone(), p_aten = init.clone();
      AdamW8bitState s_kernel, s_aten;
      const bool eight = n >= kMin8bitSize;
      const auto state_dtype = eight ? torch::kByte : torch::kFloat;
      for (auto* s : {&s_kernel, &s_aten}) {
        s->state1 = torch::zeros({n}, torch::TensorOptions().device(dev).dtype(state_dtype));
        s->state2 = torch::zeros_like(s->state1);
        if (eight) {
          s->absmax1 = torch::zeros({(n + 255) / 256}, torch::TensorOptions().device(dev));
          s->absmax2 = torch::zeros_like(s->absmax1);
        }
      }
      const QMaps maps{dynamic_map(true).to(dev), dynamic_map(false).to(dev)};
      const AdamW8bitHyper h{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f};
      // Elements whose codes or block scales ever parted.
      auto parted = torch::zeros({n}, torch::TensorOptions().device(dev).dtype(torch::kBool));
      double codes_differ = 0;
      for (int step = 1; step <= 10; ++step) {
        auto g = (torch::randn({n}, torch::TensorOptions().device(dev)) * 0.1).to(dtype);
        if (step == 4) g.index_put_({0}, std::numeric_limits<float>::infinity());
        s_kernel.step = s_aten.step = step;
        adamw8bit_update(p_kernel, g, s_kernel, maps, h);
        adamw8bit_update(p_aten, g, s_aten, maps, h, /*force_cpu_arithmetic=*/true);
        if (!eight) continue;
        const auto d1 = s_kernel.state1 != s_aten.state1, d2 = s_kernel.state2 != s_aten.state2;
        codes_differ = std::max(codes_differ, (d1 | d2).to(torch::kFloat).mean().item<double>());
        // A code that parts for the first time is the neighbour on the other side of a midpoint.
        for (const auto& [k, a] : {std::pair{s_kernel.state1, s_aten.state1},
                                   std::pair{s_kernel.state2, s_aten.state2}}) {
          const auto apart = (k.to(torch::kInt) - a.to(torch::kInt)).abs().masked_fill(parted, 0);
          EXPECT_LE(apart.max().item<int>(), 1) << "step " << step << " n=" << n << "\n"
                                                << first_parting(apart, k, a, g, s_kernel, s_aten);
        }
        auto scales = (s_kernel.absmax1 - s_aten.absmax1).abs() > 1e-6 * s_aten.absmax1.abs() |
                      (s_kernel.absmax2 - s_aten.absmax2).abs() > 1e-6 * s_aten.absmax2.abs();
        auto by_element = scales.repeat_interleave(256).slice(0, 0, n);
        parted |= d1 | d2 | by_element;
      }
      // The inf injected at step 4: bitsandbytes' 32-bit kernel (kOptimizer32bit2State) takes
      // it into element 0's moments, whose update inf / inf makes the parameter NaN; its 8-bit
      // blockwise kernel (kOptimizerStatic8bit2StateBlockwise) zeroes both moments of a
      // non-finite gradient and leaves the parameter as it was (csrc/kernels.cu, 0.50.2; the
      // H200 run showed the 8-bit sides finite). NaN never compares, so the sides must agree on
      // which elements are not finite, and the differences are read over the finite ones.
      const auto lost = torch::isfinite(p_kernel).logical_not();
      EXPECT_TRUE(torch::equal(lost, torch::isfinite(p_aten).logical_not()))
          << "n=" << n << ": the kernel and the ATen path lose different elements to the inf";
      EXPECT_EQ(lost[0].item<bool>(), !eight) << "n=" << n << ": element 0 after the inf";
      if (eight) EXPECT_FALSE(lost.any().item<bool>()) << "n=" << n;
      const auto finite = lost.logical_not();
      const auto diff = (p_kernel.to(torch::kFloat) - p_aten.to(torch::kFloat)).abs().masked_fill(lost, 0);
      const double all = diff.max().item<double>();
      const auto clean = parted.logical_not() & finite;
      const double kept = clean.to(torch::kFloat).mean().item<double>();
      const double d = clean.any().item<bool>() ? diff.masked_select(clean).max().item<double>() : 0.0;
      const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;  // bf16: one rounding step apart
      std::printf("%s n=%lld: max |kernel - aten| %.3g where the codes agreed (%.1f%% of elements), "
                  "%.3g overall; codes differing at most %.4f%%\n",
                  c10::toString(dtype), static_cast<long long>(n), d, 100 * kept, all, 100 * codes_differ);
      EXPECT_LT(d, tol);
      if (eight) {
        EXPECT_LT(codes_differ, 0.01);
        EXPECT_GT(kept, 0.9) << "codes parted for more than a tenth of the elements";
      }
    }
  }
}

}  // namespace
}  // namespace sweep
