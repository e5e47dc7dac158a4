// Per-GPU recommendations from measured rows: which configurations fit a card's memory and
// which of those is fastest. Memory transfers between cards (the caching allocator's peak
// is a property of the configuration), throughput does not: a recommendation for a card
// other than the one that measured says so and ranks by the throughput measured there.
// recommend() is the analysis (tests call it); the printers and the CLI sit on top of it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "reports/common/fit_rule.h"
#include "reports/common/gpus.h"
#include "reports/common/trainer_args.h"
#include "reports/results/technique.h"
#include "reports/results/rows.h"

namespace CLI {
class App;
class Validator;
}

namespace sweep::reports {

// The most memory a card given with --memory-gib or --context-gib may have (1 PiB).
inline constexpr double kMaxMemoryGib = 1024.0 * 1024.0;
// Context allowance when none was measured or given (reports/results/cards.h).
using ::sweep::kDefaultCudaContextBytes;

struct RecommendOptions {
  std::string gpu;                         // --gpu NAME, looked up in gpus(); "" = none
  std::optional<double> memory_gib;        // --memory-gib N
  double margin = kDefaultMargin;          // fraction of memory kept free (fit_rule.h)
  std::optional<int64_t> effective_batch;  // micro-batch x accumulation to reach
  std::optional<double> context_gib;       // overrides the measured/default allowance
  // The cap the rows ran under (a budget enforced while measuring, memory - context), when
  // neither --gpu nor --memory-gib is given: `report` passes a group's budget. Without it a
  // file whose rows all ran under one emulated budget is read the same way.
  std::optional<int64_t> budget_bytes;
};

// The card recommended for and its two figures by the one rule (fit_rule.h): cap_bytes()
// for "fits", ceiling_bytes() for "recommended".
struct Target : FitRule {
  std::string name;              // "RTX 3060", "12 GiB", or the measuring device's name
  const GpuSpec* gpu = nullptr;  // its table entry, when known
  // No --gpu or --memory-gib, and every row ran under one emulated budget: the budget is the
  // cap (it was memory - context when the rows were measured).
  bool from_budget = false;
};

// One configuration and what was measured for it; the technique's flags as the row has them
// (TechniqueFlags: the model's cache).
struct Choice : TechniqueFlags {
  // An older file's empty cell reads as train, fp32, no checkpointing; an empty optimizer
  // stays unknown.
  Mode mode = Mode::kTrain;
  Precision precision = Precision::kFp32;
  Checkpointing checkpointing = Checkpointing::kNone;
  std::optional<OptimizerKind> optimizer;
  std::string alloc_conf;
  std::string adapter;    // "" (full fine-tuning) or "lora r8": LoRA trains far fewer weights
  Offload offload = Offload::kNone;  // kOptimizer: AdamW's state on the host (ZeRO-Offload)
  int64_t batch = 0, accumulation = 1;
  double tokens_per_s = 0;
  double step_ms_cv = 0;  // how much the step time varied between repetitions
  int64_t peak_reserved_bytes = 0;
  Status status = Status::kOk;  // of the row (ok unless an eval check found otherwise)
  std::string measured_on;  // device_name of the row
  // Device emulated: predicted, not measured. Ranked by predicted tokens/s where the lead is
  // larger than the step-time model's error, else by memory (reports/common/pick.cc).
  bool predicted = false;
  std::string where;        // "results.csv:12"
  bool inferred = false;    // accumulation applied to the accumulation-1 row's measurement
  bool on_target = true;    // measured on the card recommended for
  // For a largest batch: whether a larger batch of the same configuration was measured not
  // to fit (ran out of memory, or peaked over the usable memory). When it was not, the
  // batch is only the largest *measured*, and predicted_batch is where the line through the
  // configuration's two largest measured peaks meets the usable memory (when that is larger),
  // the max-batch search's own extrapolation (reports::batch_at_budget).
  bool bounded = true;
  std::optional<int64_t> predicted_batch;
  // For a largest batch: the smallest larger batch of the configuration measured not to fit
  // (its first OOM, or a peak over the cap); empty when unbounded.
  std::optional<int64_t> first_over;

