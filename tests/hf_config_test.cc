// Models from config.json (models/hf_config.h): the catalogue as shipped, a user's file by its
// path, and the errors for a file we cannot model; and the decoders' config fields as
// transformers 5.23's config classes read them (sliding windows, head_dim, biases, rope).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "models/hf_config.h"
#include "models/llama.h"
#include "models/zoo.h"
#include "reports/results/error.h"
#include "scratch_dir.h"
#include "sweeps/worker/emulate/emulation.h"
#include "test_util.h"

namespace sweep::models {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// What a file's error says: "file:line: field: message" and its hint.
UserError error_of(const std::string& text, const std::string& file = "my/config.json") {
  try {
    spec_from_config_json(file, "", text, file);
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << text;
  return UserError("", 0, "", "");
}

TEST(Catalogue, EveryFolderHasItsConfigAndSourceAndIsBuiltIn) {
  const fs::path root = fs::path(SWEEP_SOURCE_DIR) / "models" / "catalogue";
  std::set<std::string> on_disk;
  for (const auto& org : fs::directory_iterator(root))
    for (const auto& model : fs::directory_iterator(org.path())) {
      const std::string id = org.path().filename().string() + "/" + model.path().filename().string();
      on_disk.insert(id);
      ASSERT_TRUE(fs::exists(model.path() / "config.json")) << id;
      const std::string source = read_text(model.path() / "SOURCE");
      EXPECT_EQ(source.rfind("https://huggingface.co/" + id + "/", 0), 0u)
          << id << ": SOURCE starts with the file's address on the Hub";
      EXPECT_NE(source.find('\n'), source.size() - 1) << id << ": SOURCE says where the text was read";
    }
  std::set<std::string> built_in;
  for (const auto& f : catalogue_files()) {
    built_in.insert(f.hf_id);
    EXPECT_EQ(f.json, read_text(root / f.hf_id / "config.json")) << f.hf_id << ": rebuild";
  }
  EXPECT_EQ(built_in, on_disk);
  EXPECT_GE(on_disk.size(), 14u);
}

TEST(Catalogue, ModelsAreFoundByHubIdAndByName) {
  for (const auto& f : catalogue_files()) {
    const auto* by_id = find_model(f.hf_id);
    ASSERT_NE(by_id, nullptr) << f.hf_id;
    EXPECT_TRUE(by_id->catalogue);
    EXPECT_EQ(by_id->hf_id, f.hf_id);
    EXPECT_EQ(find_model(catalogue_name(f.hf_id)), by_id);
    EXPECT_EQ(model_slug(*by_id), by_id->name);
  }
  EXPECT_EQ(find_model("Qwen/Qwen2.5-0.5B")->name, "qwen2.5-0.5b");
  EXPECT_EQ(find_model("Qwen/Qwen2.5-0.5B")->family, "llama");
}

TEST(ConfigJson, AnArchitectureNotModelledNamesTheFileLineFieldAndTheOnesWeModel) {
  const auto e = error_of("{\n  \"model_type\": \"gemma\",\n  \"architectures\": [\"GemmaForCausalLM\"]\n}\n");
  EXPECT_EQ(e.file(), "my/config.json");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "architectures");
  EXPECT_NE(std::string(e.what()).find("GemmaForCausalLM"), std::string::npos);
  for (const auto& a : supported_architectures())
    EXPECT_NE(e.hint().find(a), std::string::npos) << a;
}

TEST(ConfigJson, BadFilesAreUserErrors) {
  EXPECT_EQ(error_of("{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  oops\n}").line(), 3);
  EXPECT_EQ(error_of("{\"hidden_size\": 8}").key(), "architectures");
  EXPECT_EQ(error_of("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": -1}").key(),
            "hidden_size");
  EXPECT_EQ(error_of("{\"architectures\": [\"LlamaForCausalLM\"], \"num_attention_heads\": 6, "
                     "\"num_key_value_heads\": 4, \"hidden_size\": 48}")
                .key(),
            "num_key_value_heads");
  EXPECT_EQ(error_of("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": \"gelu\"}").key(),
            "hidden_act");
  EXPECT_EQ(error_of("{\"architectures\": [\"LlamaForCausalLM\"], \"rope_scaling\": "
                     "{\"rope_type\": \"yarn\", \"factor\": 4.0}}")
                .key(),
            "rope_scaling");
  EXPECT_EQ(error_of("{\"architectures\": [\"T5ForConditionalGeneration\"], "
                     "\"feed_forward_proj\": \"gated-gelu\"}")
                .key(),
            "feed_forward_proj");
  EXPECT_THROW(find_model("/nonexistent/dir/config.json"), UserError);
}

// A fine-tuned Whisper's own config.json: the whole model (its published widths give the Hub
// checkpoint's parameter count) or the encoder-classifier, with the file's labels.
TEST(ConfigJson, WhisperFilesAreTheWholeModelOrTheEncoderClassifier) {
  // openai/whisper-small's config.json, the fields that shape the model.
  const std::string small = R"("d_model": 768, "encoder_layers": 12, "encoder_attention_heads": 12,
      "decoder_layers": 12, "decoder_attention_heads": 12, "encoder_ffn_dim": 3072,
      "decoder_ffn_dim": 3072, "num_mel_bins": 80, "vocab_size": 51865, "max_source_positions": 1500,
      "max_target_positions": 448, "pad_token_id": 50257, "decoder_start_token_id": 50258,
      "activation_function": "gelu", "scale_embedding": false, "use_cache": true)";
  const auto whole = spec_from_config_json("whisper.json", "", R"({"architectures": ["WhisperForConditionalGeneration"], )" + small + "}", "whisper.json");
  EXPECT_EQ(whole.family, "whisper");
  EXPECT_EQ(whole.parameters, find_model("whisper-small")->parameters);
  EXPECT_EQ(whole.axes, (std::vector<std::string>{"audio_s", "target_seq"}));
  EXPECT_EQ(whole.max_target_seq, 448);
  EXPECT_DOUBLE_EQ(whole.max_audio_s, 30.0);
  const auto cls = spec_from_config_json(
      "cls.json", "",
      R"({"architectures": ["WhisperForAudioClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}, )" + small + "}",
      "cls.json");
  EXPECT_EQ(cls.family, "whisper-cls");
  // whisper-small-cls's two labels, and a third: one more row of the classifier and its bias.
  EXPECT_EQ(cls.parameters, find_model("whisper-small-cls")->parameters + 256 + 1);
  EXPECT_EQ(count_parameters(*cls.make()), cls.parameters);
  EXPECT_EQ(error_of(R"({"architectures": ["WhisperForConditionalGeneration"], "activation_function": "relu"})").key(),
            "activation_function");
  EXPECT_EQ(error_of(R"({"architectures": ["WhisperForConditionalGeneration"], "d_model": 100})").key(),
            "encoder_attention_heads");
}

