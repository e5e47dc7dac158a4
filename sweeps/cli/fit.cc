// `sweep fit`; see fit.h. A config is written and run like any other, then read back through
// the one results reader, so everything fit says comes from rows in OUT/results.csv.
#include "sweeps/cli/fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "models/zoo.h"
#include "reports/common/gpus.h"
#include "reports/recommend/recommend.h"
#include "reports/results/cards.h"
#include "reports/results/rows.h"
#include "reports/results/stats.h"
#include "sweeps/cli/fit_analysis.h"
#include "sweeps/cli/fit_config.h"
#include "sweeps/runner/budget.h"
#include "sweeps/runner/config.h"
#include "sweeps/measure/env.h"
#include "reports/results/error.h"
#include "sweeps/runner/estimate.h"
#include "sweeps/runner/grid.h"
#include "sweeps/runner/isolate.h"
#include "reports/results/schema.h"
#include "sweeps/runner/search.h"
#include "sweeps/runner/sweep.h"

namespace sweep {
namespace {

using reports::kGiB;
using schema::column;

// Bumped when a key of the JSON changes meaning or goes away (new keys do not bump it).
constexpr int kFitJsonVersion = 2;  // 2: card.usable_bytes became cap_bytes and ceiling_bytes (the one rule)

bool has_cache(const models::ModelSpec& spec) { return spec.family != "whisper"; }

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

struct Card {
  std::string name, key;  // "RTX 3060" / "rtx3060"; "0.05 GiB" / "0.05gib"
  int64_t memory_bytes = 0;
  const CardSpec* spec = nullptr;  // a card of the table (--gpu)
};

Card resolve_card(const FitOptions& o) {
  if (o.gpu.empty() == !o.memory_gib)
    throw UserError("", 0, "--gpu", "give the card with exactly one of --gpu NAME or --memory-gib N",
                    "e.g. sweep fit gpt2 --gpu rtx3060, or --memory-gib 11.75 (what CUDA reports)");
  if (!o.gpu.empty()) {
    const auto* g = reports::find_gpu(o.gpu);
    if (!g) {
      const std::string near = nearest_card_key(o.gpu);
      throw UserError("", 0, "--gpu", "unknown GPU '" + o.gpu + "'",
                      (near.empty() ? "" : "did you mean " + near + "? ") + "one of " +
                          card_keys() + " (`sweep gpus` lists them), or give --memory-gib N");
    }
    return {std::string(g->name), std::string(g->key), reports::memory_bytes(*g), g};
  }
  const double gib = *o.memory_gib;
  if (!(gib * kGiB >= 1 && gib <= reports::kMaxMemoryGib))
    throw UserError("", 0, "--memory-gib", "must be a number of GiB above 0 and at most " +
                    number_text(reports::kMaxMemoryGib) + ", got " + shown(gib),
                    "the card's memory as CUDA reports it, e.g. --memory-gib 11.75");
  return {number_text(gib) + " GiB", number_text(gib) + "gib", std::llround(gib * kGiB)};
}


}  // namespace

std::string FitTechnique::label() const {
  return to_string(precision) + ", " +
         (checkpointing == Checkpointing::kNone ? "no checkpointing"
                                                : to_string(checkpointing) + " checkpointing") +
         ", " + to_string(optimizer) + (use_cache ? "" : ", use_cache=False") +
         (adapter == Adapter::kNone ? "" : ", " + to_string(adapter)) +
         (offload == Offload::kNone ? "" : ", offload " + to_string(offload)) +
         (weights == Weights::kFull ? "" : ", " + to_string(weights) + " weights");
}

int run_fit(const FitOptions& given, nlohmann::json* answer) {
  const auto* spec = models::find_model(given.model);
  if (!spec)
    throw UserError("", 0, "MODEL", "unknown model '" + given.model + "'", unknown_model_hint(given.model));
  FitOptions o = given;
  o.model = spec->name;  // a Hugging Face id names its model (results/fit-gpt2-medium-...)
  const Card card = resolve_card(o);
  check_flags(o, *spec);

  // Without a GPU a named card is predicted by emulation; the CPU trains the real model (hours
  // for a real one), so it measures only when asked (--device cpu). A card by memory alone
  // cannot be emulated (no compute capability or SMs).
  const bool gpu_here = cuda_device_count() > 0;
  if (o.device == "auto" && !gpu_here && !card.spec)
    throw UserError("", 0, "--memory-gib",
                    "no GPU here, and a card given by its memory alone cannot be predicted by "
                    "emulation: it would be measured on the CPU, training the real model (hours "
                    "for a real model)",
                    "name the card with --gpu (`sweep gpus` lists them) to predict it in seconds, "
                    "or add --device cpu to measure on the CPU anyway");
  const Device device = o.device == "auto" ? (gpu_here ? Device::kCuda : Device::kEmulated)
                                           : parse_as<Device>(o.device).value_or(Device::kCpu);
  if (device == Device::kCuda && !gpu_here)
    throw UserError(
        "", 0, "--device", "device cuda requested but no GPU is visible",
        "use --device emulated with --gpu NAME to predict the card, or --device cpu: the "
        "tracking allocator then enforces the card's memory");
  const bool emulated = device == Device::kEmulated;
  if (emulated && !card.spec)
    throw UserError(
        "", 0, "--device",
        "device emulated predicts a card of the table, and --memory-gib names none",
        "give the card with --gpu NAME (`sweep gpus` lists them), or measure on the CPU with "
        "--device cpu");
  const std::string predicted = emulated ? predicted_by(card.name) : "";
  if (emulated && !o.quiet)  // before anything runs: the answer will not be a measurement
    std::fprintf(
        stderr, "fit %s on %s: %s (%s)\n", o.model.c_str(), card.name.c_str(), predicted.c_str(),
        o.device == "auto" ? "no CUDA device here; --device cpu measures on the CPU instead"
                           : "--device emulated");
  // The context allowance: none on the CPU; on CUDA given, or measured by a fresh worker on
  // the GPU that will run the probes (as `sweep run` measures it for a target card); on an
  // emulated card given, or the card table's.
  int64_t context = 0;
  std::string context_source = "none on the CPU";
  std::optional<HostGpu> here;  // on CUDA: the GPU that runs the probes
  if (emulated) {
    context = o.context_gib ? std::llround(*o.context_gib * kGiB) : card_context_bytes(*card.spec);
    context_source = o.context_gib ? "given with --context-gib"
                     : card.spec->context_bytes > 0
                         ? "the card table's, measured on this card"
                         : "the card table's default, not measured for this card";
  } else if (device == Device::kCuda) {
    Zygote zygote(self_exe());  // the probe forked as the probes' points will be
    here = probe_gpus(self_exe(), {visible_device(std::getenv("CUDA_VISIBLE_DEVICES"), 0)}, true,
                      kProbeDeviceTimeoutS, o.zygote ? &zygote : nullptr)
               .at(0);
    context = o.context_gib ? std::llround(*o.context_gib * kGiB) : here->context_bytes;
    context_source = o.context_gib ? "given with --context-gib" : "measured on " + here->name;
  }
  const std::string card_flag = o.gpu.empty() ? "--memory-gib" : "--gpu";
  // The one rule (reports/common/fit_rule.h): the probes run under the cap, "fits" is no OOM there;
  // the pick stays under the recommended ceiling.
  const reports::FitRule rule{card.memory_bytes, context, o.margin, device != Device::kCpu,
                              context_source};
  const int64_t cap = rule.cap_bytes();  // the budget the probes run under
  if (rule.ceiling_bytes() <= 0)
    throw UserError("", 0, card_flag, card.name + " leaves nothing usable after the margin and "
                    "the context allowance", "give a larger card, or a smaller --margin");
  // The run would refuse this budget in fit.yaml (budget_gib): said here, of the flag.
  if (here && cap > here->total_bytes)
    throw UserError("", 0, card_flag,
                    card.name + " leaves " + reports::format_bytes(static_cast<double>(cap)) +
                        " to fit in (its cap), more than this GPU (" + here->name + ", " +
                        reports::format_bytes(static_cast<double>(here->total_bytes)) +
                        ") has: a budget cannot add memory",
                    "measure a card at most this GPU's size, or predict it with --device emulated "
                    "--gpu NAME");

  // The techniques: precision x checkpointing x optimizer, and use_cache=False without
  // checkpointing (transformers turns the cache off under checkpointing in training anyway).
  const auto precisions =
      checked<Precision>(o.precisions, {Precision::kFp32, Precision::kBf16Amp, Precision::kBf16}, "--precision");
  const auto ckpts = checked<Checkpointing>(o.checkpointing, {Checkpointing::kNone, Checkpointing::kBlock}, "--checkpointing");
  // 8-bit AdamW and optimizer offload by default where they cost what they cost a user (on
  // CUDA); on the CPU 8-bit AdamW's ATen path is slow and host and device are one memory
  // (ask for them with --optimizer, --offload). LoRA changes what is trained: --adapter.
  const auto optimizers = checked<OptimizerKind>(
      o.optimizers,
      device != Device::kCpu
          ? std::vector{OptimizerKind::kAdamW, OptimizerKind::kAdafactor, OptimizerKind::kAdamW8bit}
          : std::vector{OptimizerKind::kAdamW, OptimizerKind::kAdafactor},
      "--optimizer");
  const auto adapters = checked<Adapter>(o.adapters, {Adapter::kNone}, "--adapter");
  const auto offloads =
      checked<Offload>(o.offloads,
                       device != Device::kCpu ? std::vector{Offload::kNone, Offload::kOptimizer}
                                              : std::vector{Offload::kNone},
                       "--offload");
  // 8-bit base weights only when asked (--weights full,int8), and then with LoRA only: the
  // 8-bit base is frozen.
  const auto weights = checked<Weights>(o.weights, {Weights::kFull}, "--weights");
  if (has(weights, Weights::kInt8) && !has(adapters, Adapter::kLora))
    throw UserError("", 0, "--weights", "int8 weights train only with LoRA: the 8-bit base is frozen",
                    "add --adapter lora (or --adapter none,lora)");
  // Offload is ZeRO-Offload's AdamW with fp32 master weights: AdamW only, not pure bf16.
  auto offloadable = [](Precision precision, OptimizerKind optimizer) {
    return optimizer == OptimizerKind::kAdamW && precision != Precision::kBf16;
  };
  std::vector<FitTechnique> wanted;
  for (const auto& p : precisions)
    for (const auto& c : ckpts)
      for (const auto& opt : optimizers)
        for (const auto& ad : adapters)
          for (const auto& off : offloads)
            for (const auto& w : weights)
              for (bool cache : {true, false})
                if ((cache || (has_cache(*spec) && c == Checkpointing::kNone)) &&
                    (off == Offload::kNone || offloadable(p, opt)) &&
                    (w == Weights::kFull || ad == Adapter::kLora))
                  wanted.push_back({p, c, opt, cache, ad, off, w});

  // A config.json's model is named by its path; its folder names the results directory.
  const std::string slug = models::model_slug(*models::find_model(o.model));
  const std::string out = o.out.empty() ? "results/fit-" + slug + "-" + card.key : o.out;
  const std::string name = "fit-" + slug + "-" + card.key;
  // The emulated card: the table's, its context written out when given.
  YAML::Node gpu;
  if (emulated && !o.context_gib) {
    gpu = std::string(card.spec->key);
  } else if (emulated) {
    gpu["name"] = card.name;
    gpu["memory_gib"] = number_text(static_cast<double>(card.memory_bytes) / kGiB);
    gpu["context_gib"] = number_text(static_cast<double>(context) / kGiB);
    gpu["compute_capability"] =
        std::to_string(card.spec->cc_major) + "." + std::to_string(card.spec->cc_minor);
    gpu["sms"] = card.spec->sms;
    gpu.SetStyle(YAML::EmitterStyle::Flow);
  }
  YAML::Node y = config_head(o, name, device, out, cap, gpu);
  y["search"] = "max_batch";
  y["search_max_batch"] = o.max_batch;
  YAML::Node grid = y["grid"];
  grid["batch"] = 1;
  add_input_axes(o, grid);
  grid["precision"] = yaml_list(precisions);
  grid["checkpointing"] = yaml_list(ckpts);
  grid["optimizer"] = yaml_list(optimizers);
  grid["adapter"] = yaml_list(adapters);
  grid["offload"] = yaml_list(offloads);
  grid["weights"] = yaml_list(weights);
  auto exclude = [&](std::initializer_list<std::pair<const char*, std::string>> rule) {
    YAML::Node r;
    for (const auto& [axis, value] : rule) r[axis] = value;
    r.SetStyle(YAML::EmitterStyle::Flow);
    y["exclude"].push_back(r);
  };
  if (has_cache(*spec)) {
    grid["use_cache"] = flow_list({"true", "false"});
    exclude({{"checkpointing", "block"}, {"use_cache", "false"}});
  }
  if (has(offloads, Offload::kOptimizer)) {
    for (const auto opt : optimizers)
      if (opt != OptimizerKind::kAdamW) exclude({{"offload", "optimizer"}, {"optimizer", to_string(opt)}});
    if (has(precisions, Precision::kBf16)) exclude({{"offload", "optimizer"}, {"precision", "bf16"}});
  }
  if (has(weights, Weights::kInt8) && has(adapters, Adapter::kNone))
    exclude({{"weights", "int8"}, {"adapter", "none"}});
  const std::string comment =
      "Written by `sweep fit " + o.model + "` for " + card.name + " (" + rule.derivation(card.name) +
      "). Run again with `sweep run " + out +
      "/fit.yaml --search max-batch`.";

  // Validated above; now locked (another fit or run writing OUT is refused before anything is
  // written), then fit.yaml replaced at once by a config that loads and expands (fit_config.h).
  // Its points, as the runner expands them, are the question: their budget, card, device and
  // inputs are what the rows of the answer must have been measured with.
  std::filesystem::create_directories(out);
  hold_lock((std::filesystem::path(out) / ".lock").string(), out);
  const auto cfg_path = std::filesystem::path(out) / "fit.yaml";
  const auto results_path = std::filesystem::path(out) / "results.csv";
  const auto searches = combinations(install_fit_config(
      cfg_path, emit_config(comment, y), device, [&](const std::vector<Point>& points) {
        if (!std::filesystem::exists(results_path)) return;
        const auto* r = measured_elsewhere(reports::read_results(results_path.string()), points);
        if (r)
          throw UserError(r->source, static_cast<int>(r->line), "--out",
                          "this directory holds probes of the same points measured on " +
                              to_string(*r->value<Device>()) + ", and this fit runs on " +
                              to_string(device) + ": they would be taken as measured here",
                          "give this fit its own --out");
      }));
  std::vector<Point> question;
  for (const auto& c : searches) question.push_back(c.front());

  // The estimate, before the first probe (sweeps/runner/estimate.h): the probes still to run
  // (a search whose answer this directory holds replays without one), each timed from the rows
  // measured here before; without such rows the time follows from the first probe.
  if (!o.quiet) {
    WallHistory history;
    Recorded recorded;
    if (std::filesystem::exists(results_path)) {
      const auto results = reports::read_results(results_path.string());
      history.add(results, device);
      recorded.add(results);
    }
    // A first fit of this model here: the rows other runs on this machine measured beside it
    // (results/*/results.csv), of its device.
    if (!history.knows(o.model) && !emulated) {
      std::error_code ec;
      const auto parent = std::filesystem::absolute(out).parent_path();
      for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
        const auto csv = e.path() / "results.csv";
        if (csv == std::filesystem::absolute(results_path) || !std::filesystem::is_regular_file(csv)) continue;
        try {
          history.add(reports::read_results(csv.string()), device, host_name());
        } catch (const UserError&) {
          // A results file that does not read is not this estimate's to report.
        }
      }
    }
    const bool seeded = o.predict && !emulated;
    const PlanEstimate plan = estimate_plan(searches, true, history, recorded, o.max_batch,
                                            seeded ? 2 : kProbesPerSearch);
    const int left = plan.runs_left();
    std::string estimate = "; " + plan.search_summary(results_path.string(), seeded);
    if (!plan.estimated && left > 0)
      estimate += "; no estimate of the time yet (nothing of " + o.model + " was measured on " +
                  to_string(device) + " in " + std::filesystem::absolute(out).parent_path().string() +
                  "/*): the ETA follows from the first probe";
    if (device == Device::kCpu && left > 0)
      estimate += "\nnote: on the CPU each probe trains " + o.model +
                  " for real (the first line below says how long one takes); `--gpu NAME` "
                  "without --device predicts a card by emulation in seconds";
    std::fprintf(stderr, "fit %s on %s (cap %s, %s): %zu technique%s%s\n",
                 o.model.c_str(), card.name.c_str(),
                 reports::format_bytes(static_cast<double>(cap)).c_str(),
                 device == Device::kCpu ? "enforced by the CPU's tracking allocator"
                 : emulated             ? predicted.c_str()
                                        : "emulated on this GPU",
                 wanted.size(), wanted.size() == 1 ? "" : "s", estimate.c_str());
  }
  RunOptions run;
  run.config = cfg_path.string();
  run.out = out;
  run.device = to_string(device);
  run.device_given = true;
  run.quiet = o.quiet;
  run.zygote = o.zygote;
  run.predict = o.predict;
  if (const int rc = run_sweep(run).exit_code; rc != 0) return rc;

