// The step-time cost rules (reports/results/cost_rules.h), one test per rule, each with the
// source it transcribes and numbers computed by hand; and the card table's speed facts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "reports/results/card_speed.h"
#include "reports/results/cards.h"
#include "reports/results/cost_fit.h"
#include "reports/results/cost_rules.h"

namespace sweep::cost {
namespace {

Card h100() { return *card_for("h100-80gb"); }

// Round numbers, so that each expectation below is arithmetic on the rule alone.
Calibration unit() {
  return {.gemm_tensor = 0.5, .gemm_simt = 0.5, .gemm_k_half = 0, .attention = 0.5,
          .bandwidth = 0.5, .launch_us = 2, .host_kernel_us = 10, .host_dispatch_us = 1,
          .host_autograd_us = 5, .sync_us = 20, .host_gbs = 10, .python_host = 1, .host_hook_us = 0,
          .python_hook_us = 0};
}

TEST(CardSpeed, EveryCardHasItsSpeedFactsAndTheDatasheetsFigures) {
  for (const auto& c : cards()) {
    const CardSpeed* s = card_speed(c.key);
    ASSERT_NE(s, nullptr) << c.key;
    EXPECT_GT(s->bandwidth_gbs, 0) << c.key;
    EXPECT_GT(s->boost_mhz, 0) << c.key;
    EXPECT_GT(s->l2_mib, 0) << c.key;
    EXPECT_GE(s->pcie_gen, 3) << c.key;
  }
  // H100 SXM5 datasheet: 3.35 TB/s, 1980 MHz boost, 50 MiB L2 (Hopper whitepaper), PCIe Gen5.
  EXPECT_EQ(card_speed("h100-80gb")->bandwidth_gbs, 3350);
  EXPECT_EQ(card_speed("rtx3060")->bandwidth_gbs, 360);  // 192 bit x 15 Gbps / 8
  EXPECT_NEAR(pcie_gbs(5), 63.0, 0.01);                  // PCI-SIG: 32 GT/s x16, 128b/130b
  EXPECT_NEAR(pcie_gbs(4), 31.5, 0.01);
  // The card the rules read: the dense peaks of cards.h and these facts; the A10G has no
  // published peaks, so no step time is predicted for it.
  const Card c = h100();
  EXPECT_EQ(c.bf16_tflops, 989.4);
  EXPECT_EQ(c.sms, 132);
  EXPECT_FALSE(card_for("a10g").has_value());
  EXPECT_TRUE(card_for("NVIDIA H100 80GB HBM3").has_value());
}

// CUTLASS's default tensor-core threadblock (default_gemm_configuration.h, OpClassTensorOp
// sm80: GemmShape<128, 128, 32>) cuts C into 128 x 128 tiles, one CTA each, in waves of one
// CTA per SM: 132 tiles fill the H100's 132 SMs once; 133 need a second wave that runs one.
TEST(CostRules, GemmWaveQuantisationOfTilesOverTheSms) {
  const Card c = h100();
  Kernel one_wave{.kind = Kind::kGemm, .dtype = Dtype::kBf16, .m = 128 * 12, .n = 128 * 11, .k = 4096};
  Kernel two_waves = one_wave;
  two_waves.m = 128 * 12 + 1;  // 13 x 11 = 143 tiles
  EXPECT_EQ(gemm_ctas(one_wave, c.sms), 132);
  EXPECT_EQ(gemm_ctas(two_waves, c.sms), 143);
  EXPECT_DOUBLE_EQ(wave_efficiency(132, 132), 1.0);
  EXPECT_DOUBLE_EQ(wave_efficiency(143, 132), 143.0 / 264.0);
  const Calibration u = unit();
  // 2 M N K at half the dense bf16 peak (989.4 TFLOP/s = 989.4e6 FLOP/us).
  const double flops = 2.0 * 1536 * 1408 * 4096;
  EXPECT_NEAR(gemm_us(one_wave, c, u), flops / (989.4e6 * 0.5), 1e-9);
  // One more row of tiles: 8% more work, almost twice the time.
  EXPECT_NEAR(gemm_us(two_waves, c, u) / gemm_us(one_wave, c, u), (1537.0 / 1536.0) * 264.0 / 143.0, 1e-9);
  // Split-K (cuBLAS, CUTLASS's GemmSplitKParallel): 36 tiles of a 768 x 768 weight gradient over
  // K = 8192 leave SMs idle; splitting K by floor(132 / 36) = 3 gives 108 CTAs.
  Kernel wgrad{.kind = Kind::kGemm, .dtype = Dtype::kBf16, .m = 768, .n = 768, .k = 8192};
  EXPECT_EQ(gemm_ctas(wgrad, c.sms), 108);
}

// A GEMM's dense peak by dtype: fp16/bf16 on tensor cores; fp32 on CUDA cores, since
// torch.backends.cuda.matmul.allow_tf32 defaults to False (torch/backends/cuda/__init__.py,
// float32_matmul_precision "highest"); an fp32 convolution on TF32 tensor cores, since
// torch.backends.cudnn.allow_tf32 defaults to True; bf16 on a card without bf16 tensor cores
// (T4: Turing has none) at the fp32 rate.
TEST(CostRules, TheDensePeakOfAGemmFollowsItsDtypeAndTorchsDefaults) {
  const Card c = h100();
  EXPECT_EQ(gemm_peak_tflops({.kind = Kind::kGemm, .dtype = Dtype::kF32}, c), 66.9);
  EXPECT_EQ(gemm_peak_tflops({.kind = Kind::kConv, .dtype = Dtype::kF32}, c), 494.7);
  EXPECT_EQ(gemm_peak_tflops({.kind = Kind::kGemm, .dtype = Dtype::kF16}, c), 989.4);
  const Card t4 = *card_for("t4");
  EXPECT_EQ(gemm_peak_tflops({.kind = Kind::kGemm, .dtype = Dtype::kBf16}, t4), 8.1);
  EXPECT_EQ(gemm_peak_tflops({.kind = Kind::kGemm, .dtype = Dtype::kF16}, t4), 65);
}

// A bandwidth-bound op (an elementwise kernel, a norm, a loss): its bytes read and written at
// the card's memory bandwidth (the H100 SXM5 datasheet's 3.35 TB/s), plus the launch overhead.
TEST(CostRules, ABandwidthBoundOpMovesItsBytesAtTheCardsBandwidth) {
  const Card c = h100();
  const Calibration u = unit();
  const Kernel add{.kind = Kind::kMemory, .bytes = 3 * 64e6};  // two 64 MB reads, one write
  EXPECT_NEAR(memory_us(add.bytes, c, u), 192e6 / (3350e3 * 0.5), 1e-9);
  EXPECT_NEAR(kernel_us(add, c, u), 192e6 / (3350e3 * 0.5) + 2, 1e-9);
  // A small GEMM whose operands outweigh its FLOPs is memory-bound: the larger of the two.
  Kernel gemv{.kind = Kind::kGemm, .dtype = Dtype::kBf16, .m = 1, .n = 4096, .k = 4096, .bytes = 2.0 * 4096 * 4096};
  EXPECT_NEAR(kernel_us(gemv, c, u), memory_us(gemv.bytes, c, u) + 2, 1e-9);
}

// Each SDPA backend: FlashAttention-2's work partition (one CTA per batch x head and 128-row
// block of queries forward, of keys backward; FLOPs 4 B H Lq Lk d forward, half that causal,
// 2.5 times backward: FlashAttention-2, sections 3.1 and 3.2), the memory-efficient kernel at
// 70% of flash (FlashAttention-2, figure 4, xformers against FlashAttention-2), cuDNN's as flash.
TEST(CostRules, EachSdpaBackendByItsWorkPartition) {
  const Card c = h100();
  const Calibration u = unit();
  Kernel flash{.kind = Kind::kAttention, .dtype = Dtype::kBf16, .m = 1024, .n = 1024, .k = 64,
               .batch = 8 * 12, .backend = Attention::kFlash, .causal = true};
  EXPECT_EQ(attention_ctas(flash), 96 * 8);  // 768 CTAs: 5.8 waves on 132 SMs
  EXPECT_DOUBLE_EQ(attention_flops(flash), 4.0 * 96 * 1024 * 1024 * 64 * 0.5);
  const double waves = 768.0 / (6 * 132);
  EXPECT_NEAR(attention_us(flash, c, u), attention_flops(flash) / (989.4e6 * 0.5 * waves), 1e-9);
  Kernel backward = flash;
  backward.backward = true;
  EXPECT_NEAR(attention_us(backward, c, u) / attention_us(flash, c, u), 2.5, 1e-9);
  Kernel efficient = flash;
  efficient.backend = Attention::kEfficient;
  EXPECT_NEAR(attention_us(efficient, c, u) / attention_us(flash, c, u), 1 / 0.7, 1e-9);
  Kernel cudnn = flash;
  cudnn.backend = Attention::kCudnn;
  EXPECT_NEAR(attention_us(cudnn, c, u), attention_us(flash, c, u), 1e-9);
  // fp32 attention (no flash for fp32: the memory-efficient kernel) at the fp32 rate.
  Kernel fp32 = efficient;
  fp32.dtype = Dtype::kF32;
  EXPECT_NEAR(attention_us(fp32, c, u) / attention_us(efficient, c, u), 989.4 / 66.9, 1e-9);
}

// multi_tensor_apply.cuh (torch 2.11): a launch holds at most depth_to_max_tensors[depth - 1]
// tensors ({110, 64, 48, 36, 30}) and depth_to_max_blocks[depth - 1] = 320 chunks of 65536
// elements. GPT-2's 148 parameters: AdamW's _foreach_lerp_ (2 lists) takes ceil(148 / 64) = 3
// launches; 124M elements in 1,943 chunks make a 1-list op chunk-bound: ceil(1943 / 320) = 7.
TEST(CostRules, ForeachLaunchesAsMultiTensorApplyCutsTheLists) {
  EXPECT_EQ(foreach_launches({.kind = Kind::kForeach, .tensors = 148, .chunks = 148, .lists = 2}), 3);
  EXPECT_EQ(foreach_launches({.kind = Kind::kForeach, .tensors = 148, .chunks = 1943, .lists = 1}), 7);
  EXPECT_EQ(foreach_launches({.kind = Kind::kForeach, .tensors = 148, .chunks = 148, .lists = 4}), 5);
}

// The launch overhead, host and device: every kernel costs the host its dispatch and the
// device a fixed launch time, so many tiny kernels are host-bound (the step is the host's
// dispatch time) and a sync makes the host wait for the queue.
TEST(CostRules, LaunchOverheadMakesTinyKernelsHostBound) {
  const Card c = h100();
  const Calibration u = unit();
  const std::vector<Kernel> tiny(100, Kernel{.kind = Kind::kMemory, .bytes = 1024});
  const auto t = predict_step(tiny, c, u);
  EXPECT_NEAR(t.step_ms, 100 * 10 / 1e3, 1e-9);  // host: 10 us a kernel
  EXPECT_NEAR(t.device_ms, 100 * (2 + 1024 / (3350e3 * 0.5)) / 1e3, 1e-9);
  // Views dispatch and launch nothing.
  std::vector<Kernel> views(100, Kernel{.kind = Kind::kDispatch});
  EXPECT_NEAR(predict_step(views, c, u).step_ms, 100 * 1 / 1e3, 1e-9);
  // A device-bound step is the kernels' time back to back, host time hidden.
  const std::vector<Kernel> big(10, Kernel{.kind = Kind::kMemory, .bytes = 1e9});
  EXPECT_NEAR(predict_step(big, c, u).step_ms, 10 * (1e9 / (3350e3 * 0.5) + 2) / 1e3, 1e-9);
}

// Host gaps: 8-bit AdamW synchronises after each parameter (bitsandbytes optimizer.py
// Optimizer8bit.step, sync_gpu), so its kernels cannot queue behind the host; offload's copies
// cross PCIe (gen5 x16 here) and its CPU step runs on the host.
TEST(CostRules, SyncsAndPcieCopiesAreHostGaps) {
  const Card c = h100();
  const Calibration u = unit();
  const Kernel update{.kind = Kind::kMemory, .bytes = 1e6};
  const double update_us = 1e6 / (3350e3 * 0.5) + 2;
  std::vector<Kernel> synced;
  for (int i = 0; i < 10; ++i) {
    synced.push_back(update);
    synced.push_back({.kind = Kind::kSync});
  }
  // Each parameter: dispatch (10), then its kernel (update_us), then the sync's round trip (20).
  EXPECT_NEAR(predict_step(synced, c, u).step_ms, 10 * (10 + update_us + 20) / 1e3, 1e-9);
  const Kernel copy{.kind = Kind::kPcie, .bytes = 63e6};
  EXPECT_NEAR(kernel_us(copy, c, u), 63e6 / (63.008e3) + 2, 1e-6);
  const Kernel cpu{.kind = Kind::kHostCompute, .bytes = 1e6};
  EXPECT_NEAR(predict_step({cpu}, c, u).step_ms, (10 + 1e6 / 10e3) / 1e3, 1e-9);
}

// Autograd's host work: an op that records a node (VariableType's kernel builds it and its
// saved tensors) or that the engine runs inside a node's apply (autograd/function.h,
// Node::operator()) costs host_autograd_us more than the same op dispatched with no autograd
// (an optimizer's, eval's): a view or factory too, and once per op, not per foreach launch.
TEST(CostRules, AutogradAddsItsHostTimeToEveryOpItRuns) {
  const Card c = h100();
  const Calibration u = unit();
  const Kernel plain{.kind = Kind::kMemory, .bytes = 1024};
  Kernel recorded = plain;
  recorded.autograd = true;
  EXPECT_NEAR(predict_step(std::vector<Kernel>(100, plain), c, u).step_ms, 100 * 10 / 1e3, 1e-9);
  EXPECT_NEAR(predict_step(std::vector<Kernel>(100, recorded), c, u).step_ms, 100 * 15 / 1e3, 1e-9);
  const Kernel view{.kind = Kind::kDispatch, .autograd = true};
  EXPECT_NEAR(predict_step({recorded, view}, c, u).step_ms, (15 + 1 + 5) / 1e3, 1e-9);
  // A foreach op over 220 tensors of one list: two launches, autograd's time once.
  const Kernel foreach{.kind = Kind::kForeach, .bytes = 1024, .tensors = 220, .chunks = 220,
                       .autograd = true};
  EXPECT_NEAR(predict_step({foreach}, c, u).step_ms, (2 * 10 + 5) / 1e3, 1e-9);
}

// The loop: a Python (PyTorch + transformers) loop's host time is sweep's C++ burst's times
// python_host; checkpointing's saved-tensor hooks (torch/utils/checkpoint.py: _checkpoint_hook
// packs each saved tensor in the forward, _recomputation_hook in the recomputation, and the
// unpack hook hands it to backward) are Python functions there, python_hook_us each, and C++
// in sweep's burst, host_hook_us; device time is the same.
TEST(CostRules, APythonLoopsHostTimeScalesSweepsAndItsCheckpointHooksCostTheirOwn) {
  const Card c = h100();
  Calibration u = unit();
  u.python_host = 1.5;
  u.host_hook_us = 1;
  u.python_hook_us = 20;
  const std::vector<Kernel> tiny(100, Kernel{.kind = Kind::kMemory, .bytes = 1024});
  EXPECT_NEAR(predict_step(tiny, c, u, {.python = false}).step_ms, 1.0, 1e-9);
  EXPECT_NEAR(predict_step(tiny, c, u, {.python = true}).step_ms, 1.5, 1e-9);
  std::vector<Kernel> hooked = tiny;
  hooked.insert(hooked.end(), 30, Kernel{.kind = Kind::kHook});
  EXPECT_NEAR(predict_step(hooked, c, u, {.python = false}).step_ms, 1.0 + 30 * 1 / 1e3, 1e-9);
  EXPECT_NEAR(predict_step(hooked, c, u, {.python = true}).step_ms, 1.5 + 30 * 20 / 1e3, 1e-9);
  std::vector<Kernel> big(10, Kernel{.kind = Kind::kMemory, .bytes = 1e9});
  big.insert(big.end(), 30, Kernel{.kind = Kind::kHook});
  EXPECT_NEAR(predict_step(big, c, u, {.python = true}).step_ms, predict_step(big, c, u, {.python = false}).step_ms,
              1e-9);
}

TEST(CostFit, ATraceReadsBackAndTheFitFindsTheCalibrationItWasMadeWith) {
  const Card c = h100();
  std::vector<Kernel> step = {
      {.kind = Kind::kGemm, .dtype = Dtype::kBf16, .m = 4096, .n = 4096, .k = 1024, .bytes = 3e7},
      {.kind = Kind::kAttention, .dtype = Dtype::kBf16, .m = 512, .n = 512, .k = 64, .batch = 96,
       .backend = Attention::kEfficient, .causal = true, .backward = true},
      {.kind = Kind::kForeach, .bytes = 1e8, .tensors = 10, .chunks = 1000, .lists = 3},
      {.kind = Kind::kDispatch, .autograd = true}, {.kind = Kind::kSync}, {.kind = Kind::kHook}};
  const auto back = parse_trace(nlohmann::json::parse(trace_json(step).dump()));
  ASSERT_EQ(back.size(), step.size());
  EXPECT_EQ(trace_json(back), trace_json(step));
  // Steps measured with unit(): the fit, from the committed calibration, gets within 3%.
  std::vector<Sample> samples;
  for (int scale : {1, 4, 16, 64}) {
    std::vector<Kernel> s = step;
    s[0].m *= scale;
    s[1].batch *= scale;
    for (int i = 0; i < 200 / scale; ++i) s.push_back({.kind = Kind::kMemory, .bytes = 1e5});
    samples.push_back({"s", "g", s, predict_step(s, c, unit()).step_ms, {}});
  }
  EXPECT_GT(mean_abs_error(samples, c, calibration()), 0.0);
  const Calibration fitted = fit(samples, c, calibration());
  EXPECT_LT(mean_abs_error(samples, c, fitted), 0.03);
}

}  // namespace
}  // namespace sweep::cost
