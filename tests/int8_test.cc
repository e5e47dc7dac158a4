// 8-bit frozen weights (models/int8.cc) against bitsandbytes' Linear8bitLt on the CPU
// (tests/fixtures/int8-reference.pt, written by make_int8_reference.py): the int8 weight and
// scales, the output and the input's gradient on both of bnb's paths (eval: int8 matmul with
// outlier columns; training: dequantise and multiply) in fp32 and bf16, the layers transformers
// converts per family, and LoRA on top; the `weights` axis (validated where the config is read,
// old ids kept, exit 2 with file:line:field on a bad combination); on a GPU, the int8 path on
// CUDA.
#include <gtest/gtest.h>

#include <set>

#include "models/gpt2.h"
#include "models/int8.h"
#include "models/lora.h"
#include "models/zoo.h"
#include "pickle_fixture.h"
#include "sweep_version.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

namespace sweep {
namespace {

const c10::Dict<c10::IValue, c10::IValue>& fixture() {
  static const auto blob = read_fixture("int8-reference.pt");
  return blob;
}
torch::Tensor reference(const std::string& key) { return fixture().at(key).toTensor(); }

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

// Our matmul on the fixture's input, in bnb's train or eval mode: output and input gradient.
std::pair<torch::Tensor, torch::Tensor> run(const torch::Tensor& CB, const torch::Tensor& SCB,
                                            torch::ScalarType dtype, bool training) {
  auto x = reference("x").to(dtype, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
  auto y = models::int8_matmul(x, CB, SCB, reference("bias").to(dtype), training);
  y.backward(reference("grad_output").to(dtype));
  return {y.detach(), x.grad()};
}

TEST(Int8, WeightQuantisedAsInt8Params) {
  auto [CB, SCB] = models::int8_quantize_weight(reference("weight"));
  EXPECT_EQ(CB.scalar_type(), torch::kChar);
  EXPECT_TRUE(torch::equal(CB, reference("CB")));
  EXPECT_TRUE(torch::equal(SCB, reference("SCB")));
  auto [CB16, SCB16] = models::int8_quantize_weight(reference("weight").to(torch::kBFloat16));
  EXPECT_TRUE(torch::equal(CB16, reference("CB_bf16")));
  EXPECT_TRUE(torch::equal(SCB16, reference("SCB_bf16")));
}

// Tolerances: fp32 paths agree to rounding (the same ops in the same order, 1e-5); bf16 to a
// few of its ulps at these magnitudes (|y| < 10: 0.05).
TEST(Int8, MatchesBitsandbytesOnBothPaths) {
  struct Case {
    std::string name;
    torch::ScalarType dtype;
    bool training;
    double tol;
  } cases[] = {{"eval", torch::kFloat, false, 1e-5},
               {"train", torch::kFloat, true, 1e-5},
               {"eval_bf16", torch::kBFloat16, false, 0.05},
               {"train_bf16", torch::kBFloat16, true, 0.05}};
  for (const auto& c : cases) {
    const bool bf16 = c.dtype == torch::kBFloat16;
    const std::string suffix = bf16 ? "_bf16" : "";
    auto [out, grad] = run(reference("CB" + suffix), reference("SCB" + suffix), c.dtype, c.training);
    const std::string mode = c.training ? "train" : "eval";
    const double dout = max_diff(out, reference(mode + "_out" + suffix));
    const double dgrad = max_diff(grad, reference(mode + "_grad" + suffix));
    std::printf("%-10s max |out - bnb| %.3g, max |grad - bnb| %.3g\n", c.name.c_str(), dout, dgrad);
    EXPECT_LE(dout, c.tol) << c.name;
    EXPECT_LE(dgrad, c.tol) << c.name;
  }
  // The fixture's input has outliers, so the eval path above ran bnb's decomposition.
  EXPECT_GT(reference("x").abs().max().item<double>(), models::kInt8Threshold);
}

TEST(Int8, ConvertsTheLayersTransformersConverts) {
  for (const char* family : {"gpt2", "t5", "whisper"}) {
    std::set<std::string> ours(models::int8_layer_names(family).begin(),
                               models::int8_layer_names(family).end());
    std::set<std::string> theirs;
    for (const auto& n : fixture().at(std::string("layers_") + family).toList())
      theirs.insert(n.get().toStringRef());
    EXPECT_EQ(ours, theirs) << family;
  }
}

TEST(Int8, ModelHoldsInt8WeightsAndScalesAndTrainsLora) {
  for (const char* name : {"gpt2-test", "t5-test", "whisper-test"}) {
    const auto* spec = models::find_model(name);
    auto model = spec->make();
    int64_t before = 0, after = 0;
    for (const auto& t : model->parameters()) before += t.nbytes();
    const int n = models::quantize_int8(*model, spec->family);
    for (const auto& t : model->parameters()) after += t.nbytes();
    for (const auto& t : model->buffers()) after += t.nbytes();
    EXPECT_GT(n, 0) << name;
    EXPECT_LT(after, before) << name;  // int8 (1 B) + a 4 B scale per row replace 4 B weights
    models::add_lora(*model, {8, 8, 0, models::default_lora_targets(spec->family)});
    model->train();
    auto gen = at::detail::createCPUGenerator(1);
    auto batch = model->synthetic_batch({2, 16, 8, 4.0}, torch::kCPU, gen);
    auto loss = model->loss(batch);
    loss.backward();
    int with_grad = 0;
    for (const auto& p : model->named_parameters()) {
      if (p.key().find("lora_") != std::string::npos) {
        EXPECT_TRUE(p.value().grad().defined()) << name << " " << p.key();
        ++with_grad;
      } else {
        EXPECT_FALSE(p.value().grad().defined()) << name << " " << p.key();
      }
    }
    EXPECT_GT(with_grad, 0) << name;
    EXPECT_TRUE(std::isfinite(loss.item<double>())) << name;
  }
}

TEST(Int8, MatchesTheCpuPath_CUDA) {
  // CUDA runs MatMul8bitLt (bnb's matmul picks MatMul8bitFp only on the CPU and XPU): the
  // same values as its CPU eval path, through at::_int_mm.
  auto [CB, SCB] = models::int8_quantize_weight(reference("weight").cuda());
  EXPECT_TRUE(torch::equal(CB.cpu(), reference("CB")));
  auto x = reference("x").repeat({4, 1, 1}).cuda().requires_grad_(true);  // 40 rows: _int_mm's n > 16
  auto y = models::int8_matmul(x, CB, SCB, reference("bias").cuda(), /*training=*/true);
  y.backward(reference("grad_output").repeat({4, 1, 1}).cuda());
  EXPECT_LE(max_diff(y.cpu().slice(0, 0, 2), reference("eval_out")), 1e-4);
  EXPECT_LE(max_diff(x.grad().cpu().slice(0, 0, 2), reference("eval_grad")), 1e-4);
}

Config load(const std::string& name, const std::string& yaml) {
  return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
}

TEST(Int8, TrainingInt8WithoutLoraIsAConfigErrorWithTheLineAndAHint) {
  try {
    expand_grid(load("int8-nolora", "models: [gpt2-test]\ngrid:\n  adapter: [none, lora]\n"
                                    "  weights: [full, int8]\n"),
                RunSettings{});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.key(), "grid.weights");
    EXPECT_NE(std::string(e.what()).find("adapter lora"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("exclude: [{weights: int8, adapter: none}]"), std::string::npos)
        << e.hint();
  }
  // The hint's exclude is enough; eval runs int8 weights without an adapter.
  auto pts = expand_grid(load("int8-excl", "models: [gpt2-test]\ngrid:\n  mode: [train, eval]\n"
                                           "  adapter: [none, lora]\n  weights: [full, int8]\n"
                                           "exclude: [{weights: int8, adapter: none, mode: train}]\n"),
                         RunSettings{});
  ASSERT_EQ(pts.size(), 7u);
  EXPECT_EQ(pts[2].adapter, Adapter::kLora);
  EXPECT_EQ(pts[2].weights, Weights::kInt8);
  EXPECT_EQ(pts[4].mode, Mode::kEval);
  EXPECT_EQ(pts[4].adapter, Adapter::kNone);
  EXPECT_EQ(pts[4].weights, Weights::kInt8);
  try {
    load("int8-val", "models: [gpt2-test]\ngrid: {weights: int4}\n");
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.key(), "grid.weights");
    EXPECT_NE(e.hint().find("full, int8"), std::string::npos) << e.hint();
  }
  auto path = testing::write_file(testing::temp_dir("int8-cli") / "bad.yaml",
                                  "models: [gpt2-test]\ngrid:\n  weights: int8\n");
  auto r = testing::run_sweep_cli("run " + path + " --device cpu --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":3: grid.weights"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

TEST(Int8, TheAxisKeepsOldIds) {
  auto pts = expand_grid(load("int8-axis", "models: [gpt2-test]\ngrid:\n  adapter: lora\n"
                                           "  weights: [full, int8]\n"),
                         RunSettings{});
  ASSERT_EQ(pts.size(), 2u);
  // A full-weight point hashes exactly the text it hashed before the axis existed.
  EXPECT_EQ(pts[0].id(),
            fnv1a_hex("model=gpt2-test;mode=train;batch=1;seq=128;target_seq=0;audio_s=0;"
                      "precision=fp32;checkpointing=none;accumulation=1;optimizer=adamw;"
                      "alloc_conf=;steps=3;warmup_steps=1;repetitions=3;budget_bytes=0;"
                      "suite_version=" SWEEP_VERSION ";adapter=lora;lora_r=8;lora_alpha=8;"
                      "lora_dropout=0;lora_targets=c_attn"));
  EXPECT_NE(pts[1].id(), pts[0].id());
  EXPECT_EQ(pts[1].label(), "gpt2-test b=1 seq=128 fp32 ckpt=none acc=1 adamw lora r=8 weights=int8");
  EXPECT_EQ(nlohmann::json(pts[1]).get<Point>().id(), pts[1].id());
}

}  // namespace
}  // namespace sweep