  // Only the rows of this question: its points' ids at each batch, on its device.
  const auto results = reports::read_results(results_path.string());  // `a` points into it
  Analysis a = analyse(results, question, wanted);
  const int64_t budget = a.budget_bytes;
  // The emulated runs that seeded this question's searches (OUT/predictions.csv): each a point
  // of the question on the emulated device.
  int predictions = 0;
  if (const auto path = std::filesystem::path(out) / kPredictionsFile; std::filesystem::exists(path)) {
    std::set<std::string> keys;
    for (const auto& q : question) keys.insert(combination_key(q));
    const auto rows = reports::read_results(path.string());  // the rows below point into it
    for (const auto* r : reports::latest_per_point(rows).rows) {
      Point p = point_of(*r);
      p.device = device;
      p.card = {};
      predictions += keys.count(combination_key(p)) > 0;
    }
  }
  int probes = 0;
  for (const auto& t : a.techniques) probes += t.probes;
  const std::string probes_line = probes_text(probes, static_cast<int>(a.techniques.size()), predictions);

  // The recommendation, measured: the pick at its accumulation is run once more (a plain
  // grid point; at accumulation 1 it is a probe already measured). A pick that does not fit
  // once gradients are accumulated is dropped and the next one tried.
  std::optional<Pick> choice;
  std::string reason;
  PickQuestion question_of_pick{o.effective_batch, rule.ceiling_bytes(), {}, {}};
  auto& refused = question_of_pick.refused;
  bool confirmed = false;  // the pick ran ok at its accumulation (or needs none)
  // Nothing is timed on an emulated card, and the CPU's times say nothing about a GPU: those
  // picks are ranked by memory.
  const bool by_memory = emulated || device == Device::kCpu;
  for (int attempt = 0; attempt < 8 && !confirmed; ++attempt) {
    choice = by_memory ? pick_by_memory(a, question_of_pick) : pick(a, question_of_pick);
    if (!choice) break;
    // A pick measured at its accumulation is ranked again with that measurement: confirmed when
    // it still comes first.
    if (choice->accumulation == 1 || question_of_pick.confirmed.count(pick_id(*choice))) {
      confirmed = true;
      break;
    }
    const auto& t = *choice->technique;
    YAML::Node v = config_head(o, name + "-pick", device, out, budget, gpu);
    YAML::Node pick_grid = v["grid"];
    pick_grid["batch"] = choice->batch;
    add_input_axes(o, pick_grid);
    pick_grid["precision"] = to_string(t.precision);
    pick_grid["checkpointing"] = to_string(t.checkpointing);
    pick_grid["optimizer"] = to_string(t.optimizer);
    pick_grid["adapter"] = to_string(t.adapter);
    pick_grid["offload"] = to_string(t.offload);
    pick_grid["weights"] = to_string(t.weights);
    pick_grid["accumulation"] = choice->accumulation;
    if (has_cache(*spec)) pick_grid["use_cache"] = t.use_cache;
    const auto pick_points =
        install_fit_config(std::filesystem::path(out) / "fit-pick.yaml",
                emit_config("The recommendation of `sweep fit`, measured at its accumulation.", v),
                device);
    SWEEP_CHECK(pick_points.size() == 1, "fit's pick is one point");
    run.config = (std::filesystem::path(out) / "fit-pick.yaml").string();
    if (const int rc = run_sweep(run).exit_code; rc != 0) return rc;
    // Only the pick's row is new. `a` (which `choice` points into) and the rows it points to
    // stay as they were: the file is read again into a copy of its own.
    const auto after = reports::read_results(results_path.string());
    const reports::Row* measured = nullptr;
    for (const auto* r : reports::latest_per_point(after).rows)
      if (measures(*r, pick_points.front())) measured = r;
    if (measured && measured->status == reports::Status::kOk) {
      choice->tokens_per_s = measured->number(column("tokens_per_s")).value_or(0);
      choice->step_ms_cv = measured->number(column("step_ms_cv")).value_or(0);
      choice->peak_reserved =
          measured->number(column("peak_reserved_bytes")).value_or(choice->peak_reserved);
      question_of_pick.confirmed[pick_id(*choice)] = *choice;
      if (by_memory) {
        confirmed = true;
        break;
      }
      continue;  // ranked again with what the confirmation measured
    }
    refused.push_back(pick_id(*choice));  // out of memory once gradients accumulate: the next
  }
  if (!confirmed) choice.reset();
  if (choice) {
    const auto& t = *choice->technique;
    std::ostringstream why;
    if (by_memory)
      why << "ranked by memory, not throughput ("
          << (emulated ? "an emulated card computes nothing, so no speed is predicted"
                       : "on the CPU step times say nothing about a GPU and vary with the host's "
                         "load")
          << "): the configuration with the fewest changes from plain training (fp32, no "
             "checkpointing, AdamW) that fits"
          << (o.effective_batch
                  ? " and reaches an effective batch of " + std::to_string(*o.effective_batch)
                  : "")
          << ", at its largest such micro-batch, then the lowest peak";
    else
      why << "the highest measured throughput among the configurations under the recommended "
             "ceiling";
    if (choice->above_ceiling)
      why << " (none stayed under the recommended ceiling of "
          << reports::format_bytes(static_cast<double>(rule.ceiling_bytes()))
          << ": this one fits the cap with less than the margin kept free)";
    if (o.effective_batch && by_memory)
      why << " (micro-batch " << choice->batch << " x accumulation " << choice->accumulation
          << (choice->accumulation > 1 ? emulated ? ", predicted as such" : ", measured as such"
                                       : "")
          << ")";
    else if (o.effective_batch)
      why << " and reach an effective batch of " << *o.effective_batch << " (micro-batch " << choice->batch
          << " x accumulation " << choice->accumulation << (choice->accumulation > 1 ? ", measured as such" : "") << ")";
    if (t.largest && choice->batch < *t.largest) why << "; its largest batch is " << *t.largest;
    if (!choice->why.empty()) why << "; " << choice->why;
    if (!by_memory && choice->why.empty() && choice->step_ms_cv > reports::kNoisyStepCv)
      why << ". Noisy: its step time varied " << std::lround(choice->step_ms_cv * 100)
          << "% between repetitions, so the ranking by throughput is not reliable; re-run on an idle "
             "machine, or with more repetitions (`sweep run " << out << "/fit.yaml --search max-batch --force` "
             "after raising `repetitions`)";
    reason = why.str();
  }

