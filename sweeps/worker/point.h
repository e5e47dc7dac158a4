// One grid point: everything a worker needs to run a training burst, and its identity.
// Serialised as JSON to hand it to the worker process.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reports/results/cards.h"
#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "reports/results/technique.h"
#include "reports/results/vocab.h"
#include "sweeps/measure/emulated_card.h"

namespace sweep {

// Module names as a results row writes them, ';'-separated ("q;v"); none: the family's default
// LoRA targets (models::default_lora_targets).
std::string module_names_text(const std::string& family, const std::vector<std::string>& names);

struct Point {
  // axes
  std::string model;
  std::string family;
  Mode mode = Mode::kTrain;
  int64_t batch = 1;
  int64_t seq = 0;         // 0 = not applicable to this model
  int64_t target_seq = 0;  // 0 = not applicable
  double audio_s = 0;      // 0 = not applicable
  Precision precision = Precision::kFp32;
  Checkpointing checkpointing = Checkpointing::kNone;
  int64_t accumulation = 1;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  bool use_cache = true;  // transformers' use_cache (its default); off under checkpointing
  Adapter adapter = Adapter::kNone;  // none (full fine-tuning) | lora (PEFT's LoRA, base frozen)
  // LoRA settings (part of the identity when adapter is lora): PEFT's LoraConfig defaults;
  // targets empty = the family's default target modules (models::default_lora_targets).
  SWEEP_LORA_SETTINGS(SWEEP_AXIS_MEMBER)
  // none | optimizer (ZeRO-Offload: AdamW's state and fp32 master weights in host memory,
  // stepped on the CPU; sweeps/worker/offload.h)
  Offload offload = Offload::kNone;
  // full | int8 (the frozen base's linear weights in 8 bit, as bitsandbytes' Linear8bitLt;
  // models/int8.h)
  Weights weights = Weights::kFull;
  // hf | sft (TRL's SFTTrainer: the fused LM head, the backbone without its cache;
  // models/fused_lm_head.h)
  Trainer trainer = Trainer::kHf;
  // A prompt-completion dataset's completion share of each sequence (0: none, every token
  // scored), and padding-free batches (schema::kAxes).
  double completion_share = 0;
  bool padding_free = false;
  // SFTConfig(activation_offloading=True) (sweeps/worker/activation_offload.h)
  bool activation_offloading = false;
  std::string alloc_conf;
  // how it runs
  int steps = 3;
  int warmup_steps = 1;
  int repetitions = 3;
  int64_t budget_bytes = 0;  // 0 = no cap beyond the device
  bool budget_emulated = false;
  double timeout_s = 600;
  Device device = Device::kCpu;
  // device emulated: the card whose memory the emulation predicts (the config's gpu:). An
  // axis as its `card` cell spells it (reports/results/cards.h), and only on device emulated.
  EmulatedCard card;
  double lr = 1e-3;            // optimizer settings (not part of the identity's axes list)
  double weight_decay = 0.01;
  uint64_t seed = 0;
  // The transformers release whose forward code the model follows where releases differ
  // (models/model.h follow_transformers): "5.23", or "5.17" where a config names it.
  std::string transformers = "5.23";
  // How from_pretrained loads a quantised model (weights int8, nf4, fp4; issue 58):
  // "checkpoint": from a checkpoint on disk with no dtype, so the checkpoint's (the fp32 one a
  // model built here saves as), on the CPU every tensor not converted a view of the file's
  // buffer (sweeps/worker/load_int8.h load_checkpoint_cpu); "cast": with dtype= the compute
  // dtype (bf16 for 4 bit; the point's for 8 bit), each tensor copied as a GPU's load copies it,
  // as tests/fixtures/memory_fidelity.json's quantised cases load; "": the device's: checkpoint
  // on the CPU, cast on a card (the committed tables' basis).
  std::string load;

  // 16 hex digits: FNV-1a over the identity axes and the suite version. Stable across runs.
  std::string id() const;
  // "gpt2 b=4 seq=128 fp32 ckpt=none acc=1 adamw" for progress lines and messages.
  std::string label() const;
  // The LoRA target modules as the results file writes them: "q;v".
  std::string lora_targets_text() const { return module_names_text(family, lora_targets); }
};

// A small training point of a zoo model (the test models: gpt2-test, t5-test, whisper-test)
// with its family's sequence axes set (batch 2, 32 tokens, 16 decoder tokens, 2 s of audio)
// and one step of each kind: what the GPU probe and the precision/optimizer tests train.
Point tiny_point(const std::string& model, Device device, Precision precision, OptimizerKind optimizer);
// FNV-1a 64 of `text` as 16 hex digits: the one stable hash of the suite (point identity,
// the Slurm plan's fingerprint).
std::string fnv1a_hex(const std::string& text);

// The Point member behind each axis of schema::kAxes, in its order (checked at compile time in
// point.cc): X(member). The point's cells, its id, its JSON and the grid's axis values are
// generated from it; what is not an axis (the worker's settings) is SWEEP_POINT_SETTINGS.
#define SWEEP_POINT_AXES(X)                                                                      \
  X(model) X(family) X(mode) X(batch) X(seq) X(target_seq) X(audio_s) X(precision)               \
  X(checkpointing) X(accumulation) X(optimizer) X(use_cache) X(adapter) X(lora_r) X(lora_alpha)  \
  X(lora_dropout) X(lora_targets) X(offload) X(weights) X(trainer) X(completion_share)           \
  X(padding_free) X(activation_offloading) X(alloc_conf) X(steps) X(warmup_steps) X(repetitions) X(budget_bytes)          \
  X(budget_emulated) X(device) X(card)
#define SWEEP_POINT_SETTINGS(X) X(timeout_s) X(lr) X(weight_decay) X(seed) X(transformers) X(load)

// The point's cells of a results row, as `sweep run` writes them before the measurement:
// every axis whose schema::Cell rule says the row has it.
nlohmann::json axis_cells(const Point& p);
// The point a row measured, read back from its axis cells (the typed reader's side of
// axis_cells): point_of(row).id() is the row's point_id for the suite version that wrote it.
Point point_of(const reports::Row& row);
// An axis as a config spells its value ("true", "1.5", "bf16-amp"); "" for no axis.
std::string axis_text(const Point& p, std::string_view column);
// Sets an axis from its config spelling (as axis_text writes it). False for no axis.
bool set_axis_text(Point& p, std::string_view column, const std::string& text);

void to_json(nlohmann::json& j, const Point& p);
void from_json(const nlohmann::json& j, Point& p);

}  // namespace sweep
