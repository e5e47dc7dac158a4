// 8-bit frozen weights (models/int8.cc) against bitsandbytes' Linear8bitLt on the CPU
// (tests/fixtures/int8-reference.pt, written by make_int8_reference.py): the int8 weight and
// scales, the output and the input's gradient on both of bnb's paths (eval: int8 matmul with
// outlier columns; training: dequantise and multiply) in fp32 and bf16, the layers transformers
// converts per family, and LoRA on top; the `weights` axis (validated where the config is read,
// old ids kept, exit 2 with file:line:field on a bad combination); on a GPU, the int8 path on
// CUDA.
#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>

#include <set>

#include "models/gpt2.h"
#include "models/int8.h"
#include "models/lora.h"
#include "models/zoo.h"
#include "pickle_fixture.h"
#include "sweep_version.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "sweeps/measure/trackers.h"
#include "sweeps/worker/emulate/emulation.h"
#include "sweeps/worker/load_int8.h"
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
  // make_int8_reference.py's whisper-test is the encoder-classifier (whisper-cls).
  for (const char* family : {"gpt2", "t5", "whisper"}) {
    const std::string ours_family = std::string(family) == "whisper" ? "whisper-cls" : family;
    std::set<std::string> ours(models::int8_layer_names(ours_family).begin(),
                               models::int8_layer_names(ours_family).end());
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

// The outliers (|x| >= 6) are zeroed for quantisation without writing the input: under fp16
// autocast MatMul8bitLt quantises its input itself (A.to(float16) is A), which the op before
// may have saved for its backward (here exp, which saves its output). An in-place write would
// bump its version and backward would refuse it.
TEST(Int8, OutliersLeaveTheInputAndItsBackwardAlone) {
  auto [CB, SCB] = models::int8_quantize_weight(reference("weight"));
  auto z = (reference("x") * 0.5).to(torch::kHalf).contiguous();
  z.view(-1).index_put_({3}, 2.5);  // exp(2.5) = 12.2: an outlier
  z.requires_grad_(true);
  auto x = z.exp();  // saves x for backward
  const auto before = x.detach().clone();
  ASSERT_TRUE((x.detach().abs() >= models::kInt8Threshold).any().item<bool>()) << "no outlier";
  const auto version = x._version();
  auto y = models::int8_matmul(x, CB, SCB, torch::Tensor(), /*training=*/false);  // MatMul8bitLt
  EXPECT_EQ(x._version(), version);
  EXPECT_TRUE(torch::equal(x.detach(), before));
  ASSERT_NO_THROW(y.to(torch::kFloat).sum().backward());
  EXPECT_TRUE(z.grad().defined());
}

// bnb's fp32 fallback of the int8 GEMM under CPU autocast (bf16): the int32 result is the
// exact product (bf16 would be off by hundreds at these sizes).
TEST(Int8, FallbackMatmulIsExactUnderAutocast) {
  torch::manual_seed(5);
  const auto A = torch::randint(-127, 128, {33, 768}, torch::kChar);
  const auto B = torch::randint(-127, 128, {2, 768}, torch::kChar);  // Whisper's 2-label head
  const auto exact = torch::matmul(A.to(torch::kLong), B.to(torch::kLong).t());
  torch::Tensor got;
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    got = models::int8_matmul_fallback(A, B);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
  EXPECT_EQ(got.scalar_type(), torch::kInt);
  const auto err = (got.to(torch::kLong) - exact).abs().max().item<int64_t>();
  std::printf("int8 fallback under bf16 autocast: max |error| %lld\n", static_cast<long long>(err));
  EXPECT_EQ(err, 0);
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


// transformers' load order: dot_natural_key (numbers as numbers, "h.2" before "h.10").
TEST(Int8Load, TensorsLoadInTheNaturalKeyOrder) {
  std::vector<std::string> names = {"transformer.wte.weight", "transformer.h.10.ln_1.weight",
                                    "transformer.h.2.mlp.c_fc.weight", "transformer.h.2.attn.c_attn.bias",
                                    "transformer.ln_f.weight", "layer2.x", "layer10.x", "layer.x"};
  std::sort(names.begin(), names.end(), natural_key_less);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "layer.x", "layer2.x", "layer10.x", "transformer.h.2.attn.c_attn.bias",
                       "transformer.h.2.mlp.c_fc.weight", "transformer.h.10.ln_1.weight",
                       "transformer.ln_f.weight", "transformer.wte.weight"}));
}

