// The Trainer arguments of a configuration (reports/common/trainer_args.h), one table row per
// precision / checkpointing / optimizer / adapter / weights / offload combination: the
// TrainingArguments that run what the row measured, as transformers 5.23's Trainer reads them
// (trainer_optimizer.py's optimizer names, trainer.py's use_cache and checkpointing), and what
// is no Trainer flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reports/common/trainer_args.h"

namespace sweep::reports {
namespace {

using Json = nlohmann::ordered_json;

struct Case {
  const char* name;
  TrainingSetup setup;
  const char* training_arguments;  // the JSON expected, member order included
  std::vector<std::string> model_code;  // each expected line starts with one of these, in order
  const char* lora_config = "null";
  const char* bnb_config = "null";
};

TrainingSetup setup(Precision p, Checkpointing c, OptimizerKind o, bool use_cache = true) {
  TrainingSetup s;
  s.family = "gpt2";
  s.batch = 31;
  s.accumulation = 2;
  s.precision = p;
  s.checkpointing = c;
  s.optimizer = o;
  s.use_cache = use_cache;
  return s;
}
TrainingSetup lora(TrainingSetup s, Weights w = Weights::kFull) {
  s.adapter = Adapter::kLora;
  s.lora_r = 16;
  s.lora_alpha = 32;
  s.lora_dropout = 0.05;
  s.lora_targets = {"c_attn"};
  s.weights = w;
  return s;
}
TrainingSetup offloaded(TrainingSetup s) {
  s.offload = Offload::kOptimizer;
  return s;
}

using P = Precision;
using C = Checkpointing;
using O = OptimizerKind;

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {"fp32 adamw: the foreach AdamW, not Trainer's fused default",
       setup(P::kFp32, C::kNone, O::kAdamW),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":false,)"
       R"("gradient_checkpointing":false,"optim":"adamw_torch","use_cache":true})",
       {}},
      {"bf16-amp is Trainer's bf16=True", setup(P::kBf16Amp, C::kBlock, O::kAdamWFused, false),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":true,"fp16":false,)"
       R"("gradient_checkpointing":true,"optim":"adamw_torch_fused","use_cache":false})",
       {}},
      {"fp16-amp is Trainer's fp16=True", setup(P::kFp16Amp, C::kNone, O::kAdamW8bit),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":true,)"
       R"("gradient_checkpointing":false,"optim":"adamw_bnb_8bit","use_cache":true})",
       {}},
      {"paged 8-bit AdamW", setup(P::kFp16Amp, C::kNone, O::kPagedAdamW8bit),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":true,)"
       R"("gradient_checkpointing":false,"optim":"paged_adamw_8bit","use_cache":true})",
       {}},
      {"paged 32-bit AdamW", setup(P::kFp16Amp, C::kNone, O::kPagedAdamW32bit),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":true,)"
       R"("gradient_checkpointing":false,"optim":"paged_adamw_32bit","use_cache":true})",
       {}},
      {"bf16 weights are a cast, not a flag", setup(P::kBf16, C::kBlock, O::kAdafactor, false),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":false,)"
       R"("gradient_checkpointing":true,"optim":"adafactor","use_cache":false})",
       {"model = model.to(torch.bfloat16)"}},
      {"sgd with the row's momentum and weight decay", setup(P::kFp32, C::kNone, O::kSgd),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":false,)"
       R"("gradient_checkpointing":false,"optim":"sgd","optim_args":"momentum=0.9","weight_decay":0.01,)"
       R"("use_cache":true})",
       {}},
      {"lora: get_peft_model after checkpointing is on", lora(setup(P::kBf16Amp, C::kBlock, O::kAdamW, false)),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":true,"fp16":false,)"
       R"("gradient_checkpointing":true,"optim":"adamw_torch","use_cache":false})",
       {"model.gradient_checkpointing_enable()",
        "model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32.0, lora_dropout=0.05, "
        "target_modules=[\"c_attn\"]))"},
       R"({"r":16,"lora_alpha":32.0,"lora_dropout":0.05,"target_modules":["c_attn"]})"},
      {"int8 + lora: loaded in 8 bit in the row's dtype",
       lora(setup(P::kBf16, C::kNone, O::kAdamW), Weights::kInt8),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":false,)"
       R"("gradient_checkpointing":false,"optim":"adamw_torch","use_cache":true})",
       {"model = AutoModelForCausalLM.from_pretrained(name, quantization_config=BitsAndBytesConfig("
        "load_in_8bit=True), dtype=torch.bfloat16, device_map={\"\": 0})",
        "model = get_peft_model(model, LoraConfig("},
       R"({"r":16,"lora_alpha":32.0,"lora_dropout":0.05,"target_modules":["c_attn"]})",
       R"({"load_in_8bit":true})"},
      {"offload fp32: ZeRO-Offload, DeepSpeed's optimizer", offloaded(setup(P::kFp32, C::kNone, O::kAdamW)),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":false,)"
       R"("gradient_checkpointing":false,"use_cache":true,"deepspeed":{"zero_optimization":{"stage":2,)"
       R"("offload_optimizer":{"device":"cpu","pin_memory":true}},"optimizer":{"type":"AdamW","params":)"
       R"({"lr":"auto","betas":"auto","eps":"auto","weight_decay":"auto"}},"train_micro_batch_size_per_gpu":)"
       R"("auto","gradient_accumulation_steps":"auto","fp16":{"enabled":false},"bf16":{"enabled":false}}})",
       {}},
      {"offload under autocast: fp32 weights on the card, DeepSpeed's torch_autocast",
       offloaded(setup(P::kBf16Amp, C::kBlock, O::kAdamW, false)),
       R"({"per_device_train_batch_size":31,"gradient_accumulation_steps":2,"bf16":false,"fp16":false,)"
       R"("gradient_checkpointing":true,"use_cache":false,"deepspeed":{"zero_optimization":{"stage":2,)"
       R"("offload_optimizer":{"device":"cpu","pin_memory":true}},"optimizer":{"type":"AdamW","params":)"
       R"({"lr":"auto","betas":"auto","eps":"auto","weight_decay":"auto"}},"train_micro_batch_size_per_gpu":)"
       R"("auto","gradient_accumulation_steps":"auto","fp16":{"enabled":false},"bf16":{"enabled":false},)"
       R"("torch_autocast":{"enabled":true,"dtype":"bfloat16"}}})",
       {}},
  };
  return kCases;
}

