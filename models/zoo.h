// The model zoo: every model a config can name, with the facts `sweep models` prints.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/whisper.h"

namespace sweep::models {

struct ModelSpec {
  std::string name;    // "gpt2-medium"
  std::string family;  // "gpt2" | "t5" | "whisper" | "whisper-cls" | "llama" | "phi3"
  std::string hf_id;   // "openai-community/gpt2-medium"; empty for test models
  bool test_only = false;
  int64_t layers = 0, hidden = 0, heads = 0;
  // Parameter count from the configuration (tied weights once), so `sweep models` needs
  // no multi-GB model in memory; a test checks it against the built modules.
  int64_t parameters = 0;
  std::vector<std::string> axes;  // sequence axes it takes: "seq", "target_seq", "audio_s"
  std::function<std::shared_ptr<ModelImpl>()> make;
  // The longest input it takes (0: no limit): GPT-2's n_positions tokens, Whisper's window
  // of 2 x max_source_positions frames in seconds. T5's relative positions have no limit.
  int64_t max_seq = 0;
  double max_audio_s = 0;
  int64_t max_target_seq = 0;  // the whole Whisper's max_target_positions (448) labels
  // Read from a config.json: one of the catalogue's (models/catalogue/), or a user's file
  // (`config_file`, the path as given, which is also its name).
  bool catalogue = false;
  std::string config_file;
  // A decoder's max_position_embeddings (0: none): the longest context it was trained for.
  // transformers runs longer inputs (RoPE is computed for any position), so the grid takes
  // them; `fit --seq max` searches up to it (longest_context).
  int64_t max_position_embeddings = 0;
};

// The longest seq a longest-context search tries: the longest input the model takes, else its
// max_position_embeddings; 0 where neither bounds it (T5's relative positions).
inline int64_t longest_context(const ModelSpec& spec) {
  return spec.max_seq > 0 ? spec.max_seq : spec.max_position_embeddings;
}

// Whisper from its configuration: the whole model (WhisperForConditionalGeneration, family
// "whisper"), or the encoder with WhisperForAudioClassification's head ("whisper-cls"). The
// name and Hub id are left to the caller.
ModelSpec whisper_spec(const WhisperConfig& c, bool classifier);

// All models: the hand-written zoo's real ones, the catalogue's, then the test models.
const std::vector<ModelSpec>& zoo();
// The spec of `name`: a zoo name, the Hugging Face id `sweep models` prints, or the path of a
// config.json (any name ending in ".json", read once per process); nullptr if none. A
// config.json that cannot be read or describes no model we build throws UserError naming the
// file, the line and the field.
const ModelSpec* find_model(const std::string& name);
// Whether a family's models are causal language models (AutoModelForCausalLM: GPT-2 and the
// config.json decoders), the models TRL's SFTTrainer trains.
bool is_causal_lm(const std::string& family);
// A name for files and directories derived from the model's name: the zoo name, or for a
// config.json the folder holding it ("./my-model/config.json" -> "my-model").
std::string model_slug(const ModelSpec& spec);
// Trainable parameter count (tied weights counted once), as Hugging Face's num_parameters().
int64_t count_parameters(const torch::nn::Module& m);

}  // namespace sweep::models
