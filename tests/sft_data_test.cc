// The data's shape and collation under either trainer: a prompt-completion dataset
// (completion_share: SFTTrainer's completion_only_loss) and padding-free batches (padding_free:
// one row with position_ids, masked per sequence as transformers' masking_utils does). Their
// memory against TRL is tests/memory_fidelity_test.cc's SftFidelity (its prompt-completion and
// padding-free cases); here, what they compute and what the config says of them.
#include <gtest/gtest.h>

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

// The loss and every parameter's gradient of one batch, dropout off.
std::pair<double, std::vector<torch::Tensor>> loss_and_grads(
    const std::shared_ptr<models::ModelImpl>& model, const models::Batch& batch) {
  model->zero_grad();
  auto loss = model->loss(batch);
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters())
    grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return {loss.item<double>(), grads};
}

void expect_same_training(const std::pair<double, std::vector<torch::Tensor>>& a,
                          const std::pair<double, std::vector<torch::Tensor>>& b) {
  EXPECT_NEAR(a.first, b.first, 1e-5 * std::abs(b.first));
  ASSERT_EQ(a.second.size(), b.second.size());
  for (std::size_t i = 0; i < a.second.size(); ++i) {
    ASSERT_EQ(a.second[i].defined(), b.second[i].defined()) << "parameter " << i;
    if (a.second[i].defined())
      EXPECT_TRUE(torch::allclose(a.second[i], b.second[i], 1e-3, 1e-6))
          << "parameter " << i << ": " << (a.second[i] - b.second[i]).abs().max().item<double>();
  }
}

// A padding-free row is its batch packed: each sequence attends to itself alone (the packed
// mask), from position 0 (its position_ids), and the same labels are scored (the first of each
// sequence -100, so no pair across a boundary), so the loss and the gradients are the padded
// batch's. Under both trainers, and with a sliding window shorter than a sequence (Mistral's
// and_masks(sliding_window_overlay, causal) remapped to each sequence's positions).
TEST(SftData, APaddingFreeRowTrainsAsItsBatch) {
  for (const char* config : {"llama-tiny", "mistral-tiny"}) {
    SCOPED_TRACE(config);
    auto spec = models::find_model(SWEEP_SOURCE_DIR "/tests/fixtures/configs/" +
                                   std::string(config) + "/config.json");
    ASSERT_NE(spec, nullptr);
    torch::manual_seed(0);
    auto model = spec->make();
    model->train(false);
    for (const bool sft : {false, true}) {
      model->set_fused_lm_head(sft);
      torch::Generator g1 = at::detail::createCPUGenerator(1),
                       g2 = at::detail::createCPUGenerator(1);
      const auto padded = model->synthetic_batch({3, 16}, torch::kCPU, g1);
      models::BatchShape shape{3, 16};
      shape.padding_free = true;
      const auto packed = model->synthetic_batch(shape, torch::kCPU, g2);
      ASSERT_EQ(packed.tensors.size(), 3u);
      EXPECT_EQ(packed.tensors[0].sizes(), (std::vector<int64_t>{1, 48}));
      EXPECT_EQ(packed.tensors[2][0][16].item<int64_t>(), 0);  // the second sequence restarts
      EXPECT_EQ(packed.scored, padded.scored);
      expect_same_training(loss_and_grads(model, packed), loss_and_grads(model, padded));
    }
  }
}

// A prompt-completion batch labels the completion alone (its share of each sequence, rounded
// half up): that many labels are scored after the shift, and SFTTrainer's fused head computes
// the loss and gradients transformers' cross-entropy computes over those labels.
TEST(SftData, APromptCompletionBatchScoresItsCompletionsAlone) {
  auto spec = models::find_model(SWEEP_SOURCE_DIR "/tests/fixtures/configs/llama-tiny/config.json");
  ASSERT_NE(spec, nullptr);
  torch::manual_seed(0);
  auto model = spec->make();
  model->train(false);
  models::BatchShape shape{2, 20};
  shape.completion_share = 0.25;  // 5 completion tokens, 15 of prompt
  torch::Generator gen = at::detail::createCPUGenerator(1);
  const auto batch = model->synthetic_batch(shape, torch::kCPU, gen);
  const auto& labels = batch.tensors[1];
  EXPECT_EQ((labels.slice(1, 1) != -100).sum().item<int64_t>(), 2 * 5);
  EXPECT_EQ(batch.scored, 2 * 5);
  EXPECT_TRUE((labels.slice(1, 0, 15) == -100).all().item<bool>());
  EXPECT_TRUE(labels.slice(1, 15).equal(batch.tensors[0].slice(1, 15)));
  std::pair<double, std::vector<torch::Tensor>> runs[2];
  for (const bool sft : {false, true}) {
    model->set_fused_lm_head(sft);
    runs[sft] = loss_and_grads(model, batch);
  }
  expect_same_training(runs[1], runs[0]);
  // Padding-free too: the prompts' labels and each sequence's first are one set.
  shape.padding_free = true;
  torch::Generator again = at::detail::createCPUGenerator(1);
  EXPECT_EQ(model->synthetic_batch(shape, torch::kCPU, again).scored, 2 * 5);
}