TEST(TrainerArgs, EachCombinationGetsWhatTrainerNeedsForTheSameRow) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const TrainerArgs a = trainer_args(c.setup);
    EXPECT_EQ(a.training_arguments, Json::parse(c.training_arguments)) << a.training_arguments.dump();
    EXPECT_EQ(a.lora_config, Json::parse(c.lora_config)) << a.lora_config.dump();
    EXPECT_EQ(a.bnb_config, Json::parse(c.bnb_config)) << a.bnb_config.dump();
    ASSERT_EQ(a.model_code.size(), c.model_code.size()) << trainer_args_text(a);
    for (std::size_t i = 0; i < c.model_code.size(); ++i)
      EXPECT_EQ(a.model_code[i].rfind(c.model_code[i], 0), 0u) << a.model_code[i];
  }
}

// What differs from Trainer's own behaviour is said, not left to be found out.
TEST(TrainerArgs, SaysWhatIsNoTrainerFlag) {
  auto notes = [](const TrainingSetup& s) {
    std::string all;
    for (const auto& n : trainer_args(s).notes) all += n + "\n";
    return all;
  };
  EXPECT_NE(notes(setup(P::kBf16, C::kNone, O::kAdamWFused)).find("not Trainer's bf16=True"), std::string::npos);
  EXPECT_NE(notes(setup(P::kFp32, C::kNone, O::kAdamW)).find("adamw_torch_fused"), std::string::npos);
  EXPECT_NE(notes(setup(P::kFp32, C::kNone, O::kAdafactor)).find("torch.optim.Adafactor"), std::string::npos);
  EXPECT_NE(notes(setup(P::kFp32, C::kNone, O::kAdamW8bit)).find("AdamW8bit, as measured"), std::string::npos);
  EXPECT_NE(notes(setup(P::kFp32, C::kNone, O::kPagedAdamW8bit)).find("paged_bytes"), std::string::npos);
  EXPECT_NE(notes(offloaded(setup(P::kFp32, C::kNone, O::kAdamW))).find("DeepSpeed ZeRO-Offload"),
            std::string::npos);
  EXPECT_EQ(notes(offloaded(setup(P::kFp32, C::kNone, O::kAdamW, false))).find("adamw_torch"),
            std::string::npos);  // DeepSpeed's optimizer, not Trainer's
  EXPECT_NE(notes(setup(P::kFp32, C::kNone, O::kAdamWFused, true)).find("Trainer's default is False"),
            std::string::npos);
  EXPECT_NE(notes(setup(P::kBf16Amp, C::kBlock, O::kAdamWFused, false)).find("activation_checkpointing"),
            std::string::npos);
  EXPECT_EQ(notes(setup(P::kBf16Amp, C::kNone, O::kAdamWFused, false)), "");
}

