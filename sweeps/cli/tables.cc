// `sweep tables`; see tables.h. Every number comes from `sweep fit`'s answer (run_fit's JSON), so
// the tables say what fit would say, by fit's rule for "fits" and its recommendation.
#include "sweeps/cli/tables.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "models/zoo.h"
#include "reports/common/fit_rule.h"
#include "reports/common/gpus.h"
#include "reports/recommend/recommend.h"
#include "reports/results/cards.h"
#include "reports/results/error.h"
#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "reports/tables/tables.h"
#include "sweep_version.h"
#include "sweeps/cli/fit.h"
#include "sweeps/runner/install_file.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Beyond fit's default combinations (full fine-tuning: precision x checkpointing x optimizer
// incl. 8-bit AdamW x offload x use_cache), a second fit per input tries LoRA and int8 weights
// with LoRA, with AdamW only (LoRA's optimizer state is a few MiB whatever the optimizer):
// trying them with every optimizer and offload tripled a card's time for rows that differ by
// bytes. The recommendation is the first fit's: full fine-tuning, what `sweep fit` answers.
const std::vector<std::string> kLoraAdapters = {"lora"};
const std::vector<std::string> kLoraWeights = {"full", "int8"};
constexpr int64_t kEffectiveBatch = 32;

// One model at one length people train it.
struct Input {
  std::string label;  // "seq 512", "seq 512, target 128", "audio 30 s": as reports name it
  std::string slug;   // "seq512"
  std::optional<int64_t> seq, target_seq;
  std::optional<double> audio_s;
};

std::vector<Input> inputs_of(const models::ModelSpec& spec) {
  if (spec.family == "gpt2") return {{"seq 512", "seq512", 512}, {"seq 1024", "seq1024", 1024}};
  if (spec.family == "t5") return {{"seq 512, target 128", "seq512-target128", 512, 128}};
  return {{"audio 30 s", "audio30s", std::nullopt, std::nullopt, 30.0}};
}