// The config: a completion share of a non-causal model and padding-free batches of a model
// sweep does not pack are errors naming the line; the points that set neither keep their ids.
TEST(SftData, TheConfigRefusesWhatCannotRunNamingTheLine) {
  struct Case {
    const char* yaml;
    int line;
    const char* key;
    const char* names;
  };
  for (const Case& c : {
           Case{"models: [gpt2-test, t5-test]\ngrid:\n  completion_share: [0.5]\n", 3,
                "grid.completion_share", "t5-test"},
           Case{"models: [gpt2-test]\ngrid:\n  trainer: sft\n  padding_free: [false, true]\n", 4,
                "grid.padding_free", "gpt2-test"},
       }) {
    SCOPED_TRACE(c.yaml);
    try {
      expand_grid(load("sft-data-config", c.yaml), RunSettings{});
      ADD_FAILURE() << "no error";
    } catch (const UserError& e) {
      EXPECT_EQ(e.line(), c.line);
      EXPECT_EQ(e.key(), c.key);
      EXPECT_NE(std::string(e.what()).find(c.names), std::string::npos) << e.what();
    }
  }
  const auto pts =
      expand_grid(load("sft-data-ids", "models: [" SWEEP_SOURCE_DIR
                                       "/tests/fixtures/configs/llama-tiny/config.json]\n"
                                       "grid:\n  seq: 64\n  completion_share: [1, 0.5]\n"
                                       "  padding_free: [false, true]\n"),
                  RunSettings{});
  ASSERT_EQ(pts.size(), 4u);
  std::set<std::string> ids;
  for (const auto& p : pts) ids.insert(p.id());
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(axis_cells(pts[0]).at("completion_share"), 1);
  EXPECT_EQ(axis_cells(pts[1]).at("padding_free"), 1);
  EXPECT_EQ(nlohmann::json(pts[3]).get<Point>().id(), pts[3].id());
  // Unset, the share is no cell (and, as padding_free's 0, not in the id: SftTrainer's
  // TheAxisKeepsOldIdsAndRunsWithoutTheCache pins a point's id to the text it hashed before).
  Point plain = pts[0];
  plain.completion_share = 0;
  plain.padding_free = false;
  EXPECT_FALSE(axis_cells(plain).contains("completion_share"));
  EXPECT_EQ(axis_cells(plain).at("padding_free"), 0);
  EXPECT_NE(plain.id(), pts[0].id());
  EXPECT_EQ(plain.label().find("padding"), std::string::npos);
  EXPECT_NE(pts[1].label().find("padding-free"), std::string::npos) << pts[1].label();
}

// On an emulated card, where Triton's head copies only the scored positions (`compact`): a
// quarter of each sequence scored holds its tiles at a quarter of the tokens, below the whole
// sequence's by at least the three quarters of the (4096 x 32768) bf16 tile it no longer
// needs. Padding-free batches of two run, and hold more than their padded batch: the packed
// (1, 1, L, L) mask, and keys and values repeated per head where a mask rules out SDPA's GQA.
TEST(SftData, OnAnEmulatedCardTheCompletionShareAndPackingMoveThePeak) {
  auto dir = testing::temp_dir("sft-data-emulated");
  auto path = testing::write_file(
      dir / "c.yaml",
      "device: emulated\ngpu: rtx4090\nmodels: [" SWEEP_SOURCE_DIR
      "/tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json]\n"
      "steps: 1\nwarmup_steps: 1\nrepetitions: 1\nout: " +
          (dir / "out").string() +
          "\n"
          "grid: {seq: 2048, batch: 2, precision: bf16-amp, checkpointing: block, trainer: sft,\n"
          "       completion_share: [1, 0.25], padding_free: [false, true]}\n");
  auto r = testing::run_sweep_cli("run " + path + " --quiet", "SWEEP_GNUPLOT=/nonexistent");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = reports::read_results((dir / "out").string());
  ASSERT_EQ(results.rows.size(), 4u);
  using schema::column;
  std::map<std::pair<std::string, std::string>, double> forward;
  for (const auto& row : results.rows) {
    ASSERT_EQ(row.at(column("status")), "ok") << row.at(column("message"));
    forward[{std::string(row.at(column("completion_share"))),
             std::string(row.at(column("padding_free")))}] =
        *row.number(column("forward_peak_bytes"));
  }
  const double tile_quarters = 3.0 * 1024 * 32768 * 2;
  EXPECT_GT(forward.at({"1.0", "0"}) - forward.at({"0.25", "0"}), tile_quarters);
  EXPECT_GT(forward.at({"1.0", "1"}), forward.at({"1.0", "0"}));
}

}  // namespace
}  // namespace sweep
