// The training burst on the CPU, in-process with the tracking allocator: what each
// technique does to the measured memory, and that it is implemented the PyTorch way.
#include <gtest/gtest.h>

#include "models/zoo.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/checkpoint.h"
#include "sweeps/worker/fault.h"
#include "sweeps/worker/optim.h"
#include "sweeps/worker/precision.h"
#include "test_util.h"

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
  const Fault once = Fault::parse("oom:optimizer#3", p);
  EXPECT_EQ(once.phase, "optimizer");
  EXPECT_EQ(once.nth, 3);
  EXPECT_EQ(Fault::parse("cublas-alloc:forward", p).kind, Fault::Kind::kCublasAlloc);
  EXPECT_THROW(Fault::parse("segfault", p), std::invalid_argument);
  EXPECT_THROW(Fault::parse("oom:optimizer#0", p), std::invalid_argument);
  EXPECT_THROW(Fault::parse("cuda-oom", p), std::invalid_argument);  // which phase?
  EXPECT_THROW(Fault::parse("crash:forward", p), std::invalid_argument);
}

// Counts calls: one span per repetition, whatever the steps in it.
class CountingTimer final : public StepTimer {
 public:
  void start() override { ++starts; }
  double stop_seconds() override {
    ++stops;
    return 0.003 * 2;  // two steps of 3 ms
  }
  int starts = 0, stops = 0;
};

// The timed steps of a repetition are one timer span (one CUDA event pair and one sync on a
// GPU, as scripts/hf_reference.py times its N steps), not one per step; the step time is the
// span over the steps.
TEST(Burst, ARepetitionIsTimedAsOneSpan) {
  static auto mem = make_cpu_tracker();
  auto p = tiny();
  p.steps = 2;
  p.repetitions = 3;
  CountingTimer timer;
  const auto m = run_burst(p, *mem, timer);
  ASSERT_EQ(m.status, Status::kOk) << m.message;
  EXPECT_EQ(timer.starts, 3);
  EXPECT_EQ(timer.stops, 3);
  ASSERT_EQ(m.step_ms_samples.size(), 3u);
  for (double s : m.step_ms_samples) EXPECT_NEAR(s, 3.0, 1e-9);
}

// A step that fails in a later repetition (an OOM that a retry would have survived, so later
// steps could run) ends the timed steps there: no step runs after it, and the row's phase is
// the failure's, not the phase the burst was left in.
TEST(Burst, AFailedRepetitionEndsTheTimedStepsAtItsPhase) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  auto p = tiny();
  p.steps = 2;
  p.repetitions = 3;
  // One warm-up step, then two a repetition: the 4th optimizer phase is repetition 2's first.
  BurstHooks hooks = fault_hooks(Fault::parse("oom:optimizer#4", p));
  int steps = 0;
  auto fault = hooks.on_phase;
  hooks.on_phase = [&](const std::string& phase, MemoryTracker& m) {
    steps += phase == "forward";
    fault(phase, m);
  };
  const auto m = run_burst(p, *mem, *timer, hooks);
  EXPECT_EQ(m.status, Status::kOom);
  EXPECT_EQ(m.phase, "optimizer");
  EXPECT_EQ(steps, 4) << "steps ran after the failure";
}

// The first repetition failing, the later ones not: Google Benchmark's statistics read the
// first repetition's report, which a failed one never fills (a SIGSEGV in the worker). The
// worker, in its own process, records the OOM at its phase.
TEST(Burst, AFailedFirstRepetitionIsAnOomRowNotACrash) {
  auto p = tiny();
  p.steps = 2;
  p.repetitions = 3;
  const auto r = testing::run_sweep_cli_split("worker --point '" + nlohmann::json(p).dump() + "' --result-fd 1",
                                              "SWEEP_TEST_FAULT=oom:optimizer#2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto record = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_EQ(record.at("status"), "oom") << record.dump();
  EXPECT_EQ(record.value("phase", ""), "optimizer") << record.dump();
}

// Out of memory outside the caching allocator (cuBLAS's or cuDNN's handles and workspaces, the
// CUDA runtime's own allocations): an oom at its phase, with the library as the reason and the
// gap unknown (the allocator's observer never fired), not a crash.
TEST(Burst, OomsOutsideTheAllocatorAreOomsWithAReasonAndNoGap) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  for (const auto& [kind, reason] : {std::pair{"cublas-alloc", "cublas-alloc-failed"},
                                     std::pair{"cudnn-alloc", "cudnn-alloc-failed"},
                                     std::pair{"cuda-oom", "cuda-out-of-memory"}}) {
    const auto m = run_burst(tiny(), *mem, *timer, fault_hooks(Fault::parse(std::string(kind) + ":backward", tiny())));
    EXPECT_EQ(m.status, Status::kOom) << kind;
    EXPECT_EQ(m.phase, "backward") << kind;
    EXPECT_EQ(m.reason, reason);
    EXPECT_FALSE(m.oom_gap_bytes) << kind << ": gap " << *m.oom_gap_bytes;
    EXPECT_EQ(m.message.find('\n'), std::string::npos) << m.message;
  }
  // The allocator's own failure keeps its gap (0 on the CPU: nothing is cached) and no reason.
  const auto m = run_burst(tiny(), *mem, *timer, fault_hooks(Fault::parse("oom:backward", tiny())));
  EXPECT_EQ(m.reason, "");
  ASSERT_TRUE(m.oom_gap_bytes);
  EXPECT_EQ(*m.oom_gap_bytes, 0);
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
class Checkpointing : public ::testing::TestWithParam<std::string> {};

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
                         ::testing::Values("gpt2-test", "t5-test", "whisper-test"),
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
