// Optimizer offload (`offload: optimizer`, ZeRO-Offload on one device): on the CPU the device
// peak drops by exactly what moved to the host and the host holds exactly that (plus the CPU
// step's temporaries); the parameters follow AdamW's; the axis is checked where the config is
// read and lands in the results row. The *_CUDA test runs the pinned path on a GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/lora.h"
#include "models/zoo.h"
#include "reports/results/rows.h"
#include "sweep_version.h"
#include "sweeps/worker/burst.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "sweeps/worker/offload.h"
#include "sweeps/worker/optim.h"
#include "reports/results/schema.h"
#include "test_util.h"

namespace sweep {
namespace {

Measurement burst(const Point& p, MemoryTracker& mem, StepTimer& timer) {
  auto m = run_burst(p, mem, timer);
  EXPECT_EQ(m.status, Status::kOk) << m.message;
  return m;
}

Measurement cpu_burst(const Point& p) {
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  return burst(p, *mem, *timer);
}

// The parameters the burst trains, in its order (the model's, less what it freezes; under
// LoRA the adapters), and what AdamW's for-loop step holds in temporaries at most: the
// previous parameter's `denom` while the next one's v.sqrt() and its quotient exist
// (adam.py _single_tensor_adam), max(2 b0, b[i-1] + 2 b[i]), plus the divisor: a Python
// float that ATen wraps in a 0-dim double tensor and casts to float (8 + 4 bytes, alive
// while the quotient is allocated; SWEEP_TRACE_ALLOC shows `8 4 N -4 -8`).
constexpr int64_t kWrappedDivisor = 8 + 4;
struct Trained {
  int64_t bytes = 0, count = 0, step_temps = 0;
};
Trained trained(const Point& p) {
  auto model = models::find_model(p.model)->make();
  if (p.adapter == Adapter::kLora)
    models::add_lora(*model, {p.lora_r, p.lora_alpha, p.lora_dropout,
                              models::default_lora_targets(p.family)});
  Trained t;
  int64_t previous = 0;
  for (const auto& q : model->parameters()) {
    if (!q.requires_grad()) continue;
    const auto b = static_cast<int64_t>(q.nbytes());
    t.bytes += b;
    ++t.count;
    t.step_temps = std::max(t.step_temps, previous + 2 * b);
    previous = b;
  }
  t.step_temps += kWrappedDivisor;
  return t;
}

class OffloadAccounting : public ::testing::TestWithParam<std::string> {};

// fp32 on the CPU: the optimizer state (both moments, and the step counters, CPU float
// scalars) leaves the device and with it the step's temporaries; the host holds the fp32
// master weights, the fp32 gradient buffer, the moments, the counters and those temporaries.
TEST_P(OffloadAccounting, DevicePeakDropsByTheStateAndTheHostHoldsIt) {
  Point none = tiny_point(GetParam(), Device::kCpu, Precision::kFp32, OptimizerKind::kAdamW);
  Point off = none;
  off.offload = Offload::kOptimizer;
  const Trained t = trained(none);
  const auto a = cpu_burst(none), b = cpu_burst(off);
  const int64_t state = 2 * t.bytes + 4 * t.count;
  EXPECT_EQ(a.optimizer_bytes, 2 * t.bytes);
  EXPECT_EQ(b.optimizer_bytes, 0);
  EXPECT_EQ(b.weights_bytes, a.weights_bytes);  // the master copy is host memory
  EXPECT_EQ(b.grads_bytes, a.grads_bytes);
  // Later steps' forward and backward run beside the state in `none`, never in `optimizer`.
  EXPECT_EQ(*a.forward_peak_bytes - *b.forward_peak_bytes, state);
  EXPECT_EQ(*a.backward_peak_bytes - *b.backward_peak_bytes, state);
  EXPECT_EQ(*a.optimizer_peak_bytes - *b.optimizer_peak_bytes, state + t.step_temps);
  EXPECT_EQ(b.peak_allocated_bytes,
            std::max({*b.forward_peak_bytes, *b.backward_peak_bytes, *b.optimizer_peak_bytes}));
  EXPECT_EQ(b.at_peak_optimizer_bytes, 0);
  ASSERT_TRUE(b.host_peak_bytes);
  EXPECT_EQ(*b.host_peak_bytes, 4 * t.bytes + 4 * t.count + t.step_temps)
      << "trained " << t.bytes << " B in " << t.count << " tensors";
  ASSERT_TRUE(b.offload_transfer_ms);
  EXPECT_GT(*b.offload_transfer_ms, 0);
  EXPECT_FALSE(a.host_peak_bytes);
  EXPECT_FALSE(a.offload_transfer_ms);
  EXPECT_NEAR(b.loss, a.loss, 1e-6 * std::abs(a.loss));  // the same training
}

INSTANTIATE_TEST_SUITE_P(Families, OffloadAccounting,
                         ::testing::Values("gpt2-test", "t5-test", "whisper-test"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('-')); });

// Under LoRA only the adapters train: only they have host copies and state.
TEST(Offload, LoraOffloadsTheAdaptersOnly) {
  Point p = tiny_point("gpt2-test", Device::kCpu, Precision::kFp32, OptimizerKind::kAdamW);
  p.adapter = Adapter::kLora;
  p.offload = Offload::kOptimizer;
  const Trained t = trained(p);
  EXPECT_EQ(t.bytes, 2 * (8 * 64 + 192 * 8) * 4);  // rank 8 on c_attn (64 -> 192), two blocks
  const auto m = cpu_burst(p);
  EXPECT_EQ(m.grads_bytes, t.bytes);
  EXPECT_EQ(m.optimizer_bytes, 0);
  EXPECT_EQ(*m.host_peak_bytes, 4 * t.bytes + 4 * t.count + t.step_temps);
}

// Trains gpt2-test for `steps` steps from seed 0 with `opt_for` and returns its parameters.
std::vector<torch::Tensor> train(at::ScalarType dtype, int steps,
                                 const std::function<std::unique_ptr<Optimizer>(
                                     std::vector<torch::Tensor>)>& opt_for) {
  torch::manual_seed(0);
  auto model = models::find_model("gpt2-test")->make();
  model->to(dtype);
  std::vector<torch::Tensor> params = model->parameters();
  auto opt = opt_for(params);
  auto gen = at::detail::createCPUGenerator(1);
  auto batch = model->synthetic_batch({2, 32, 0, 0}, torch::kCPU, gen);
  for (int i = 0; i < steps; ++i) {
    model->loss(batch).backward();
    opt->step();
    opt->zero_grad();
  }
  std::vector<torch::Tensor> out;
  for (const auto& q : params) out.push_back(q.detach().clone());
  return out;
}

TEST(Offload, ParametersFollowAdamW) {
  constexpr int kSteps = 3;
  auto adamw = [](std::vector<torch::Tensor> ps) {
    return make_optimizer({OptimizerKind::kAdamW, 1e-3, 0.01}, std::move(ps));
  };
  auto offload = [](std::vector<torch::Tensor> ps) -> std::unique_ptr<Optimizer> {
    return std::make_unique<OffloadOptimizer>(std::move(ps), 1e-3, 0.01);
  };
  // fp32: the host step is the same for-loop AdamW on the same values: equal to the bit.
  const auto a = train(torch::kFloat, kSteps, adamw), b = train(torch::kFloat, kSteps, offload);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  // Pure bf16: offload steps fp32 master weights (DeepSpeed's), plain AdamW the bf16 weights
  // with bf16 moments, so they part. Each moved at most about lr a step from the same start
  // (Adam's normalised update), so they stay within 2 x steps x lr of each other, plus a bf16
  // rounding (2^-7 relative). And the offloaded weights did move: the copy back happened.
  const auto c = train(torch::kBFloat16, kSteps, adamw), d = train(torch::kBFloat16, kSteps, offload);
  const auto start = train(torch::kBFloat16, 0, offload);
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const auto x = c[i].to(torch::kFloat), y = d[i].to(torch::kFloat);
    const double diff = (x - y).abs().max().item<double>();
    worst = std::max(worst, diff);
    EXPECT_TRUE(torch::allclose(x, y, /*rtol=*/1.0 / 128, /*atol=*/2 * kSteps * 1e-3))
        << "parameter " << i << ": max difference " << diff;
    EXPECT_FALSE(torch::equal(d[i], start[i])) << "parameter " << i << " did not move";
  }
  std::printf("pure bf16, offload vs AdamW after %d steps: max difference %.3g\n", kSteps, worst);
}

