// `sweep tables`; see tables.h. Every number comes from `sweep fit`'s answer (run_fit's JSON), so
// the tables say what fit would say, by fit's rule for "fits" and its recommendation.
#include "sweeps/cli/tables.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

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
#include "sweeps/cli/fit_question.h"
#include "reports/results/files.h"
#include "sweeps/runner/progress.h"
#include "sweeps/runner/sweep.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Beyond fit's default combinations (full fine-tuning: precision x checkpointing x optimizer
// incl. 8-bit AdamW x offload x the cache), a second fit per input tries LoRA and int8 weights
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
  if (spec.family == "whisper")
    return {{"audio 30 s, labels 448", "audio30s-target448", std::nullopt, 448, 30.0}};
  if (spec.family == "whisper-cls") return {{"audio 30 s", "audio30s", std::nullopt, std::nullopt, 30.0}};
  // A decoder read from a config.json: fit's default length (fit_question.h default_lengths).
  FitOptions o;
  default_lengths(spec, o);
  const int64_t seq = o.seq.value_or(1024);
  return {{"seq " + std::to_string(seq), "seq" + std::to_string(seq), seq}};
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

// "27 searches in 41.8 s (1.5 s a search)": a unit's time, and what one search cost in it.
std::string searches_text(std::size_t searches, std::chrono::steady_clock::duration took) {
  const double s = std::chrono::duration<double>(took).count();
  char text[96];
  if (searches == 0) std::snprintf(text, sizeof text, "%.1f s", s);
  else
    std::snprintf(text, sizeof text, "%zu search%s in %.1f s (%.1f s a search)", searches,
                  searches == 1 ? "" : "es", s, s / static_cast<double>(searches));
  return text;
}

void write(const fs::path& path, const std::string& text, const std::string& what) {
  install_file(path, text, what, "--out", "give --out a directory you can write");
}

// The fit options every fit of a card's table starts from.
FitOptions table_fit_base(const CardSpec& card) {
  FitOptions base;
  base.gpu = std::string(card.key);
  base.device = "emulated";
  base.effective_batch = kEffectiveBatch;
  base.quiet = true;
  if (lacks_bf16(card)) base.precisions = {"fp32", "fp16-amp", "bf16"};
  return base;
}

// A card's data before its entries: the card's facts as `sweep gpus --json` gives them, the
// two figures of the rule, and how the table was made.
json card_head(const CardSpec& card, const FitOptions& base) {
  const reports::FitRule rule{card_memory_bytes(card), card_context_bytes(card), base.margin};
  json d;
  d["tables_json_version"] = reports::kTablesJsonVersion;
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
  return d;
}

// A technique's (or the recommendation's) label as fit prints it.
std::string technique_label(const json& t) {
  FitTechnique x;
  for (const auto& [column, value] : t.items())  // fit's JSON: Technique::json's members and more
    if (value.is_boolean() || value.is_string())
      x.set(column, value.is_boolean() ? (value.get<bool>() ? "1" : "0") : value.get<std::string>());
  return x.label();
}

// The RTX 3060's measured rows of one model and input beside the emulation under their cap
// (fit once more with the cap as the budget), or nothing where no row measured them.
std::optional<json> measured_beside(const CardSpec& card, const reports::Results& measured,
                                    const models::ModelSpec& spec, const Input& in, const FitOptions& f,
                                    std::size_t& searches) {
  const auto budget = [&]() -> std::optional<double> {
    for (const auto& r : measured.rows)
      if (r.at(schema::column("model")) == spec.name &&
          (!in.seq || r.number(schema::column("seq")) == static_cast<double>(*in.seq)))
        if (const auto b = r.number(schema::column("budget_bytes"))) return *b;
    return std::nullopt;
  }();
  if (!budget) return std::nullopt;
  FitOptions capped = f;
  capped.margin = 0;  // the cap is the budget: memory - context = the measured cap
  capped.context_gib = (static_cast<double>(card_memory_bytes(card)) - *budget) / reports::kGiB;
  capped.effective_batch.reset();
  capped.adapters = {"none"};
  capped.weights = {"full"};
  capped.offloads = {"none"};
  capped.optimizers = {"adamw", "adafactor"};
  capped.out = f.out + "-cap";
  json capped_answer;
  if (run_fit(capped, &capped_answer) != 0) return std::nullopt;
  searches += capped_answer["techniques"].size();
  const auto rows = reports::measured_beside_predicted(
      measured, reports::read_results((fs::path(capped.out) / "results.csv").string()));
  const std::string key = spec.name + "|" + in.label;
  if (!rows.contains(key)) return std::nullopt;
  return json{{"where",
               "Measured on an " + rows[key][0]["measured_on"].get<std::string>() + " under a " +
                   reports::format_bytes(*budget) + " cap (the 3060's memory less its context; the rows: "
                   "rtx3060-results.csv, the write-up: rtx3060-measured.md), beside the "
                   "emulation of RTX 3060 under the same cap. Ranked by tokens/s measured on "
                   "that H100 under the cap: a ranking of techniques, not a 3060's speed."},
              {"rows", rows[key]}};
}

