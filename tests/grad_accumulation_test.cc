// The autograd engine's sum of a tensor's gradients (sweeps/worker/emulate/grad_accumulation.h):
// in place on a real device, and so on the emulated one, where PyTorch itself would add out of
// place because it counts every Meta tensor as a tensor subclass.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>

#include "sweeps/measure/trackers.h"
#include "sweeps/worker/emulate/emulation.h"
#include "sweeps/worker/emulate/grad_accumulation.h"

namespace sweep {
namespace {

// A weight used twice, as a tied embedding and output layer under autocast: looked up, and
// cast to bf16 for the output's matmul. Its two gradients meet in the engine's buffer: the
// output layer's (cast back to fp32) first, the embedding's last. Returns the backward's peak
// above what was allocated before it.
int64_t backward_peak(torch::Device device, MemoryTracker& mem, bool in_place) {
  const auto f32 = torch::TensorOptions().device(device);
  auto w = torch::empty({1000, 64}, f32).requires_grad_(true);
  const auto ids = torch::zeros({2, 8}, f32.dtype(torch::kLong));
  torch::Tensor loss;
  {
    auto x = at::embedding(w, ids);
    auto logits = at::linear(x.to(torch::kBFloat16), w.to(torch::kBFloat16));
    loss = logits.to(torch::kFloat).sum();
  }
  mem.reset_peaks();
  const int64_t before = mem.allocated();
  {
    std::optional<emu::InPlaceAccumulation> sums;
    if (in_place) sums.emplace();
    loss.backward();
  }
  return mem.peak_allocated() - before;
}

TEST(GradAccumulation, TheEngineSumsATiedWeightsGradientsInPlaceAsOnTheCpu) {
  static auto cpu_mem = make_cpu_tracker();
  const int64_t cpu = backward_peak(torch::kCPU, *cpu_mem, false);
  EmulatedCard card;
  card.name = "cpu";
  card.cpu = true;
  emu::start_emulation(card);
  auto mem = make_emulated_tracker(card, "");
  EXPECT_EQ(backward_peak(torch::kMeta, *mem, true), cpu);
  // Without it, Meta's out-of-place sum holds one gradient (1000 x 64 fp32) more, at a moment
  // the output layer's input gradient (2 x 8 x 64 fp32), part of the CPU's peak, is gone.
  EXPECT_EQ(backward_peak(torch::kMeta, *mem, false), cpu + 1000 * 64 * 4 - 2 * 8 * 64 * 4);
}

}  // namespace
}  // namespace sweep
