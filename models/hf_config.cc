// Models from config.json; see hf_config.h.
#include "models/hf_config.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "models/llama.h"
#include "models/t5.h"
#include "reports/results/error.h"

namespace sweep::models {
namespace {

using nlohmann::json;

// The file being read, for messages that name the line of a field.
struct Source {
  const std::string& file;
  const std::string& text;
  // The line of `"field"`'s first occurrence (1-based); 0 when the text does not hold it.
  int line_of(const std::string& field) const {
    const auto at = text.find("\"" + field + "\"");
    if (at == std::string::npos) return 0;
    return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  }
  [[noreturn]] void fail(const std::string& field, const std::string& message,
                         const std::string& hint) const {
    throw UserError(file, line_of(field), field, message, hint);
  }
};

// A field as transformers' config class reads it: the file's value, else the class default.
int64_t whole(const Source& s, const json& j, const std::string& key, int64_t fallback,
              int64_t min = 1) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  const auto& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < min)
    s.fail(key, "expected a whole number of at least " + std::to_string(min) + ", got " + v.dump(),
           "write the value the model's published config.json has");
  return v.get<int64_t>();
}

double number(const Source& s, const json& j, const std::string& key, double fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_number())
    s.fail(key, "expected a number, got " + j.at(key).dump(), "write a number, e.g. 1e-06");
  return j.at(key).get<double>();
}

bool flag(const Source& s, const json& j, const std::string& key, bool fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean())
    s.fail(key, "expected true or false, got " + j.at(key).dump(), "write true or false");
  return j.at(key).get<bool>();
}

