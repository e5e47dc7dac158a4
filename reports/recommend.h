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

#include "reports/gpus.h"
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
  double margin = 0.1;                     // fraction of memory kept free
  std::optional<int64_t> effective_batch;  // micro-batch x accumulation to reach
  std::optional<double> context_gib;       // overrides the measured/default allowance
};

// The card recommended for and its budget.
struct Target {
  std::string name;              // "RTX 3060", "12 GiB", or the measuring device's name
  const GpuSpec* gpu = nullptr;  // its table entry, when known
  int64_t memory_bytes = 0;
  bool memory_as_sold = false;  // from the GPU table's capacity, not what CUDA reports
  double margin = 0;
  int64_t context_bytes = 0;
  std::string context_source;  // how context_bytes was chosen, for the report
  int64_t usable_bytes = 0;    // floor(memory x (1 - margin)) - context
  bool cuda = true;
};

// One configuration and what was measured for it.
struct Choice {
  // An older file's empty cell reads as train, fp32, no checkpointing; an empty optimizer
  // stays unknown.
  Mode mode = Mode::kTrain;
  Precision precision = Precision::kFp32;
  Checkpointing checkpointing = Checkpointing::kNone;
  std::optional<OptimizerKind> optimizer;
  std::string alloc_conf;
  std::string adapter;    // "" (full fine-tuning) or "lora r8": LoRA trains far fewer weights
  bool use_cache = true;  // false: the model was called with use_cache=False
  Offload offload = Offload::kNone;  // kOptimizer: AdamW's state on the host (ZeRO-Offload)
  int64_t batch = 0, accumulation = 1;
  double tokens_per_s = 0;
  double step_ms_cv = 0;  // how much the step time varied between repetitions
  int64_t peak_reserved_bytes = 0;
  Status status = Status::kOk;  // of the row (ok unless an eval check found otherwise)
  std::string measured_on;  // device_name of the row
  // Device emulated: predicted, not measured. Memory only: no throughput, so predicted
  // configurations are ranked by memory (ranks_by_memory in recommend.cc).
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

  // Changes from the plain configuration (fp32, no checkpointing, accumulation 1, AdamW,
  // default allocator): ties go to the simpler one.
  int techniques() const;
  // "bf16-amp, block, batch 8 x 4, adamw"
  std::string label() const;
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
  std::optional<Choice> fastest;                // fastest train configuration that fits
  std::vector<Choice> max_batch;                // largest fitting micro-batch per precision
  std::optional<Choice> effective;              // cheapest way to the effective batch
  std::optional<Choice> eval_max_batch;         // largest eval batch that fits
  std::optional<Choice> eval_counterpart;       // eval row matching `fastest`
  std::string eval_check;  // fits | does not fit | <status> | not measured; "" = no eval rows
  std::vector<ClosestStep> steps;  // filled when nothing fits
  int closest_step = -1;           // index into steps of the first that came closest
  int train_rows = 0, train_ok = 0;
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
  int64_t memory_bytes = 0, usable_bytes = 0;
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
  std::vector<GroupRecommendation> groups;
  std::vector<GpuColumn> columns;
  int64_t column_context_bytes = 0;  // the target's allowance, or CUDA's default
  // [group][column]: the fastest fit, only where the group's rows reach that card's limit
  // (covered); elsewhere empty and printed "not measured": every measured row fits such a
  // card, so what is fastest on it was never measured.
  std::vector<std::vector<std::optional<Choice>>> cells;
  std::vector<std::vector<bool>> covered;
};

// The one rule for "fits", used by `recommend`, `fit` and the budget `fit` searches under:
// a configuration fits a card when its peak reserved memory is at most
// floor(memory x (1 - margin)) - context, memory being what CUDA reports for the card.
int64_t usable_bytes(int64_t memory, double margin, int64_t context);

// The card recommended (or reported) for, its context allowance and usable memory, by the
// rule above; `sweep report --gpu/--memory-gib` draws the same line. Throws UserError for an
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
// --memory-gib and --context-gib (GiB of a card; NaN, 1e308 and 9e9 used to pass and give a
// negative usable memory), --margin (a fraction kept free): the same checks on recommend,
// report and fit.
extern const CLI::Validator kMemoryGib;
extern const CLI::Validator kMargin;

// Adds the card options shared by `recommend` and `report` (--gpu, --memory-gib, --margin,
// --context-gib) to cmd; call the returned function in the callback to copy the optional
// ones into options.
std::function<void()> add_card_options(CLI::App* cmd, RecommendOptions& options);

// `sweep recommend RESULTS_DIR... [--gpu NAME | --memory-gib N] [--margin F]
//  [--effective-batch N] [--context-gib X] [--out DIR]`
void register_recommend_command(CLI::App& app, int& exit_code);

}  // namespace sweep::reports
