// LoRA (adapter: lora): the config keys refuse bad values with file, line and hint; the axis
// keeps the ids of points measured before it; the base is frozen (no gradients, no optimizer
// state) and the adapters are PEFT's (where they go, their shapes, a zero update at the start).
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "models/gpt2.h"
#include "models/zoo.h"
#include "sweep_version.h"
#include "sweeps/worker/burst.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

namespace sweep {
namespace {

Config load(const std::string& name, const std::string& yaml) {
  return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
}

UserError error_of(const std::string& name, const std::string& yaml) {
  try {
    expand_grid(load(name, yaml), RunSettings{});
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << "no UserError for:\n" << yaml;
  return UserError("", 0, "", "");
}

TEST(Lora, BadSettingsNameTheirLineKeyAndHint) {
  struct Case {
    std::string line, key, says;
  } cases[] = {
      {"lora_r: 0", "lora_r", "at least 1"},
      {"lora_r: 2.5", "lora_r", "not a whole number"},
      {"lora_alpha: 0", "lora_alpha", "more than 0"},
      {"lora_alpha: -8", "lora_alpha", "at least 0"},
      {"lora_dropout: 1", "lora_dropout", "less than 1"},
      {"lora_dropout: -0.1", "lora_dropout", "at least 0"},
      {"lora_targets: []", "lora_targets", "empty list"},
      {"lora_targets: [\"q, v\"]", "lora_targets", "not a module name"},
      {"lora_targets: [c_atn]", "lora_targets", "no target names a layer of gpt2-test"},
      {"lora_targets: [all-linear, c_attn]", "lora_targets", "PEFT's shorthand"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    auto e = error_of("lora-bad", "models: [gpt2-test]\ngrid: {adapter: lora}\n" + c.line + "\n");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.key(), c.key);
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
  auto e = error_of("lora-axis", "models: [gpt2-test]\ngrid:\n  adapter: [none, qlora]\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "grid.adapter");
  EXPECT_NE(e.hint().find("lora"), std::string::npos);
}

TEST(Lora, ATargetOfNoModelInTheSweepIsATypo) {
  // c_attn adapts GPT-2; "q_prj" names no layer of any model with adapter lora.
  auto e = error_of("lora-typo",
                    "models: [gpt2-test, whisper-test]\ngrid: {adapter: lora}\n"
                    "lora_targets: [c_attn, q_proj,\n  q_prj]\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(std::string(e.what()).find("'q_prj'"), std::string::npos) << e.what();
}

// PEFT's "all-linear" (any case, as PEFT compares it) is kept as the user wrote it, in the rows
// too, and means every linear layer of each model but its output embedding.
TEST(Lora, AllLinearIsPeftsShorthandForEveryLinearLayer) {
  for (const char* spelling : {"all-linear", "[All-Linear]"}) {
    auto pts = expand_grid(load("lora-all", std::string("models: [t5-test, gpt2-test]\ngrid: {adapter: lora}\n") +
                                                "lora_targets: " + spelling + "\n"),
                           RunSettings{});
    ASSERT_EQ(pts.size(), 2u);
    for (const auto& p : pts) {
      EXPECT_EQ(p.lora_targets_text(), "all-linear");
      EXPECT_EQ(models::lora_targets_of(p.family, p.lora_targets), models::lora_layer_names(p.family));
    }
  }
  EXPECT_EQ(models::lora_targets_of("t5", {}), models::default_lora_targets("t5"));
  EXPECT_EQ(models::lora_targets_of("t5", {"q"}), std::vector<std::string>{"q"});
}

TEST(Lora, CliExitsTwoWithFileLineAndHint) {
  auto path = testing::write_file(testing::temp_dir("lora-cli") / "bad.yaml",
                                  "models: [gpt2-test]\ngrid: {adapter: lora}\nlora_dropout: 1.5\n");
  auto r = testing::run_sweep_cli("run " + path + " --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":3: lora_dropout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

TEST(Lora, TheAxisKeepsOldIdsAndItsSettingsAreIdentity) {
  auto pts = expand_grid(load("lora-axis", R"(
models: [t5-test]
grid: {adapter: [none, lora], batch: [1, 2]}
lora_r: 16
)"),
                         RunSettings{});
  ASSERT_EQ(pts.size(), 4u);  // adapter outside batch: batch stays innermost
  EXPECT_EQ(pts[0].adapter, Adapter::kNone);
  EXPECT_EQ(pts[1].batch, 2);
  EXPECT_EQ(pts[2].adapter, Adapter::kLora);
  EXPECT_EQ(pts[2].lora_r, 16);
  EXPECT_EQ(pts[2].lora_targets_text(), "q;v");  // PEFT's default for T5
  EXPECT_EQ(pts[2].label(), "t5-test b=1 seq=128 tgt=128 fp32 ckpt=none acc=1 adamw lora r=16");

  // A point without an adapter hashes exactly the text it hashed before the axis existed.
  const Point& none = pts[0];
  EXPECT_EQ(none.id(),
            fnv1a_hex("model=t5-test;mode=train;batch=1;seq=128;target_seq=128;audio_s=0;"
                      "precision=fp32;checkpointing=none;accumulation=1;optimizer=adamw;"
                      "alloc_conf=;steps=3;warmup_steps=1;repetitions=3;budget_bytes=0;"
                      "suite_version=" SWEEP_VERSION));
  Point other = none;  // LoRA settings do not matter without LoRA
  other.lora_r = 4;
  other.lora_targets = {"o"};
  EXPECT_EQ(other.id(), none.id());
  // With LoRA every setting is identity.
  Point lora = pts[2];
  for (auto change : std::vector<std::function<void(Point&)>>{
           [](Point& p) { p.lora_r = 8; }, [](Point& p) { p.lora_alpha = 32; },
           [](Point& p) { p.lora_dropout = 0.1; }, [](Point& p) { p.lora_targets = {"q"}; }}) {
    Point q = lora;
    change(q);
    EXPECT_NE(q.id(), lora.id());
  }
  EXPECT_NE(lora.id(), none.id());
  Point back = nlohmann::json(lora).get<Point>();
  EXPECT_EQ(back.id(), lora.id());
}

// lora_layer_names is what configs are checked against, and what "all-linear" adapts: it must be
// the built models' Linear and Conv1D layers but the output embedding (a decoder's untied
// lm_head), as PEFT's _maybe_include_all_linear_layers finds them.
TEST(Lora, LayerNamesAreTheBuiltModelsLinearLayers) {
  const std::string configs = SWEEP_SOURCE_DIR "/tests/fixtures/configs/";
  for (const char* model : {"gpt2-test", "t5-test", "whisper-test"}) {
    const auto* spec = models::find_model(model);
    SCOPED_TRACE(model);
    auto m = spec->make();
    std::set<std::string> built, listed;
    for (const auto& item : m->named_modules())
      if (item.value()->as<torch::nn::Linear>() || item.value()->as<models::Conv1D>())
        built.insert(item.key());
    for (const auto& name : built) {
      bool any = false;
      for (const auto& layer : models::lora_layer_names(spec->family))
        if (models::lora_target_matches(name, layer)) any = true, listed.insert(layer);
      EXPECT_TRUE(any) << name << " is not in lora_layer_names";
    }
    EXPECT_EQ(listed.size(), models::lora_layer_names(spec->family).size());
    // The defaults adapt every attention block's layers and nothing else.
    const int n = models::add_lora(*m, {8, 8, 0, models::default_lora_targets(spec->family)});
    const int per_block = spec->family == "gpt2" ? 1 : spec->family == "t5" ? 2 : 2;
    const int blocks = spec->family == "t5" ? 2 + 2 * 2 : spec->layers;  // T5: cross-attn too
    EXPECT_EQ(n, per_block * blocks);
  }
  for (const std::string& model : std::vector<std::string>{"gpt2-test", "t5-test", "whisper-test", "whisper-s2s-test",
                                   configs + "llama-tiny/config.json", configs + "qwen3-tiny/config.json",
                                   configs + "phi3-tiny/config.json", configs + "mistral-tiny/config.json"}) {
    const auto* spec = models::find_model(model);
    ASSERT_NE(spec, nullptr) << model;
    SCOPED_TRACE(model);
    auto m = spec->make();
    int linear = 0;
    for (const auto& item : m->named_modules()) {
      if (!item.value()->as<torch::nn::Linear>() && !item.value()->as<models::Conv1D>()) continue;
      if (item.key() == "lm_head") continue;  // get_output_embeddings()
      ++linear;
      bool any = false;
      for (const auto& layer : models::lora_layer_names(spec->family))
        any = any || models::lora_target_matches(item.key(), layer);
      EXPECT_TRUE(any) << item.key() << " is not in lora_layer_names";
    }
    EXPECT_EQ(models::add_lora(*m, {8, 8, 0, models::lora_targets_of(spec->family, {models::kAllLinear})}), linear);
  }
}

TEST(Lora, AdaptersArePeftsAndStartAsAZeroUpdate) {
  auto m = models::find_model("gpt2-test")->make();
  m->train(false);
  auto gen = at::detail::createCPUGenerator(1);
  auto batch = m->synthetic_batch({2, 16, 0, 0}, torch::kCPU, gen);
  torch::NoGradGuard no_grad;
  auto before = m->logits(batch);
  models::add_lora(*m, {4, 16, 0.1, {"c_attn", "mlp.c_proj"}});
  int64_t trainable = 0;
  for (const auto& item : m->named_parameters()) {
    const bool adapter = item.key().find(".lora.lora_") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    if (adapter) trainable += item.value().numel();
  }
  // c_attn: A (4, 64), B (192, 4); mlp.c_proj: A (4, 256), B (64, 4); two blocks.
  EXPECT_EQ(trainable, 2 * (4 * 64 + 192 * 4 + 4 * 256 + 64 * 4));
  EXPECT_TRUE(torch::equal(m->logits(batch), before));  // B starts at zero
  for (auto& item : m->named_parameters())
    if (item.key().find("lora_B") != std::string::npos) item.value().fill_(0.01);
  EXPECT_FALSE(torch::allclose(m->logits(batch), before));
}

TEST(Lora, TheBaseHasNoGradientsAndNoOptimizerState) {
  Point p = tiny_point("gpt2-test", Device::kCpu, Precision::kFp32, OptimizerKind::kAdamW);
  p.adapter = Adapter::kLora;
  static auto mem = make_cpu_tracker();
  static auto timer = make_cpu_timer();
  const auto m = run_burst(p, *mem, *timer);
  ASSERT_EQ(m.status, Status::kOk) << m.message;
  const auto* spec = models::find_model("gpt2-test");
  // Rank 8 on c_attn (64 -> 192) in each of the two blocks, fp32.
  const int64_t adapters = 2 * (8 * 64 + 192 * 8) * 4;
  EXPECT_EQ(m.weights_bytes, spec->parameters * 4 + adapters);
  EXPECT_EQ(m.grads_bytes, adapters);
  EXPECT_EQ(m.optimizer_bytes, 2 * adapters);  // AdamW's two moments, of the adapters only
}

}  // namespace
}  // namespace sweep