Config load(const std::string& name, const std::string& yaml) {
  return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
}

TEST(Offload, OtherOptimizersAreAConfigErrorWithTheLineAndAnExcludeHint) {
  for (const char* optimizer : {"adafactor", "adamw8bit", "adamw-fused", "sgd"}) {
    SCOPED_TRACE(optimizer);
    try {
      expand_grid(load("offload-opt", std::string("models: [gpt2-test]\ngrid:\n  optimizer: [adamw, ") +
                                          optimizer + "]\n  offload: [none, optimizer]\n"),
                  RunSettings{});
      ADD_FAILURE() << "no error";
    } catch (const UserError& e) {
      EXPECT_EQ(e.line(), 4);
      EXPECT_EQ(e.key(), "grid.offload");
      EXPECT_NE(std::string(e.what()).find(optimizer), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("exclude: [{offload: optimizer, optimizer: " + std::string(optimizer)),
                std::string::npos)
          << e.hint();
    }
  }
  // The hint's exclude is enough: adamw with and without offload, adafactor without.
  auto pts = expand_grid(load("offload-excl", "models: [gpt2-test]\ngrid:\n"
                                              "  optimizer: [adamw, adafactor]\n"
                                              "  offload: [none, optimizer]\n"
                                              "exclude: [{offload: optimizer, optimizer: adafactor}]\n"),
                         RunSettings{});
  ASSERT_EQ(pts.size(), 3u);
  auto named = [](const Point& p) { return to_string(p.optimizer) + "/" + to_string(p.offload); };
  EXPECT_EQ(named(pts[0]), "adamw/none");
  EXPECT_EQ(named(pts[1]), "adamw/optimizer");
  EXPECT_EQ(named(pts[2]), "adafactor/none");
  try {
    load("offload-val", "models: [gpt2-test]\ngrid: {offload: cpu}\n");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.key(), "grid.offload");
    EXPECT_NE(e.hint().find("none, optimizer"), std::string::npos) << e.hint();
  }
}

