// The zoo's table: configurations as published by Hugging Face for each checkpoint.
#include "models/zoo.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "models/gpt2.h"
#include "models/hf_config.h"
#include "reports/results/error.h"
#include "models/t5.h"
#include "models/whisper.h"

namespace sweep::models {

namespace {
TransformersRelease g_transformers = TransformersRelease::k5_23;
}  // namespace

void follow_transformers(TransformersRelease release) { g_transformers = release; }
TransformersRelease followed_transformers() { return g_transformers; }

std::optional<TransformersRelease> parse_transformers_release(const std::string& text) {
  for (const auto& [name, release] : {std::pair{"5.17", TransformersRelease::k5_17},
                                      std::pair{"5.23", TransformersRelease::k5_23}}) {
    const std::string n = name;
    if (text == n || (text.rfind(n + ".", 0) == 0 && text.size() > n.size() + 1 &&
                      text.find_first_not_of("0123456789", n.size() + 1) == std::string::npos))
      return release;
  }
  return std::nullopt;
}
namespace {

ModelSpec gpt2(std::string name, std::string hf_id, int64_t n_embd, int64_t n_layer,
               int64_t n_head, bool test_only = false, int64_t vocab = 50257,
               int64_t n_positions = 1024) {
  GPT2Config c;
  c.n_embd = n_embd;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.vocab_size = vocab;
  c.n_positions = n_positions;
  const int64_t C = n_embd;
  // Per block: two LayerNorms, c_attn, attn.c_proj, c_fc, mlp.c_proj (weights + biases).
  const int64_t block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) +
                        (4 * C * C + C);
  const int64_t params = vocab * C + n_positions * C + n_layer * block + 2 * C;
  return ModelSpec{std::move(name), "gpt2", std::move(hf_id), test_only, n_layer, n_embd, n_head,
                   params, {"seq"},
                   [c] { return std::make_shared<GPT2LMHeadModelImpl>(c); }, n_positions};
}

ModelSpec t5(std::string name, std::string hf_id, int64_t d_model, int64_t d_ff, int64_t layers,
              int64_t heads, bool test_only = false, int64_t vocab = 32128) {
  T5Config c;
  c.vocab_size = vocab;
  c.d_model = d_model;
  c.d_ff = d_ff;
  c.num_layers = c.num_decoder_layers = layers;
  c.num_heads = heads;
  c.d_kv = test_only ? d_model / heads : 64;  // every published T5 uses d_kv 64
  const int64_t d = d_model, inner = heads * c.d_kv;
  const int64_t attn = 4 * d * inner + d;            // q, k, v, o (no biases) + its norm
  const int64_t ff = 2 * d * d_ff + d;               // wi, wo + its norm
  const int64_t bias = c.relative_attention_num_buckets * heads;  // first block of each stack
  const int64_t encoder = layers * (attn + ff) + bias + d;
  const int64_t decoder = layers * (2 * attn + ff) + bias + d;
  const int64_t params = vocab * d + encoder + decoder;  // shared embedding counted once
  return ModelSpec{std::move(name), "t5", std::move(hf_id), test_only, layers, d_model, heads,
                   params, {"seq", "target_seq"},
                   [c] { return std::make_shared<T5ForConditionalGenerationImpl>(c); }};
}

// Whisper's published checkpoints: the encoder and decoder share widths, layer counts (but
// large-v3-turbo's 4-layer decoder) and heads; the MLPs are 4 x d_model wide.
struct WhisperShape {
  int64_t d_model, encoder_layers, heads, mels = 80, decoder_layers = 0, vocab = 51865;
  int64_t max_source_positions = 1500, max_target_positions = 448;
};

WhisperConfig whisper_config(const WhisperShape& w) {
  WhisperConfig c;
  c.num_mel_bins = w.mels;
  c.d_model = w.d_model;
  c.encoder_layers = w.encoder_layers;
  c.encoder_attention_heads = c.decoder_attention_heads = w.heads;
  c.encoder_ffn_dim = c.decoder_ffn_dim = 4 * w.d_model;
  c.decoder_layers = w.decoder_layers ? w.decoder_layers : w.encoder_layers;
  c.max_source_positions = w.max_source_positions;
  c.max_target_positions = w.max_target_positions;
  c.vocab_size = w.vocab;
  if (w.vocab < c.decoder_start_token_id + 1) {  // the test model's small vocabulary: last two
    c.pad_token_id = w.vocab - 2;
    c.decoder_start_token_id = w.vocab - 1;
  }
  return c;
}

}  // namespace

