// What the step-time prediction sees of an emulated step (sweeps/worker/emulate/cost_record.h):
// the RecordFunction callback on Meta tensors records every GEMM the CUDA step launches, with
// its shape and dtype, each fused attention kernel with its backend, the optimizer's foreach
// kernels; and an emulated row carries the predicted step time and throughput.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reports/results/cards.h"
#include "reports/results/cost_fit.h"
#include "sweeps/worker/point.h"
#include "test_util.h"

namespace sweep {
namespace {

struct Recorded {
  std::vector<cost::Kernel> kernels;
  nlohmann::json row;
};

Recorded run_emulated(Point p, const std::string& card = "h100-80gb") {
  p.device = Device::kEmulated;
  p.card = facts_of(*find_card(card));
  p.steps = 1;
  p.warmup_steps = 1;
  p.repetitions = 1;
  const auto trace = std::filesystem::temp_directory_path() /
                     ("sweep_cost_record_" + std::to_string(::getpid()));
  std::filesystem::remove(trace);
  const nlohmann::json j = p;
  const auto run = testing::run_sweep_cli_split("worker --point '" + j.dump() + "' --result-fd 1",
                                                "SWEEP_STEP_TRACE=" + trace.string());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  Recorded r;
  r.row = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
  std::ifstream in(trace);
  std::string line;
  std::getline(in, line);
  std::filesystem::remove(trace);
  if (!line.empty()) r.kernels = cost::parse_trace(nlohmann::json::parse(line));
  return r;
}

Point gpt2_test(Precision precision) {
  Point p = tiny_point("gpt2-test", Device::kEmulated, precision, OptimizerKind::kAdamW);
  p.batch = 2;
  p.seq = 32;
  return p;
}

// gpt2-test: 2 layers of n_embd 64, vocabulary 1024. Forward: per layer c_attn, attention's
// c_proj, c_fc and the MLP's c_proj (transformers' Conv1D: addmm), then lm_head (linear on a
// 3-D input: matmul's mm); backward: two GEMMs for each (the input's and the weight's
// gradients). 27 GEMMs, the first c_attn's (B T) x C times C x 3C.
TEST(CostRecord, EveryGemmOfTheStepWithItsShapeAndDtype) {
  const auto r = run_emulated(gpt2_test(Precision::kFp32));
  std::vector<cost::Kernel> gemms;
  for (const auto& k : r.kernels)
    if (k.kind == cost::Kind::kGemm) gemms.push_back(k);
  ASSERT_EQ(gemms.size(), 27u);
  EXPECT_EQ(gemms[0].m, 64);
  EXPECT_EQ(gemms[0].k, 64);
  EXPECT_EQ(gemms[0].n, 192);
  EXPECT_EQ(gemms[0].dtype, cost::Dtype::kF32);
  // Under bf16 autocast the same GEMMs run in bf16 (autocast's lower-precision list).
  const auto amp = run_emulated(gpt2_test(Precision::kBf16Amp));
  int bf16 = 0;
  for (const auto& k : amp.kernels) bf16 += k.kind == cost::Kind::kGemm && k.dtype == cost::Dtype::kBf16;
  EXPECT_EQ(bf16, 27);
}

// The attention kernels are those of the backend sdpa_cuda.cc chose: fp32 on sm_90 cannot take
// flash (fp16/bf16 only), so the memory-efficient kernel runs; under bf16 autocast cuDNN's
// attention on sm_90 (torch 2.11 puts it first there), flash on an sm_86 RTX 3060. One forward
// and one backward per layer. AdamW is torch's foreach implementation on CUDA.
TEST(CostRecord, AttentionByTheChosenBackendAndTheForeachOptimizer) {
  auto count = [](const std::vector<cost::Kernel>& ks, cost::Attention backend, bool backward) {
    int n = 0;
    for (const auto& k : ks)
      n += k.kind == cost::Kind::kAttention && k.backend == backend && k.backward == backward;
    return n;
  };
  const auto fp32 = run_emulated(gpt2_test(Precision::kFp32));
  EXPECT_EQ(count(fp32.kernels, cost::Attention::kEfficient, false), 2);
  EXPECT_EQ(count(fp32.kernels, cost::Attention::kEfficient, true), 2);
  const auto amp = run_emulated(gpt2_test(Precision::kBf16Amp));
  EXPECT_EQ(count(amp.kernels, cost::Attention::kCudnn, false), 2);
  EXPECT_EQ(count(amp.kernels, cost::Attention::kCudnn, true), 2);
  const auto amp_sm86 = run_emulated(gpt2_test(Precision::kBf16Amp), "rtx3060");
  EXPECT_EQ(count(amp_sm86.kernels, cost::Attention::kFlash, false), 2);
  EXPECT_EQ(count(amp_sm86.kernels, cost::Attention::kFlash, true), 2);
  int foreach = 0;
  for (const auto& k : fp32.kernels) foreach += k.kind == cost::Kind::kForeach;
  EXPECT_GE(foreach, 4);  // AdamW: lerp_, mul_, addcmul_ ... (adam.py _multi_tensor_adam)
}

// Autograd's part: every op of the forward (grad mode on, parameters requiring grad) and of the
// backward (run by the engine inside a node) is autograd's; the optimizer's are not, nor is
// anything in eval. torch.optim.Adafactor reads two values per parameter on the host
// (_single_tensor_adafactor: param.norm(2).item() and update.norm(2).item()), each a wait for
// the card: 2 syncs for each of gpt2-test's 28 parameters (wte, wpe, 12 a layer, ln_f's two;
// lm_head is wte).
TEST(CostRecord, AutogradsOpsAndTheOptimizersHostReads) {
  auto launches = [](const std::vector<cost::Kernel>& ks, bool autograd) {
    int n = 0;
    for (const auto& k : ks) n += k.kind != cost::Kind::kDispatch && k.kind != cost::Kind::kSync && k.autograd == autograd;
    return n;
  };
  const auto adamw = run_emulated(gpt2_test(Precision::kFp32));
  int autograd_gemms = 0, foreach_autograd = 0;
  for (const auto& k : adamw.kernels) {
    autograd_gemms += k.kind == cost::Kind::kGemm && k.autograd;
    foreach_autograd += k.kind == cost::Kind::kForeach && k.autograd;
  }
  EXPECT_EQ(autograd_gemms, 27);  // forward's 9 and backward's 18
  EXPECT_EQ(foreach_autograd, 0);
  EXPECT_GT(launches(adamw.kernels, false), 0);
  Point eval = gpt2_test(Precision::kFp32);
  eval.mode = Mode::kEval;
  eval.optimizer = OptimizerKind::kNone;
  EXPECT_EQ(launches(run_emulated(eval).kernels, true), 0);
  Point adafactor = gpt2_test(Precision::kFp32);
  adafactor.optimizer = OptimizerKind::kAdafactor;
  int syncs = 0;
  for (const auto& k : run_emulated(adafactor).kernels) syncs += k.kind == cost::Kind::kSync;
  EXPECT_EQ(syncs, 2 * 28);
  for (const auto& k : adamw.kernels) EXPECT_NE(k.kind, cost::Kind::kSync);
}

// Block checkpointing's saved-tensor hooks (checkpoint.cc, torch.utils.checkpoint's
// non-reentrant hooks): each tensor a checkpointed block saves is packed in the forward,
// packed again when the recomputation reaches it (which then stops), and unpacked once in
// backward; three hook calls a tensor, none without checkpointing.
TEST(CostRecord, EachTensorACheckpointedBlockSavesIsHookedThreeTimes) {
  auto hooks = [](const std::vector<cost::Kernel>& ks) {
    int n = 0;
    for (const auto& k : ks) n += k.kind == cost::Kind::kHook;
    return n;
  };
  EXPECT_EQ(hooks(run_emulated(gpt2_test(Precision::kFp32)).kernels), 0);
  Point p = gpt2_test(Precision::kFp32);
  p.checkpointing = Checkpointing::kBlock;
  const int hooked = hooks(run_emulated(p).kernels);
  EXPECT_GT(hooked, 0);
  EXPECT_EQ(hooked % 3, 0);
  // gpt2-test has 2 layers, both checkpointed, each saving as many tensors.
  EXPECT_EQ(hooked % 6, 0);
}

// The row: step_ms, tokens_per_s, samples_per_s and tflops filled, as a measured row's are;
// none for a card whose peaks are not published (the A10G), whose memory is still predicted.
TEST(CostRecord, AnEmulatedRowCarriesItsPredictedStepTimeAndThroughput) {
  const auto r = run_emulated(gpt2_test(Precision::kBf16Amp));
  ASSERT_EQ(r.row.at("status"), "ok") << r.row.dump();
  const double step_ms = r.row.at("step_ms").get<double>();
  EXPECT_GT(step_ms, 0);
  EXPECT_NEAR(r.row.at("tokens_per_s").get<double>(), 2 * 32 / (step_ms / 1e3), 1e-6);
  EXPECT_NEAR(r.row.at("samples_per_s").get<double>(), 2 / (step_ms / 1e3), 1e-6);
  EXPECT_GT(r.row.at("tflops").get<double>(), 0);
  EXPECT_NEAR(step_ms, cost::predict_step(r.kernels, *cost::card_for("h100-80gb")).step_ms, 1e-9);
  const auto a10g = run_emulated(gpt2_test(Precision::kBf16Amp), "a10g");
  EXPECT_FALSE(a10g.row.contains("step_ms") && !a10g.row.at("step_ms").is_null()) << a10g.row.dump();
  EXPECT_GT(a10g.row.at("peak_allocated_bytes").get<double>(), 0);
  // The same step is slower on an RTX 3060 than on an H100, once it is large enough to be
  // bound by the GPU (gpt2-test's step is the host's launches on both): GPT-2 at 512 tokens.
  Point gpt2 = gpt2_test(Precision::kBf16Amp);
  gpt2.model = "gpt2";
  gpt2.batch = 8;
  gpt2.seq = 512;
  const auto h100 = run_emulated(gpt2);
  const auto rtx3060 = run_emulated(gpt2, "rtx3060");
  EXPECT_GT(rtx3060.row.at("step_ms").get<double>(), 1.5 * h100.row.at("step_ms").get<double>());
}

}  // namespace
}  // namespace sweep
