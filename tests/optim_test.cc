// The optimizers and the loss scaler against torch.optim and torch.amp.GradScaler: parameters
// after a few steps on a fixed problem (tests/fixtures/optim-reference.pt, written by
// make_optim_reference.py), each implementation the burst can take; and finite losses from
// bursts in every precision with every optimizer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sweeps/worker/burst.h"
#include "sweeps/worker/optim.h"
#include "sweeps/worker/precision.h"
#include "pickle_fixture.h"

namespace sweep {
namespace {

struct Case {
  std::string fixture;  // key in the fixture's "cases"
  OptimizerOptions options;
  bool amp = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture; }

constexpr int kInfStep = 2;  // make_optim_reference.py INF_STEP

const c10::Dict<c10::IValue, c10::IValue>& fixture() {
  static const auto blob = read_fixture("optim-reference.pt");
  return blob;
}

class AgainstTorchOptim : public testing::TestWithParam<Case> {};

TEST_P(AgainstTorchOptim, ParametersAfterStepsMatch) {
  const Case& c = GetParam();
  const auto& blob = fixture();
  std::vector<torch::Tensor> params;
  for (const auto& t : tensors(blob.at("init"))) params.push_back(t.clone().requires_grad_(true));
  auto opt = make_optimizer(c.options, params);
  GradScaler scaler(torch::kCPU);
  int step = 0;
  for (const auto& step_grads : blob.at("grads").toList()) {
    const auto g = tensors(step_grads.get());
    // d(loss)/dp = g, as in the fixture's backward.
    auto loss = torch::zeros({});
    for (std::size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * g[i]).sum();
    (c.amp ? scaler.scale(loss) : loss).backward();
    if (c.amp && step == kInfStep) {
      torch::NoGradGuard no_grad;
      params[0].grad()[0][0].fill_(std::numeric_limits<float>::infinity());
    }
    if (c.amp) {
      scaler.step(*opt);
      scaler.update();
    } else {
      opt->step();
    }
    opt->zero_grad();
    ++step;
  }
  const auto& expected_case = blob.at("cases").toGenericDict().at(c.fixture).toGenericDict();
  const auto expected = tensors(expected_case.at("params"));
  ASSERT_EQ(expected.size(), params.size());
  double max_diff = 0;
  for (std::size_t i = 0; i < params.size(); ++i)
    max_diff = std::max(max_diff, (params[i].detach() - expected[i]).abs().max().item<double>());
  std::printf("%s (torch %s): max |parameter difference| after %d steps = %.3g\n",
              c.fixture.c_str(), blob.at("torch").toStringRef().c_str(), step, max_diff);
  EXPECT_LT(max_diff, 1e-6);
  if (c.amp) {
    EXPECT_EQ(scaler.current_scale(), expected_case.at("scale").toTensor().item<double>());
    EXPECT_EQ(scaler.skipped_steps(), expected_case.at("skipped").toTensor().item<int64_t>());
  }
}

// Hyper-parameters as in make_optim_reference.py. An empty impl is torch.optim's default pick,
// which on the CPU is the for-loop.
INSTANTIATE_TEST_SUITE_P(
    Fixture, AgainstTorchOptim,
    testing::Values(Case{"adamw", {OptimizerKind::kAdamW, 1e-2, 0.1}},
                    Case{"adamw-foreach", {OptimizerKind::kAdamW, 1e-2, 0.1, Impl::kForeach}},
                    Case{"adamw-fused", {OptimizerKind::kAdamWFused, 1e-2, 0.1}},
                    Case{"sgd", {OptimizerKind::kSgd, 0.1, 0.01}},
                    Case{"sgd-foreach", {OptimizerKind::kSgd, 0.1, 0.01, Impl::kForeach}},
                    Case{"adafactor", {OptimizerKind::kAdafactor, 1e-2, 0.1}},
                    Case{"amp-adamw", {OptimizerKind::kAdamW, 1e-2, 0.1}, true},
                    Case{"amp-adamw-fused", {OptimizerKind::kAdamWFused, 1e-2, 0.1}, true}),
    [](const auto& info) {
      std::string n = info.param.fixture;
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST(GradScaler, SkipsAStepWithAPlantedInfAndBacksOff) {
  auto w = torch::ones({4}, torch::requires_grad());
  auto opt = make_optimizer({OptimizerKind::kAdamW, 1e-3, 0.0}, {w});
  GradScaler scaler(torch::kCPU);
  EXPECT_EQ(scaler.current_scale(), 65536.0);
  // Finite gradients: the step happens.
  scaler.scale(w.sum()).backward();
  scaler.step(*opt);
  scaler.update();
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.current_scale(), 65536.0);  // grows only every 2000 good steps
  EXPECT_FALSE(torch::equal(w, torch::ones({4})));
  // A planted inf: the step is skipped, the weights are untouched, the scale halves.
  opt->zero_grad();
  auto before = w.detach().clone();
  (scaler.scale(w.sum()) * std::numeric_limits<float>::infinity()).backward();
  scaler.step(*opt);
  scaler.update();
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_TRUE(torch::equal(w.detach(), before));
  EXPECT_EQ(scaler.current_scale(), 32768.0);
}

// Every precision with every optimizer trains: the loss after the last step is finite (NaN
// weights from a step would make it NaN) and not every fp16 step was skipped.
class FiniteLoss : public testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FiniteLoss, AfterABurstOnTheCpu) {
  const auto& [precision, optimizer] = GetParam();
  Point p = tiny_point("gpt2-test", Device::kCpu, *parse_as<Precision>(precision), *parse_as<OptimizerKind>(optimizer));
  p.steps = 2;
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  const auto m = run_burst(p, *mem, *timer);
  ASSERT_EQ(m.status, Status::kOk) << m.message;
  std::printf("%s %s: loss %.6f, %lld skipped steps\n", precision.c_str(), optimizer.c_str(),
              m.loss, static_cast<long long>(m.skipped_steps));
  EXPECT_TRUE(std::isfinite(m.loss));
  EXPECT_LT(m.skipped_steps, p.warmup_steps + p.steps * p.repetitions);
}

INSTANTIATE_TEST_SUITE_P(
    PrecisionsAndOptimizers, FiniteLoss,
    testing::Combine(testing::Values("fp32", "bf16", "bf16-amp", "fp16-amp"),
                     testing::Values("adamw", "adamw-fused", "sgd", "adafactor", "adamw8bit")),
    [](const auto& info) {
      std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace sweep