// One model at one input: fit's answer (full fine-tuning, then LoRA and int8 with LoRA), each
// technique labelled, and the measured rows where there are some.
json entry_of(const CardSpec& card, const FitOptions& base, const fs::path& results,
              const models::ModelSpec& spec, const Input& in,
              const std::optional<reports::Results>& measured, std::size_t& searches) {
  FitOptions f = base;
  f.model = spec.name;
  f.seq = in.seq;
  f.target_seq = in.target_seq;
  f.audio_s = in.audio_s;
  f.out = (results / card.key / (spec.name + "-" + in.slug)).string();
  auto fit = [&](const FitOptions& x) {
    json answer;
    if (const int rc = run_fit(x, &answer); rc != 0)
      throw UserError("", 0, "--card",
                      "the fit of " + spec.name + ", " + in.label + " on " + std::string(card.name) +
                          " failed (exit " + std::to_string(rc) + ")",
                      "run it alone to see why: sweep fit " + spec.name + " --gpu " +
                          std::string(card.key) + " --device emulated --out " + x.out);
    searches += answer["techniques"].size();  // one max-batch search per technique
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
  for (auto& t : answer["techniques"]) t["label"] = technique_label(t);
  if (!answer["recommendation"].is_null())
    answer["recommendation"]["label"] = technique_label(answer["recommendation"]);
  answer.erase("results");  // a path of this machine, not a fact of the table
  json entry = {{"model", spec.name}, {"input", in.label}, {"fit", answer}};
  if (measured)
    if (auto m = measured_beside(card, *measured, spec, in, f, searches)) entry["measured"] = std::move(*m);
  return entry;
}

// The fit answers one card's table needs, collected into the card's data (reports/tables/tables.h).
// `progress` counts one unit per model and input (its fits), as the search counts probes.
json collect(const CardSpec& card, const TablesOptions& o, const std::vector<const models::ModelSpec*>& zoo,
             Progress& progress) {
  const fs::path measured_file = fs::path(o.out) / "rtx3060-results.csv";
  std::optional<reports::Results> measured;
  if (card.key == "rtx3060" && names_something(measured_file))
    measured = reports::read_results(measured_file.string());
  const FitOptions base = table_fit_base(card);
  json d = card_head(card, base);
  for (const auto* spec : zoo)
    for (const Input& in : inputs_of(*spec)) {
      const std::string what = std::string(card.key) + ", " + spec->name + ", " + in.label;
      const auto start = std::chrono::steady_clock::now();
      std::size_t searches = 0;
      progress.start_work(what);
      d["entries"].push_back(entry_of(card, base, o.results, *spec, in, measured, searches));
      progress.finish_work(what, searches_text(searches, std::chrono::steady_clock::now() - start));
    }
  if (measured)
    d["measured_note"] = "Where a section also shows measured rows, those rank by throughput "
                         "measured on an H100 under the 3060's cap, and each disagreement with the "
                         "prediction is said in its row.";
  return d;
}

// The catalogue's section (issue 34 item 5): each decoder of models/catalogue/ at 2048 and 4096
// tokens, fine-tuned the three ways people do, each with gradient checkpointing and AdamW:
// every weight in bf16 (loaded in bf16, Trainer's bf16=True: our precision bf16), LoRA on that
// bf16 base, and QLoRA (the base in NF4, bf16 compute: bf16-amp; fp16 where the card has no
// bf16 tensor cores). A cell is fit's largest batch, or, where batch 1 does not fit, how far
// over the cap batch 1's peak is: that batch on the card without its memory limit.
const std::vector<int64_t> kCatalogueLengths = {2048, 4096};

struct Way {
  std::string key, label, precision, adapter, weights;
};

std::vector<Way> ways_on(const CardSpec& card) {
  const std::string amp = lacks_bf16(card) ? "fp16-amp" : "bf16-amp";
  return {{"full", "bf16 full fine-tune", "bf16", "none", "full"},
          {"lora", "LoRA, bf16 base", "bf16", "lora", "full"},
          {"qlora", "QLoRA, NF4 base", amp, "lora", "nf4"}};
}

std::string way_flags(const Way& w) {
  return "--precision " + w.precision + " --checkpointing block --optimizer adamw --offload none" +
         (w.adapter == "none" ? "" : " --adapter lora") +
         (w.weights == "full" ? "" : " --weights " + w.weights);
}

// Batch 1's peak reserved bytes on `card` with no memory limit: an emulated run of one point on
// the card written out with the most memory a config takes.
std::optional<double> unlimited_batch1_peak(const CardSpec& card, const models::ModelSpec& spec,
                                            const Way& w, int64_t seq, const fs::path& dir) {
  char cc[16];
  std::snprintf(cc, sizeof cc, "\"%d.%d\"", card.cc_major, card.cc_minor);
  const std::string yaml =
      "name: batch1-unlimited\ndevice: emulated\nout: " + json(dir.string()).dump() + "\n" +
      "gpu: {name: " + json(std::string(card.name) + ", memory unlimited").dump() +
      ", memory_gib: 1048576, compute_capability: " + cc + ", sms: " + std::to_string(card.sms) + "}\n" +
      "steps: 1\nwarmup_steps: 1\nrepetitions: 1\nmodels: [" + json(spec.name).dump() + "]\n" +
      "grid: {batch: 1, seq: " + std::to_string(seq) + ", precision: " + w.precision +
      ", checkpointing: block, optimizer: adamw, adapter: " + w.adapter + ", weights: " + w.weights + "}\n";
  fs::create_directories(dir);
  const fs::path config = dir / "config.yaml";
  install_file(config, yaml, "the batch-1 config", "--results", "give --results a directory you can write");
  RunOptions r;
  r.config = config.string();
  r.quiet = true;
  r.search = "none";
  r.force = true;
  run_sweep(r);
  const auto results = reports::read_results((dir / "results.csv").string());
  for (const auto& row : results.rows)
    if (row.status == Status::kOk) return row.number(schema::column("peak_reserved_bytes"));
  return std::nullopt;
}

// One catalogue cell: fit's answer for one way at one length.
json catalogue_cell(const FitOptions& base, const CardSpec& card, const models::ModelSpec& spec,
                    const Way& w, int64_t seq, const fs::path& dir, std::size_t& searches) {
  json cell = {{"seq", seq}, {"way", w.key}};
  if (spec.max_seq > 0 && seq > spec.max_seq) {
    cell["beyond_context"] = spec.max_seq;
    return cell;
  }
  FitOptions f = base;
  f.model = spec.name;
  f.seq = seq;
  f.effective_batch.reset();
  f.precisions = {w.precision};
  f.checkpointing = {"block"};
  f.optimizers = {"adamw"};
  f.offloads = {"none"};
  f.adapters = {w.adapter};
  f.weights = {w.weights};
  f.trainers = {"hf"};  // Trainer's cells, as committed (SFTTrainer's are not in the tables yet)
  f.out = (dir / (spec.name + "-seq" + std::to_string(seq) + "-" + w.key)).string();
  json answer;
  if (const int rc = run_fit(f, &answer); rc != 0)
    throw UserError("", 0, "--card",
                    "the fit of " + spec.name + ", seq " + std::to_string(seq) + ", " + w.label + " on " +
                        std::string(card.name) + " failed (exit " + std::to_string(rc) + ")",
                    "run it alone to see why: sweep fit " + spec.name + " --gpu " + std::string(card.key) +
                        " --device emulated --seq " + std::to_string(seq) + " " + way_flags(w));
  // Its best technique (fit may try an axis both ways): the largest batch.
  auto largest = [](const json& t) {
    return t.at("largest_batch").is_null() ? int64_t{0} : t.at("largest_batch").get<int64_t>();
  };
  const json* best = nullptr;
  for (const json& t : answer.at("techniques")) {
    ++searches;
    if (!best || largest(t) > largest(*best)) best = &t;
  }
  if (!best) return cell;
  for (const char* k : {"largest_batch", "first_oom", "peak_reserved_bytes", "probes"})
    if (best->contains(k)) cell[k] = best->at(k);
  if (cell.value("largest_batch", json()).is_null()) {
    const auto need = unlimited_batch1_peak(card, spec, w, seq, fs::path(f.out) / "batch1-unlimited");
    if (need) {
      cell["batch1_peak_reserved_bytes"] = *need;
      cell["over_bytes"] = *need - static_cast<double>(reports::FitRule{card_memory_bytes(card),
                                                                       card_context_bytes(card), base.margin}
                                                           .cap_bytes());
    }
  }
  return cell;
}

json collect_catalogue(const CardSpec& card, const TablesOptions& o,
                       const std::vector<const models::ModelSpec*>& models, Progress& progress) {
  const FitOptions base = table_fit_base(card);
  json c = {{"lengths", kCatalogueLengths}, {"ways", json::array()}, {"rows", json::array()}};
  for (const Way& w : ways_on(card))
    c["ways"].push_back({{"key", w.key}, {"label", w.label}, {"flags", way_flags(w)}});
  const fs::path dir = fs::path(o.results) / card.key / "catalogue";
  for (const auto* spec : models) {
    const std::string what = std::string(card.key) + ", " + spec->name + ", the catalogue's lengths";
    const auto start = std::chrono::steady_clock::now();
    std::size_t searches = 0;
    progress.start_work(what);
    json row = {{"model", spec->name}, {"hf_id", spec->hf_id}, {"parameters", spec->parameters},
                {"cells", json::array()}};
    for (const int64_t seq : kCatalogueLengths)
      for (const Way& w : ways_on(card)) row["cells"].push_back(catalogue_cell(base, card, *spec, w, seq, dir, searches));
    c["rows"].push_back(row);
    progress.finish_work(what, searches_text(searches, std::chrono::steady_clock::now() - start));
  }
  return c;
}

// A card's data already in OUT (its .json), or nullopt where there is none. Read as every file
// sweep reads (files.h: a FIFO is refused, not waited on), and checked by printing it, so that
// data this sweep cannot draw is refused with its file before any fit runs.
std::optional<json> card_data_in(const fs::path& out, const CardSpec& card) {
  const fs::path p = out / (std::string(card.key) + ".json");
  if (!names_something(p)) return std::nullopt;
  const std::string hint = "regenerate it: sweep tables --card " + std::string(card.key);
  json d = json::parse(read_regular_file(p.string(), "", hint), nullptr, false);
  if (d.is_discarded() || !d.is_object() || d.value("tables_json_version", 0) != reports::kTablesJsonVersion)
    throw UserError(p.string(), 0, "tables_json_version", "not the data of a table this sweep writes", hint);
  try {
    reports::table_view(d);
  } catch (const json::exception& e) {
    throw UserError(p.string(), 0, "", std::string("not the data of a table this sweep writes (") + e.what() + ")",
                    hint);
  }
  return d;
}

// `--model` regenerates only those models' sections: the card's other sections (and catalogue
// rows) come from its data already in OUT, in the zoo's order, and none is ever dropped (an
// entry of a model the zoo no longer has stays, last).
json merged(const json& fresh, const json& previous, const std::vector<const models::ModelSpec*>& chosen) {
  auto is_chosen = [&](const std::string& model) {
    return std::any_of(chosen.begin(), chosen.end(), [&](const auto* m) { return m->name == model; });
  };
  json d = fresh;
  d["entries"] = json::array();
  for (const auto& m : models::zoo())
    for (const auto& e : (is_chosen(m.name) ? fresh : previous).at("entries"))
      if (e.at("model") == m.name) d["entries"].push_back(e);
  for (const auto& e : previous.at("entries"))
    if (!models::find_model(e.at("model").get<std::string>())) d["entries"].push_back(e);
  for (const auto& e : d["entries"])
    if (e.contains("measured") && !d.contains("measured_note") && previous.contains("measured_note"))
      d["measured_note"] = previous["measured_note"];
  if (previous.contains("catalogue")) {
    json rows = json::array();
    for (const auto& m : models::zoo())
      for (const auto& r : (is_chosen(m.name) && fresh.contains("catalogue") ? fresh : previous)
                               .at("catalogue").at("rows"))
        if (r.at("model") == m.name) rows.push_back(r);
    d["catalogue"] = fresh.contains("catalogue") ? fresh.at("catalogue") : previous.at("catalogue");
    d["catalogue"]["rows"] = rows;
  }
  return d;
}

std::vector<const CardSpec*> chosen_cards(const TablesOptions& o) {
  std::vector<const CardSpec*> chosen;
  if (o.cards.empty())
    for (const auto& c : cards()) chosen.push_back(&c);
  for (const auto& name : o.cards) {
    const CardSpec* c = find_card(name);
    if (!c) {
      const std::string near = nearest_card_key(name);
      throw UserError("", 0, "--card", unknown_card_message(name),
                      (near.empty() ? "" : "did you mean " + near + "? ") + "one of " + card_keys() +
                          " (`sweep gpus` lists them)");
    }
    chosen.push_back(c);
  }
  return chosen;
}

// The models of --model, by name or Hugging Face id (`sweep models` prints both); every model
// of the zoo but the -test ones without it. The catalogue's decoders have the catalogue's
// section; the others a section each per input.
struct ChosenModels {
  std::vector<const models::ModelSpec*> sections, catalogue;
};
ChosenModels chosen_models(const TablesOptions& o) {
  for (const auto& name : o.models) {
    const auto* m = models::find_model(name);
    if (!m || m->test_only)
      throw UserError("", 0, "--model", "unknown model '" + name + "'",
                      "`sweep models` lists them (the -test models have no table)");
  }
  ChosenModels chosen;
  for (const auto& m : models::zoo()) {
    const bool named = std::any_of(o.models.begin(), o.models.end(),
                                   [&](const std::string& n) { return models::find_model(n) == &m; });
    // The encoder-classifiers (whisper-*-cls) only when named: the whole Whisper is what people train.
    if (m.test_only || !(o.models.empty() ? m.family != "whisper-cls" : named)) continue;
    (m.catalogue ? chosen.catalogue : chosen.sections).push_back(&m);
  }
  return chosen;
}

}  // namespace

