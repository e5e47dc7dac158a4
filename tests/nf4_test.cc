// 4-bit frozen weights (models/nf4.cc, QLoRA) against bitsandbytes' Linear4bit on the CPU
// (tests/fixtures/nf4-reference.pt, written by make_nf4_reference.py): the packed NF4 and FP4
// codes and the double-quantised state as Params4bit makes them, the weight dequantised again,
// a training step's output and input gradient under compute dtype bf16; the kernel bnb's CUDA
// gemm_4bit picks (fused or dequantise + F.linear) for every card architecture and shape of the
// fixture's table; the `weights` axis' rules for 4 bit (exit 2 with file:line:field); and a
// model loaded in 4 bit that trains LoRA on the emulated device in both of bnb's CUDA paths.
#include <gtest/gtest.h>

#include "models/lora.h"
#include "models/nf4.h"
#include "models/zoo.h"
#include "pickle_fixture.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

namespace sweep {
namespace {

const c10::Dict<c10::IValue, c10::IValue>& fixture() {
  static const auto blob = read_fixture("nf4-reference.pt");
  return blob;
}
torch::Tensor reference(const std::string& key) { return fixture().at(key).toTensor(); }

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

// A Linear of the fixture's weight and bias, quantised as Params4bit does.
torch::nn::Linear quantised_layer(models::Quant4 type) {
  const auto w = reference("weight");
  torch::nn::Linear layer(torch::nn::LinearOptions(w.size(1), w.size(0)));
  {
    torch::NoGradGuard no_grad;
    layer->weight.copy_(w);
    layer->bias.copy_(reference("bias"));
  }
  layer->bias.set_requires_grad(false);
  models::Layer4 l{"layer", layer.get(), layer->weight, false};
  models::quantize_4bit_layer(l, layer->weight, {type, torch::kBFloat16});
  return layer;
}

TEST(Nf4, QuantisedAsParams4bit) {
  for (const auto& [type, name] : {std::pair{models::Quant4::kNf4, "nf4"}, {models::Quant4::kFp4, "fp4"}}) {
    SCOPED_TRACE(name);
    const std::string q = name;
    auto layer = quantised_layer(type);
    const auto* s = models::state_4bit(*layer);
    ASSERT_NE(s, nullptr);
    // The packed codes: bnb's default quantize_4bit, ATen op for op, so bit for bit.
    EXPECT_TRUE(torch::equal(layer->weight, reference(q + "_packed")));
    EXPECT_EQ(layer->weight.sizes(), reference(q + "_packed").sizes());
    EXPECT_FALSE(layer->weight.requires_grad());
    // The double quantisation: the offset (a mean), the nested absmax and the 8-bit codes.
    EXPECT_NEAR(s->offset.item<float>(), reference(q + "_offset").item<float>(), 1e-7);
    EXPECT_LE(max_diff(s->absmax2, reference(q + "_absmax2")), 1e-7);
    EXPECT_TRUE(torch::equal(s->code2, reference(q + "_code2")));
    // The 8-bit codes are the nearest entry of the dynamic map; bnb 0.50.2's CPU kernel (its
    // BinSearch lookup) takes the next one for one of the 192 here (a value among the map's
    // dense entries near 0, 5e-5 from both): at most one in a hundred may differ.
    const auto differ = (s->absmax != reference(q + "_absmax")).sum().item<int64_t>();
    EXPECT_LE(differ, s->absmax.numel() / 100) << differ << " of " << s->absmax.numel();
    EXPECT_EQ(s->shape, (std::vector<int64_t>{reference("weight").size(0), reference("weight").size(1)}));
    // The dequantised weight: equal where the block's scale is, within the map's step there.
    EXPECT_LE(max_diff(models::dequantize_4bit(layer->weight, *s), reference(q + "_dequantized")), 1e-4);
  }
}

TEST(Nf4, TrainsAsLinear4bit) {
  for (const auto& [type, name] : {std::pair{models::Quant4::kNf4, "nf4"}, {models::Quant4::kFp4, "fp4"}}) {
    SCOPED_TRACE(name);
    const std::string q = name;
    auto layer = quantised_layer(type);
    layer->train(true);
    auto x = reference("x").clone().requires_grad_(true);
    auto y = models::linear_4bit(*layer, layer->weight, layer->bias, x);
    y.backward(reference("grad_output"));
    // Computed in bf16 (the compute dtype) and cast back to the input's fp32, as bnb does.
    EXPECT_EQ(y.scalar_type(), torch::kFloat);
    EXPECT_EQ(layer->bias.scalar_type(), torch::kBFloat16);  // cast in place by the forward
    EXPECT_LE(max_diff(y, reference(q + "_out")), 1e-6);
    EXPECT_LE(max_diff(x.grad(), reference(q + "_grad")), 1e-6);
  }
}

// A real GPU's values come from ATen in chunks (nf4.h dequantize_4bit_chunked): the same as
// bnb's CPU kernel's, here on the CPU, past a chunk's end too.
TEST(Nf4, TheGpuDequantisationEqualsTheCpuKernel) {
  auto weight = torch::randn({1024, 1536});  // 1.5 chunks of 2^20 weights
  torch::nn::Linear layer(torch::nn::LinearOptions(1536, 1024));
  models::Layer4 l{"layer", layer.get(), layer->weight, false};
  models::quantize_4bit_layer(l, weight, {models::Quant4::kNf4, torch::kBFloat16});
  const auto* s = models::state_4bit(*layer);
  ASSERT_NE(s, nullptr);
  const int64_t blocks = s->absmax.numel();
  auto absmax = s->code2.index({s->absmax.to(torch::kLong)}) *
                s->absmax2.repeat_interleave(256).slice(0, 0, blocks);
  absmax += s->offset;
  auto out = torch::empty({1024, 1536});
  models::dequantize_4bit_chunked(layer->weight, absmax, s->code, 64, out);
  EXPECT_TRUE(torch::equal(out, models::dequantize_4bit(layer->weight, *s)));
  EXPECT_LT(max_diff(out, weight), 0.5 * weight.abs().max().item<double>());
}

TEST(Nf4, TheCudaKernelIsTheOneBitsandbytesPicks) {
  const auto table = reference("kernel_table");
  ASSERT_GT(table.size(0), 10000);
  const auto* t = table.data_ptr<int32_t>();
  int mismatches = 0, fused = 0;
  for (int64_t i = 0; i < table.size(0); ++i) {
    const int32_t* r = t + i * table.size(1);
    const at::ScalarType dtype = r[6] == 0 ? at::kBFloat16 : r[6] == 1 ? at::kHalf : at::kFloat;
    const bool ours = models::gemm_4bit_uses_custom_kernel({r[0], r[1], r[2]}, dtype, r[3], r[4], r[5], 64);
    fused += r[7];
    if (ours != static_cast<bool>(r[7]) && ++mismatches <= 10)
      ADD_FAILURE() << "sm_" << r[1] << r[2] << " (" << r[0] << " SMs) M=" << r[3] << " N=" << r[4]
                    << " K=" << r[5] << " dtype " << r[6] << ": bnb " << r[7] << ", ours " << ours;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(fused, 1000);  // both kernels are exercised
}

Config load(const std::string& name, const std::string& yaml) {
  return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
}

TEST(Nf4, TrainingIn4BitNeedsLoraAndNotPureBf16) {
  try {
    expand_grid(load("nf4-nolora", "models: [gpt2-test]\ngrid:\n  adapter: [none, lora]\n"
                                   "  weights: [full, nf4]\n"),
                RunSettings{});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.key(), "grid.weights");
    EXPECT_NE(std::string(e.what()).find("4-bit base weights are frozen"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("exclude: [{weights: nf4, adapter: none}]"), std::string::npos) << e.hint();
  }
  try {
    expand_grid(load("nf4-bf16", "models: [gpt2-test]\ngrid:\n  adapter: lora\n"
                                 "  precision: [bf16-amp, bf16]\n  weights: fp4\n"),
                RunSettings{});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.key(), "grid.weights");
    EXPECT_NE(std::string(e.what()).find("prepare_model_for_kbit_training"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("exclude: [{weights: fp4, precision: bf16}]"), std::string::npos) << e.hint();
  }
  auto pts = expand_grid(load("nf4-ok", "models: [gpt2-test]\ngrid:\n  adapter: lora\n"
                                        "  precision: [fp32, bf16-amp]\n  weights: [nf4, fp4]\n"),
                         RunSettings{});
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].label(), "gpt2-test b=1 seq=128 fp32 ckpt=none acc=1 adamw lora r=8 weights=nf4");
}

// A model in 4 bit holds a quarter byte a weight and more than its 4-bit layers: the packed
// codes, one uint8 scale per 64 weights, the nested fp32 scales and the tables.
TEST(Nf4, ModelHoldsPackedWeightsAndTrainsLora) {
  const auto* spec = models::find_model("gpt2-test");
  ASSERT_NE(spec, nullptr);
  torch::manual_seed(0);
  auto model = spec->make();
  const int n = models::quantize_4bit(*model, spec->family, {models::Quant4::kNf4, torch::kBFloat16});
  EXPECT_EQ(n, static_cast<int>(models::layers_4bit(*model, spec->family).size()));
  for (const auto& l : models::layers_4bit(*model, spec->family)) {
    const auto* s = models::state_4bit(*l.module);
    ASSERT_NE(s, nullptr) << l.name;
    const int64_t numel = s->shape[0] * s->shape[1];
    EXPECT_EQ(l.weight.numel(), (numel + 1) / 2) << l.name;
    EXPECT_EQ(s->absmax.numel(), (numel + 63) / 64) << l.name;
    EXPECT_EQ(s->absmax2.numel(), (s->absmax.numel() + 255) / 256) << l.name;
  }
  models::add_lora(*model, {8, 8, 0, models::default_lora_targets(spec->family)});
  model->train(true);
  auto gen = at::detail::createCPUGenerator(1);
  auto batch = model->synthetic_batch({2, 16, 0, 0}, torch::kCPU, gen);
  auto loss = model->loss(batch);
  loss.backward();
  int with_grad = 0;
  for (const auto& p : model->parameters()) with_grad += p.grad().defined() ? 1 : 0;
  EXPECT_GT(with_grad, 0);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

// A worker point on an emulated card: its measurement row as JSON.
nlohmann::json emulated_point(const std::string& model, const std::string& weights,
                              const std::string& precision) {
  const nlohmann::json p = {
      {"model", model}, {"family", "llama"}, {"batch", 1}, {"seq", 2048},
      {"precision", precision}, {"checkpointing", "block"}, {"adapter", "lora"},
      {"weights", weights}, {"device", "emulated"}, {"steps", 1}, {"warmup_steps", 1},
      {"repetitions", 1},
      {"card", {{"name", "H100"}, {"memory_bytes", 85017493504}, {"cc_major", 9}, {"cc_minor", 0}, {"sms", 132}}}};
  return testing::run_worker_point(p);
}

// Zero compute for big models: Llama 3.1 70B (its rope_scaling llama3 included) in QLoRA on an
// emulated H100 in seconds. Its weights: the 4-bit layers (half a byte a weight, one byte per
// 64 for the block scales) and the fp32 rest (prepare_model_for_kbit_training: the untied
// 128256 x 8192 embedding and lm_head, 8.4 GB), within 1% (the nested scales, the tables and
// the adapters come on top).
TEST(Nf4, Llama70BQloraOnAnEmulatedH100) {
  const auto q = emulated_point("meta-llama/Llama-3.1-70B", "nf4", "bf16-amp");
  ASSERT_TRUE(q.contains("weights_bytes"));
  const double w = q.at("weights_bytes").get<double>();
  const double rest = 2.0 * 128256 * 8192 * 4 + 161.0 * 8192 * 4;  // embeddings, lm_head, norms
  const double linear = 70553706496.0 - 2.0 * 128256 * 8192 - 161 * 8192;  // the 4-bit layers' weights
  EXPECT_NEAR(w, rest + linear * (0.5 + 1.0 / 64), 0.01 * w) << q.dump();
  EXPECT_GT(q.at("peak_allocated_bytes").get<double>(), w);
  EXPECT_LT(q.at("peak_reserved_bytes").get<double>(), 80e9) << "fits an 80 GB card";
}

// Issue 34 item 6: the CPU device refuses, before it starts, a model whose weights alone
// exceed the machine's memory (the CPU builds them in fp32 first: 70.6B parameters are 282 GB),
// with the file, the models line and the emulated device as the way out; nothing is written.
TEST(Nf4, TheCpuRefusesAModelLargerThanItsMemoryBeforeItStarts) {
  const auto dir = testing::temp_dir("cpu-too-big");
  const auto path = testing::write_file(dir / "big.yaml",
                                        "name: big\ndevice: cpu\nout: " + (dir / "out").string() +
                                            "\ngrid: {seq: 128, adapter: lora, weights: nf4}\n"
                                            "sweeps:\n  - models: [gpt2-test]\n"
                                            "  - models: [meta-llama/Llama-3.1-70B]\n");
  for (const char* extra : {" --dry-run", ""}) {
    const auto r = testing::run_sweep_cli("run " + path + extra);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(path + ":7: models"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("llama-3.1-70b: its weights alone are"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--device emulated"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "results.csv"));
}

}  // namespace
}  // namespace sweep