TEST(Offload, TheAxisKeepsOldIdsAndEvalHasNoOffload) {
  auto pts = expand_grid(load("offload-axis", "models: [gpt2-test]\ngrid:\n"
                                              "  mode: [train, eval]\n"
                                              "  offload: [none, optimizer]\n"
                                              "  batch: [1, 2]\n"),
                         RunSettings{});
  ASSERT_EQ(pts.size(), 6u);  // eval: one offload value
  EXPECT_EQ(pts[0].offload, Offload::kNone);
  EXPECT_EQ(pts[1].offload, Offload::kNone);
  EXPECT_EQ(pts[1].batch, 2);  // batch innermost
  EXPECT_EQ(pts[2].offload, Offload::kOptimizer);
  EXPECT_EQ(pts[4].mode, Mode::kEval);
  EXPECT_EQ(pts[4].offload, Offload::kNone);
  EXPECT_EQ(pts[2].label(), "gpt2-test b=1 seq=128 fp32 ckpt=none acc=1 adamw offload=optimizer");
  // A point without offload hashes exactly the text it hashed before the axis existed.
  EXPECT_EQ(pts[0].id(),
            fnv1a_hex("model=gpt2-test;mode=train;batch=1;seq=128;target_seq=0;audio_s=0;"
                      "precision=fp32;checkpointing=none;accumulation=1;optimizer=adamw;"
                      "alloc_conf=;steps=3;warmup_steps=1;repetitions=3;budget_bytes=0;"
                      "suite_version=" SWEEP_VERSION));
  EXPECT_NE(pts[2].id(), pts[0].id());
  EXPECT_EQ(nlohmann::json(pts[2]).get<Point>().id(), pts[2].id());
}

