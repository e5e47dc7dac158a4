// The training burst on the CPU, in-process with the tracking allocator: what each
// technique does to the measured memory, and that it is implemented the PyTorch way.
#include <gtest/gtest.h>

#include "models/zoo.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/checkpoint.h"
#include "sweeps/worker/fault.h"
#include "sweeps/worker/optim.h"
#include "sweeps/worker/precision.h"

namespace sweep {
namespace {

Point tiny(int64_t batch = 4) {
  Point p;
  p.model = "gpt2-test";
  p.family = "gpt2";
  p.batch = batch;
  p.seq = 64;
  p.steps = 1;
  p.warmup_steps = 1;
  p.repetitions = 1;
  return p;
}

Measurement burst(const Point& p) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  auto m = run_burst(p, *mem, *timer);
  EXPECT_EQ(m.status, Status::kOk) << m.message;
  return m;
}

TEST(Burst, BreakdownAddsUpAndWeightsAreTheParameters) {
  auto m = burst(tiny());
  const auto* spec = models::find_model("gpt2-test");
  EXPECT_EQ(m.weights_bytes, spec->parameters * 4);
  EXPECT_EQ(m.grads_bytes, spec->parameters * 4);
  EXPECT_EQ(m.optimizer_bytes, 2 * spec->parameters * 4);  // AdamW: exp_avg + exp_avg_sq
  EXPECT_GT(m.activations_bytes, 0);
  EXPECT_GE(m.peak_allocated_bytes, m.weights_bytes + m.optimizer_bytes + m.activations_bytes);
  EXPECT_FALSE(m.peak_phase.empty());
  EXPECT_GT(*m.tokens_per_s, 0);
  EXPECT_GT(*m.tflops, 0);
}

// The breakdown at the peak adds up to the peak exactly, wherever the peak falls: in the
// optimizer step (small batch: weights, gradients and AdamW state are all there) or in
// backward (large batch: activations dominate, gradients only partly built).
TEST(Burst, BreakdownAtThePeakAddsUpToThePeak) {
  for (int64_t batch : {1, 16}) {
    auto m = burst(tiny(batch));
    SCOPED_TRACE("batch " + std::to_string(batch) + ", peak in " + m.peak_phase);
    EXPECT_EQ(m.at_peak_weights_bytes + m.at_peak_grads_bytes + m.at_peak_optimizer_bytes +
                  m.at_peak_activations_bytes,
              m.peak_allocated_bytes);
    EXPECT_EQ(m.at_peak_weights_bytes, m.weights_bytes);
    EXPECT_GE(m.at_peak_activations_bytes, 0);
    EXPECT_LE(m.at_peak_grads_bytes, m.grads_bytes);
    ASSERT_TRUE(m.forward_peak_bytes && m.backward_peak_bytes && m.optimizer_peak_bytes);
    EXPECT_EQ(std::max({*m.forward_peak_bytes, *m.backward_peak_bytes, *m.optimizer_peak_bytes}),
              m.peak_allocated_bytes);
    if (m.peak_phase == "optimizer") {
      EXPECT_EQ(m.at_peak_grads_bytes, m.grads_bytes);
      EXPECT_EQ(m.at_peak_optimizer_bytes, m.optimizer_bytes);
    }
  }
}

TEST(Burst, CheckpointingLowersActivations) {
  auto p = tiny(8);
  auto none = burst(p);
  p.checkpointing = Checkpointing::kBlock;
  auto block = burst(p);
  EXPECT_LT(block.activations_bytes, none.activations_bytes);
  EXPECT_LT(block.peak_allocated_bytes, none.peak_allocated_bytes);
}

TEST(Burst, PureBf16HalvesWeights) {
  auto p = tiny();
  auto fp32 = burst(p);
  p.precision = Precision::kBf16;
  auto bf16 = burst(p);
  EXPECT_EQ(bf16.weights_bytes * 2, fp32.weights_bytes);
  EXPECT_EQ(bf16.optimizer_bytes * 2, fp32.optimizer_bytes);
}

TEST(Burst, AccumulationPeaksCloseToOneMicroBatch) {
  auto p = tiny(4);
  auto one = burst(p);
  p.accumulation = 4;
  auto four = burst(p);
  EXPECT_NEAR(static_cast<double>(four.peak_allocated_bytes), one.peak_allocated_bytes,
              0.1 * one.peak_allocated_bytes);
  // ...and processes four times the tokens per optimizer step (counted, not timed: which of
  // two short bursts is faster depends on what else the machine runs).
  auto tokens_per_step = [](const Measurement& m) { return *m.tokens_per_s * *m.step_ms / 1000; };
  EXPECT_NEAR(tokens_per_step(four), 4 * tokens_per_step(one), 1e-6 * tokens_per_step(four));
}

TEST(Burst, EvalModeHoldsNoGradientsOrOptimizerState) {
  auto p = tiny();
  p.mode = Mode::kEval;
  p.optimizer = OptimizerKind::kNone;
  auto m = burst(p);
  EXPECT_EQ(m.grads_bytes, 0);
  EXPECT_EQ(m.optimizer_bytes, 0);
  EXPECT_GT(m.activations_bytes, 0);
}

TEST(Burst, OptimizersStateSizes) {
  const auto n = models::find_model("gpt2-test")->parameters;
  auto p = tiny();
  p.optimizer = OptimizerKind::kSgd;
  EXPECT_EQ(burst(p).optimizer_bytes, n * 4);  // one momentum buffer
  p.optimizer = OptimizerKind::kAdamWFused;
  EXPECT_EQ(burst(p).optimizer_bytes, 2 * n * 4);
  p.optimizer = OptimizerKind::kAdafactor;
  EXPECT_LT(burst(p).optimizer_bytes, n * 4 / 4);  // factored: rows + columns only
}

TEST(Burst, OomInEachPhaseIsRecordedWithThatPhase) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  for (std::string phase : {"build", "forward", "backward", "optimizer"}) {
    const Fault f = Fault::parse("oom:" + phase, tiny());
    auto m = run_burst(tiny(), *mem, *timer, fault_hooks(f));
    EXPECT_EQ(m.status, Status::kOom) << phase;
    EXPECT_EQ(m.phase, phase);
  }
}