// The config a spec builds (its make() closure holds it): built on a tiny file.
LlamaConfig config_of(const std::string& json) {
  auto model = spec_from_config_json("x.json", "", json, "x.json").make();
  return std::dynamic_pointer_cast<LlamaForCausalLMImpl>(model)->config();
}

TEST(ConfigJson, DecoderFieldsAsTransformersConfigClassesReadThem) {
  const std::string small = R"("hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50)";
  // Qwen2: q/k/v biases; the window only with use_sliding_window, from max_window_layers on.
  auto q2 = config_of(R"({"architectures": ["Qwen2ForCausalLM"], )" + small +
                      R"(, "sliding_window": 8, "use_sliding_window": false})");
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.o_proj_bias);
  EXPECT_EQ(q2.layer_window, std::vector<int64_t>(4, 0));
  auto q2s = config_of(R"({"architectures": ["Qwen2ForCausalLM"], )" + small +
                       R"(, "sliding_window": 8, "use_sliding_window": true, "max_window_layers": 2})");
  EXPECT_EQ(q2s.layer_window, (std::vector<int64_t>{0, 0, 8, 8}));
  // Qwen3: head_dim 128 unless the file says, q/k norms.
  auto q3 = config_of(R"({"architectures": ["Qwen3ForCausalLM"], )" + small + "}");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_TRUE(q3.qk_norm);
  // Mistral: sliding_window 4096 when the file leaves it out, none when it says null.
  EXPECT_EQ(config_of(R"({"architectures": ["MistralForCausalLM"], )" + small + "}").layer_window[0], 4096);
  EXPECT_EQ(config_of(R"({"architectures": ["MistralForCausalLM"], )" + small +
                      R"(, "sliding_window": null})").layer_window[0], 0);
  // Llama: hidden_size / heads, attention_bias on all four projections, llama3 rope.
  auto ll = config_of(R"({"architectures": ["LlamaForCausalLM"], )" + small +
                      R"(, "attention_bias": true, "rope_scaling": {"rope_type": "llama3",
      "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 16}})");
  EXPECT_EQ(ll.head_dim, 8);
  EXPECT_TRUE(ll.attention_bias && ll.o_proj_bias);
  EXPECT_EQ(ll.rope.type, "llama3");
  // Phi-3: fused projections; its default pad_token_id (32000) must lie in the vocabulary, as
  // nn.Embedding's padding_idx must.
  EXPECT_TRUE(config_of(R"({"architectures": ["Phi3ForCausalLM"], "pad_token_id": 0, )" + small + "}")
                  .fused_projections);
  EXPECT_EQ(error_of(R"({"architectures": ["Phi3ForCausalLM"], )" + small + "}").key(), "pad_token_id");
}

