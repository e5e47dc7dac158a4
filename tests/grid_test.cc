// Grid expansion is a pure function: exact order, exclusions, per-model axes, identity.
#include <gtest/gtest.h>

#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

namespace sweep {
namespace {

Config load(const std::string& name, const std::string& yaml) {
  auto dir = testing::temp_dir(name);
  return load_config(testing::write_file(dir / "c.yaml", yaml));
}

std::vector<std::string> labels(const std::vector<Point>& pts) {
  std::vector<std::string> v;
  for (const auto& p : pts) v.push_back(p.label());
  return v;
}

TEST(Grid, CartesianProductInExactOrderWithBatchInnermost) {
  auto cfg = load("order", R"(
models: [gpt2-test]
grid:
  batch: [1, 2]
  seq: 64
  precision: [fp32, bf16-amp]
  checkpointing: [none, block]
)");
  auto pts = expand_grid(cfg, RunSettings{});
  EXPECT_EQ(labels(pts), (std::vector<std::string>{
                             "gpt2-test b=1 seq=64 fp32 ckpt=none acc=1 adamw",
                             "gpt2-test b=2 seq=64 fp32 ckpt=none acc=1 adamw",
                             "gpt2-test b=1 seq=64 fp32 ckpt=block acc=1 adamw",
                             "gpt2-test b=2 seq=64 fp32 ckpt=block acc=1 adamw",
                             "gpt2-test b=1 seq=64 bf16-amp ckpt=none acc=1 adamw",
                             "gpt2-test b=2 seq=64 bf16-amp ckpt=none acc=1 adamw",
                             "gpt2-test b=1 seq=64 bf16-amp ckpt=block acc=1 adamw",
                             "gpt2-test b=2 seq=64 bf16-amp ckpt=block acc=1 adamw",
                         }));
}

TEST(Grid, EveryModelsDefaultAxesAreOnesItTakes) {
  // whisper-test used to default to Whisper's 30 s of audio, 7.5 times its window.
  auto cfg = load("defaults", "models: [whisper-test, whisper-tiny, gpt2-test, whisper-s2s-test]\n");
  auto pts = expand_grid(cfg, RunSettings{});
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].audio_s, 2);
  EXPECT_EQ(pts[0].target_seq, 0);  // the encoder-classifier takes no labels
  EXPECT_EQ(pts[1].audio_s, 30);
  EXPECT_EQ(pts[1].target_seq, 128);  // the whole Whisper's labels
  EXPECT_EQ(pts[2].seq, 128);
  EXPECT_EQ(pts[3].target_seq, 64);  // whisper-s2s-test's 64 label positions
}

TEST(Grid, ExcludesThatRemoveEveryPointAreAnError) {
  auto cfg = load("exclude_all", R"(
models: [gpt2-test]
grid: {batch: [1, 2], seq: 32}
exclude:
  - {model: gpt2-test}
)");
  try {
    expand_grid(cfg, RunSettings{});
    FAIL() << "an empty grid was expanded";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 5);
    EXPECT_EQ(e.key(), "exclude");
    EXPECT_NE(std::string(e.what()).find("remove every point"), std::string::npos);
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(Grid, ASequenceLongerThanTheModelTakesIsAConfigError) {
  auto cfg = load("too_long", R"(
models: [gpt2-test, t5-test]
grid:
  batch: 1
  seq: [128, 512]
)");
  try {
    expand_grid(cfg, RunSettings{});
    FAIL() << "seq 512 was expanded for gpt2-test (256 positions)";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 5);
    EXPECT_EQ(e.key(), "seq");
    EXPECT_NE(std::string(e.what()).find("gpt2-test's 256 positions"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("up to 256"), std::string::npos) << e.hint();
  }
  // T5's relative positions take any length; Whisper's window is its limit.
  EXPECT_NO_THROW(expand_grid(load("t5_long", "models: [t5-test]\ngrid: {seq: 4096}\n"), RunSettings{}));
  EXPECT_THROW(expand_grid(load("whisper_long", "models: [whisper-test]\ngrid: {audio_s: 5}\n"),
                           RunSettings{}),
               UserError);
  // The whole Whisper's labels: at most max_target_positions (448), as transformers refuses.
  try {
    expand_grid(load("labels_long", "models: [whisper-small]\ngrid:\n  target_seq: 500\n"), RunSettings{});
    FAIL() << "500 label tokens were expanded for whisper-small";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.key(), "target_seq");
    EXPECT_NE(std::string(e.what()).find("whisper-small's 448 label positions"), std::string::npos) << e.what();
  }
}