  // Every technique axis's and LoRA setting's cell, as the row has them (schema::kAxes): what
  // a configuration is (same_configuration) and how many changes it makes (techniques()).
  TechniqueCells cells;
  // The mode and every cell but the accumulation, computed once when read (same_configuration
  // compares it in loops over every row).
  std::string configuration;
  // What the row ran, in the fields Trainer arguments are made of (the family, LoRA's rank,
  // alpha, dropout and targets); batch and accumulation are this choice's own.
  TrainingSetup setup;
  // The choice as the user's training script sets it: TrainingArguments (and LoraConfig,
  // BitsAndBytesConfig, the DeepSpeed config of an offload), at this batch and accumulation.
  TrainerArgs trainer_args() const;

  // Changes from the plain configuration (fp32, no checkpointing, accumulation 1, AdamW,
  // default allocator): ties go to the simpler one.
  int techniques() const;
  // "bf16-amp, block, batch 8 x 4, adamw"
  std::string label() const;
  // The label less the batch: "bf16-amp, block checkpointing, adamw".
  std::string technique() const;
  bool noisy() const;  // step_ms_cv above kNoisyStepCv: its rank by throughput is unreliable
};

// One step of the "nothing fits" walk: the lowest peak the measured rows reach using the
// changes up to and including this one.
struct ClosestStep {
  std::string change;  // "as measured", "+ mixed precision", ...
  std::optional<Choice> best;
};

// The recommendation for one model at one sequence setting.
struct GroupRecommendation {
  std::string model, seq, target_seq, audio_s;  // as in the rows; empty = not applicable
  // The recommendation: the fastest train configuration under the recommended ceiling (the
  // steadier runner-up where noise decides, fit_rule.h; by memory on the CPU and for
  // predictions); when nothing is under the ceiling, the fastest that fits the cap
  // (above_ceiling). With an effective batch asked, the way to it (`effective`) when there is
  // one, as fit's answer is.
  std::optional<Choice> fastest;
  bool above_ceiling = false;
  std::string headline_note;  // why the headline is not simply the fastest, "" when it is
  // Largest micro-batch that fits the cap, per technique (every axis but batch and
  // accumulation), in the report's technique order.
  std::vector<Choice> max_batch;
  std::optional<Choice> effective;              // cheapest way to the effective batch
  std::optional<Choice> eval_max_batch;         // largest eval batch that fits
  std::optional<Choice> eval_counterpart;       // eval row matching `fastest`
  std::string eval_check;  // fits | does not fit | <status> | not measured; "" = no eval rows
  std::vector<ClosestStep> steps;  // filled when nothing fits
  int closest_step = -1;           // index into steps of the first that came closest
  int train_rows = 0, train_ok = 0;
  // Train rows that neither ran ok nor ran out of memory (crash, timeout, ...), and the first
  // one's status and message: a group with no pick and such rows has no answer, never "nothing
  // fits" (a search stopped by a crash says nothing of memory).
  int train_failed = 0;
  std::string failure;  // "crash: whisper needs audio_s > 0 (results.csv:3)"
  // What the summary says instead of a pick: "" when there is one; else why there is none.
  std::string no_pick() const;
  // Whether some train row was measured not to fit the target: without one, every measured
  // configuration fits and a larger batch, unmeasured, may fit and be faster.
  bool limit_reached = false;
  std::string measure_command;  // the `sweep fit` that measures the limit on the target