// The test seam reads its spec strictly: a typo is an error, not a fault that never fires.
TEST(Burst, FaultSpecsParseOrAreRefused) {
  Point p = tiny();
  EXPECT_EQ(Fault::parse("", p).kind, Fault::Kind::kNone);
  EXPECT_EQ(Fault::parse("crash", p).kind, Fault::Kind::kCrash);
  EXPECT_EQ(Fault::parse("hang@" + std::to_string(p.batch), p).kind, Fault::Kind::kHang);
  EXPECT_EQ(Fault::parse("hang@" + std::to_string(p.batch + 1), p).kind, Fault::Kind::kNone);
  EXPECT_EQ(Fault::parse("oom:backward", p).phase, "backward");
  EXPECT_THROW(Fault::parse("segfault", p), std::invalid_argument);
}

std::vector<torch::Tensor> grads_after_backward(const std::string& name, bool checkpoint) {
  torch::manual_seed(7);
  auto model = models::find_model(name)->make();
  model->train();  // dropout on: the recompute must replay the same masks
  if (checkpoint) model->set_block_runner(&checkpoint_block);
  auto gen = at::detail::createCPUGenerator(3);
  auto batch = model->synthetic_batch({2, 32, 16, 1.0}, torch::kCPU, gen);
  torch::manual_seed(11);
  model->loss(batch).backward();
  std::vector<torch::Tensor> g;
  for (const auto& item : model->named_parameters()) {
    const auto& name = item.key();
    const auto& p = item.value();
    if (!p.requires_grad()) continue;  // frozen (Whisper's positions)
    EXPECT_TRUE(p.grad().defined()) << name << (checkpoint ? " (checkpointed)" : "");
    g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  }
  return g;
}

// Every family: GPT-2's single input, T5's shared position bias and encoder output flowing
// into every decoder block, Whisper's conv stem before the blocks.
class Checkpointing : public testing::TestWithParam<std::string> {};

TEST_P(Checkpointing, GradientsEqualWithAndWithoutAtAFixedSeed) {
  auto a = grads_after_backward(GetParam(), false);
  auto b = grads_after_backward(GetParam(), true);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, (a[i] - b[i]).abs().max().item<double>());
  std::printf("%s: max |grad difference| = %g\n", GetParam().c_str(), max_diff);
  EXPECT_LT(max_diff, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Families, Checkpointing,
                         testing::Values("gpt2-test", "t5-test", "whisper-test"),
                         [](const auto& info) {
                           return info.param.substr(0, info.param.find('-'));
                         });

TEST(Burst, Fp16AmpRunsWithDynamicScaling) {
  auto p = tiny();
  p.precision = Precision::kFp16Amp;
  auto m = burst(p);
  EXPECT_TRUE(std::isfinite(m.loss));
}

}  // namespace
}  // namespace sweep