// Cards without bf16 hardware (compute capability below 8.0: T4, V100). torch 2.11's
// torch.cuda.is_bf16_supported() defaults to including_emulation=True and, below sm_80, answers
// whether a bf16 tensor can be created on the device (cuda/__init__.py:183-212), which it can;
// so torch.autocast("cuda", dtype=torch.bfloat16) does not refuse (amp/autocast_mode.py:282-296
// raises only when that answer is False), and bf16 trains, without bf16 tensor cores. What
// people run on these cards is fp16 autocast with a GradScaler, on the fp16 tensor cores: the
// tables try fp16-amp there in place of bf16-amp (the same activations in memory, plus the
// scaler's few bytes), and keep pure bf16 with this note.
bool lacks_bf16(const CardSpec& c) { return !has_bf16_tensor_cores(c); }
std::string precision_note(const CardSpec& c) {
  return c.name.data() + std::string(
             " (sm_" + std::to_string(c.cc_major) + std::to_string(c.cc_minor) +
             ") has no bf16 tensor cores. torch 2.11 does not refuse bf16 there: "
             "torch.cuda.is_bf16_supported() defaults to including_emulation=True and answers "
             "True when a bf16 tensor can be created (torch/cuda/__init__.py), so "
             "torch.autocast(\"cuda\", dtype=torch.bfloat16) runs (torch/amp/autocast_mode.py "
             "raises only when that answer is False), but slowly. This table therefore tries "
             "fp16-amp (fp16 autocast with a GradScaler, on the fp16 tensor cores: what people "
             "use on this card) in place of bf16-amp, with the same memory; pure bf16 rows are "
             "kept for their memory, and train at a fraction of fp16's speed here.");
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write(const fs::path& path, const std::string& text, const std::string& what) {
  install_file(path, text, what, "--out", "give --out a directory you can write");
}

// The fit answers one card's table needs, collected into the card's data (reports/tables/tables.h).
json collect(const CardSpec& card, const TablesOptions& o, const std::vector<const models::ModelSpec*>& zoo) {
  const bool measured_card = card.key == "rtx3060";
  const fs::path measured_file = fs::path(o.out) / "rtx3060-results.csv";
  std::optional<reports::Results> measured;
  if (measured_card && fs::exists(measured_file)) measured = reports::read_results(measured_file.string());

  json d;
  d["tables_json_version"] = reports::kTablesJsonVersion;
  FitOptions base;
  base.gpu = std::string(card.key);
  base.device = "emulated";
  base.effective_batch = kEffectiveBatch;
  base.quiet = true;
  if (lacks_bf16(card)) base.precisions = {"fp32", "fp16-amp", "bf16"};
  const reports::FitRule rule{card_memory_bytes(card), card_context_bytes(card), base.margin};
  // The card's facts as `sweep gpus --json` gives them, and the two figures of the rule.
  const json gpus = reports::gpus_json();
  for (const auto& g : gpus.at("gpus"))
    if (g.at("key") == card.key) d["card"] = g;
  d["card"]["margin"] = base.margin;
  d["card"]["cap_bytes"] = rule.cap_bytes();
  d["card"]["ceiling_bytes"] = rule.ceiling_bytes();
  d["command"] = "sweep tables --card " + std::string(card.key);
  const std::string precision_flag = lacks_bf16(card) ? " --precision fp32,fp16-amp,bf16" : "";
  d["fit_flags"] = precision_flag + "`, then the same with `--adapter lora --weights full,int8 "
                   "--optimizer adamw --offload none" + precision_flag;
  d["commit"] = SWEEP_GIT_COMMIT;
  d["suite_version"] = SWEEP_VERSION;
  d["effective_batch"] = kEffectiveBatch;
  if (lacks_bf16(card)) d["precision_note"] = precision_note(card);
  d["entries"] = json::array();
  for (const auto* spec : zoo)
    for (const Input& in : inputs_of(*spec)) {
      FitOptions f = base;
      f.model = spec->name;
      f.seq = in.seq;
      f.target_seq = in.target_seq;
      f.audio_s = in.audio_s;
      f.out = (fs::path(o.results) / card.key / (spec->name + "-" + in.slug)).string();
      auto fit = [&](const FitOptions& x) {
        json answer;
        if (const int rc = run_fit(x, &answer); rc != 0)
          throw UserError("", 0, "--card",
                          "the fit of " + spec->name + ", " + in.label + " on " +
                              std::string(card.name) + " failed (exit " + std::to_string(rc) + ")",
                          "run it alone to see why: sweep fit " + spec->name + " --gpu " +
                              std::string(card.key) + " --device emulated --out " + x.out);
        return answer;
      };
      json answer = fit(f);
      FitOptions lora = f;
      lora.adapters = kLoraAdapters;
      lora.weights = kLoraWeights;
      lora.optimizers = {"adamw"};
      lora.offloads = {"none"};
      lora.effective_batch.reset();
      lora.out = f.out + "-lora";
      for (const auto& t : fit(lora)["techniques"]) answer["techniques"].push_back(t);
      // Each technique (and the recommendation) with the label fit prints.
      auto label = [](const json& t) {
        FitTechnique x;
        x.precision = *parse_as<Precision>(t.at("precision").get<std::string>());
        x.checkpointing = *parse_as<Checkpointing>(t.at("checkpointing").get<std::string>());
        x.optimizer = *parse_as<OptimizerKind>(t.at("optimizer").get<std::string>());
        x.use_cache = t.at("use_cache");
        x.adapter = *parse_as<Adapter>(t.at("adapter").get<std::string>());
        x.offload = *parse_as<Offload>(t.at("offload").get<std::string>());
        x.weights = *parse_as<Weights>(t.at("weights").get<std::string>());
        return x.label();
      };
      for (auto& t : answer["techniques"]) t["label"] = label(t);
      if (!answer["recommendation"].is_null())
        answer["recommendation"]["label"] = label(answer["recommendation"]);
      answer.erase("results");  // a path of this machine, not a fact of the table
      json entry = {{"model", spec->name}, {"input", in.label}, {"fit", answer}};

      // The measured rows of this model and input, beside the emulation under their cap.
      if (measured) {
        const auto budget = [&]() -> std::optional<double> {
          for (const auto& r : measured->rows)
            if (r.at(schema::column("model")) == spec->name &&
                (!in.seq || r.number(schema::column("seq")) == static_cast<double>(*in.seq)))
              if (const auto b = r.number(schema::column("budget_bytes"))) return *b;
          return std::nullopt;
        }();
        if (budget) {
          FitOptions capped = f;
          capped.margin = 0;  // the cap is the budget: memory - context = the measured cap
          capped.context_gib = (static_cast<double>(card_memory_bytes(card)) - *budget) / reports::kGiB;
          capped.effective_batch.reset();
          capped.adapters = {"none"};
          capped.weights = {"full"};
          capped.offloads = {"none"};
          capped.optimizers = {"adamw", "adafactor"};
          capped.out = f.out + "-cap";
          json ignored;
          if (run_fit(capped, &ignored) == 0) {
            const auto rows = reports::measured_beside_predicted(
                *measured, reports::read_results((fs::path(capped.out) / "results.csv").string()));
            const std::string key = spec->name + "|" + in.label;
            if (rows.contains(key))
              entry["measured"] = {
                  {"where",
                   "Measured on an " + rows[key][0]["measured_on"].get<std::string>() + " under a " +
                       reports::format_bytes(*budget) + " cap (the 3060's memory less its context; the rows: "
                       "rtx3060-results.csv, the write-up: rtx3060-measured.md), beside the "
                       "emulation of RTX 3060 under the same cap. Ranked by tokens/s measured on "
                       "that H100 under the cap: a ranking of techniques, not a 3060's speed."},
                  {"rows", rows[key]}};
          }
        }
      }
      d["entries"].push_back(entry);
    }
  if (measured)
    d["measured_note"] = "Where a section also shows measured rows, those rank by throughput "
                         "measured on an H100 under the 3060's cap, and each disagreement with the "
                         "prediction is said in its row.";
  return d;
}

}  // namespace