TEST(TrainerArgs, EvalRowsGetTheEvalBatchAndNoOptimizer) {
  TrainingSetup s = setup(P::kBf16, C::kNone, O::kNone);
  s.mode = Mode::kEval;
  EXPECT_EQ(trainer_args(s).training_arguments,
            Json::parse(R"({"per_device_eval_batch_size":31,"bf16":false,"fp16":false,"bf16_full_eval":true,)"
                        R"("use_cache":true})"));
}

TEST(TrainerArgs, TextIsPythonToPaste) {
  const TrainerArgs a = trainer_args(setup(P::kBf16, C::kBlock, O::kAdafactor, false));
  const std::string text = trainer_args_text(a);
  EXPECT_EQ(text.rfind("model = model.to(torch.bfloat16)  # bf16 weights: no Trainer flag\n"
                       "args = TrainingArguments(\n"
                       "    per_device_train_batch_size=31,\n"
                       "    gradient_accumulation_steps=2,\n"
                       "    bf16=False,\n"
                       "    fp16=False,\n"
                       "    gradient_checkpointing=True,\n"
                       "    optim=\"adafactor\",\n"
                       "    use_cache=False,\n"
                       ")\n# ",
                       0),
            0u)
      << text;
  const std::string ds = trainer_args_text(trainer_args(offloaded(setup(P::kFp32, C::kNone, O::kAdamW))));
  EXPECT_NE(ds.find("ds_config = {\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
                    "{\"device\": \"cpu\", \"pin_memory\": True}}"),
            std::string::npos)
      << ds;
  EXPECT_NE(ds.find("    deepspeed=ds_config,\n"), std::string::npos) << ds;
}

TEST(TrainerArgs, JsonCarriesTheSameAsTheText) {
  const TrainerArgs a = trainer_args(lora(setup(P::kFp16Amp, C::kNone, O::kAdamW), Weights::kInt8));
  const Json j = trainer_args_json(a);
  EXPECT_EQ(j["training_arguments"], a.training_arguments);
  EXPECT_EQ(j["lora_config"], a.lora_config);
  EXPECT_EQ(j["bnb_config"], Json::parse(R"({"load_in_8bit":true})"));
  EXPECT_EQ(j["from_pretrained"], Json::parse(R"({"dtype":"float32","device_map":{"":0}})"));
  EXPECT_EQ(j["model_code"].size(), a.model_code.size());
  EXPECT_FALSE(trainer_args_json(trainer_args(setup(P::kFp32, C::kNone, O::kAdamW))).contains("lora_config"));
}

// QLoRA: the 4-bit BitsAndBytesConfig and the load in its compute dtype (fp16 under fp16-amp),
// prepare_model_for_kbit_training with the row's checkpointing (which then needs no
// gradient_checkpointing_enable() of its own before get_peft_model), a Llama by its class.
TEST(TrainerArgs, QloraLoadsIn4BitAndPreparesForKbitTraining) {
  TrainingSetup s = lora(setup(P::kBf16Amp, C::kBlock, O::kAdamW, false), Weights::kNf4);
  s.family = "llama";
  s.lora_targets = {"q_proj", "v_proj"};
  const TrainerArgs a = trainer_args(s);
  ASSERT_EQ(a.model_code.size(), 3u);
  EXPECT_EQ(a.model_code[0],
            "model = AutoModelForCausalLM.from_pretrained(name, quantization_config=BitsAndBytesConfig("
            "load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True, "
            "bnb_4bit_compute_dtype=torch.bfloat16), dtype=torch.bfloat16, device_map={\"\": 0})");
  EXPECT_EQ(a.model_code[1], "model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)");
  EXPECT_EQ(a.model_code[2].rfind("model = get_peft_model(model, LoraConfig(", 0), 0u) << a.model_code[2];
  EXPECT_EQ(a.training_arguments.at("gradient_checkpointing"), true);
  EXPECT_EQ(a.bnb_config, Json::parse(R"({"load_in_4bit":true,"bnb_4bit_quant_type":"nf4",)"
                                      R"("bnb_4bit_use_double_quant":true,"bnb_4bit_compute_dtype":"bfloat16"})"));
  const TrainerArgs f = trainer_args(lora(setup(P::kFp16Amp, C::kNone, O::kAdamW), Weights::kFp4));
  EXPECT_NE(f.model_code[0].find("bnb_4bit_quant_type=\"fp4\""), std::string::npos) << f.model_code[0];
  EXPECT_NE(f.model_code[0].find("bnb_4bit_compute_dtype=torch.float16), dtype=torch.float16"),
            std::string::npos) << f.model_code[0];
  EXPECT_EQ(f.model_code[1], "model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)");
  EXPECT_EQ(f.from_pretrained, Json::parse(R"({"dtype":"float16","device_map":{"":0}})"));
}