// WhisperEncoder's parameters: the stem (two convolutions, the frozen positions), the layers
// (k_proj has no bias; q, v, out do; two LayerNorms; fc1, fc2), the final LayerNorm.
ModelSpec whisper_spec(const WhisperConfig& c, bool classifier) {
  const int64_t d = c.d_model, fe = c.encoder_ffn_dim, fd = c.decoder_ffn_dim;
  const int64_t stem = (c.num_mel_bins * 3 * d + d) + (d * 3 * d + d) + c.max_source_positions * d;
  const int64_t encoder_layer = 4 * d * d + 3 * d + 4 * d + (d * fe + fe) + (fe * d + d);
  const int64_t encoder = stem + c.encoder_layers * encoder_layer + 2 * d;
  const double window_s = 2.0 * static_cast<double>(c.max_source_positions) / 100.0;
  if (classifier) {
    // A 256-wide projection and the classifier.
    const int64_t head = (d * c.classifier_proj_size + c.classifier_proj_size) +
                         (c.classifier_proj_size * c.num_labels + c.num_labels);
    return ModelSpec{"", "whisper-cls", "", false, c.encoder_layers, d, c.encoder_attention_heads,
                     encoder + head, {"audio_s"},
                     [c] { return std::make_shared<WhisperForAudioClassificationImpl>(c); }, 0,
                     window_s};
  }
  // Two attentions, three LayerNorms, fc1, fc2 a layer; token and position embeddings; the
  // final LayerNorm. proj_out is the token embedding (tied, counted once).
  const int64_t decoder_layer = 2 * (4 * d * d + 3 * d) + 3 * 2 * d + (d * fd + fd) + (fd * d + d);
  const int64_t decoder = c.vocab_size * d + c.max_target_positions * d +
                          c.decoder_layers * decoder_layer + 2 * d;
  ModelSpec spec{"", "whisper", "", false, c.encoder_layers, d, c.encoder_attention_heads,
                 encoder + decoder, {"audio_s", "target_seq"},
                 [c] { return std::make_shared<WhisperForConditionalGenerationImpl>(c); }, 0,
                 window_s};
  spec.max_target_seq = c.max_target_positions;
  return spec;
}

