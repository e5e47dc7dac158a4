// The model zoo: every model a config can name, with the facts `sweep models` prints.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace sweep::models {

struct ModelSpec {
  std::string name;    // "gpt2-medium"
  std::string family;  // "gpt2" | "t5" | "whisper"
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
};

// All models, real ones first, then test models.
const std::vector<ModelSpec>& zoo();
// The spec of `name`: a zoo name, or the Hugging Face id `sweep models` prints; nullptr if none.
const ModelSpec* find_model(const std::string& name);
// Trainable parameter count (tied weights counted once), as Hugging Face's num_parameters().
int64_t count_parameters(const torch::nn::Module& m);

}  // namespace sweep::models