// PEFT's shorthand is a string, LoraConfig(target_modules="all-linear"), not a module name in a list.
TEST(TrainerArgs, AllLinearTargetsAreAString) {
  TrainingSetup s = lora(setup(P::kFp32, C::kNone, O::kAdamW));
  s.lora_targets = {"all-linear"};
  const TrainerArgs a = trainer_args(s);
  EXPECT_EQ(a.lora_config.at("target_modules"), "all-linear");
  EXPECT_NE(a.model_code.back().find("target_modules=\"all-linear\""), std::string::npos) << a.model_code.back();
}

// bf16 weights of a decoder read from its config.json are loaded in bf16, as sweep's burst
// loads them; GPT-2's are cast after the load, as its measured reference does.
TEST(TrainerArgs, ADecoderLoadsItsBf16WeightsWithFromPretrained) {
  TrainingSetup s = setup(P::kBf16, C::kBlock, O::kAdamW, false);
  s.family = "llama";
  const TrainerArgs a = trainer_args(s);
  ASSERT_EQ(a.model_code.size(), 1u);
  EXPECT_EQ(a.model_code[0],
            "model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16)  # bf16 weights: no Trainer flag");
  EXPECT_EQ(a.from_pretrained, Json::parse(R"({"dtype":"bfloat16"})"));
  s.family = "gpt2";
  EXPECT_EQ(trainer_args(s).model_code.at(0), "model = model.to(torch.bfloat16)  # bf16 weights: no Trainer flag");
}

TEST(TrainerArgs, PrecisionNamesExplainThemselves) {
  EXPECT_EQ(precision_words(P::kBf16Amp), "bf16 autocast (Trainer bf16=True)");
  EXPECT_EQ(precision_words(P::kBf16), "bf16 weights (model.to(bfloat16))");
  EXPECT_EQ(precision_words(P::kFp16Amp), "fp16 autocast + loss scaling (Trainer fp16=True)");
  EXPECT_EQ(precision_words(P::kFp32), "fp32");
}

TEST(TrainerArgs, PythonLiterals) {
  EXPECT_EQ(python_literal(Json::parse(R"({"a":[true,false,null],"b":"x\"y","c":1.5})")),
            R"({"a": [True, False, None], "b": "x\"y", "c": 1.5})");
}

// A results row's axis cells give the setup; an older file's empty cells their fallbacks.
TEST(TrainerArgs, SetupOfARow) {
  Row row;
  auto set = [&](std::string_view column, const char* v) { row.cells[schema::find_column(column)] = v; };
  set("family", "t5");
  set("mode", "train");
  set("batch", "12");
  set("accumulation", "4");
  set("precision", "bf16-amp");
  set("checkpointing", "block");
  set("optimizer", "adamw-fused");
  set("use_cache", "0");
  set("adapter", "lora");
  set("lora_r", "8");
  set("lora_alpha", "16");
  set("lora_dropout", "0.1");
  set("lora_targets", "q;v");
  set("weights", "int8");
  const TrainingSetup s = setup_of(row);
  EXPECT_EQ(s.family, "t5");
  EXPECT_EQ(s.batch, 12);
  EXPECT_EQ(s.accumulation, 4);
  EXPECT_EQ(s.precision, P::kBf16Amp);
  EXPECT_EQ(s.checkpointing, C::kBlock);
  EXPECT_EQ(s.optimizer, O::kAdamWFused);
  EXPECT_FALSE(s.use_cache);
  EXPECT_EQ(s.adapter, Adapter::kLora);
  EXPECT_EQ(s.lora_alpha, 16);
  EXPECT_EQ(s.lora_dropout, 0.1);
  EXPECT_EQ(s.lora_targets, (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(s.offload, Offload::kNone);  // empty in an older file: its fallback
  EXPECT_EQ(s.weights, Weights::kInt8);
}

}  // namespace
}  // namespace sweep::reports