TEST(Grid, AnUnboundedGridIsCountedAndRefusedBeforeExpanding) {
  // Four 100-value axes: 10^8 points used to end in std::bad_alloc.
  std::string values, confs;  // 1..100, and 100 allocator settings torch takes
  for (int i = 1; i <= 100; ++i) {
    values += (i > 1 ? ", " : "") + std::to_string(i);
    confs += (i > 1 ? ", " : "") + std::string("\"max_split_size_mb:") + std::to_string(20 + i) + "\"";
  }
  auto cfg = load("huge", "models: [gpt2-test]\ngrid: {batch: [" + values + "], seq: [" + values +
                              "], accumulation: [" + values + "], alloc_conf: [" + confs + "]}\n");
  EXPECT_EQ(count_grid(cfg), 100000000u);
  try {
    expand_grid(cfg, RunSettings{});
    FAIL() << "expanded 10^8 points";
  } catch (const UserError& e) {
    EXPECT_EQ(e.key(), "grid");
    EXPECT_NE(std::string(e.what()).find("100000000 points, more than the limit of 10000"),
              std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("--max-points"), std::string::npos);
  }
  // Within the limit (and with it raised) the same code expands.
  auto small = load("small", "models: [gpt2-test]\ngrid: {batch: [1, 2], seq: [8, 16]}\n");
  RunSettings tight;
  tight.max_points = 3;
  EXPECT_THROW(expand_grid(small, tight), UserError);
  tight.max_points = 4;
  EXPECT_EQ(expand_grid(small, tight).size(), 4u);
}

TEST(Grid, ExcludeRulesDropMatchingPointsOnly) {
  auto cfg = load("exclude", R"(
models: [gpt2-test]
grid: {batch: [1, 2, 4], precision: [fp32, bf16], seq: 32}
exclude:
  - {precision: bf16, batch: 4}
  - {model: gpt2-test, batch: 1, precision: fp32}
)");
  auto pts = expand_grid(cfg, RunSettings{});
  EXPECT_EQ(labels(pts), (std::vector<std::string>{
                             "gpt2-test b=2 seq=32 fp32 ckpt=none acc=1 adamw",
                             "gpt2-test b=4 seq=32 fp32 ckpt=none acc=1 adamw",
                             "gpt2-test b=1 seq=32 bf16 ckpt=none acc=1 adamw",
                             "gpt2-test b=2 seq=32 bf16 ckpt=none acc=1 adamw",
                         }));
}

TEST(Grid, SweepGroupsOverrideTheGridAndEvalDropsTrainingAxes) {
  auto cfg = load("groups", R"(
grid: {batch: [1, 2], seq: 32, accumulation: [1, 4]}
sweeps:
  - models: [gpt2-test]
  - models: [gpt2-test]
    grid: {mode: eval, batch: 8}
)");
  auto pts = expand_grid(cfg, RunSettings{});
  // 2 batches x 2 accumulations, then one eval point (accumulation collapses to 1).
  ASSERT_EQ(pts.size(), 5u);
  EXPECT_EQ(pts[4].mode, Mode::kEval);
  EXPECT_EQ(pts[4].batch, 8);
  EXPECT_EQ(pts[4].accumulation, 1);
  EXPECT_EQ(pts[4].optimizer, OptimizerKind::kNone);
}

TEST(Grid, AxesAModelDoesNotTakeStayUnset) {
  auto cfg = load("axes", "models: [gpt2-test]\ngrid: {seq: 16, audio_s: [10, 20], target_seq: 8}\n");
  auto pts = expand_grid(cfg, RunSettings{});
  ASSERT_EQ(pts.size(), 1u);  // audio_s and target_seq do not multiply GPT-2 points
  EXPECT_EQ(pts[0].audio_s, 0);
  EXPECT_EQ(pts[0].target_seq, 0);
}

TEST(Grid, PointIdentityIsStableAndDependsOnEveryAxis) {
  Point a;
  a.model = "gpt2";
  a.batch = 4;
  a.seq = 128;
  Point b = a;
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(a.id().size(), 16u);
  b.precision = Precision::kBf16Amp;
  EXPECT_NE(a.id(), b.id());
  b = a;
  b.alloc_conf = "expandable_segments:True";
  EXPECT_NE(a.id(), b.id());
  b = a;
  b.timeout_s = 5;  // how long we wait is not what is measured
  EXPECT_EQ(a.id(), b.id());
}

TEST(Grid, PointRoundTripsThroughJson) {
  Point a;
  a.model = "gpt2-test";
  a.batch = 3;
  a.audio_s = 12.5;
  a.budget_bytes = 123456;
  Point b = nlohmann::json(a).get<Point>();
  EXPECT_EQ(nlohmann::json(a), nlohmann::json(b));
}

}  // namespace
}  // namespace sweep