int run_tables(const TablesOptions& o) {
  const std::vector<const CardSpec*> chosen = chosen_cards(o);
  const ChosenModels models = chosen_models(o);
  // Every card's data in OUT is read (and checked) before the first fit: the page needs them
  // all, and a refusal after minutes of fits would waste them.
  std::map<std::string, json> data;
  for (const auto& c : cards())
    if (auto d = card_data_in(o.out, c)) data[std::string(c.key)] = std::move(*d);
  make_output_directory(o.out, "--out");
  std::size_t units = 0;  // [k/N]: each card's models and inputs
  for (const auto* spec : models.sections) units += inputs_of(*spec).size();
  units += models.catalogue.size();
  Progress progress(units * chosen.size(), o.quiet);
  for (const CardSpec* card : chosen) {
    const auto start = std::chrono::steady_clock::now();
    json d = collect(*card, o, models.sections, progress);
    if (!models.catalogue.empty()) d["catalogue"] = collect_catalogue(*card, o, models.catalogue, progress);
    const std::size_t inputs = d["entries"].size() + models.catalogue.size();
    const std::string key(card->key);
    if (!o.models.empty() && data.count(key)) {
      std::vector<const models::ModelSpec*> all = models.sections;
      all.insert(all.end(), models.catalogue.begin(), models.catalogue.end());
      d = merged(d, data.at(key), all);
    }
    write(fs::path(o.out) / (key + ".json"), d.dump(1) + "\n", "the table's data");
    write(fs::path(o.out) / (key + ".md"), reports::card_markdown(d), "the table");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[64];
    std::snprintf(line, sizeof line, "%zu inputs in %.1f s", inputs, s);
    progress.note("tables: " + key + ": " + line + " -> " + (fs::path(o.out) / (key + ".md")).string());
    data[key] = std::move(d);
  }
  // The page: every card whose data is in OUT, in the table's order.
  std::vector<json> all;
  for (const auto& c : cards())
    if (data.count(std::string(c.key))) all.push_back(data.at(std::string(c.key)));
  write(fs::path(o.out) / "index.html", reports::tables_page(all), "the page");
  return 0;
}

}  // namespace sweep