int run_tables(const TablesOptions& o) {
  std::vector<const CardSpec*> chosen;
  if (o.cards.empty())
    for (const auto& c : cards()) chosen.push_back(&c);
  for (const auto& name : o.cards) {
    const CardSpec* c = find_card(name);
    if (!c) {
      const std::string near = nearest_card_key(name);
      throw UserError("", 0, "--card", "unknown card '" + name + "'",
                      (near.empty() ? "" : "did you mean " + near + "? ") + "one of " + card_keys() +
                          " (`sweep gpus` lists them)");
    }
    chosen.push_back(c);
  }
  std::vector<const models::ModelSpec*> zoo;
  for (const auto& m : models::zoo())
    if (!m.test_only && (o.models.empty() || std::find(o.models.begin(), o.models.end(), m.name) != o.models.end()))
      zoo.push_back(&m);
  for (const auto& name : o.models) {
    const auto* m = models::find_model(name);
    if (!m || m->test_only)
      throw UserError("", 0, "--model", "unknown model '" + name + "'",
                      "`sweep models` lists them (the -test models have no table)");
  }
  fs::create_directories(o.out);
  for (const CardSpec* card : chosen) {
    const auto start = std::chrono::steady_clock::now();
    const json d = collect(*card, o, zoo);
    write(fs::path(o.out) / (std::string(card->key) + ".json"), d.dump(1) + "\n", "the table's data");
    write(fs::path(o.out) / (std::string(card->key) + ".md"), reports::card_markdown(d), "the table");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!o.quiet)
      std::fprintf(stderr, "tables: %s: %zu inputs in %.1f s -> %s\n", std::string(card->key).c_str(),
                   d["entries"].size(), s, (fs::path(o.out) / (std::string(card->key) + ".md")).c_str());
  }
  // The page: every card whose data is in OUT, in the table's order.
  std::vector<json> all;
  for (const auto& c : cards()) {
    const fs::path p = fs::path(o.out) / (std::string(c.key) + ".json");
    if (!fs::exists(p)) continue;
    json d = json::parse(read_text(p), nullptr, false);
    if (d.is_discarded() || d.value("tables_json_version", 0) != reports::kTablesJsonVersion)
      throw UserError(p.string(), 0, "tables_json_version",
                      "not the data of a table this sweep writes",
                      "regenerate it: sweep tables --card " + std::string(c.key));
    all.push_back(std::move(d));
  }
  write(fs::path(o.out) / "index.html", reports::tables_page(all), "the page");
  return 0;
}

}  // namespace sweep