TEST(Offload, ABadCombinationExitsTwoNamingFileLineAndField) {
  auto path = testing::write_file(testing::temp_dir("offload-cli") / "bad.yaml",
                                  "models: [gpt2-test]\ngrid:\n  optimizer: adafactor\n"
                                  "  offload: optimizer\n");
  auto r = testing::run_sweep_cli("run " + path + " --device cpu --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":4: grid.offload"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

// End to end: the worker's row carries the axis and the two columns, the reader takes them.
TEST(Offload, RowsCarryTheAxisHostPeakAndTransferTime) {
  auto dir = testing::temp_dir("offload-run");
  auto path = testing::write_file(dir / "c.yaml",
                                  "models: [gpt2-test]\nsteps: 1\nwarmup_steps: 1\nrepetitions: 1\n"
                                  "out: " + (dir / "out").string() + "\n"
                                  "grid: {seq: 32, offload: [none, optimizer]}\n");
  auto r = testing::run_sweep_cli("run " + path + " --device cpu --quiet", "SWEEP_GNUPLOT=/nonexistent");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = reports::read_results((dir / "out").string());
  ASSERT_EQ(results.rows.size(), 2u);
  using schema::column;
  const auto& none = results.rows[0];
  const auto& off = results.rows[1];
  EXPECT_EQ(none.at(column("offload")), "none");
  EXPECT_EQ(off.at(column("offload")), "optimizer");
  EXPECT_EQ(none.at(column("host_peak_bytes")), "");
  EXPECT_GT(*off.number(column("host_peak_bytes")), 0);
  EXPECT_GT(*off.number(column("offload_transfer_ms")), 0);
  EXPECT_EQ(*off.number(column("optimizer_bytes")), 0);
  EXPECT_LT(*off.number(column("peak_allocated_bytes")), *none.number(column("peak_allocated_bytes")));
}

// On a GPU: pinned host buffers, the device without optimizer state, AdamW's parameters.
TEST(Offload, PinnedHostStateAndAdamWsParameters_CUDA) {
  static auto mem = make_cuda_tracker();
  static auto timer = make_cuda_timer();
  Point none = tiny_point("gpt2-test", Device::kCuda, Precision::kFp32, OptimizerKind::kAdamW);
  Point off = none;
  off.offload = Offload::kOptimizer;
  const Trained t = trained(none);
  const auto a = burst(none, *mem, *timer), b = burst(off, *mem, *timer);
  EXPECT_EQ(b.optimizer_bytes, 0);
  EXPECT_EQ(a.optimizer_bytes, 2 * t.bytes);
  // The caching allocator rounds blocks up (512 B), so the drop is at least the moments.
  EXPECT_GE(*a.forward_peak_bytes - *b.forward_peak_bytes, 2 * t.bytes);
  // Pinned blocks are powers of two: master weights and gradient buffer at least 2 x bytes,
  // the pageable moments (DeepSpeedCPUAdam's zeros_like) 2 x bytes exactly.
  EXPECT_GE(*b.host_peak_bytes, 4 * t.bytes);
  EXPECT_GT(*b.offload_transfer_ms, 0);
  EXPECT_NEAR(b.loss, a.loss, 1e-4 * std::abs(a.loss));
  torch::manual_seed(0);
  auto m1 = models::find_model("gpt2-test")->make();
  m1->to(torch::kCUDA);
  torch::manual_seed(0);
  auto m2 = models::find_model("gpt2-test")->make();
  m2->to(torch::kCUDA);
  auto o1 = make_optimizer({OptimizerKind::kAdamW, 1e-3, 0.01, Impl::kForLoop}, m1->parameters());
  OffloadOptimizer o2(m2->parameters(), 1e-3, 0.01);
  auto gen = at::detail::createCPUGenerator(1);
  auto batch = m1->synthetic_batch({2, 32, 0, 0}, torch::kCUDA, gen);
  m1->train(false);  // no dropout: the two models see the same computation
  m2->train(false);
  for (int i = 0; i < 3; ++i) {
    m1->loss(batch).backward();
    o1->step();
    o1->zero_grad();
    m2->loss(batch).backward();
    o2.step();
    o2.zero_grad();
  }
  // The key third of c_attn's bias has a gradient of zero up to rounding (softmax does not
  // see a constant added to every key of a query), and Adam turns that rounding noise into
  // steps of about lr whose signs differ between any two implementations once the parameters
  // differ in their last bits: on the H200 the two blocks' c_attn biases were the only
  // parameters apart. Every other element is held to rounding.
  const auto p1 = m1->named_parameters(), p2 = m2->named_parameters();
  for (const auto& item : p1) {
    auto a = item.value(), b = p2[item.key()];
    if (item.key().find("c_attn.bias") != std::string::npos) {
      const int64_t e = a.size(0) / 3;
      a = torch::cat({a.slice(0, 0, e), a.slice(0, 2 * e)});
      b = torch::cat({b.slice(0, 0, e), b.slice(0, 2 * e)});
    }
    EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << item.key();
  }
}

}  // namespace
}  // namespace sweep