namespace sweep::reports {
namespace {

// trainer sft: TRL's SFTConfig with the same fields, its two other defaults written as the row
// ran them, and SFTTrainer taking LoRA as its peft_config (it wraps the model itself).
TEST(TrainerArgs, SftRowsAreSftConfigAndSftTrainer) {
  TrainingSetup s = lora(setup(P::kFp32, C::kNone, O::kAdamW, false));
  s.family = "llama";
  s.lora_targets = {"q_proj", "v_proj"};
  s.trainer = Trainer::kSft;
  s.seq = 2048;  // SFTConfig's max_length, always said: its default (1024) truncates
  const TrainerArgs a = trainer_args(s);
  EXPECT_EQ(a.config_class, "SFTConfig");
  EXPECT_TRUE(a.model_code.empty()) << trainer_args_text(a);  // no get_peft_model of our own
  const std::string text = trainer_args_text(a);
  EXPECT_EQ(text.rfind("args = SFTConfig(\n"
                       "    per_device_train_batch_size=31,\n"
                       "    gradient_accumulation_steps=2,\n"
                       "    bf16=False,\n"
                       "    fp16=False,\n"
                       "    gradient_checkpointing=False,\n"
                       "    optim=\"adamw_torch\",\n"
                       "    use_cache=False,\n"
                       "    max_length=2048,\n"
                       ")\n"
                       "trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, "
                       "peft_config=LoraConfig(r=16, lora_alpha=32.0, lora_dropout=0.05, "
                       "target_modules=[\"q_proj\", \"v_proj\"]))\n# ",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("# gradient_checkpointing=False as measured; SFTConfig's default is True\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("# bf16=False as measured; SFTConfig's default is True (bf16 autocast)\n"),
            std::string::npos) << text;
  const Json j = trainer_args_json(a);
  EXPECT_EQ(j["config_class"], "SFTConfig");
  EXPECT_EQ(j["trainer_code"], a.trainer_code);
  // SFTConfig's own defaults (bf16 autocast, checkpointing) need no note; Trainer's rows none.
  TrainingSetup plain = setup(P::kBf16Amp, C::kBlock, O::kAdamWFused, false);
  plain.trainer = Trainer::kSft;
  const TrainerArgs b = trainer_args(plain);
  EXPECT_EQ(b.trainer_code, "trainer = SFTTrainer(model=model, args=args, train_dataset=dataset)");
  for (const auto& note : b.notes) EXPECT_EQ(note.find("SFTConfig"), std::string::npos) << note;
  // fp16=True makes SFTConfig's bf16 default False itself.
  TrainingSetup fp16 = setup(P::kFp16Amp, C::kBlock, O::kAdamWFused, false);
  fp16.trainer = Trainer::kSft;
  for (const auto& note : trainer_args(fp16).notes) EXPECT_EQ(note.find("SFTConfig"), std::string::npos) << note;
  EXPECT_FALSE(trainer_args_json(trainer_args(setup(P::kFp32, C::kNone, O::kAdamW))).contains("config_class"));
}

// Every training script this suite can emit runs, as far as it goes without a model, with the
// real packages (tests/fixtures/construct_trainer_args.py, in the Python scripts/setup.sh
// --tests gives transformers 5.23, PEFT 0.21 and TRL 1.16 and names in BUILD/ref-python): every TrainingArguments, SFTConfig,
// LoraConfig and BitsAndBytesConfig is constructed, every other call bound to the real
// signature. A field a class lacks, or a value it refuses, fails here.
TEST(TrainerArgs, EveryEmittedScriptConstructsWithTheRealPackages) {
  namespace fs = std::filesystem;
  const fs::path source = fs::path(SWEEP_TEST_DATA).parent_path().parent_path();
  std::set<std::string> texts;
  for (const char* family : {"gpt2", "t5", "whisper", "whisper-cls", "llama", "phi3"})
    for (const Mode mode : {Mode::kTrain, Mode::kEval})
      for (const P p : {P::kFp32, P::kFp16Amp, P::kBf16Amp, P::kBf16})
        for (const C c : {C::kNone, C::kBlock})
          for (const O o : {O::kAdamW, O::kAdamWFused, O::kSgd, O::kAdafactor, O::kAdamW8bit,
                            O::kPagedAdamW8bit, O::kPagedAdamW32bit})
            for (const Adapter a : {Adapter::kNone, Adapter::kLora})
              for (const Weights w : {Weights::kFull, Weights::kInt8, Weights::kNf4, Weights::kFp4})
                for (const Offload off : {Offload::kNone, Offload::kOptimizer})
                  for (const Trainer t : {Trainer::kHf, Trainer::kSft})
                    for (const bool cache : {true, false}) {
                      const bool causal = std::string(family) == "gpt2" || std::string(family) == "llama" ||
                                          std::string(family) == "phi3";
                      if ((w != Weights::kFull && a != Adapter::kLora) || (t == Trainer::kSft && !causal) ||
                          (off == Offload::kOptimizer && (o != O::kAdamW || p == P::kBf16)) ||
                          ((w == Weights::kNf4 || w == Weights::kFp4) && p == P::kBf16) ||
                          (t == Trainer::kSft && cache) ||
                          (mode == Mode::kEval && (c != C::kNone || o != O::kAdamW || off != Offload::kNone)))
                        continue;
                      TrainingSetup s = setup(p, c, mode == Mode::kEval ? O::kNone : o, cache);
                      if (a == Adapter::kLora) s = lora(s, w);
                      s.family = family;
                      s.mode = mode;
                      s.offload = off;
                      s.trainer = t;
                      s.seq = 1024;
                      s.lora_targets = {std::string(family) == "gpt2" ? "c_attn" : "q_proj"};
                      texts.insert(trainer_args_text(trainer_args(s)));
                    }
  // The data's shape and collation: a prompt-completion dataset, padding-free batches.
  for (const Trainer t : {Trainer::kHf, Trainer::kSft})
    for (const bool padding_free : {false, true})
      for (const double completion_share : {0.0, 0.75}) {
        TrainingSetup s = lora(setup(P::kBf16Amp, C::kBlock, O::kAdamW, false), Weights::kNf4);
        s.family = "llama";
        s.trainer = t;
        s.seq = 2048;
        s.lora_targets = {"q_proj"};
        s.padding_free = padding_free;
        s.completion_share = completion_share;
        texts.insert(trainer_args_text(trainer_args(s)));
      }
  // SFTTrainer's activation offloading, under QLoRA and a full fine-tune.
  for (const Adapter a : {Adapter::kNone, Adapter::kLora}) {
    TrainingSetup s = setup(P::kBf16Amp, C::kBlock, O::kAdamW, false);
    if (a == Adapter::kLora) s = lora(s, Weights::kNf4);
    s.family = "llama";
    s.trainer = Trainer::kSft;
    s.seq = 8192;
    s.lora_targets = {"q_proj"};
    s.activation_offloading = true;
    const auto args = trainer_args(s);
    EXPECT_EQ(args.training_arguments.at("activation_offloading"), true);
    texts.insert(trainer_args_text(args));
  }
  ASSERT_GT(texts.size(), 500u);
  std::string python;
  std::ifstream(fs::path(SWEEP_BUILD_DIR) / "ref-python") >> python;
  ASSERT_FALSE(python.empty()) << SWEEP_BUILD_DIR << "/ref-python names no Python: scripts/setup.sh --tests "
                               << "installs the reference packages and writes it";
  const fs::path dir = fs::temp_directory_path() / ("sweep-construct-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream cases(dir / "cases.jsonl");
    int i = 0;
    for (const auto& text : texts) cases << Json{{"case", "script " + std::to_string(i++)}, {"text", text}}.dump() << "\n";
  }
  const std::string command = "'" + python + "' -W ignore '" +
                              (source / "tests/fixtures/construct_trainer_args.py").string() + "' < '" +
                              (dir / "cases.jsonl").string() + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  ASSERT_TRUE(pipe);
  std::string out;
  char buf[4096];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  const int status = ::pclose(pipe.release());
  fs::remove_all(dir);
  std::size_t ok = 0, failed = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const Json r = Json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object()) continue;  // a package's warning
    if (r.value("ok", false)) {
      ++ok;
    } else if (++failed <= 5) {
      ADD_FAILURE() << r.value("error", "") << "\n" << r.value("text", "");
    }
  }
  EXPECT_EQ(status, 0) << "scripts/setup.sh --tests installs the reference packages into " << python
                       << "\n" << out.substr(0, 4000);
  EXPECT_EQ(ok, texts.size()) << failed << " failed";
}

}  // namespace
}  // namespace sweep::reports
