// A configuration in the words of the user's training script: the Hugging Face Trainer
// arguments (transformers 5.23's TrainingArguments, PEFT 0.21's LoraConfig, BitsAndBytesConfig,
// DeepSpeed's ZeRO-Offload config) that run what a row measured, and, said plainly, what is no
// Trainer flag. One function for fit, recommend, report and the tables; text to paste and JSON
// (`trainer_args`) come from the same value. Pure, and free of LibTorch like the rest of reports/.
//
// What each axis runs here (sweeps/worker/) and the Trainer name that runs the same:
//   precision  fp32: nothing; fp16-amp: torch.autocast + GradScaler = Trainer fp16=True;
//              bf16-amp: torch.autocast = Trainer bf16=True; bf16: the model cast to bfloat16
//              (model.to(torch.bfloat16)), no Trainer flag (bf16=True is autocast).
//   checkpointing block: torch.utils.checkpoint(use_reentrant=False) per block, what
//              gradient_checkpointing=True runs (activation_checkpointing from 5.23 on).
//   optimizer  adamw: torch.optim.AdamW, the default implementation (foreach on CUDA) =
//              optim="adamw_torch"; adamw-fused: AdamW(fused=True) = "adamw_torch_fused",
//              Trainer's default since torch 2.8; sgd: torch.optim.SGD momentum 0.9, weight
//              decay 0.01 = "sgd" with optim_args="momentum=0.9"; adamw8bit: bnb.optim.AdamW8bit
//              = "adamw_bnb_8bit" (not paged); adafactor: torch.optim.Adafactor, whose state
//              transformers' Adafactor (optim="adafactor") shares, not its arithmetic.
//   adapter    lora: get_peft_model(model, LoraConfig(...)), each setting by its LoraConfig word
//              (schema::Axis::trainer).
//   weights    int8: from_pretrained(quantization_config=BitsAndBytesConfig(load_in_8bit=True));
//              nf4 | fp4: BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type,
//              bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype bf16 (fp16 under
//              fp16-amp)), then prepare_model_for_kbit_training when training (QLoRA).
//   offload    optimizer: DeepSpeed ZeRO-Offload (stage 2, offload_optimizer cpu, its CPU AdamW).
// An axis one TrainingArguments flag runs as it is, the model's cache among them, is the
// table's (schema::Axis::trainer: the flag, and a note where Trainer's default differs).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "reports/results/rows.h"
#include "reports/results/technique.h"
#include "reports/results/vocab.h"

namespace sweep::reports {

// One training configuration, with the fields and vocabulary of a results row.
// The technique (reports/results/technique.h: precision, checkpointing, optimizer, the cache,
// adapter, offload, weights), LoRA's settings (the targets as a row names them: {"c_attn"},
// {"q", "v"}) and what else the arguments are made of.
struct TrainingSetup : Technique, LoraSettings {
  std::string family;  // "gpt2" | "t5" | "whisper" | "llama" ...: names the class a quantised load uses
  // Tokens per sample (0: the row names none): SFTConfig's max_length, which truncates every
  // sample to it (its default 1024), so an sft answer always says it.
  int64_t seq = 0;
  // A prompt-completion dataset's completion share (0: none) and padding-free batches: the
  // data's shape and its collation, which are the trainer's words but no Technique member.
  double completion_share = 0;
  bool padding_free = false;
  // SFTConfig(activation_offloading=True): TRL's offloader around each training_step.
  bool activation_offloading = false;
  Mode mode = Mode::kTrain;
  int64_t batch = 1;         // per_device_train_batch_size
  int64_t accumulation = 1;  // gradient_accumulation_steps
};

// The setup a results row measured (its axis cells; an older file's empty cells their fallbacks).
TrainingSetup setup_of(const Row& row);

// The arguments, as JSON values in the order they are printed. Objects left null are not used.
struct TrainerArgs {
  // TrainingArguments(...), or SFTConfig(...) for trainer sft (its subclass, which defaults
  // gradient_checkpointing and bf16 to True: both are always written); under offload its
  // `deepspeed` member is the ZeRO-Offload config.
  std::string config_class = "TrainingArguments";
  nlohmann::ordered_json training_arguments = nlohmann::ordered_json::object();
  nlohmann::ordered_json from_pretrained;  // int8: from_pretrained's dtype and device_map
  nlohmann::ordered_json bnb_config;       // int8: BitsAndBytesConfig(...), its quantization_config
  nlohmann::ordered_json lora_config;      // lora: LoraConfig(...)
  // What is no Trainer flag, as Python statements in the order they run ("model =
  // model.to(torch.bfloat16)"), and where Trainer would run something else than the row did.
  std::vector<std::string> model_code;
  // After the arguments: the trainer as TRL's SFTTrainer takes the model and LoRA
  // (`SFTTrainer(..., peft_config=LoraConfig(...))`); empty for transformers' Trainer.
  std::string trainer_code;
  std::vector<std::string> notes;
};

TrainerArgs trainer_args(const TrainingSetup& setup);

// Python lines a user can paste (comments for the notes): the model lines, then
// `args = TrainingArguments(...)` (or SFTConfig), then the trainer for SFTTrainer.
std::string trainer_args_text(const TrainerArgs& args);
// {"training_arguments": {...}, "from_pretrained": {...}, "bnb_config": {...}, "lora_config":
// {...}, "model_code": [...], "notes": [...], "text": trainer_args_text()}: what `fit --json` carries as `trainer_args`
// (the members not used left out); for SFTTrainer also "config_class": "SFTConfig" and
// "trainer_code".
nlohmann::ordered_json trainer_args_json(const TrainerArgs& args);

// A precision named so that it explains itself: "bf16 autocast (Trainer bf16=True)", "bf16
// weights (model.to(bfloat16))", "fp16 autocast + loss scaling (Trainer fp16=True)", "fp32".
std::string precision_words(Precision precision);

// A JSON value as a Python literal: True, None, "text", [1, 2], {"a": 1}.
std::string python_literal(const nlohmann::ordered_json& value);

}  // namespace sweep::reports
