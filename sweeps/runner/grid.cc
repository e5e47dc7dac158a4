// Grid expansion; see grid.h.
#include "sweeps/runner/grid.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <variant>

#include "models/lora.h"
#include "models/zoo.h"
#include "sweeps/measure/alloc_conf.h"

namespace sweep {
namespace {

// Values used for an axis the config leaves out: a Point's own defaults (train, batch 1, fp32,
// no checkpointing, adamw, ...), but for the sequence axes, which a Point leaves at 0 (none).
const std::map<std::string, std::string> kSequenceDefaults = {
    {"seq", "128"}, {"target_seq", "128"}, {"audio_s", "30"}};

// A test model is sized for a 2-core CPU and its positions with it: whisper-test's encoder
// window is 4 s of audio, so Whisper's 30 s default would always fail there.
std::string default_value(const models::ModelSpec& spec, const std::string& axis) {
  if (axis == "audio_s" && spec.test_only) return "2";
  if (axis == "target_seq" && spec.max_target_seq > 0 && spec.max_target_seq < 128)
    return std::to_string(spec.max_target_seq);
  if (auto it = kSequenceDefaults.find(axis); it != kSequenceDefaults.end()) return it->second;
  return axis_text(Point{}, axis);
}

void set_axis(Point& p, const std::string& axis, const std::string& v) {
  SWEEP_CHECK(set_axis_text(p, axis, v), "'" + axis + "' is no axis of a point (schema::kAxes)");
}

}  // namespace

void check_fits(const models::ModelSpec& spec, const Point& p, const std::string& axis,
                const std::string& file, int line, const std::string& key) {
  if (axis == "seq" && spec.max_seq > 0 && p.seq > spec.max_seq)
    throw UserError(file, line, key,
                    "seq " + std::to_string(p.seq) + " is longer than " + spec.name + "'s " +
                        std::to_string(spec.max_seq) + " positions",
                    "use seq up to " + std::to_string(spec.max_seq) + " for " + spec.name +
                        (file.empty() ? std::string()  // a flag: no config to regroup
                                      : ", or give it its own group under sweeps: with a shorter seq"));
  if (axis == "audio_s" && spec.max_audio_s > 0 && p.audio_s > spec.max_audio_s + 1e-9)
    throw UserError(file, line, key,
                    "audio_s " + number_text(p.audio_s) + " is longer than " + spec.name +
                        "'s " + number_text(spec.max_audio_s) + " s window",
                    "use audio_s up to " + number_text(spec.max_audio_s) + " for " + spec.name);
  if (axis == "target_seq" && spec.max_target_seq > 0 && p.target_seq > spec.max_target_seq)
    throw UserError(file, line, key,
                    "target_seq " + std::to_string(p.target_seq) + " is longer than " + spec.name +
                        "'s " + std::to_string(spec.max_target_seq) + " label positions",
                    "use target_seq up to " + std::to_string(spec.max_target_seq) + " for " +
                        spec.name + " (transformers refuses longer labels)");
}

namespace {

// Whether a setting's values are module names (schema::Values::kNames): LoRA's targets.
bool names_modules(const std::string& column) {
  const schema::Axis* a = schema::find_axis(column);
  return a != nullptr && a->values == schema::Values::kNames;
}

// Module names as PEFT takes them: a model must have a layer that some target names (PEFT
// fails otherwise), and a target that names no layer of any model it is used with is a typo.
// A setting the config leaves out is each family's defaults.
void check_module_names(const Config& cfg, const std::string& key, const std::string& cell,
                        const std::set<std::string>& lora_models) {
  std::vector<std::string> targets;
  std::stringstream names(cell);
  for (std::string t; std::getline(names, t, ';');)
    if (!t.empty()) targets.push_back(t);
  const int line = cfg.setting_lines.at(key);
  std::set<std::string> families;
  for (const auto& name : lora_models) {
    const auto* spec = models::find_model(name);
    families.insert(spec->family);
    bool any = false;
    for (const auto& t : targets) any = any || models::names_lora_layer(spec->family, t);
    if (!any)
      throw UserError(cfg.path, line, key,
                      "no target names a layer of " + name,
                      "layers of " + spec->family + " models LoRA can adapt: " +
                          models::lora_layer_list(spec->family) + ", or all of them: all-linear");
  }
  for (const auto& t : targets) {
    bool any = false;
    for (const auto& f : families) any = any || models::names_lora_layer(f, t);
    if (!any && !families.empty())
      throw UserError(cfg.path, line, key,
                      "'" + t + "' names no layer of the models with adapter lora",
                      "layers LoRA can adapt: " + models::lora_layer_list(*families.begin()) +
                          " (a name matches a layer's name or its end after a dot), or all-linear");
  }
}

// Optimizer offload is ZeRO-Offload's CPU AdamW: other optimizers have no host step here.
void check_offload(const Point& p, const std::string& file, int line, const std::string& key) {
  if (p.offload == Offload::kNone || p.optimizer == OptimizerKind::kAdamW) return;
  const std::string optimizer = to_string(p.optimizer);
  throw UserError(file, line, key,
                  "offload optimizer applies to adamw only, not " + optimizer + " (" + p.model + ")",
                  "the host step is DeepSpeed's CPU Adam (AdamW); leave the combination out with "
                  "`exclude: [{offload: optimizer, optimizer: " + optimizer + "}]`");
}

// 8- and 4-bit base weights are frozen: training them needs an adapter (bitsandbytes'
// Linear8bitLt with has_fp16_weights=False, and Params4bit, have no gradient). Eval runs them as
// they are. QLoRA trains the rest of the model in fp32 (prepare_model_for_kbit_training casts
// it), so a 4-bit point trains in fp32 or under autocast, not as a bf16 model.
void check_weights(const Point& p, const std::string& file, int line, const std::string& key) {
  if (p.weights == Weights::kFull || p.mode != Mode::kTrain) return;
  const std::string w = to_string(p.weights);
  if (p.adapter != Adapter::kLora)
    throw UserError(file, line, key,
                    "weights " + w + " trains only with adapter lora (" + p.model +
                        "): the " + (p.weights == Weights::kInt8 ? "8" : "4") +
                        "-bit base weights are frozen",
                    "add `adapter: [lora]` to the grid, or leave the combination out with "
                    "`exclude: [{weights: " + w + ", adapter: none}]`");
  if (p.weights != Weights::kInt8 && p.precision == Precision::kBf16)
    throw UserError(file, line, key,
                    "weights " + w + " does not train at precision bf16 (" + p.model +
                        "): prepare_model_for_kbit_training casts every parameter it does not "
                        "quantise to fp32",
                    "train QLoRA under bf16-amp (bnb_4bit_compute_dtype bf16), or leave the "
                    "combination out with `exclude: [{weights: " + w + ", precision: bf16}]`");
}

// TRL's SFTTrainer trains causal language models (AutoModelForCausalLM): its fused LM head
// scores next tokens. It runs the backbone without its cache, so its points have none.
void check_trainer(const Point& p, const std::string& file, int line, const std::string& key) {
  if (p.trainer != Trainer::kSft || models::is_causal_lm(p.family)) return;
  throw UserError(file, line, key,
                  "trainer sft runs causal language models only, and " + p.model + " is a " +
                      p.family + " model",
                  "train it with trainer hf (Trainer, or Seq2SeqTrainer for an encoder-decoder): give "
                  "it a group of its own under sweeps: without trainer sft");
}

// A prompt-completion dataset labels a causal LM's completions; padding-free batches pack the
// sequences of a decoder from a config.json (LlamaModel and its kin read position_ids; sweep's
// GPT-2 does not follow GPT2Model's packed path).
void check_causal_inputs(const Point& p, const GridSpec& grid, const std::string& file,
                         const std::function<std::string(const std::string&)>& key_of) {
  if (auto c = grid.find("completion_share");
      c != grid.end() && p.completion_share > 0 && !models::is_causal_lm(p.family))
    throw UserError(
        file, c->second.line, key_of("completion_share"),
        "completion_share labels a causal language model's completions, and " + p.model + " is a " +
            p.family + " model",
        "give " + p.model + " a group of its own under sweeps: without completion_share");
  if (auto f = grid.find("padding_free");
      f != grid.end() && p.padding_free && p.family != "llama" && p.family != "phi3")
    throw UserError(file, f->second.line, key_of("padding_free"),
                    "padding_free packs the sequences of a decoder read from a config.json (Llama, "
                    "Qwen, Mistral, Phi-3), and " +
                        p.model + " is a " + p.family + " model",
                    "give " + p.model + " a group of its own under sweeps: without padding_free");
}

// Activation offloading is SFTConfig's (TRL's SFTTrainer wraps its training_step in the
// offloader; TrainingArguments has no such field), and it moves tensors off a GPU: TRL's
// OffloadActivations makes a torch.cuda.Stream() and fails without one.
void check_activation_offloading(const Point& p, const std::string& file, int line,
                                 const std::string& key) {
  if (!p.activation_offloading) return;
  if (p.trainer != Trainer::kSft)
    throw UserError(file, line, key,
                    "activation_offloading is SFTConfig's (TRL's SFTTrainer), and " + p.model +
                        " trains under trainer hf here: transformers' Trainer has no such argument",
                    "add `trainer: sft` to the grid, or leave the combination out with "
                    "`exclude: [{activation_offloading: true, trainer: hf}]`");
  if (p.device == Device::kCpu || p.card.cpu)
    throw UserError(
        file, line, key,
        "activation_offloading copies what autograd saves from a GPU to host memory, and "
        "this run is on the CPU: TRL's offloader makes a CUDA stream and fails without a GPU",
        "run it on a card: `device: cuda`, or an emulated one (`device: emulated`, `gpu: CARD`)");
}

// backend:cudaMallocAsync on a CUDA device (or an emulated one, whose model is the native
// caching allocator): LibTorch fixes the backend when it loads, so a forked point asking for
// another fails torch's load-time assert (zygote.h, set_alloc_conf), and CUDA's stream-ordered
// allocator has no OOM observer (no out-of-memory row, no snapshot). The CPU ignores the
// setting, as PyTorch does.
void check_alloc_conf(const Point& p, const std::string& file, int line, const std::string& key) {
  if (p.alloc_conf.empty() || p.device == Device::kCpu) return;
  const auto parsed = emu::parse_alloc_conf(p.alloc_conf);
  const auto* settings = std::get_if<emu::AllocatorSettings>(&parsed);
  if (!settings || settings->backend == "native") return;
  throw UserError(file, line, key,
                  "alloc_conf '" + p.alloc_conf + "' selects backend " + settings->backend +
                      ": sweep measures (and emulates) PyTorch's native caching allocator, which "
                      "LibTorch fixes when it loads, and cudaMallocAsync reports no "
                      "out-of-memory the way the native one does",
                  "drop backend from alloc_conf (native is the default), or leave the value out "
                  "with `exclude: [{alloc_conf: \"" + p.alloc_conf + "\"}]`");
}

}  // namespace

bool matches(const ExcludeRule& rule, const Point& p) {
  for (const auto& [axis, value] : rule.match)
    if (axis_text(p, axis) != value) return false;
  return !rule.match.empty();
}

std::size_t count_grid(const Config& cfg) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  auto times = [&](std::size_t a, std::size_t b) { return b && a > kMax / b ? kMax : a * b; };
  std::size_t total = 0;
  for (const auto& group : cfg.sweeps) {
    for (const auto& name : group.models) {
      const auto* spec = models::find_model(name);
      std::size_t n = 1;
      for (const auto& axis : kAxes) {
        const bool sequence = axis == "seq" || axis == "target_seq" || axis == "audio_s";
        if (sequence && std::find(spec->axes.begin(), spec->axes.end(), axis) == spec->axes.end())
          continue;
        const AxisValues* values = nullptr;
        if (auto it = group.grid.find(axis); it != group.grid.end()) values = &it->second;
        else if (auto top = cfg.grid.find(axis); top != cfg.grid.end()) values = &top->second;
        if (values) n = times(n, values->values.size());
      }
      total = total > kMax - n ? kMax : total + n;
    }
  }
  return total;
}