std::string architecture_list() {
  std::string out;
  for (const auto& a : supported_architectures()) out += (out.empty() ? "" : ", ") + a;
  return out;
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (the published files).
LlamaConfig::Rope parse_rope(const Source& s, const json& j, const LlamaConfig& c) {
  LlamaConfig::Rope r;
  const json* scaling = nullptr;
  std::string scaling_key;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (!scaling && j.contains(key) && j.at(key).is_object()) scaling = &j.at(scaling_key = key);
  r.theta = number(s, j, "rope_theta", 10000.0);
  r.partial_rotary_factor = number(s, j, "partial_rotary_factor", 1.0);
  r.original_max_position_embeddings =
      whole(s, j, "original_max_position_embeddings", c.max_position_embeddings);
  if (!scaling) return r;
  const json& p = *scaling;
  r.type = p.value("rope_type", p.value("type", std::string("default")));
  r.theta = number(s, p, "rope_theta", r.theta);
  r.partial_rotary_factor = number(s, p, "partial_rotary_factor", r.partial_rotary_factor);
  r.factor = number(s, p, "factor", 1.0);
  r.low_freq_factor = number(s, p, "low_freq_factor", 1.0);
  r.high_freq_factor = number(s, p, "high_freq_factor", 4.0);
  r.original_max_position_embeddings =
      whole(s, p, "original_max_position_embeddings", r.original_max_position_embeddings);
  if (r.type == "longrope") {
    r.short_factor = p.value("short_factor", std::vector<double>{});
    r.long_factor = p.value("long_factor", std::vector<double>{});
  }
  static const std::vector<std::string> kTypes = {"default", "linear", "llama3", "longrope"};
  if (std::find(kTypes.begin(), kTypes.end(), r.type) == kTypes.end())
    s.fail(scaling_key, "rope type '" + r.type + "' is not modelled",
           "the rope types modelled are default, linear, llama3 and longrope");
  const int64_t half = static_cast<int64_t>(static_cast<double>(c.head_dim) * r.partial_rotary_factor) / 2;
  if (r.type == "longrope" && static_cast<int64_t>(r.short_factor.size()) != half)
    s.fail("short_factor", "longrope's short_factor has " + std::to_string(r.short_factor.size()) +
                               " values, the rotary dimension needs " + std::to_string(half),
           "give one factor per rotary frequency (head_dim * partial_rotary_factor / 2)");
  return r;
}

// A sliding window field: an explicit null is None (no window), not the class default.
int64_t window(const Source& s, const json& j, const std::string& key, int64_t fallback) {
  if (j.contains(key) && j.at(key).is_null()) return 0;
  return whole(s, j, key, fallback, 0);
}

// Each layer's sliding window as the architecture's config class and model decide it.
std::vector<int64_t> layer_windows(const Source& s, const json& j, const std::string& arch,
                                   int64_t layers) {
  std::vector<int64_t> w(layers, 0);
  if (arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM") {
    // sliding_window only with use_sliding_window, and only from max_window_layers on
    // (layer_types as the config class builds them).
    if (!flag(s, j, "use_sliding_window", false)) return w;
    const int64_t size = window(s, j, "sliding_window", 4096);
    const int64_t from = whole(s, j, "max_window_layers", 28, 0);
    for (int64_t i = from; i < layers; ++i) w[i] = size;
  } else if (arch == "MistralForCausalLM") {
    std::fill(w.begin(), w.end(), window(s, j, "sliding_window", 4096));
  } else if (arch == "Phi3ForCausalLM") {
    std::fill(w.begin(), w.end(), window(s, j, "sliding_window", 0));
  }
  return w;
}

// padding_idx only for an id inside the vocabulary: nn.Embedding refuses others.
void check_padding_index(const Source& s, int64_t pad_token_id, int64_t vocab_size) {
  if (pad_token_id >= vocab_size)
    s.fail("pad_token_id", "pad_token_id " + std::to_string(pad_token_id) +
                               " is outside the vocabulary of " + std::to_string(vocab_size),
           "transformers' nn.Embedding refuses a padding index past vocab_size");
}

int64_t llama_parameters(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, D = c.head_dim, H = c.num_attention_heads,
                KV = c.num_key_value_heads, I = c.intermediate_size;
  int64_t attn = C * H * D + 2 * C * KV * D + H * D * C;
  if (c.attention_bias) attn += H * D + 2 * KV * D;
  if (c.o_proj_bias) attn += C;
  if (c.qk_norm) attn += 2 * D;
  int64_t mlp = 3 * C * I;
  if (c.mlp_bias) mlp += 2 * I + C;
  const int64_t layer = attn + mlp + 2 * C;
  return c.vocab_size * C * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer + C;
}

ModelSpec llama_spec(const Source& s, const json& j, const std::string& arch) {
  LlamaConfig c;
  c.architecture = arch;
  c.vocab_size = whole(s, j, "vocab_size", arch == "Phi3ForCausalLM" ? 32064 : 32000);
  c.hidden_size = whole(s, j, "hidden_size", 4096);
  c.intermediate_size = whole(s, j, "intermediate_size", 11008);
  c.num_hidden_layers = whole(s, j, "num_hidden_layers", 32);
  c.num_attention_heads = whole(s, j, "num_attention_heads", 32);
  c.num_key_value_heads = whole(s, j, "num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    s.fail("num_key_value_heads", "num_attention_heads " + std::to_string(c.num_attention_heads) +
                                      " is not a multiple of num_key_value_heads " +
                                      std::to_string(c.num_key_value_heads),
           "grouped-query attention shares each key/value head among a whole number of heads");
  c.head_dim = whole(s, j, "head_dim", arch == "Qwen3ForCausalLM" ? 128 : c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings = whole(s, j, "max_position_embeddings", 2048);
  c.rms_norm_eps = number(s, j, "rms_norm_eps", arch == "Phi3ForCausalLM" ? 1e-5 : 1e-6);
  c.initializer_range = number(s, j, "initializer_range", 0.02);
  c.tie_word_embeddings = flag(s, j, "tie_word_embeddings", false);
  c.use_cache = flag(s, j, "use_cache", true);
  // padding_idx only for an id inside the vocabulary: nn.Embedding refuses others.
  c.pad_token_id = whole(s, j, "pad_token_id", arch == "Phi3ForCausalLM" ? 32000 : -1, -1);
  check_padding_index(s, c.pad_token_id, c.vocab_size);
  c.attention_dropout = number(s, j, "attention_dropout", 0.0);
  if (arch == "LlamaForCausalLM" || arch == "Qwen3ForCausalLM") {
    c.attention_bias = c.o_proj_bias = flag(s, j, "attention_bias", false);
    if (arch == "LlamaForCausalLM") c.mlp_bias = flag(s, j, "mlp_bias", false);
  }
  if (arch == "Qwen2ForCausalLM") c.attention_bias = true;  // q, k, v with bias, o without
  c.qk_norm = arch == "Qwen3ForCausalLM";
  if (arch == "Phi3ForCausalLM") {
    c.fused_projections = true;
    c.resid_pdrop = number(s, j, "resid_pdrop", 0.0);
  }
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu")
    s.fail("hidden_act", "activation '" + act + "' is not modelled", "the family's MLP is SwiGLU: silu");
  c.layer_window = layer_windows(s, j, arch, c.num_hidden_layers);
  c.rope = parse_rope(s, j, c);
  const std::string family = arch == "Phi3ForCausalLM" ? "phi3" : "llama";
  ModelSpec spec{"", family, "", false, c.num_hidden_layers, c.hidden_size,
                 c.num_attention_heads, llama_parameters(c), {"seq"},
                 [c] { return std::make_shared<LlamaForCausalLMImpl>(c); }};
  spec.max_position_embeddings = c.max_position_embeddings;
  return spec;
}

// T5ForConditionalGeneration as t5.h models it: T5 v1.0 (ReLU feed-forward, tied embeddings).
ModelSpec t5_spec(const Source& s, const json& j) {
  T5Config c;
  c.vocab_size = whole(s, j, "vocab_size", 32128);
  c.d_model = whole(s, j, "d_model", 512);
  c.d_kv = whole(s, j, "d_kv", 64);
  c.d_ff = whole(s, j, "d_ff", 2048);
  c.num_layers = whole(s, j, "num_layers", 6);
  c.num_decoder_layers = whole(s, j, "num_decoder_layers", c.num_layers);
  c.num_heads = whole(s, j, "num_heads", 8);
  c.relative_attention_num_buckets = whole(s, j, "relative_attention_num_buckets", 32);
  c.relative_attention_max_distance = whole(s, j, "relative_attention_max_distance", 128);
  c.dropout_rate = number(s, j, "dropout_rate", 0.1);
  c.layer_norm_epsilon = number(s, j, "layer_norm_epsilon", 1e-6);
  c.decoder_start_token_id = whole(s, j, "decoder_start_token_id", 0, 0);
  const std::string ff = j.value("feed_forward_proj", std::string("relu"));
  if (ff != "relu")
    s.fail("feed_forward_proj", "feed_forward_proj '" + ff + "' (T5 v1.1 and later) is not modelled",
           "the T5 modelled is v1.0: feed_forward_proj relu");
  if (!flag(s, j, "tie_word_embeddings", true))
    s.fail("tie_word_embeddings", "an untied T5 LM head is not modelled",
           "the T5 modelled ties the LM head to the shared embedding");
  const int64_t d = c.d_model, inner = c.num_heads * c.d_kv;
  const int64_t attn = 4 * d * inner + d, ff_params = 2 * d * c.d_ff + d;
  const int64_t bias = c.relative_attention_num_buckets * c.num_heads;
  const int64_t params = c.vocab_size * d + c.num_layers * (attn + ff_params) + bias + d +
                         c.num_decoder_layers * (2 * attn + ff_params) + bias + d;
  return ModelSpec{"", "t5", "", false, c.num_layers, c.d_model, c.num_heads, params,
                   {"seq", "target_seq"},
                   [c] { return std::make_shared<T5ForConditionalGenerationImpl>(c); }};
}

// Whisper as whisper.h models it, from WhisperConfig's fields (its defaults are tiny's): the
// whole model, or the encoder with the audio-classification head.
ModelSpec whisper_from_json(const Source& s, const json& j, bool classifier) {
  WhisperConfig c;
  c.vocab_size = whole(s, j, "vocab_size", 51865);
  c.num_mel_bins = whole(s, j, "num_mel_bins", 80);
  c.d_model = whole(s, j, "d_model", 384);
  c.encoder_layers = whole(s, j, "encoder_layers", 4);
  c.encoder_attention_heads = whole(s, j, "encoder_attention_heads", 6);
  c.encoder_ffn_dim = whole(s, j, "encoder_ffn_dim", 1536);
  c.decoder_layers = whole(s, j, "decoder_layers", 4);
  c.decoder_attention_heads = whole(s, j, "decoder_attention_heads", 6);
  c.decoder_ffn_dim = whole(s, j, "decoder_ffn_dim", 1536);
  c.max_source_positions = whole(s, j, "max_source_positions", 1500);
  c.max_target_positions = whole(s, j, "max_target_positions", 448);
  c.pad_token_id = whole(s, j, "pad_token_id", 50256, 0);
  c.decoder_start_token_id = whole(s, j, "decoder_start_token_id", 50257, 0);
  c.classifier_proj_size = whole(s, j, "classifier_proj_size", 256);
  c.num_labels = j.contains("id2label") && j.at("id2label").is_object() && !j.at("id2label").empty()
                     ? static_cast<int64_t>(j.at("id2label").size())
                     : whole(s, j, "num_labels", 2);
  c.dropout = number(s, j, "dropout", 0.0);
  c.attention_dropout = number(s, j, "attention_dropout", 0.0);
  c.activation_dropout = number(s, j, "activation_dropout", 0.0);
  for (const auto& [key, heads] : {std::pair{"encoder_attention_heads", c.encoder_attention_heads},
                                   std::pair{"decoder_attention_heads", c.decoder_attention_heads}})
    if (c.d_model % heads != 0)
      s.fail(key, "d_model " + std::to_string(c.d_model) + " is not a multiple of " + key + " " +
                      std::to_string(heads),
             "transformers' WhisperAttention refuses it: each head takes d_model / heads channels");
  check_padding_index(s, c.pad_token_id, c.vocab_size);
  const std::string act = j.value("activation_function", std::string("gelu"));
  if (act != "gelu")
    s.fail("activation_function", "activation '" + act + "' is not modelled",
           "Whisper's published checkpoints use gelu");
  if (flag(s, j, "scale_embedding", false))
    s.fail("scale_embedding", "scaled embeddings are not modelled",
           "Whisper's published checkpoints have scale_embedding false");
  if (flag(s, j, "use_weighted_layer_sum", false))
    s.fail("use_weighted_layer_sum", "the weighted layer sum is not modelled",
           "the classification head modelled pools the encoder's last layer");
  if (!classifier && !flag(s, j, "tie_word_embeddings", true))
    s.fail("tie_word_embeddings", "an untied proj_out is not modelled",
           "Whisper ties proj_out to the decoder's token embedding");
  return whisper_spec(c, classifier);
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kArchs = {
      "LlamaForCausalLM",           "Qwen2ForCausalLM",
      "Qwen3ForCausalLM",           "MistralForCausalLM",
      "Phi3ForCausalLM",            "T5ForConditionalGeneration",
      "WhisperForConditionalGeneration", "WhisperForAudioClassification"};
  return kArchs;
}

ModelSpec spec_from_config_json(const std::string& name, const std::string& hf_id,
                                const std::string& text, const std::string& file) {
  const Source s{file, text};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    const auto at = std::min<size_t>(e.byte, text.size());
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    throw UserError(file, line, "", std::string("not JSON: ") + e.what(),
                    "a model's config.json as Hugging Face publishes it");
  }
  if (!j.is_object()) throw UserError(file, 1, "", "not a JSON object", "a model's config.json");
  if (!j.contains("architectures") || !j.at("architectures").is_array() ||
      j.at("architectures").empty() || !j.at("architectures")[0].is_string())
    s.fail("architectures", "no architectures list",
           "a model's config.json names its class, e.g. \"architectures\": [\"LlamaForCausalLM\"]; "
           "the ones modelled: " + architecture_list());
  const std::string arch = j.at("architectures")[0].get<std::string>();
  const auto& known = supported_architectures();
  if (std::find(known.begin(), known.end(), arch) == known.end())
    s.fail("architectures", "architecture '" + arch + "' is not modelled",
           "the ones modelled: " + architecture_list());
  ModelSpec spec = arch == "T5ForConditionalGeneration"        ? t5_spec(s, j)
                   : arch == "WhisperForConditionalGeneration" ? whisper_from_json(s, j, false)
                   : arch == "WhisperForAudioClassification"   ? whisper_from_json(s, j, true)
                                                               : llama_spec(s, j, arch);
  spec.name = name;
  spec.hf_id = hf_id;
  return spec;
}

std::string catalogue_name(const std::string& hf_id) {
  std::string n = hf_id.substr(hf_id.find('/') + 1);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return n;
}

bool names_config_file(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

}  // namespace sweep::models
