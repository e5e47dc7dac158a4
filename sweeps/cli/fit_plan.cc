// fit's plan; see fit_plan.h.
#include "sweeps/cli/fit_plan.h"

#include <algorithm>

#include "models/zoo.h"
#include "reports/results/error.h"
#include "sweeps/cli/fit_config.h"

namespace sweep {
namespace {

using reports::kGiB;

template <Vocabulary E>
YAML::Node yaml_list(const std::vector<E>& v) {
  std::vector<std::string> names;
  for (const auto& e : v) names.push_back(to_string(e));
  return flow_list(names);
}

template <Vocabulary E>
bool has(const std::vector<E>& v, E e) {
  return std::find(v.begin(), v.end(), e) != v.end();
}

// The values a flag gives (checked and spelled as a config would be), else the defaults.
template <Vocabulary E>
std::vector<E> checked(const std::vector<std::string>& given, const std::vector<E>& defaults,
                       const std::string& flag) {
  if (given.empty()) return defaults;
  std::vector<E> out;
  for (const auto& v : given) {
    const auto e = parse_as<E>(canonical_axis_value(std::string(VocabTable<E>::key), v, "", 0, flag));
    SWEEP_CHECK(e.has_value(), "a canonical " + std::string(VocabTable<E>::key) + " that is no value");
    if (!has(out, *e)) out.push_back(*e);
  }
  return out;
}

// Each axis' values: the flag's, else the defaults for the device.
struct Axes {
  std::vector<Precision> precisions;
  std::vector<Checkpointing> checkpointing;
  std::vector<OptimizerKind> optimizers;
  std::vector<Adapter> adapters;
  std::vector<Offload> offloads;
  std::vector<Weights> weights;
};

Axes axes_of(const FitQuestion& q) {
  const FitOptions& o = q.o;
  Axes x;
  // A card without bf16 tensor cores (T4, V100) trains in fp16 autocast with a GradScaler,
  // not bf16 autocast (the per-card tables do the same, sweeps/cli/tables.cc lacks_bf16).
  x.precisions = checked<Precision>(
      o.precisions,
      q.bf16_tensor_cores() ? std::vector{Precision::kFp32, Precision::kBf16Amp, Precision::kBf16}
                            : std::vector{Precision::kFp32, Precision::kFp16Amp, Precision::kBf16},
      "--precision");
  x.checkpointing = checked<Checkpointing>(
      o.checkpointing, {Checkpointing::kNone, Checkpointing::kBlock}, "--checkpointing");
  // 8-bit AdamW and optimizer offload by default where they cost what they cost a user (on
  // CUDA); on the CPU 8-bit AdamW's ATen path is slow and host and device are one memory
  // (ask for them with --optimizer, --offload). LoRA changes what is trained: --adapter.
  x.optimizers = checked<OptimizerKind>(
      o.optimizers,
      !q.cpu() ? std::vector{OptimizerKind::kAdamW, OptimizerKind::kAdafactor, OptimizerKind::kAdamW8bit}
               : std::vector{OptimizerKind::kAdamW, OptimizerKind::kAdafactor},
      "--optimizer");
  x.adapters = checked<Adapter>(o.adapters, {Adapter::kNone}, "--adapter");
  x.offloads = checked<Offload>(
      o.offloads,
      !q.cpu() ? std::vector{Offload::kNone, Offload::kOptimizer} : std::vector{Offload::kNone},
      "--offload");
  // 8- and 4-bit base weights only when asked (--weights full,int8,nf4), and then with LoRA
  // only: the quantised base is frozen.
  x.weights = checked<Weights>(o.weights, {Weights::kFull}, "--weights");
  for (const Weights w : x.weights)
    if (w != Weights::kFull && !has(x.adapters, Adapter::kLora))
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

// Every combination of the axes that trains, and use_cache=False without checkpointing
// (transformers turns the cache off under checkpointing in training anyway).
std::vector<FitTechnique> combine(const Axes& x, bool model_has_cache) {
  std::vector<FitTechnique> wanted;
  for (const auto& p : x.precisions)
    for (const auto& c : x.checkpointing)
      for (const auto& opt : x.optimizers)
        for (const auto& ad : x.adapters)
          for (const auto& off : x.offloads)
            for (const auto& w : x.weights)
              for (bool cache : {true, false})
                if ((cache || (model_has_cache && c == Checkpointing::kNone)) &&
                    (off == Offload::kNone || offloadable(p, opt)) &&
                    (w == Weights::kFull || ad == Adapter::kLora) && trainable(w, p))
                  wanted.push_back({p, c, opt, cache, ad, off, w});
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
  y["search"] = "max_batch";
  y["search_max_batch"] = q.o.max_batch;
  YAML::Node grid = y["grid"];
  grid["batch"] = 1;
  add_input_axes(q.o, grid);
  grid["precision"] = yaml_list(x.precisions);
  grid["checkpointing"] = yaml_list(x.checkpointing);
  grid["optimizer"] = yaml_list(x.optimizers);
  grid["adapter"] = yaml_list(x.adapters);
  grid["offload"] = yaml_list(x.offloads);
  grid["weights"] = yaml_list(x.weights);
  auto exclude = [&](std::initializer_list<std::pair<const char*, std::string>> rule) {
    YAML::Node r;
    for (const auto& [axis, value] : rule) r[axis] = value;
    r.SetStyle(YAML::EmitterStyle::Flow);
    y["exclude"].push_back(r);
  };
  if (q.has_cache()) {
    grid["use_cache"] = flow_list({"true", "false"});
    exclude({{"checkpointing", "block"}, {"use_cache", "false"}});
  }
  if (has(x.offloads, Offload::kOptimizer)) {
    for (const auto opt : x.optimizers)
      if (opt != OptimizerKind::kAdamW) exclude({{"offload", "optimizer"}, {"optimizer", to_string(opt)}});
    if (has(x.precisions, Precision::kBf16)) exclude({{"offload", "optimizer"}, {"precision", "bf16"}});
  }
  for (const Weights w : x.weights) {
    if (w == Weights::kFull) continue;
    if (has(x.adapters, Adapter::kNone)) exclude({{"weights", to_string(w)}, {"adapter", "none"}});
    if (w != Weights::kInt8 && has(x.precisions, Precision::kBf16))
      exclude({{"weights", to_string(w)}, {"precision", "bf16"}});
  }
  return y;
}

}  // namespace

FitPlan plan(const FitQuestion& q) {
  const Axes x = axes_of(q);
  FitPlan p;
  p.wanted = combine(x, q.has_cache());
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
