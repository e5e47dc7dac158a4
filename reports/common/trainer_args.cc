// The Trainer arguments of a configuration (trainer_args.h). Every name below was read in
// transformers 5.23.0 (training_args.py OptimizerNames and the fields, trainer_optimizer.py
// _get_adamw_torch/_get_sgd/_get_adafactor/_get_bitsandbytes_optimizer, trainer.py's
// checkpointing), PEFT 0.21's LoraConfig and DeepSpeed 0.19's config keys; the words of the axes
// one keyword runs are the table's (schema::Axis::trainer).
#include "reports/common/trainer_args.h"

namespace sweep::reports {
namespace {

using Json = nlohmann::ordered_json;

// An object's members as Python keywords: "r=8, lora_alpha=8.0".
std::string keywords(const Json& object) {
  std::string s;
  for (const auto& [k, v] : object.items()) s += (s.empty() ? "" : ", ") + k + "=" + python_literal(v);
  return s;
}

// The optimizer the row ran, by Trainer's name. Offload has its own (DeepSpeed's).
void add_optimizer(const TrainingSetup& s, TrainerArgs& a) {
  Json& t = a.training_arguments;
  switch (s.optimizer) {
    case OptimizerKind::kAdamW:
      // trainer_optimizer.py _get_adamw_torch: torch.optim.AdamW without fused=, so torch's
      // default choice (foreach on CUDA), as sweeps/worker/optim.cc runs it.
      t["optim"] = "adamw_torch";
      a.notes.push_back("optim=\"adamw_torch\" is torch.optim.AdamW's foreach implementation, as measured; "
                        "Trainer's own default (torch >= 2.8) is \"adamw_torch_fused\"");
      break;
    case OptimizerKind::kAdamWFused:
      t["optim"] = "adamw_torch_fused";  // AdamW(fused=True); Trainer's default since torch 2.8
      break;
    case OptimizerKind::kSgd:
      // _get_sgd: torch.optim.SGD with lr only unless optim_args names more; the row's SGD has
      // momentum 0.9 (a buffer per parameter) and weight decay 0.01 (a foreach temporary).
      t["optim"] = "sgd";
      t["optim_args"] = "momentum=0.9";
      t["weight_decay"] = 0.01;
      break;
    case OptimizerKind::kAdafactor:
      // _get_adafactor: transformers.optimization.Adafactor(scale_parameter=False,
      // relative_step=False), beta1 None: no first moment, factored second moments, as the
      // row's torch.optim.Adafactor; its arithmetic is not the same.
      t["optim"] = "adafactor";
      a.notes.push_back(
          "optim=\"adafactor\" is transformers' Adafactor: the same state as the torch.optim.Adafactor "
          "measured (factored second moments, no first moment), other temporaries (it steps a 16-bit "
          "parameter in an fp32 copy); to run the measured one, Trainer(..., optimizers="
          "(torch.optim.Adafactor(model.parameters(), lr=1e-3, weight_decay=0.01), None))");
      break;
    case OptimizerKind::kAdamW8bit:
      // _get_bitsandbytes_optimizer: bnb.optim.AdamW(optim_bits=8, is_paged=False) = AdamW8bit.
      t["optim"] = "adamw_bnb_8bit";
      a.notes.push_back("optim=\"adamw_bnb_8bit\" is bitsandbytes' AdamW8bit, as measured");
      break;
    case OptimizerKind::kPagedAdamW8bit:
    case OptimizerKind::kPagedAdamW32bit:
      // bnb.optim.AdamW(optim_bits=8 or 32, is_paged=True): the moments of parameters of 1e5
      // elements or more in CUDA unified memory, which the driver pages to the host under pressure.
      t["optim"] = s.optimizer == OptimizerKind::kPagedAdamW8bit ? "paged_adamw_8bit" : "paged_adamw_32bit";
      a.notes.push_back("optim=\"" + t["optim"].get<std::string>() +
                        "\" keeps the moments of large parameters in CUDA unified memory, outside "
                        "PyTorch's allocator: the row's paged_bytes, not in its peaks");
      break;
    case OptimizerKind::kNone:
      break;
  }
}

// Optimizer offload as DeepSpeed's ZeRO-Offload (sweeps/worker/offload.h): fp32 master
// weights, gradients and AdamW's moments in pinned host memory, stepped by DeepSpeed's CPU
// Adam. The weights on the card stay in the row's dtype (fp32, autocast on top), so DeepSpeed's
// own fp16/bf16 modes (16-bit weights on the card) are off and autocast is its torch_autocast.
Json zero_offload(const TrainingSetup& s) {
  Json ds = Json::object();
  ds["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}}};
  ds["optimizer"] = {{"type", "AdamW"},
                     {"params", {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}};
  ds["train_micro_batch_size_per_gpu"] = "auto";
  ds["gradient_accumulation_steps"] = "auto";
  ds["fp16"] = {{"enabled", false}};
  ds["bf16"] = {{"enabled", false}};
  if (s.precision == Precision::kFp16Amp || s.precision == Precision::kBf16Amp)
    ds["torch_autocast"] = {{"enabled", true},
                            {"dtype", s.precision == Precision::kFp16Amp ? "float16" : "bfloat16"}};
  return ds;
}

// The transformers class that loads a family's checkpoint as the zoo builds it (scripts/
// hf_reference.py build): GPT-2 with its LM head, T5 and Whisper for generation, Whisper's
// encoder-classifier.
std::string auto_class(const std::string& family) {
  if (family == "gpt2" || family == "llama" || family == "phi3") return "AutoModelForCausalLM";
  if (family == "t5") return "AutoModelForSeq2SeqLM";
  if (family == "whisper") return "AutoModelForSpeechSeq2Seq";
  if (family == "whisper-cls") return "AutoModelForAudioClassification";
  return "AutoModel";
}

void add_precision(const TrainingSetup& s, TrainerArgs& a) {
  Json& t = a.training_arguments;
  const bool offload = s.offload == Offload::kOptimizer;
  // Under DeepSpeed the fp16/bf16 flags must equal the config's (integrations/deepspeed.py
  // fill_match), and autocast is the config's.
  t["bf16"] = !offload && s.precision == Precision::kBf16Amp;
  t["fp16"] = !offload && s.precision == Precision::kFp16Amp;
  if (s.precision != Precision::kBf16) return;
  if (s.mode == Mode::kEval) {
    t["bf16_full_eval"] = true;  // trainer.py evaluation_loop: model.to(torch.bfloat16)
  } else if (s.weights == Weights::kFull) {
    if (s.family == "llama" || s.family == "phi3") {
      // A decoder from its config.json: sweeps/worker/burst.cc loads it in bf16 from the start.
      a.from_pretrained = {{"dtype", "bfloat16"}};
      a.model_code.push_back("model = " + auto_class(s.family) +
                             ".from_pretrained(name, dtype=torch.bfloat16)  # bf16 weights: no Trainer flag");
    } else {
      a.model_code.push_back("model = model.to(torch.bfloat16)  # bf16 weights: no Trainer flag");
    }
    a.notes.push_back("bf16 weights are not Trainer's bf16=True: that is autocast over fp32 weights "
                      "(the bf16-amp rows), which holds more memory");
  }
}

bool four_bit(Weights w) { return w == Weights::kNf4 || w == Weights::kFp4; }

// QLoRA as sweeps/worker/burst.cc runs it: BitsAndBytesConfig 4-bit with double quantisation,
// compute dtype bf16 (fp16 under fp16-amp) and the load in it, then, when training,
// prepare_model_for_kbit_training (the rest of the model in fp32), whose checkpointing the
// Trainer's gradient_checkpointing=True makes non-reentrant again.
void add_4bit(const TrainingSetup& s, TrainerArgs& a) {
  const std::string dtype = s.precision == Precision::kFp16Amp ? "float16" : "bfloat16";
  const std::string type = to_string(s.weights);
  a.bnb_config = {{"load_in_4bit", true}, {"bnb_4bit_quant_type", type},
                  {"bnb_4bit_use_double_quant", true}, {"bnb_4bit_compute_dtype", dtype}};
  a.from_pretrained = {{"dtype", dtype}, {"device_map", {{"", 0}}}};
  a.model_code.push_back("model = " + auto_class(s.family) +
                         ".from_pretrained(name, quantization_config=BitsAndBytesConfig("
                         "load_in_4bit=True, bnb_4bit_quant_type=\"" + type +
                         "\", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch." +
                         dtype + "), dtype=torch." + dtype + ", device_map=" +
                         python_literal(a.from_pretrained["device_map"]) + ")");
  if (s.mode != Mode::kTrain) return;
  const bool ckpt = s.checkpointing == Checkpointing::kBlock;
  a.model_code.push_back(std::string("model = prepare_model_for_kbit_training(model, "
                                     "use_gradient_checkpointing=") + (ckpt ? "True" : "False") + ")");
}

void add_weights(const TrainingSetup& s, TrainerArgs& a) {
  if (four_bit(s.weights)) return add_4bit(s, a);
  if (s.weights != Weights::kInt8) return;
  // sweeps/worker/load_int8.h: onto the GPU tensor by tensor, in the row's weights' dtype.
  a.bnb_config = {{"load_in_8bit", true}};
  const std::string dtype = s.precision == Precision::kBf16 ? "bfloat16" : "float32";
  a.from_pretrained = {{"dtype", dtype}, {"device_map", {{"", 0}}}};
  a.model_code.push_back("model = " + auto_class(s.family) +
                         ".from_pretrained(name, quantization_config=BitsAndBytesConfig(" +
                         keywords(a.bnb_config) + "), dtype=torch." + dtype + ", device_map=" +
                         python_literal(a.from_pretrained["device_map"]) + ")");
  a.notes.push_back("the 8-bit model is trained as loaded: prepare_model_for_kbit_training (fp32 "
                    "copies of the other parameters) was not called");
}

// A setting's value as LoraConfig takes it.
template <class T>
Json peft_value(const T& v) { return v; }
// PEFT's "all-linear" is a string, not a module name in a list.
Json peft_value(const std::vector<std::string>& names) {
  return names.size() == 1 && names[0] == "all-linear" ? Json(names[0]) : Json(names);
}

void add_lora(const TrainingSetup& s, TrainerArgs& a) {
  if (s.adapter != Adapter::kLora) return;
  a.lora_config = Json::object();
  s.for_each([&](std::string_view column, const auto& v) {
    a.lora_config[std::string(schema::find_axis(column)->trainer)] = peft_value(v);
  });
  // SFTTrainer wraps the model itself (get_peft_model in its __init__; with checkpointing
  // on, enable_input_require_grads), as tests/fixtures/make_sft_fixtures.py measured it.
  if (s.trainer == Trainer::kSft) return;
  // sweeps/worker/burst.cc: get_peft_model after gradient_checkpointing_enable(), so that PEFT
  // makes the embeddings' output require grad, as a script that enables it first does.
  if (s.mode == Mode::kTrain && s.checkpointing == Checkpointing::kBlock && !four_bit(s.weights))
    a.model_code.push_back("model.gradient_checkpointing_enable()  # before get_peft_model, as measured");
  a.model_code.push_back("model = get_peft_model(model, LoraConfig(" + keywords(a.lora_config) + "))");
}

// The technique axes one TrainingArguments flag runs (schema::Axis::trainer): the flag as the
// row has it, and a note where the Trainer's default would run something else.
void add_trainer_flags(const TrainingSetup& s, TrainerArgs& a) {
  for (const auto& axis : schema::kAxes) {
    if (axis.role != schema::Role::kTechnique || axis.trainer.empty()) continue;
    SWEEP_CHECK(axis.values == schema::Values::kBool, "a TrainingArguments word for no flag");
    const std::string cell = s.cell(axis.column);
    a.training_arguments[std::string(axis.trainer)] = cell == "1";
    if (cell != axis.trainer_default && !axis.trainer_note.empty()) a.notes.emplace_back(axis.trainer_note);
  }
}

void add_offload(const TrainingSetup& s, TrainerArgs& a) {
  if (s.offload != Offload::kOptimizer || s.mode != Mode::kTrain) return;
  // DeepSpeed's optimizer replaces Trainer's `optim` (integrations/deepspeed.py
  // deepspeed_optim_sched: "optimizer" in the config), its CPU Adam under offload.
  a.training_arguments["deepspeed"] = zero_offload(s);
  a.notes.push_back("optimizer offload is no Trainer flag: it is DeepSpeed ZeRO-Offload (pip install "
                    "deepspeed), its config passed as TrainingArguments(deepspeed=ds_config)");
}

// TRL 1.16's SFTConfig and SFTTrainer (trainer sft): the same fields, whose defaults differ
// for two that are always written (gradient_checkpointing and bf16 default to True there), and
// the trainer, with LoRA as its peft_config. The row's model is TRL's to wrap: its fused LM head
// (add_fused_lm_head) is what SFTTrainer adds to every causal LM it trains.
void add_sft(const TrainingSetup& s, TrainerArgs& a) {
  a.config_class = "SFTConfig";
  // Padding-free without packing does not truncate: SFTTrainer refuses a max_length then.
  if (s.padding_free) {
    a.training_arguments["padding_free"] = true;
    a.training_arguments["max_length"] = nullptr;
    if (s.seq > 0)
      a.notes.push_back(
          "padding_free=True truncates nothing (SFTTrainer wants max_length=None): "
          "truncate each sample to " +
          std::to_string(s.seq) + " tokens when you tokenize");
  } else if (s.seq > 0) {
    a.training_arguments["max_length"] = s.seq;
  }
  // SFTTrainer's default for a prompt-completion dataset, written as what was measured.
  if (s.completion_share > 0) a.training_arguments["completion_only_loss"] = true;
  if (s.activation_offloading && s.mode == Mode::kTrain)
    a.training_arguments["activation_offloading"] = true;
  a.trainer_code = "trainer = SFTTrainer(model=model, args=args, train_dataset=dataset";
  if (!a.lora_config.is_null()) a.trainer_code += ", peft_config=LoraConfig(" + keywords(a.lora_config) + ")";
  a.trainer_code += ")";
  if (s.mode == Mode::kTrain && s.checkpointing == Checkpointing::kNone)
    a.notes.push_back("gradient_checkpointing=False as measured; SFTConfig's default is True");
  // SFTConfig's bf16 defaults to `not fp16`: only fp32 and bf16 weights turn its autocast off.
  if ((s.precision == Precision::kFp32 || s.precision == Precision::kBf16) && s.offload == Offload::kNone)
    a.notes.push_back("bf16=False as measured; SFTConfig's default is True (bf16 autocast)");
}

// The data as measured: a prompt-completion dataset, and for Trainer its padding-free
// collator (transformers' DataCollatorWithFlattening: the batch as one row with position_ids).
void add_data(const TrainingSetup& s, TrainerArgs& a) {
  if (s.completion_share > 0)
    a.notes.push_back("a prompt-completion dataset: the last " +
                      number_text(100 * s.completion_share) +
                      "% of each sample is the completion, the only tokens scored" +
                      (s.trainer == Trainer::kSft ? "" : " (labels -100 over the prompt)"));
  if (s.trainer == Trainer::kHf && s.padding_free && s.mode == Mode::kTrain)
    a.trainer_code =
        "trainer = Trainer(model=model, args=args, train_dataset=dataset, "
        "data_collator=DataCollatorWithFlattening())";
}

}  // namespace

TrainingSetup setup_of(const Row& row) {
  TrainingSetup s;
  s.family = row.at(schema::find_column("family"));
  auto number = [&](std::string_view column, double fallback) {
    const auto v = row.number(schema::find_column(column));
    return v ? *v : fallback;
  };
  s.mode = row.value<Mode>().value_or(Mode::kTrain);
  s.batch = static_cast<int64_t>(number("batch", 1));
  s.seq = static_cast<int64_t>(number("seq", 0));
  s.completion_share = number("completion_share", 0);
  s.padding_free = row.at(schema::find_column("padding_free")) == "1";
  s.activation_offloading = row.at(schema::find_column("activation_offloading")) == "1";
  s.accumulation = static_cast<int64_t>(number("accumulation", 1));
  read_technique(row, s);  // an empty cell without a fallback: the plain value
  read_lora_settings(row, s);
  return s;
}

TrainerArgs trainer_args(const TrainingSetup& s) {
  TrainerArgs a;
  Json& t = a.training_arguments;
  if (s.mode == Mode::kEval) {
    t["per_device_eval_batch_size"] = s.batch;
  } else {
    t["per_device_train_batch_size"] = s.batch;
    t["gradient_accumulation_steps"] = s.accumulation;
  }
  add_weights(s, a);
  add_precision(s, a);
  if (s.mode == Mode::kTrain) {
    // trainer.py: gradient_checkpointing_enable(use_reentrant=False), the checkpointing of
    // sweeps/worker/checkpoint.h. 5.23 calls the flag activation_checkpointing, keeping this
    // name as an alias until v6; 5.17 knows only this one.
    t["gradient_checkpointing"] = s.checkpointing == Checkpointing::kBlock;
    if (s.checkpointing == Checkpointing::kBlock)
      a.notes.push_back("transformers 5.23 renamed gradient_checkpointing to activation_checkpointing; "
                        "the old name works, with a warning, until v6");
    if (s.offload == Offload::kNone) add_optimizer(s, a);
  }
  add_trainer_flags(s, a);
  add_lora(s, a);
  if (s.mode == Mode::kTrain) add_offload(s, a);
  if (s.trainer == Trainer::kSft) add_sft(s, a);
  add_data(s, a);
  return a;
}

std::string python_literal(const nlohmann::ordered_json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + python_literal(e);
    return "[" + s + "]";
  }
  if (v.is_object()) {
    std::string s;
    for (const auto& [k, e] : v.items()) s += (s.empty() ? "" : ", ") + Json(k).dump() + ": " + python_literal(e);
    return "{" + s + "}";
  }
  return v.dump();  // numbers and strings are spelt alike
}

std::string trainer_args_text(const TrainerArgs& a) {
  std::string out;
  for (const auto& line : a.model_code) out += line + "\n";
  // The DeepSpeed config is named, then passed: TrainingArguments(deepspeed=ds_config).
  const auto ds = a.training_arguments.find("deepspeed");
  if (ds != a.training_arguments.end()) out += "ds_config = " + python_literal(*ds) + "\n";
  out += "args = " + a.config_class + "(\n";
  for (const auto& [k, v] : a.training_arguments.items())
    out += "    " + k + "=" + (k == "deepspeed" ? "ds_config" : python_literal(v)) + ",\n";
  out += ")\n";
  if (!a.trainer_code.empty()) out += a.trainer_code + "\n";
  for (const auto& note : a.notes) out += "# " + note + "\n";
  return out;
}

nlohmann::ordered_json trainer_args_json(const TrainerArgs& a) {
  Json j = Json::object();
  j["training_arguments"] = a.training_arguments;
  if (!a.from_pretrained.is_null()) j["from_pretrained"] = a.from_pretrained;
  if (!a.bnb_config.is_null()) j["bnb_config"] = a.bnb_config;
  if (!a.lora_config.is_null()) j["lora_config"] = a.lora_config;
  j["model_code"] = a.model_code;
  if (!a.trainer_code.empty()) {
    j["config_class"] = a.config_class;
    j["trainer_code"] = a.trainer_code;
  }
  j["notes"] = a.notes;
  j["text"] = trainer_args_text(a);  // the same, as Python to paste
  return j;
}

std::string precision_words(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16Amp:
      return "fp16 autocast + loss scaling (Trainer fp16=True)";
    case Precision::kBf16Amp:
      return "bf16 autocast (Trainer bf16=True)";
    case Precision::kBf16:
      return "bf16 weights (model.to(bfloat16))";
  }
  SWEEP_CHECK(false, "a precision without words");
  return {};
}

}  // namespace sweep::reports