// _compute_llama3_parameters on Llama 3.2's rope (theta 500000, factor 32, head_dim 64): the
// values transformers 5.23's ROPE_INIT_FUNCTIONS["llama3"] gives for inv_freq[0], [10] (the
// smoothed band), [20] and [31].
TEST(Rope, Llama3InverseFrequenciesAsTransformers) {
  LlamaConfig c;
  c.head_dim = 64;
  c.rope.type = "llama3";
  c.rope.theta = 500000.0;
  c.rope.factor = 32.0;
  c.rope.original_max_position_embeddings = 8192;
  auto [f, scaling] = rope_inv_freq(c);
  ASSERT_EQ(f.numel(), 32);
  EXPECT_DOUBLE_EQ(scaling, 1.0);
  auto near = [&](int i, double want) { EXPECT_NEAR(f[i].item<double>() / want, 1.0, 1e-6) << i; };
  near(0, 1.0);
  near(10, 0.016560440883040428);
  near(20, 8.570255886297673e-06);
  near(31, 9.418306490260875e-08);
}

// Phi-3.5-mini's longrope (head_dim 96, 48 short factors, 4096 -> 131072 positions) as
// transformers 5.23's ROPE_INIT_FUNCTIONS["longrope"] gives it at a training length of 2048;
// and the model builds on Meta, as the emulated device builds it (the factors, read from the
// file, once reached a Meta tensor that had no data to copy them into).
TEST(Rope, LongropeAsTransformersAndOnMeta) {
  const auto* spec = find_model("microsoft/Phi-3.5-mini-instruct");
  ASSERT_NE(spec, nullptr);
  EmulatedCard cpu;  // the emulated device configured as the CPU, as Int8Load starts it
  cpu.name = "cpu";
  cpu.cpu = true;
  emu::start_emulation(cpu);
  LlamaConfig c;
  {
    emu::MetaFactories on_meta;
    auto model = std::dynamic_pointer_cast<LlamaForCausalLMImpl>(spec->make());
    ASSERT_NE(model, nullptr);
    c = model->config();
    auto [f, scaling] = rope_inv_freq(c);
    EXPECT_TRUE(f.is_meta());
    EXPECT_EQ(f.numel(), 48);
  }
  EXPECT_EQ(c.rope.type, "longrope");
  auto [f, scaling] = rope_inv_freq(c);
  ASSERT_EQ(f.numel(), 48);
  EXPECT_NEAR(scaling, 1.1902380714238083, 1e-12);
  auto near = [&](int i, double want) { EXPECT_NEAR(f[i].item<double>() / want, 1.0, 1e-6) << i; };
  near(0, 1.0);
  near(10, 0.13343630731105804);
  near(30, 0.0015654843300580978);
  near(47, 4.2659426981117576e-05);
}

TEST(ConfigJsonCli, ALocalConfigJsonIsAModelForFitAndModelsListsTheCatalogue) {
  ScratchDir dir("sweep_hf_config_cli");
  fs::create_directories(dir.path / "my-model");
  const auto file = (dir.path / "my-model" / "config.json").string();
  fs::copy_file(fs::path(SWEEP_SOURCE_DIR) / "tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json", file);
  const auto fit = testing::run_sweep_cli("fit " + file + " --gpu rtx3060 --seq 256 --out " +
                                          (dir.path / "out").string());
  EXPECT_EQ(fit.exit_code, 0) << fit.output;
  EXPECT_NE(fit.output.find("predicted"), std::string::npos) << fit.output;

  const auto models = testing::run_sweep_cli("models");
  EXPECT_EQ(models.exit_code, 0);
  for (const auto& f : catalogue_files()) EXPECT_NE(models.output.find(f.hf_id), std::string::npos) << f.hf_id;

  testing::write_file(dir.path / "bad.json", "{\n  \"architectures\": [\"GPTNeoXForCausalLM\"]\n}\n");
  const auto bad = testing::run_sweep_cli("fit " + (dir.path / "bad.json").string() + " --gpu rtx3060");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("bad.json:2: architectures: architecture 'GPTNeoXForCausalLM' is not modelled"),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("hint: the ones modelled: LlamaForCausalLM"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace sweep::models
