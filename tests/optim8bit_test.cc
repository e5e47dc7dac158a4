// AdamW8bit (sweeps/worker/optim8bit.cc) against bitsandbytes' AdamW8bit run on the CPU
// (tests/fixtures/adamw8bit-reference.pt, written by make_adamw8bit_reference.py): the
// quantisation maps, the state layout and bytes, the parameters after ten steps; the state
// bytes of the tiny models through a burst; and, on a GPU host, our kernel against the ATen path.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "models/zoo.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/optim8bit.h"
#include "pickle_fixture.h"

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
class StateBytes : public testing::TestWithParam<std::string> {};

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

INSTANTIATE_TEST_SUITE_P(Zoo, StateBytes, testing::Values("gpt2-test", "t5-test", "whisper-test"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Our kernel against the ATen path on the same CUDA tensors. The kernel uses bnb's fast
// intrinsics (__powf, __fdividef) and nvcc contracts to FMA, so an element's moment can land
// one code away now and then; parameters stay within 1e-5 after ten steps at lr 1e-3, codes
// agree for all but a small fraction.
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
      for (int step = 1; step <= 10; ++step) {
        auto g = (torch::randn({n}, torch::TensorOptions().device(dev)) * 0.1).to(dtype);
        if (step == 4) g.index_put_({0}, std::numeric_limits<float>::infinity());
        s_kernel.step = s_aten.step = step;
        adamw8bit_update(p_kernel, g, s_kernel, maps, h);
        adamw8bit_update(p_aten, g, s_aten, maps, h, /*force_cpu_arithmetic=*/true);
      }
      const double d = (p_kernel.to(torch::kFloat) - p_aten.to(torch::kFloat)).abs().max().item<double>();
      const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;  // bf16: one rounding step apart
      std::printf("%s n=%lld: max |kernel - aten| %.3g\n", c10::toString(dtype),
                  static_cast<long long>(n), d);
      EXPECT_LT(d, tol);
      if (eight) {
        const double codes_differ =
            (s_kernel.state1 != s_aten.state1).to(torch::kFloat).mean().item<double>();
        EXPECT_LT(codes_differ, 0.01);
        // A block's absmax moves with its largest moment's code: 2% covers a code step.
        EXPECT_TRUE(torch::allclose(s_kernel.absmax1, s_aten.absmax1, 2e-2, 0));
        EXPECT_TRUE(torch::allclose(s_kernel.absmax2, s_aten.absmax2, 2e-2, 0));
      }
    }
  }
}

}  // namespace
}  // namespace sweep