  std::string label() const;  // "gpt2 (seq 512)"
};

// A column of the cross-GPU table: the table's cards of one memory size.
struct GpuColumn {
  std::string name;  // "A100 80GB / H100 PCIe / H100 80GB SXM"
  std::vector<const GpuSpec*> gpus;
  FitRule rule;  // its memory, the target's margin and context
};

struct Recommendation {
  Target target;
  std::optional<int64_t> effective_batch;
  std::vector<std::string> measured_on;  // distinct device names of the rows
  bool other_card = false;               // some rows used were measured on another card
  bool has_eval = false;
  std::vector<std::string> notes;  // warnings with advice
  std::vector<std::string> predicted_cards;  // the cards emulated rows predict ("RTX 3060")
  std::string predicted_line() const;  // predicted_by(those cards); "" when none
  // Where the rows of a file with several devices are answered one device at a time: the
  // part's label ("measured on AMD EPYC"), said in the title; "" for rows of one kind.
  std::string part_label;
  std::vector<GroupRecommendation> groups;
  std::vector<GpuColumn> columns;
  int64_t column_context_bytes = 0;  // the target's allowance, or CUDA's default
  // [group][column]: the recommendation for that card, only where the group's rows reach its
  // cap (covered); elsewhere empty, and the column is left out of the table when no group
  // reaches it (every measured row fits such a card, so what is fastest on it was never
  // measured: said once under the table).
  std::vector<std::vector<std::optional<Choice>>> cells;
  std::vector<std::vector<bool>> covered;
};

// The card recommended (or reported) for, its context allowance, cap and recommended ceiling
// by the one rule (fit_rule.h); `sweep report` draws the same lines. Throws UserError for an
// unknown --gpu, results that do not say which card, or no usable memory.
Target card_target(const std::vector<Results>& results, const RecommendOptions& options);

// The analysis. Throws UserError for an unknown --gpu or results that do not say
// which card to recommend for, UserError for a malformed cell.
Recommendation recommend(const std::vector<Results>& results, const RecommendOptions& options);

// Printers over one field list (recommend_report.cc).
std::string recommendations_markdown(const Recommendation& r);
std::string recommendations_csv(const Recommendation& r);
// `recommend --json` (recommend_json.cc): every field above, a Choice through to_json().
nlohmann::json recommendations_json(const Recommendation& r);
void to_json(nlohmann::json& j, const Choice& c);

// The check of a floating flag: a finite number from min to max; the message names the text
// as typed and `what` ("'nan' is not a number of GiB from 0 to 1048576"). CLI11's Range and
// PositiveNumber let NaN through (every comparison with it is false).
CLI::Validator finite_number(double min, double max, const std::string& what);
// The same for a number above 0 (0 itself refused), up to `max`.
CLI::Validator positive_number(double max, const std::string& what);
// A whole number from `min` to `max`, read exactly: CLI::PositiveNumber printed its bound as
// 309 digits, and CLI11's conversion took 2^63 as 9223372036854775807.
CLI::Validator whole_number(int64_t min, int64_t max, const std::string& what);
// --memory-gib and --context-gib (GiB of a card; NaN, 1e308 and 9e9 used to pass and give a
// negative usable memory), --margin (a fraction kept free): the same checks on recommend,
// report and fit.
extern const CLI::Validator kMemoryGib;
extern const CLI::Validator kMargin;

// Adds the card options shared by `recommend` and `report` (--gpu, --memory-gib, --margin,
// --context-gib) to cmd; call the returned function in the callback to copy the optional
// ones into options.
std::function<void()> add_card_options(CLI::App* cmd, RecommendOptions& options);

// Where `report` and `recommend` write when --out is not given: beside the results file, unless
// it sits in a git work tree outside that tree's results/ folder (docs/tables/
// rtx3060-results.csv): then <tree>/results/<name>/, name being the file's stem or, for a
// results.csv, its directory's name, so that nothing is written among the sources.
std::string default_out_dir(const std::string& results_path);

// `sweep recommend RESULTS_DIR... [--gpu NAME | --memory-gib N] [--margin F]
//  [--effective-batch N] [--context-gib X] [--out DIR]`
void register_recommend_command(CLI::App& app, int& exit_code);

}  // namespace sweep::reports