// What the device holds at most while transformers 5.17 + bitsandbytes 0.50.2 load the model
// in 8 bit onto it, from the model's tensors alone: in natural key order each tensor arrives
// in the load's dtype; a converted weight (n elements, r rows) first as that (value), then as
// float16 (B), then bnb's kernel allocates the scales (4 r) and the int8 matrix (n) before B and
// the value go.
int64_t reference_load_peak(torch::nn::Module& model, const std::string& family, int64_t dsize) {
  std::map<std::string, int64_t> rows;  // converted weights: rows of the matrix quantised
  for (auto& l : models::int8_layers(model, family))
    rows[l.name + ".weight"] = l.conv1d ? l.weight.size(1) : l.weight.size(0);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : model.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers()) tensors.emplace_back(item.key(), item.value());
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return natural_key_less(a.first, b.first); });
  int64_t level = 0, peak = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.numel();
    const int64_t size = t.is_floating_point() ? dsize : static_cast<int64_t>(t.element_size());
    const auto r = rows.find(name);
    if (r == rows.end()) {
      level += n * size;
      peak = std::max(peak, level);
      continue;
    }
    level += n * size + 2 * n + 4 * r->second + n;  // value, B, SCB, CB
    peak = std::max(peak, level);
    level -= n * size + 2 * n;  // B and the value go
  }
  return peak;
}

// The 8-bit load onto a device (a card's, here the emulated device counting every byte
// exactly) holds at most what the reference loader holds, to the byte, per family and dtype,
// and never the whole model in float32 (as moving it first and quantising on the device did).
TEST(Int8Load, TheDevicePeakIsTheReferenceLoaders) {
  EmulatedCard cpu;  // exact counting: no caching allocator rounding
  cpu.name = "cpu";
  cpu.cpu = true;
  emu::start_emulation(cpu);
  static auto mem = make_emulated_tracker(cpu, "");
  for (const char* name : {"gpt2-test", "t5-test", "whisper-test"}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto* spec = models::find_model(name);
      std::shared_ptr<models::ModelImpl> model, shapes;
      {
        emu::MetaFactories on_meta;
        HostScope host;
        model = spec->make();
        shapes = spec->make();
      }
      const int64_t base = mem->allocated();
      mem->reset_peaks();
      load_int8(*model, spec->family, torch::Device(torch::kMeta), dtype);
      const int64_t ours = mem->peak_allocated() - base;
      const int64_t ref = reference_load_peak(*shapes, spec->family, dtype == torch::kFloat ? 4 : 2);
      int64_t fp32_model = 0;
      for (const auto& t : shapes->parameters()) fp32_model += t.numel() * 4;
      std::printf("%s %s: load peak %lld B, reference loader %lld B, the model in fp32 %lld B\n",
                  name, c10::toString(dtype), static_cast<long long>(ours),
                  static_cast<long long>(ref), static_cast<long long>(fp32_model));
      EXPECT_EQ(ours, ref) << name << " " << c10::toString(dtype);
      EXPECT_LT(ours, fp32_model) << name;
      for (const auto& l : models::int8_layers(*model, spec->family))
        EXPECT_TRUE(models::is_int8(l.weight)) << name << " " << l.name;
      model.reset();
    }
  }
}

// The whole burst on a card: GPT-2 (124M, 498 MB in fp32) with 8-bit base weights and LoRA
// under a 0.4 GiB budget, less than the fp32 model. Loaded as transformers loads it the device
// holds 0.25 GB of weights and trains (peak 0.33 GB); with the fp32 model moved first it ran out
// of memory in the build.
TEST(Int8Load, AModelLargerThanTheBudgetInFp32LoadsIn8Bit) {
  nlohmann::json p = {{"model", "gpt2"}, {"family", "gpt2"}, {"batch", 1}, {"seq", 32},
                      {"precision", "fp32"}, {"adapter", "lora"}, {"weights", "int8"},
                      {"device", "emulated"}, {"warmup_steps", 1}, {"steps", 1}, {"repetitions", 1},
                      {"budget_bytes", static_cast<int64_t>(0.4 * (int64_t{1} << 30))},
                      {"card", {{"name", "RTX 3060"}, {"memory_bytes", 12616466432LL},
                                {"context_bytes", 0}, {"cc_major", 8}, {"cc_minor", 6},
                                {"sms", 28}, {"cpu", false}}}};
  const auto run = testing::run_sweep_cli_split("worker --point '" + p.dump() + "' --result-fd 1");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto m = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
  EXPECT_EQ(m.at("status"), "ok") << m.dump();
  std::printf("gpt2 int8 + LoRA under 0.4 GiB: weights %lld B, peak %lld B in %s\n",
              m.value("weights_bytes", 0LL), m.value("peak_allocated_bytes", 0LL),
              m.value("peak_phase", std::string()).c_str());
  const int64_t budget = p.at("budget_bytes"), fp32_model = 124439808LL * 4;  // gpt2's parameters
  ASSERT_LT(budget, fp32_model) << "the budget must be below the fp32 model for this test";
  EXPECT_LE(m.value("peak_allocated_bytes", int64_t{0}), budget);
}

}  // namespace
}  // namespace sweep
