// Activation offloading (`activation_offloading`, SFTConfig's; sweeps/worker/activation_offload.h):
// under checkpointing each block's input leaves the card but for the last few the forward
// stashed, and pinned host memory holds them all; the config takes it under trainer sft on a
// card only. The *_CUDA test trains the same steps with and without it on a GPU.
#include <gtest/gtest.h>

#include "reports/results/cards.h"
#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "sweeps/measure/trackers.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "sweeps/worker/burst.h"
#include "test_util.h"

namespace sweep {
namespace {

using schema::column;

// SmolLM2-135M: 30 layers of width 576, so 30 block inputs (fp32 under bf16 autocast, batch 2
// of 2048 tokens: 9 MiB each) against the three the forward's stash of five tensors (two a
// layer: the checkpoint's dummy and the input) still holds at the last layer.
constexpr int64_t kLayers = 30;
constexpr int64_t kBlockInput = 2 * 2048 * 576 * 4;

TEST(ActivationOffload, OnAnEmulatedCardEachBlocksInputLeavesTheCard) {
  auto dir = testing::temp_dir("activation-offload");
  auto path = testing::write_file(
      dir / "c.yaml",
      "device: emulated\ngpu: rtx4090\nmodels: [smollm2-135m]\n"
      "steps: 1\nwarmup_steps: 1\nrepetitions: 1\nout: " +
          (dir / "out").string() +
          "\n"
          "grid: {seq: 2048, batch: 2, precision: bf16-amp, checkpointing: block, "
          "trainer: sft, adapter: lora, activation_offloading: [false, true]}\n");
  auto r = testing::run_sweep_cli("run " + path + " --quiet", "SWEEP_GNUPLOT=/nonexistent");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = reports::read_results((dir / "out").string());
  ASSERT_EQ(results.rows.size(), 2u);
  const bool on_first = results.rows[0].at(column("activation_offloading")) == "1";
  const auto& plain = results.rows[on_first ? 1 : 0];
  const auto& off = results.rows[on_first ? 0 : 1];
  ASSERT_EQ(plain.at(column("status")), "ok") << plain.at(column("message"));
  ASSERT_EQ(off.at(column("status")), "ok") << off.at(column("message"));
  EXPECT_EQ(plain.at(column("activation_offloading")), "0");
  EXPECT_EQ(plain.at(column("host_peak_bytes")), "");
  const int64_t dropped = static_cast<int64_t>(*plain.number(column("forward_peak_bytes")) -
                                               *off.number(column("forward_peak_bytes")));
  EXPECT_GE(dropped, (kLayers - 3) * kBlockInput - (1 << 20));
  EXPECT_LE(dropped, kLayers * kBlockInput);
  EXPECT_LT(*off.number(column("peak_allocated_bytes")),
            *plain.number(column("peak_allocated_bytes")));
  // Every block input is pinned at once (9 MiB rounds up to 16 MiB), and what else was saved.
  EXPECT_GE(*off.number(column("host_peak_bytes")), static_cast<double>(kLayers * (16 << 20)));
}

Config load(const std::string& name, const std::string& yaml) {
  return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
}

// SFTConfig's flag alone (Trainer has none), and only where there is a card to offload from.
TEST(ActivationOffload, OnlySftTrainerOnACardOffloads) {
  RunSettings card;
  card.device = Device::kEmulated;
  card.card = facts_of(*find_card("rtx4090"));
  try {
    expand_grid(load("ao-hf",
                     "models: [smollm2-135m]\ngrid:\n  trainer: [hf, sft]\n"
                     "  activation_offloading: true\n"),
                card);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.key(), "grid.activation_offloading");
    EXPECT_NE(std::string(e.what()).find("SFTConfig"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("trainer: sft"), std::string::npos) << e.hint();
  }
  try {
    expand_grid(load("ao-cpu",
                     "models: [smollm2-135m]\ngrid:\n  trainer: sft\n"
                     "  activation_offloading: [false, true]\n"),
                RunSettings{});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4);
    EXPECT_NE(std::string(e.what()).find("CPU"), std::string::npos) << e.what();
  }
  const auto pts = expand_grid(load("ao-ok",
                                    "models: [smollm2-135m]\ngrid:\n  trainer: sft\n"
                                    "  mode: [train, eval]\n  activation_offloading: true\n"),
                               card);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_TRUE(pts[0].activation_offloading);
  EXPECT_FALSE(pts[1].activation_offloading);  // eval saves nothing for backward
  EXPECT_NE(pts[0].label().find("offload-activations"), std::string::npos) << pts[0].label();
}

// On a GPU: the same loss, the block inputs off the card, pinned host memory holding them.
TEST(ActivationOffload, TheSameStepsWithTheBlockInputsInPinnedMemory_CUDA) {
  static auto mem = make_cuda_tracker();
  static auto timer = make_cuda_timer();
  Point plain =
      tiny_point("smollm2-135m", Device::kCuda, Precision::kBf16Amp, OptimizerKind::kAdamW);
  plain.seq = 2048;
  plain.checkpointing = Checkpointing::kBlock;
  plain.trainer = Trainer::kSft;
  plain.use_cache = false;
  plain.adapter = Adapter::kLora;
  plain.lora_dropout = 0;
  Point off = plain;
  off.activation_offloading = true;
  const auto a = run_burst(plain, *mem, *timer);
  const auto b = run_burst(off, *mem, *timer);
  ASSERT_EQ(a.status, Status::kOk) << a.message;
  ASSERT_EQ(b.status, Status::kOk) << b.message;
  EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::abs(a.loss));
  EXPECT_GE(*a.forward_peak_bytes - *b.forward_peak_bytes, (kLayers - 3) * kBlockInput - (2 << 20));
  EXPECT_GE(*b.host_peak_bytes, kLayers * (16 << 20));
}

}  // namespace
}  // namespace sweep