  const bool cpu = device == Device::kCpu;
  const std::string measured_on = a.device_name.empty() ? to_string(device) : a.device_name;
  if (o.json || answer) {
    nlohmann::json j;
    j["fit_json_version"] = kFitJsonVersion;
    j["model"] = o.model;
    j["device"] = to_string(device);
    j["measured_on"] = measured_on;
    j["cpu_measured"] = cpu;
    j["predicted"] = emulated;  // device emulated: memory predicted, nothing measured or timed
    if (emulated) j["predicted_by"] = predicted;
    j["card"] = {{"name", card.name}, {"memory_bytes", card.memory_bytes}, {"margin", o.margin},
                 {"context_bytes", context}, {"context_source", context_source},
                 {"cap_bytes", rule.cap_bytes()}, {"ceiling_bytes", rule.ceiling_bytes()},
                 {"budget_bytes", budget}};
    if (o.effective_batch) j["effective_batch"] = *o.effective_batch;
    j["results"] = results_path.string();
    j["techniques"] = nlohmann::json::array();
    for (const auto& t : a.techniques) {
      nlohmann::json e = technique_json(t);
      e["probes"] = t.probes;
      e["limit_reached"] = t.first_oom.has_value();
      e["largest_batch"] = t.largest ? nlohmann::json(*t.largest) : nlohmann::json(nullptr);
      e["first_oom"] = t.first_oom ? nlohmann::json(*t.first_oom) : nlohmann::json(nullptr);
      if (t.largest) {
        e["peak_reserved_bytes"] = t.peak_reserved;
        e["peak_allocated_bytes"] = t.peak_allocated;
        e["headroom_bytes"] = static_cast<double>(budget) - t.peak_reserved;
        e["tokens_per_s"] = emulated ? nlohmann::json(nullptr) : nlohmann::json(t.tokens_per_s);
        e["step_ms_cv"] = emulated ? nlohmann::json(nullptr) : nlohmann::json(t.step_ms_cv);
      }
      if (!t.stopped.empty()) e["stopped"] = t.stopped;
      j["techniques"].push_back(e);
    }
    j["probes"] = probes;
    j["probes_per_technique"] = a.techniques.empty() ? 0.0 : static_cast<double>(probes) / a.techniques.size();
    j["predictions"] = predictions;  // emulated runs that seeded the searches, not probes
    j["probes_text"] = probes_line;
    if (choice) {
      const auto& t = *choice->technique;
      j["recommendation"] = technique_json(t);
      j["recommendation"].update(
          {{"batch", choice->batch},
           {"accumulation", choice->accumulation},
           {"peak_reserved_bytes", choice->peak_reserved},
           {"tokens_per_s",
            emulated ? nlohmann::json(nullptr) : nlohmann::json(choice->tokens_per_s)},
           {"step_ms_cv", emulated ? nlohmann::json(nullptr) : nlohmann::json(choice->step_ms_cv)},
           {"noisy", !emulated && choice->step_ms_cv > reports::kNoisyStepCv},
           {"predicted", emulated},
           {"above_ceiling", choice->above_ceiling},
           {"reason", reason}});
    } else {
      j["recommendation"] = nullptr;
    }
    if (answer) {
      *answer = std::move(j);
      return 0;
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::printf(
      "%s on %s. The rule, %s.%s\n\n", o.model.c_str(), card.name.c_str(),
      rule.derivation(card.name).c_str(),
      cpu ? "\nMeasured on the CPU: memory as PyTorch would allocate it, enforced by the tracking "
            "allocator; the throughput is the CPU's, not a GPU's."
      : emulated ? ("\nPredicted by emulation of " + card.name +
                    ", not measured: memory as CUDA's caching "
                    "allocator would hold it on that card; no throughput (nothing computes).")
                       .c_str()
                 : "");
  std::printf("| technique | largest batch | peak | headroom | tokens/s ±cv | probes |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const auto& t : a.techniques) {
    std::string largest = t.largest ? std::to_string(*t.largest) : "none";
    if (t.largest && !t.first_oom) largest += " (limit not reached)";
    if (!t.stopped.empty()) largest += " (" + t.stopped + ")";
    std::printf("| %s | %s | %s | %s | %s | %d |\n", t.label().c_str(), largest.c_str(),
                t.largest ? reports::format_bytes(t.peak_reserved).c_str() : "",
                t.largest
                    ? reports::format_bytes(static_cast<double>(budget) - t.peak_reserved).c_str()
                    : "",
                !t.largest ? ""
                : emulated ? "not measured"
                           : (std::to_string(static_cast<int64_t>(t.tokens_per_s)) + " ±" +
                              std::to_string(std::lround(t.step_ms_cv * 100)) + "%")
                                 .c_str(),
                t.probes);
  }
  std::printf("\nProbes: %s.\n", probes_line.c_str());
  if (choice) {
    const auto& t = *choice->technique;
    const std::string accumulation =
        choice->accumulation > 1 ? " x accumulation " + std::to_string(choice->accumulation) : "";
    if (emulated)
      std::printf("\nRecommended (%s): %s, batch %lld%s: peak %s, recommended ceiling %s, %s.\n",
                  predicted.c_str(), t.label().c_str(), static_cast<long long>(choice->batch),
                  accumulation.c_str(), reports::format_bytes(choice->peak_reserved).c_str(),
                  reports::format_bytes(static_cast<double>(rule.ceiling_bytes())).c_str(),
                  reason.c_str());
    else
      std::printf("\nRecommended: %s, batch %lld%s: %lld tokens/s, %s.\n", t.label().c_str(),
                  static_cast<long long>(choice->batch), accumulation.c_str(),
                  static_cast<long long>(choice->tokens_per_s), reason.c_str());
  } else {
    std::printf("\nNothing fits %s: not even batch 1 of any technique%s.\n", card.name.c_str(),
                emulated ? (" (" + predicted + ")").c_str() : "");
  }
  const std::string card_arg = o.gpu.empty() ? "--memory-gib " + number_text(*o.memory_gib) : "--gpu " + o.gpu;
  std::printf("\nRows: %s (sweep report %s; sweep recommend %s %s)\n", results_path.c_str(), out.c_str(),
              out.c_str(), card_arg.c_str());
  return 0;
}

}  // namespace sweep
