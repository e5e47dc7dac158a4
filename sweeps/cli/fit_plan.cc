// fit's plan; see fit_plan.h.
#include "sweeps/cli/fit_plan.h"

#include <algorithm>
#include <functional>

#include "models/zoo.h"
#include "reports/results/error.h"
#include "sweeps/cli/fit_config.h"
#include "sweeps/runner/search.h"

namespace sweep {
namespace {

using reports::kGiB;

// The values a flag gives (checked and spelled as a config would be), else the defaults.
template <Vocabulary E>
std::vector<std::string> checked(const std::vector<std::string>& given, const std::vector<E>& defaults,
                                 const std::string& flag) {
  std::vector<std::string> out;
  for (const auto& v : given) {
    const auto e = parse_as<E>(canonical_axis_value(std::string(VocabTable<E>::key), v, "", 0, flag));
    SWEEP_CHECK(e.has_value(), "a canonical " + std::string(VocabTable<E>::key) + " that is no value");
    if (std::find(out.begin(), out.end(), to_string(*e)) == out.end()) out.push_back(to_string(*e));
  }
  if (given.empty())
    for (const E e : defaults) out.push_back(to_string(e));
  return out;
}

// Each searched axis's values as cells, in schema::fit_axes() order: the flag's, else the
// defaults for the device.
struct Axes {
  std::vector<std::pair<const schema::Axis*, std::vector<std::string>>> values;
  const std::vector<std::string>& of(std::string_view column) const {
    for (const auto& [axis, v] : values)
      if (axis->column == column) return v;
    SWEEP_CHECK(false, "fit searches no axis " + std::string(column));
  }
  template <Vocabulary E>
  std::vector<E> of() const {
    std::vector<E> out;
    for (const auto& v : of(VocabTable<E>::key)) out.push_back(*parse_as<E>(v));
    return out;
  }
  template <Vocabulary E>
  bool has(E e) const {
    const auto v = of<E>();
    return std::find(v.begin(), v.end(), e) != v.end();
  }
};

// One searched axis's values: its flag's, else the defaults for the device and model.
std::vector<std::string> values_of(const FitQuestion& q, const schema::Axis& axis) {
  const FitOptions& o = q.o;
  const std::string_view c = axis.column;
  // A card without bf16 tensor cores (T4, V100) trains in fp16 autocast with a GradScaler,
  // not bf16 autocast (the per-card tables do the same, sweeps/cli/tables.cc lacks_bf16).
  if (c == "precision")
    return checked<Precision>(
        o.precisions,
        q.bf16_tensor_cores() ? std::vector{Precision::kFp32, Precision::kBf16Amp, Precision::kBf16}
                              : std::vector{Precision::kFp32, Precision::kFp16Amp, Precision::kBf16},
        "--precision");
  if (c == "checkpointing")
    return checked<Checkpointing>(o.checkpointing, {Checkpointing::kNone, Checkpointing::kBlock},
                                  "--checkpointing");
  // 8-bit AdamW and optimizer offload by default where they cost what they cost a user (on
  // CUDA); on the CPU 8-bit AdamW's ATen path is slow and host and device are one memory
  // (ask for them with --optimizer, --offload). LoRA changes what is trained: --adapter.
  if (c == "optimizer")
    return checked<OptimizerKind>(
        o.optimizers,
        !q.cpu() ? std::vector{OptimizerKind::kAdamW, OptimizerKind::kAdafactor, OptimizerKind::kAdamW8bit}
                 : std::vector{OptimizerKind::kAdamW, OptimizerKind::kAdafactor},
        "--optimizer");
  if (c == "adapter") return checked<Adapter>(o.adapters, {Adapter::kNone}, "--adapter");
  if (c == "offload")
    return checked<Offload>(
        o.offloads,
        !q.cpu() ? std::vector{Offload::kNone, Offload::kOptimizer} : std::vector{Offload::kNone},
        "--offload");
  // 8- and 4-bit base weights only when asked (--weights full,int8,nf4), and then with LoRA
  // only: the quantised base is frozen.
  if (c == "weights") return checked<Weights>(o.weights, {Weights::kFull}, "--weights");
  // TRL's SFTTrainer beside Trainer for a decoder read from a config.json (Llama, Qwen,
  // Mistral, Phi-3: what people fine-tune with TRL); Trainer alone for the zoo's GPT-2 unless
  // asked. SFTTrainer trains causal LMs only (the grid's check_trainer).
  if (c == "trainer") {
    const bool decoder = models::is_causal_lm(q.spec->family);
    const bool from_config = (q.spec->catalogue || !q.spec->config_file.empty()) && !q.spec->test_only;
    auto trainers = checked<Trainer>(o.trainers, decoder && from_config ? std::vector{Trainer::kHf, Trainer::kSft}
                                                                        : std::vector{Trainer::kHf},
                                     "--trainer");
    if (!decoder && std::find(trainers.begin(), trainers.end(), "sft") != trainers.end())
      throw UserError("", 0, "--trainer",
                      "TRL's SFTTrainer trains causal language models, and " + q.spec->name + " is a " +
                          q.spec->family + " model",
                      "leave --trainer out (transformers' Trainer)");
    return trainers;
  }
  // A flag without a command-line flag of its own (the model's cache): both ways where the
  // model has it.
  SWEEP_CHECK(axis.values == schema::Values::kBool, "fit has no values for " + std::string(c));
  return q.has_cache() ? std::vector<std::string>{"1", "0"} : std::vector<std::string>{"1"};
}

Axes axes_of(const FitQuestion& q) {
  Axes x;
  for (const schema::Axis* a : schema::fit_axes()) x.values.push_back({a, values_of(q, *a)});
  for (const Weights w : x.of<Weights>())
    if (w != Weights::kFull && !x.has(Adapter::kLora))
      throw UserError("", 0, "--weights",
                      to_string(w) + " weights train only with LoRA: the " +
                          (w == Weights::kInt8 ? "8" : "4") + "-bit base is frozen",
                      "add --adapter lora (or --adapter none,lora)");
  return x;
}

// Offload is ZeRO-Offload's AdamW with fp32 master weights: AdamW only, not pure bf16.
bool offloadable(Precision precision, OptimizerKind optimizer) {
  return optimizer == OptimizerKind::kAdamW && precision != Precision::kBf16;
}

// QLoRA trains the rest of the model in fp32 (prepare_model_for_kbit_training): not as a bf16
// model (sweeps/runner/grid.cc check_weights).
bool trainable(Weights w, Precision p) {
  return w == Weights::kFull || w == Weights::kInt8 || p != Precision::kBf16;
}

// A value other than plain where the axis's fit_without is not plain (schema.h).
bool searched_together(const Technique& t) {
  for (const schema::Axis* a : schema::fit_axes())
    if (!a->fit_without.empty() && !schema::is_plain(*a, t.cell(a->column)) &&
        !schema::is_plain(*schema::find_axis(a->fit_without), t.cell(a->fit_without)))
      return false;
  return true;
}

// Every combination of the axes' values that trains, nested in fit_axes() order. SFTTrainer
// runs the model without its cache whatever the flag (the grid sets use_cache=False for it):
// one combination, named use_cache=False, where Trainer has two.
std::vector<FitTechnique> combine(const Axes& x) {
  std::vector<FitTechnique> wanted;
  std::function<void(std::size_t, FitTechnique)> nest = [&](std::size_t i, FitTechnique t) {
    if (i == x.values.size()) {
      if (t.trainer == Trainer::kSft && !t.use_cache) return;  // the cache's one, below
      if (searched_together(t) && (t.offload == Offload::kNone || offloadable(t.precision, t.optimizer)) &&
          (t.weights == Weights::kFull || t.adapter == Adapter::kLora) && trainable(t.weights, t.precision)) {
        if (t.trainer == Trainer::kSft) t.use_cache = false;
        wanted.push_back(t);
      }
      return;
    }
    for (const auto& v : x.values[i].second) {
      SWEEP_CHECK(t.set(x.values[i].first->column, v), "a searched value that is none");
      nest(i + 1, t);
    }
  };
  nest(0, FitTechnique{});
  return wanted;
}

// The emulated card as fit.yaml names it: the table's key, or written out when its context
// was given.
YAML::Node gpu_node(const FitQuestion& q) {
  YAML::Node gpu;
  if (!q.emulated()) return gpu;
  if (!q.o.context_gib) return YAML::Node(std::string(q.card.spec->key));
  gpu["name"] = q.card.name;
  gpu["memory_gib"] = number_text(static_cast<double>(q.card.memory_bytes) / kGiB);
  gpu["context_gib"] = number_text(static_cast<double>(q.rule.context_bytes) / kGiB);
  gpu["compute_capability"] =
      std::to_string(q.card.spec->cc_major) + "." + std::to_string(q.card.spec->cc_minor);
  gpu["sms"] = q.card.spec->sms;
  gpu.SetStyle(YAML::EmitterStyle::Flow);
  return gpu;
}

// fit.yaml: a max-batch search per combination, the combinations that cannot train excluded.
YAML::Node search_config(const FitQuestion& q, const FitPlan& p, const Axes& x) {
  YAML::Node y = config_head(q.o, p.name, q.device, p.out, q.cap(), p.gpu);
  YAML::Node grid = y["grid"];
  if (q.o.seq_max) {
    // The longest seq at the question's batch, from one step up to the model's longest input.
    y["search"] = "max_seq";
    grid["batch"] = q.o.batch.value_or(1);
    add_input_axes(q.o, grid);
    grid["seq"] = kSeqStep;
  } else {
    y["search"] = "max_batch";
    y["search_max_batch"] = q.o.max_batch;
    grid["batch"] = 1;
    add_input_axes(q.o, grid);
  }
  auto exclude = [&](std::initializer_list<std::pair<std::string_view, std::string>> rule) {
    YAML::Node r;
    for (const auto& [axis, value] : rule) r[std::string(axis)] = value;
    r.SetStyle(YAML::EmitterStyle::Flow);
    y["exclude"].push_back(r);
  };
  // Each searched axis with its values (one that only takes its plain value is left to its
  // default), and a value searched only where another axis is plain.
  for (const auto& [axis, values] : x.values) {
    if (axis->values == schema::Values::kBool && values.size() == 1 && schema::is_plain(*axis, values[0]))
      continue;
    std::vector<std::string> spelled;
    for (const auto& v : values) spelled.push_back(config_text(axis->column, v));
    grid[std::string(axis->column)] = flow_list(spelled);
    if (axis->fit_without.empty()) continue;
    const schema::Axis& other = *schema::find_axis(axis->fit_without);
    // Under SFTTrainer the cache is off whatever the flag (combine): the rule is Trainer's.
    const bool sft = x.has(Trainer::kSft);
    for (const auto& v : values)
      if (!schema::is_plain(*axis, v))
        for (const auto& w : x.of(other.column))
          if (!schema::is_plain(other, w)) {
            if (sft && axis->column == "use_cache")
              exclude({{other.column, w}, {axis->column, config_text(axis->column, v)}, {"trainer", "hf"}});
            else
              exclude({{other.column, w}, {axis->column, config_text(axis->column, v)}});
          }
  }
  if (x.has(Offload::kOptimizer)) {
    for (const auto opt : x.of<OptimizerKind>())
      if (opt != OptimizerKind::kAdamW) exclude({{"offload", "optimizer"}, {"optimizer", to_string(opt)}});
    if (x.has(Precision::kBf16)) exclude({{"offload", "optimizer"}, {"precision", "bf16"}});
  }
  for (const Weights w : x.of<Weights>()) {
    if (w == Weights::kFull) continue;
    if (x.has(Adapter::kNone)) exclude({{"weights", to_string(w)}, {"adapter", "none"}});
    if (w != Weights::kInt8 && x.has(Precision::kBf16))
      exclude({{"weights", to_string(w)}, {"precision", "bf16"}});
  }
  return y;
}

}  // namespace

FitPlan plan(const FitQuestion& q) {
  const Axes x = axes_of(q);
  FitPlan p;
  p.wanted = combine(x);
  // A config.json's model is named by its path; its folder names the results directory.
  const std::string slug = models::model_slug(*q.spec);
  p.out = q.o.out.empty() ? "results/fit-" + slug + "-" + q.card.key : q.o.out;
  p.name = "fit-" + slug + "-" + q.card.key;
  p.gpu = gpu_node(q);
  p.config = search_config(q, p, x);
  p.comment = "Written by `sweep fit " + q.o.model + "` for " + q.card.name + " (" +
              q.rule.derivation(q.card.name) + "). Run again with `sweep run " + p.out +
              "/fit.yaml --search max-batch`.";
  return p;
}

}  // namespace sweep
