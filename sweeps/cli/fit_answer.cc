// fit's answer; see fit_answer.h.
#include "sweeps/cli/fit_answer.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>

#include "models/zoo.h"
#include "reports/common/fidelity.h"
#include "reports/common/trainer_args.h"
#include "reports/results/rows.h"
#include "reports/results/stats.h"
#include "sweeps/runner/search.h"

namespace sweep {
namespace {

// Bumped when a key of the JSON changes meaning or goes away (new keys do not bump it).
constexpr int kFitJsonVersion = 2;  // 2: card.usable_bytes became cap_bytes and ceiling_bytes (the one rule)

nlohmann::json or_null(bool known, double v) { return known ? nlohmann::json(v) : nlohmann::json(nullptr); }

// A predicted largest batch whose peak sits within the emulator's measured error of the cap.
bool borderline(const FitQuestion& q, const FitTechnique& t) {
  if (!q.emulated() || !t.largest) return false;
  const auto e = reports::measured_error(q.spec->family);
  return !e || e->borderline(t.peak_reserved, static_cast<double>(q.cap()));
}

// A technique's search as JSON: its fields, its probes, the value searched (`largest` and
// `first_oom` named as the caller says: largest_batch and first_oom, or longest_seq and
// first_oom_seq) and, where one fit, the peak and speed there; a stopped search's status.
nlohmann::json searched_answer(const FitQuestion& q, const FitTechnique& t, int64_t budget,
                               const char* largest, const char* first_oom) {
  const bool emulated = q.emulated();
  nlohmann::json e = t.json();
  e["probes"] = t.probes;
  e["limit_reached"] = t.first_oom.has_value();
  e[largest] = t.largest ? nlohmann::json(*t.largest) : nlohmann::json(nullptr);
  e[first_oom] = t.first_oom ? nlohmann::json(*t.first_oom) : nlohmann::json(nullptr);
  if (t.largest) {
    e["peak_reserved_bytes"] = t.peak_reserved;
    e["peak_allocated_bytes"] = t.peak_allocated;
    e["headroom_bytes"] = static_cast<double>(budget) - t.peak_reserved;
    e["tokens_per_s"] = or_null(!emulated, t.tokens_per_s);
    e["step_ms_cv"] = or_null(!emulated, t.step_ms_cv);
    // The emulated step's predicted speed (reports/results/cost_rules.h), never a measurement.
    if (emulated) e["predicted_tokens_per_s"] = or_null(t.tokens_per_s > 0, t.tokens_per_s);
  }
  if (!t.stopped.empty()) e["stopped"] = t.stopped;
  if (!t.stopped_message.empty()) e["stopped_message"] = t.stopped_message;
  if (emulated) e["borderline"] = borderline(q, t);
  return e;
}

nlohmann::json technique_answer(const FitQuestion& q, const FitTechnique& t, int64_t budget) {
  return searched_answer(q, t, budget, "largest_batch", "first_oom");
}

// --seq max: a technique's longest seq at the question's batch, as `longest_context` lists it.
nlohmann::json longest_answer(const FitQuestion& q, const FitTechnique& t, int64_t budget) {
  nlohmann::json e = searched_answer(q, t, budget, "longest_seq", "first_oom_seq");
  e["batch"] = q.o.batch.value_or(1);
  return e;
}

// The pick in the words of the user's training script; nullopt when no row of it was read.
std::optional<reports::TrainerArgs> pick_trainer_args(const FitRows& rows, const Pick& c) {
  const auto setup = training_setup(rows.analysis, c);
  if (!setup) return std::nullopt;
  return reports::trainer_args(*setup);
}

nlohmann::json recommendation_json(const FitQuestion& q, const FitRows& rows, const FitPick& pick) {
  if (!pick.choice) return nullptr;
  const Pick& c = *pick.choice;
  const bool emulated = q.emulated();
  nlohmann::json j = c.technique->json();
  j.update({{"batch", c.batch},
            {"accumulation", c.accumulation},
            {"peak_reserved_bytes", c.peak_reserved},
            {"tokens_per_s", or_null(!emulated, c.tokens_per_s)},
            {"step_ms_cv", or_null(!emulated, c.step_ms_cv)},
            {"noisy", !emulated && c.step_ms_cv > reports::kNoisyStepCv},
            {"predicted", emulated},
            {"above_ceiling", c.above_ceiling},
            {"reason", pick.reason},
            {"precision_words", reports::precision_words(c.technique->precision)}});
  if (c.seq > 0) j["longest_seq"] = c.seq;
  // The same configuration as Hugging Face TrainingArguments (and LoraConfig, BitsAndBytesConfig,
  // the DeepSpeed config of an offload), what is no Trainer flag said in model_code and notes.
  if (const auto args = pick_trainer_args(rows, c)) j["trainer_args"] = reports::trainer_args_json(*args);
  return j;
}

std::string technique_row(const FitQuestion& q, const FitTechnique& t, int64_t budget) {
  const bool emulated = q.emulated();
  std::string largest = t.largest ? std::to_string(*t.largest) : "none";
  if (borderline(q, t)) largest += " (borderline)";
  if (t.largest && !t.first_oom) largest += " (limit not reached)";
  if (!t.stopped.empty()) largest += " (" + t.stopped + ")";
  const std::string peak = t.largest ? reports::format_bytes(t.peak_reserved) : "";
  const std::string headroom =
      t.largest ? reports::format_bytes(static_cast<double>(budget) - t.peak_reserved) : "";
  const std::string speed = !t.largest ? ""
                            : emulated ? (t.tokens_per_s > 0
                                              ? std::to_string(static_cast<int64_t>(t.tokens_per_s)) + " predicted"
                                              : "not predicted")
                                       : std::to_string(static_cast<int64_t>(t.tokens_per_s)) +
                                             " ±" + std::to_string(std::lround(t.step_ms_cv * 100)) + "%";
  return "| " + t.label() + " | " + largest + " | " + peak + " | " + headroom + " | " + speed +
         " | " + std::to_string(t.probes) + " |\n";
}

// --seq max: a technique's row of the answer's table.
std::string longest_row(const FitQuestion& q, const FitTechnique& t) {
  std::string longest = t.largest ? std::to_string(*t.largest) : "none";
  if (borderline(q, t)) longest += " (borderline)";
  if (t.largest && !t.first_oom) longest += " (the model's longest)";
  if (!t.stopped.empty()) longest += " (" + t.stopped + ")";
  const std::string speed = !t.largest || t.tokens_per_s <= 0 ? ""
                            : std::to_string(static_cast<int64_t>(t.tokens_per_s)) +
                                  (q.emulated() ? " predicted" : "");
  return "| " + t.label() + " | " + longest + " | " +
         (t.largest ? reports::format_bytes(t.peak_reserved) : "") + " | " +
         (t.first_oom ? std::to_string(*t.first_oom) : "") + " | " + speed + " | " +
         std::to_string(t.probes) + " |\n";
}

// The pick's TrainingArguments, indented under the recommendation, to paste into a script.
void print_trainer_args(const FitRows& rows, const Pick& c) {
  const auto args = pick_trainer_args(rows, c);
  if (!args) return;
  std::printf("\nIn your training script (Hugging Face transformers%s):\n",
              args->config_class == "SFTConfig" ? ", TRL" : "");
  std::stringstream text(reports::trainer_args_text(*args));
  for (std::string line; std::getline(text, line);) std::printf("    %s\n", line.c_str());
  // Trainer takes the length the data has: the tokenizer's truncation sets it.
  if (c.seq > 0 && args->config_class != "SFTConfig")
    std::printf("    # each sample at most %lld tokens: tokenizer(..., truncation=True, max_length=%lld)\n",
                static_cast<long long>(c.seq), static_cast<long long>(c.seq));
}

void print_recommendation(const FitQuestion& q, const FitRows& rows, const FitPick& pick) {
  if (!pick.choice && !pick.no_answer.empty()) {
    std::printf("\nNo answer: %s. Fix what stopped them and run the same command again: every "
                "probe already measured is reused, and the crashed or timed-out ones run again.\n",
                pick.no_answer.c_str());
    return;
  }
  if (!pick.choice) {
    const auto& ts = rows.analysis.techniques;
    const bool some_fit = std::any_of(ts.begin(), ts.end(), [](const auto& t) { return t.largest.has_value(); });
    const std::string predicted = q.emulated() ? " (" + q.predicted + ")" : "";
    if (some_fit && q.o.effective_batch)
      std::printf("\nNothing reaches an effective batch of %lld on %s%s: every micro-batch that divides it "
                  "ran out of memory once gradients accumulated, or does not fit. The table above gives "
                  "each technique's largest batch alone; ask for a smaller --effective-batch.\n",
                  static_cast<long long>(*q.o.effective_batch), q.card.name.c_str(), predicted.c_str());
    else
      std::printf("\nNothing fits %s: not even batch 1 of any technique%s.\n", q.card.name.c_str(),
                  predicted.c_str());
    return;
  }
  const Pick& c = *pick.choice;
  const std::string accumulation =
      c.accumulation > 1 ? " x accumulation " + std::to_string(c.accumulation) : "";
  if (c.seq > 0)
    std::printf("\nLongest context%s: %s, seq %lld at batch %lld: peak %s, recommended ceiling %s, %s.\n",
                q.emulated() ? (" (" + q.predicted + ")").c_str() : "", c.technique->label().c_str(),
                static_cast<long long>(c.seq), static_cast<long long>(c.batch),
                reports::format_bytes(c.peak_reserved).c_str(),
                reports::format_bytes(static_cast<double>(q.rule.ceiling_bytes())).c_str(),
                pick.reason.c_str());
  else if (q.emulated())
    std::printf("\nRecommended (%s): %s, batch %lld%s: peak %s, recommended ceiling %s, %s.\n",
                q.predicted.c_str(), c.technique->label().c_str(), static_cast<long long>(c.batch),
                accumulation.c_str(), reports::format_bytes(c.peak_reserved).c_str(),
                reports::format_bytes(static_cast<double>(q.rule.ceiling_bytes())).c_str(),
                pick.reason.c_str());
  else
    std::printf("\nRecommended: %s, batch %lld%s: %lld tokens/s, %s.\n", c.technique->label().c_str(),
                static_cast<long long>(c.batch), accumulation.c_str(),
                static_cast<long long>(c.tokens_per_s), pick.reason.c_str());
  std::printf("Precision: %s.\n", reports::precision_words(c.technique->precision).c_str());
  print_trainer_args(rows, c);
}

}  // namespace

nlohmann::json answer_json(const FitQuestion& q, const FitSearch& s, const FitRows& rows,
                           const FitPick& pick) {
  const Analysis& a = rows.analysis;
  const bool emulated = q.emulated();
  nlohmann::json j;
  j["fit_json_version"] = kFitJsonVersion;
  j["model"] = q.o.model;
  j["length"] = length_words(*q.spec, q.o);  // what the headline names
  if (q.o.seq) j["seq"] = *q.o.seq;
  if (q.o.target_seq) j["target_seq"] = *q.o.target_seq;
  if (q.o.audio_s) j["audio_s"] = *q.o.audio_s;
  j["device"] = to_string(q.device);
  j["measured_on"] = a.device_name.empty() ? to_string(q.device) : a.device_name;
  j["cpu_measured"] = q.cpu();
  j["predicted"] = emulated;  // device emulated: memory predicted, nothing measured or timed
  if (emulated) j["predicted_by"] = q.predicted;
  j["card"] = {{"name", q.card.name}, {"memory_bytes", q.card.memory_bytes}, {"margin", q.o.margin},
               {"context_bytes", q.rule.context_bytes}, {"context_source", q.rule.context_source},
               {"cap_bytes", q.rule.cap_bytes()}, {"ceiling_bytes", q.rule.ceiling_bytes()},
               {"budget_bytes", a.budget_bytes}};
  if (q.o.effective_batch) j["effective_batch"] = *q.o.effective_batch;
  j["results"] = s.results.string();
  if (q.o.seq_max) {  // the longest seq per technique at one batch
    j["search"] = "max_seq";
    j["batch"] = q.o.batch.value_or(1);
    j["seq_step"] = kSeqStep;
    const int64_t limit = models::longest_context(*q.spec);  // the search's end
    j["seq_limit"] = limit > 0 ? nlohmann::json(limit) : nlohmann::json(nullptr);
    j["longest_context"] = nlohmann::json::array();
    for (const auto& t : a.techniques) j["longest_context"].push_back(longest_answer(q, t, a.budget_bytes));
  } else {
    j["techniques"] = nlohmann::json::array();
    for (const auto& t : a.techniques) j["techniques"].push_back(technique_answer(q, t, a.budget_bytes));
  }
  if (emulated) {
    const auto e = reports::measured_error(q.spec->family);
    j["measured_error"] = {{"family", q.spec->family},
                           {"text", reports::measured_error_line(q.spec->family)}};
    if (e) j["measured_error"].update({{"low", e->low}, {"high", e->high}, {"rows", e->rows}});
  }
  j["probes"] = rows.probes;
  j["probes_per_technique"] =
      a.techniques.empty() ? 0.0 : static_cast<double>(rows.probes) / a.techniques.size();
  j["predictions"] = rows.predictions;  // emulated runs that seeded the searches, not probes
  j["probes_text"] = rows.probes_line;
  j["recommendation"] = recommendation_json(q, rows, pick);
  if (!pick.no_answer.empty()) j["no_answer"] = pick.no_answer;
  return j;
}

void print_answer(const FitQuestion& q, const FitPlan& p, const FitSearch& s, const FitRows& rows,
                  const FitPick& pick) {
  const Analysis& a = rows.analysis;
  std::printf(
      "%s, %s, on %s. The rule, %s.%s\n\n", q.o.model.c_str(), length_words(*q.spec, q.o).c_str(),
      q.card.name.c_str(),
      q.rule.derivation(q.card.name).c_str(),
      q.cpu() ? "\nMeasured on the CPU: memory as PyTorch would allocate it, enforced by the "
                "tracking allocator; the throughput is the CPU's, not a GPU's."
      : q.emulated() ? ("\nPredicted by emulation of " + q.card.name +
                        ", not measured: memory as CUDA's caching allocator would hold it on "
                        "that card; tokens/s predicted from the card's datasheet by the step-time "
                        "model (docs/fidelity.md, \"Step time\"), nothing computed.")
                           .c_str()
                     : "");
  if (q.o.seq_max) {
    std::printf("The longest seq each technique fits at batch %lld (searched in steps of %lld "
                "tokens, to within 1%%):\n\n"
                "| technique | longest seq | peak | first seq out of memory | tokens/s | probes |\n"
                "| --- | ---: | ---: | ---: | ---: | ---: |\n",
                static_cast<long long>(q.o.batch.value_or(1)), static_cast<long long>(kSeqStep));
    for (const auto& t : a.techniques) std::fputs(longest_row(q, t).c_str(), stdout);
  } else {
    std::printf("| technique | largest batch | peak | headroom | tokens/s ±cv | probes |\n"
                "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (const auto& t : a.techniques)
      std::fputs(technique_row(q, t, a.budget_bytes).c_str(), stdout);
  }
  if (q.emulated()) std::printf("\n%s\n", reports::measured_error_line(q.spec->family).c_str());
  std::printf("\nProbes: %s.\n", rows.probes_line.c_str());
  print_recommendation(q, rows, pick);
  const std::string card_arg =
      q.o.gpu.empty() ? "--memory-gib " + number_text(*q.o.memory_gib) : "--gpu " + q.o.gpu;
  std::printf("\nRows: %s (sweep report %s; sweep recommend %s %s)\n", s.results.c_str(),
              p.out.c_str(), p.out.c_str(), card_arg.c_str());
}

}  // namespace sweep
