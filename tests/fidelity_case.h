// A case of the memory fixtures (tests/fixtures/memory_fidelity.json, load_fidelity.json) as the
// Point our burst runs: the fields the scripts in tests/fixtures write for each case, and the
// file's shared "steps".
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/zoo.h"
#include "reports/results/vocab.h"
#include "sweeps/worker/point.h"

namespace sweep::testing {

// A fixture file under tests/fixtures/, parsed.
inline nlohmann::json read_fixture(const std::string& name) {
  std::ifstream in(std::string(SWEEP_SOURCE_DIR) + "/tests/fixtures/" + name);
  return nlohmann::json::parse(in);
}

// A case's enumerated axis, by its name; `fallback` where the case leaves it out.
template <Vocabulary E>
E named(const nlohmann::json& c, const char* key, const char* fallback = "") {
  const std::string name = c.value(key, std::string(fallback));
  const auto e = parse_as<E>(name);
  if (!e) ADD_FAILURE() << "case " << c.dump() << ": " << key << " '" << name << "' is no value";
  return e.value_or(E{});
}

// A case's model: a zoo name, or a config.json under tests/fixtures/configs/ named by its path
// from the checkout, as a user names a file.
inline std::string model_of(const nlohmann::json& c) {
  const std::string model = c.at("model");
  return models::names_config_file(model) ? SWEEP_SOURCE_DIR "/" + model : model;
}

// The case's point. `load` where the case names none: how the fixture's script loaded a
// quantised model (Point::load).
inline Point fixture_point(const nlohmann::json& c, const nlohmann::json& steps, const std::string& load) {
  Point p;
  p.model = model_of(c);
  p.family = models::find_model(p.model)->family;
  p.mode = named<Mode>(c, "mode");
  p.batch = c.at("batch");
  p.seq = c.value("seq", 0);
  p.target_seq = c.value("target_seq", 0);
  p.audio_s = c.value("audio_s", 0.0);
  p.precision = named<Precision>(c, "precision");
  p.checkpointing = named<Checkpointing>(c, "checkpointing");
  p.accumulation = c.at("accumulation");
  p.optimizer = named<OptimizerKind>(c, "optimizer");
  p.use_cache = c.at("use_cache");
  // LoRA cases (peft.get_peft_model) carry the adapter's settings; the others train every weight.
  p.adapter = named<Adapter>(c, "adapter", "none");
  if (p.adapter == Adapter::kLora) {
    p.lora_r = c.at("lora_r");
    p.lora_alpha = c.at("lora_alpha");
    p.lora_dropout = c.at("lora_dropout");
    p.lora_targets = c.at("lora_targets").get<std::vector<std::string>>();
  }
  // Quantised base weights (from_pretrained with a BitsAndBytesConfig).
  p.weights = named<Weights>(c, "weights", "full");
  p.load = c.value("load", load);
  p.trainer = named<Trainer>(c, "trainer", "hf");
  // A prompt-completion dataset, and padding-free batches (SFTTrainer's cases).
  p.completion_share = c.value("completion_share", 0.0);
  p.padding_free = c.value("padding_free", false);
  p.steps = steps.at("steps");
  p.warmup_steps = steps.at("warmup");
  p.repetitions = steps.at("repetitions");
  p.seed = steps.at("seed");
  return p;
}

}  // namespace sweep::testing
