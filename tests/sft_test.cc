// trainer: sft, TRL's SFTTrainer: the config's axis (old ids kept, the cache off, causal LMs
// only) and its fused LM head, whose loss and gradients are the whole logits' cross-entropy's
// (its memory is tests/memory_fidelity_test.cc's SftFidelity).
#include <gtest/gtest.h>

#include "models/fused_lm_head.h"
#include "models/zoo.h"
#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "sweep_version.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

namespace sweep {
namespace {

Config load(const std::string& name, const std::string& yaml) {
  return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
}

TEST(SftTrainer, TheAxisKeepsOldIdsAndRunsWithoutTheCache) {
  auto pts = expand_grid(load("sft-axis", "models: [gpt2-test]\ngrid:\n  trainer: [hf, sft]\n"
                                          "  use_cache: [true, false]\n"),
                         RunSettings{});
  // hf with and without the cache; sft once (the trainer nests inside the cache):
  // SFTTrainer runs the backbone with use_cache=False.
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].trainer, Trainer::kHf);
  EXPECT_TRUE(pts[0].use_cache);
  EXPECT_EQ(pts[1].trainer, Trainer::kSft);
  EXPECT_FALSE(pts[1].use_cache);
  EXPECT_EQ(pts[2].trainer, Trainer::kHf);
  EXPECT_FALSE(pts[2].use_cache);
  // A Trainer point hashes exactly the text it hashed before the axis existed.
  EXPECT_EQ(pts[0].id(),
            fnv1a_hex("model=gpt2-test;mode=train;batch=1;seq=128;target_seq=0;audio_s=0;"
                      "precision=fp32;checkpointing=none;accumulation=1;optimizer=adamw;"
                      "alloc_conf=;steps=3;warmup_steps=1;repetitions=3;budget_bytes=0;"
                      "suite_version=" SWEEP_VERSION));
  EXPECT_EQ(pts[1].label(), "gpt2-test b=1 seq=128 fp32 ckpt=none acc=1 adamw no-cache trainer-sft");
  EXPECT_EQ(nlohmann::json(pts[1]).get<Point>().id(), pts[1].id());
  EXPECT_EQ(axis_cells(pts[1]).at("trainer"), "sft");
  EXPECT_NE(pts[1].id(), pts[2].id());
}

TEST(SftTrainer, ASeq2SeqModelIsAConfigErrorNamingTheLine) {
  try {
    expand_grid(load("sft-t5", "models: [gpt2-test, t5-test]\ngrid:\n  precision: fp32\n"
                               "  trainer: [hf, sft]\n"),
                RunSettings{});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.key(), "grid.trainer");
    EXPECT_NE(std::string(e.what()).find("t5-test"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("trainer hf"), std::string::npos) << e.hint();
  }
  auto path = testing::write_file(testing::temp_dir("sft-cli") / "bad.yaml",
                                  "models: [t5-test]\ngrid:\n  trainer: sft\n");
  auto r = testing::run_sweep_cli("run " + path + " --device cpu --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":3: grid.trainer"), std::string::npos) << r.output;
}

// The reference: transformers' loss over the whole logits (ForCausalLMLoss, fp32).
torch::Tensor whole_logits_loss(const torch::Tensor& hidden, const torch::Tensor& weight,
                                const torch::Tensor& labels) {
  auto logits = at::linear(hidden, weight);
  return models::causal_lm_loss(logits, labels, weight.size(0));
}

// Over two tiles of tokens (4199 scored positions > 4096) and two of the vocabulary (32800 >
// 32768): the same loss, and the same gradients for the hidden states and the weight.
TEST(SftTrainer, TheFusedHeadIsTheCrossEntropyOverEveryTile) {
  torch::manual_seed(0);
  const int64_t B = 3, T = 1400, C = 8, V = 32800;
  auto hidden = torch::randn({B, T, C}).requires_grad_();
  auto weight = (torch::randn({V, C}) * 0.5).requires_grad_();
  auto labels = torch::randint(V, {B, T}, torch::kLong);
  labels.index_put_({0, torch::indexing::Slice(0, 100)}, -100);  // a prompt not scored

  auto ours = models::fused_lm_head_loss(hidden, weight, labels,
                                         (labels.slice(1, 1) != -100).sum().item<int64_t>());
  ours.backward();
  auto dh = hidden.grad().clone(), dw = weight.grad().clone();
  hidden.mutable_grad().reset();
  weight.mutable_grad().reset();
  auto ref = whole_logits_loss(hidden, weight, labels);
  ref.backward();
  EXPECT_NEAR(ours.item<double>(), ref.item<double>(), 1e-5 * std::abs(ref.item<double>()));
  EXPECT_TRUE(torch::allclose(dh, hidden.grad(), 1e-4, 1e-7))
      << (dh - hidden.grad()).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(dw, weight.grad(), 1e-4, 1e-7))
      << (dw - weight.grad()).abs().max().item<double>();
}