std::vector<Point> expand_grid(const Config& cfg, const RunSettings& run) {
  // Counted before anything is built: four 100-value axes used to end in std::bad_alloc.
  if (const std::size_t n = count_grid(cfg); n > run.max_points)
    throw UserError(cfg.path, 0, "grid",
                    "the grid has " + std::to_string(n) + " points, more than the limit of " +
                        std::to_string(run.max_points),
                    "use fewer values per axis, or raise the limit with --max-points N");
  std::vector<Point> out;
  std::set<std::string> seen, lora_models;
  for (std::size_t g = 0; g < cfg.sweeps.size(); ++g) {
    const auto& group = cfg.sweeps[g];
    // An axis's key as the message names it: the group's own grid, or the top-level one.
    auto key_of = [&](const std::string& axis) {
      return group.grid.count(axis) ? "sweeps[" + std::to_string(g) + "].grid." + axis : "grid." + axis;
    };
    GridSpec grid = cfg.grid;
    for (const auto& [axis, values] : group.grid) grid[axis] = values;
    std::vector<ExcludeRule> rules = cfg.exclude;
    rules.insert(rules.end(), group.exclude.begin(), group.exclude.end());

    for (const auto& name : group.models) {
      const auto* spec = models::find_model(name);
      auto takes = [&](const std::string& axis) {
        if (axis != "seq" && axis != "target_seq" && axis != "audio_s") return true;
        return std::find(spec->axes.begin(), spec->axes.end(), axis) != spec->axes.end();
      };
      Point base;
      base.model = name;
      base.family = spec->family;
      base.steps = cfg.steps;
      base.warmup_steps = cfg.warmup_steps;
      base.repetitions = cfg.repetitions;
      base.timeout_s = cfg.timeout_s;
      base.device = run.device;
      base.budget_bytes = run.budget_bytes;
      base.budget_emulated = run.budget_emulated;
      if (run.device == Device::kEmulated) base.card = run.card;
      base.lr = cfg.lr;
      base.weight_decay = cfg.weight_decay;
      base.seed = cfg.seed;
      base.transformers = cfg.transformers;
      for (const auto& [column, text] : cfg.settings) set_axis(base, column, text);
      // Module names the config leaves out: the family's defaults, named.
      for (const auto& a : schema::kAxes)
        if (const std::string column(a.column); names_modules(column) && !cfg.settings.count(column))
          set_axis(base, column, module_names_text(spec->family, {}));

      std::function<void(std::size_t, Point)> rec = [&](std::size_t i, Point p) {
        if (i == kAxes.size()) {
          if (p.mode == Mode::kEval) {
            p.checkpointing = Checkpointing::kNone;
            p.accumulation = 1;
            p.optimizer = OptimizerKind::kNone;
            p.offload = Offload::kNone;
            p.activation_offloading = false;
          }
          if (p.trainer == Trainer::kSft) p.use_cache = false;  // SFTTrainer's use_cache=False
          for (const auto& r : rules)
            if (matches(r, p)) return;
          if (auto o = grid.find("offload"); o != grid.end())
            check_offload(p, cfg.path, o->second.line, key_of("offload"));
          if (auto w = grid.find("weights"); w != grid.end())
            check_weights(p, cfg.path, w->second.line, key_of("weights"));
          if (auto t = grid.find("trainer"); t != grid.end())
            check_trainer(p, cfg.path, t->second.line, key_of("trainer"));
          if (auto a = grid.find("alloc_conf"); a != grid.end())
            check_alloc_conf(p, cfg.path, a->second.line, key_of("alloc_conf"));
          check_causal_inputs(p, grid, cfg.path, key_of);
          if (auto a = grid.find("activation_offloading"); a != grid.end())
            check_activation_offloading(p, cfg.path, a->second.line,
                                        key_of("activation_offloading"));
          if (p.adapter == Adapter::kLora) lora_models.insert(p.model);
          if (seen.insert(p.id()).second) out.push_back(p);
          return;
        }
        const auto& axis = kAxes[i];
        if (!takes(axis)) return rec(i + 1, p);
        auto it = grid.find(axis);
        std::vector<std::string> values =
            it != grid.end() ? it->second.values : std::vector<std::string>{default_value(*spec, axis)};
        for (const auto& v : values) {
          Point q = p;
          set_axis(q, axis, v);
          check_fits(*spec, q, axis, cfg.path, it != grid.end() ? it->second.line : 0, axis);
          rec(i + 1, q);
        }
      };
      rec(0, base);
    }
  }
  for (const auto& [column, cell] : cfg.settings)
    if (names_modules(column)) check_module_names(cfg, column, cell, lora_models);
  if (out.empty()) {
    const int line = !cfg.exclude.empty() ? cfg.exclude.front().line
                     : cfg.sweeps.front().exclude.empty() ? 0
                                                          : cfg.sweeps.front().exclude.front().line;
    throw UserError(cfg.path, line, "exclude", "the exclude rules remove every point of the grid",
                    "loosen or drop a rule (run with --dry-run to list the points)");
  }
  return out;
}

}  // namespace sweep