namespace {

// The whole model (WhisperForConditionalGeneration), what the Hub id names.
ModelSpec whisper(std::string name, std::string hf_id, const WhisperShape& w, bool test_only = false) {
  ModelSpec spec = whisper_spec(whisper_config(w), /*classifier=*/false);
  spec.name = std::move(name);
  spec.hf_id = std::move(hf_id);
  spec.test_only = test_only;
  return spec;
}

// The encoder with WhisperForAudioClassification's head (a 256-wide projection and a 2-label
// classifier): audio classification, not speech recognition.
ModelSpec whisper_cls(std::string name, const WhisperShape& w, bool test_only = false) {
  ModelSpec spec = whisper_spec(whisper_config(w), /*classifier=*/true);
  spec.name = std::move(name);
  spec.test_only = test_only;
  return spec;
}

std::vector<ModelSpec> build_zoo() {
  std::vector<ModelSpec> z;
  z.push_back(gpt2("gpt2", "openai-community/gpt2", 768, 12, 12));
  z.push_back(gpt2("gpt2-medium", "openai-community/gpt2-medium", 1024, 24, 16));
  z.push_back(gpt2("gpt2-large", "openai-community/gpt2-large", 1280, 36, 20));
  z.push_back(gpt2("gpt2-xl", "openai-community/gpt2-xl", 1600, 48, 25));
  z.push_back(t5("t5-small", "google-t5/t5-small", 512, 2048, 6, 8));
  z.push_back(t5("t5-base", "google-t5/t5-base", 768, 3072, 12, 12));
  z.push_back(t5("t5-large", "google-t5/t5-large", 1024, 4096, 24, 16));
  const std::vector<std::pair<std::string, WhisperShape>> whispers = {
      {"tiny", {384, 4, 6}},
      {"base", {512, 6, 8}},
      {"small", {768, 12, 12}},
      {"medium", {1024, 24, 16}},
      {"large-v3", {1280, 32, 20, /*mels=*/128, 0, /*vocab=*/51866}},
      {"large-v3-turbo", {1280, 32, 20, /*mels=*/128, /*decoder_layers=*/4, /*vocab=*/51866}}};
  for (const auto& [size, shape] : whispers)
    z.push_back(whisper("whisper-" + size, "openai/whisper-" + size, shape));
  // The encoder-classifiers that were whisper-* before the whole model came (their rows,
  // configs and baselines read on under these names).
  for (const auto& [size, shape] : whispers)
    if (size != "large-v3-turbo") z.push_back(whisper_cls("whisper-" + size + "-cls", shape));
  // The catalogue's published configs (models/catalogue/), by Hugging Face id.
  for (const auto& f : catalogue_files()) {
    ModelSpec spec = spec_from_config_json(catalogue_name(f.hf_id), f.hf_id, f.json,
                                           "models/catalogue/" + f.hf_id + "/config.json");
    spec.catalogue = true;
    z.push_back(std::move(spec));
  }
  // Test models: small enough for a 2-core CPU, same code paths. Their configurations are
  // the ones tests/fixtures/make_reference.py builds in transformers.
  z.push_back(gpt2("gpt2-test", "", 64, 2, 4, /*test_only=*/true, /*vocab=*/1024,
                   /*n_positions=*/256));
  z.push_back(t5("t5-test", "", 64, 128, 2, 4, /*test_only=*/true, /*vocab=*/1024));
  // whisper-test is the encoder-classifier (the name its fixtures were made under);
  // whisper-s2s-test the whole model, with a 1024-token vocabulary whose last two tokens are
  // the pad and the decoder's start.
  WhisperShape tiny{64, 2, 4, /*mels=*/16, 0, /*vocab=*/1024, /*max_source_positions=*/200,
                    /*max_target_positions=*/64};
  z.push_back(whisper_cls("whisper-test", tiny, /*test_only=*/true));
  z.push_back(whisper("whisper-s2s-test", "", tiny, /*test_only=*/true));
  return z;
}

}  // namespace

const std::vector<ModelSpec>& zoo() {
  static const std::vector<ModelSpec> z = build_zoo();
  return z;
}

namespace {

// A user's config.json, read once per process (the worker finds it again by its path).
const ModelSpec* model_from_file(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<ModelSpec>> files;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = files.find(path); it != files.end()) return it->second.get();
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path))
    throw UserError(path, 0, "", "cannot read the file",
                    "name a model's config.json (a path ending in .json), or a model `sweep "
                    "models` lists");
  std::stringstream text;
  text << in.rdbuf();
  auto spec = std::make_unique<ModelSpec>(spec_from_config_json(path, "", text.str(), path));
  spec->config_file = path;
  return (files[path] = std::move(spec)).get();
}

}  // namespace

const ModelSpec* find_model(const std::string& name) {
  for (const auto& s : zoo())
    if (s.name == name || (!s.hf_id.empty() && s.hf_id == name)) return &s;
  if (names_config_file(name)) return model_from_file(name);
  return nullptr;
}

std::string model_slug(const ModelSpec& spec) {
  if (spec.config_file.empty()) return spec.name;
  const std::filesystem::path p = std::filesystem::absolute(spec.config_file).lexically_normal();
  std::string slug = p.parent_path().filename().string();
  if (slug.empty() || p.filename() != "config.json") slug = p.stem().string();
  return slug;
}

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

bool is_causal_lm(const std::string& family) {
  return family == "gpt2" || family == "llama" || family == "phi3";
}

}  // namespace sweep::models