// A model of the zoo under trainer sft: the loss its Trainer would compute, and the tied
// embedding's gradient (the head's and the input's parts) alike.
TEST(SftTrainer, AModelsLossAndGradientsAreTrainers) {
  auto spec = models::find_model("gpt2-test");
  ASSERT_NE(spec, nullptr);
  torch::manual_seed(0);
  auto model = spec->make();
  model->train(false);  // no dropout: the two losses see the same activations
  torch::Generator gen = at::detail::createCPUGenerator(1);
  const auto batch = model->synthetic_batch({2, 64}, torch::kCPU, gen);
  std::vector<torch::Tensor> grads[2];
  double losses[2];
  for (int sft = 0; sft < 2; ++sft) {
    model->set_fused_lm_head(sft == 1);
    model->zero_grad();
    auto loss = model->loss(batch);
    loss.backward();
    losses[sft] = loss.item<double>();
    for (const auto& p : model->parameters()) grads[sft].push_back(p.grad().clone());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0]));
  for (std::size_t i = 0; i < grads[0].size(); ++i)
    EXPECT_TRUE(torch::allclose(grads[1][i], grads[0][i], 1e-3, 1e-6))
        << "parameter " << i << ": " << (grads[1][i] - grads[0][i]).abs().max().item<double>();
}

// On an emulated card (Triton's path: only the labelled positions, copied; the fold allocates
// nothing; the gradients accumulated by cuBLAS in fp32 from bf16) the row runs end to end, and
// its forward holds less than transformers' by more than the fp32 upcast of the logits alone.
TEST(SftTrainer, OnAnEmulatedCardTheLogitsAreNeverBuilt) {
  auto dir = testing::temp_dir("sft-emulated");
  auto path = testing::write_file(
      dir / "c.yaml", "device: emulated\ngpu: rtx4090\nmodels: [" SWEEP_SOURCE_DIR
                      "/tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json]\n"
                      "steps: 1\nwarmup_steps: 1\nrepetitions: 1\nout: " + (dir / "out").string() + "\n"
                      "grid: {seq: 2048, batch: 2, precision: bf16-amp, checkpointing: block, trainer: [hf, sft]}\n");
  auto r = testing::run_sweep_cli("run " + path + " --quiet", "SWEEP_GNUPLOT=/nonexistent");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = reports::read_results((dir / "out").string());
  ASSERT_EQ(results.rows.size(), 2u);
  using schema::column;
  const bool sft_first = results.rows[0].at(column("trainer")) == "sft";  // the runner's order
  const auto& hf = results.rows[sft_first ? 1 : 0];
  const auto& sft = results.rows[sft_first ? 0 : 1];
  ASSERT_EQ(hf.at(column("status")), "ok");
  ASSERT_EQ(sft.at(column("status")), "ok") << sft.at(column("message"));
  EXPECT_EQ(hf.at(column("trainer")), "hf");
  EXPECT_EQ(sft.at(column("trainer")), "sft");
  EXPECT_EQ(sft.at(column("use_cache")), "0");
  const double logits_fp32 = 2.0 * 2048 * 151936 * 4;
  EXPECT_GT(*hf.number(column("forward_peak_bytes")) - *sft.number(column("forward_peak_bytes")), logits_fp32);
  EXPECT_LT(*sft.number(column("peak_allocated_bytes")), *hf.number(column("peak_allocated_bytes")));
}

}  // namespace
}  // namespace sweep
