// What the rows of a fit's results directory say: each technique's largest batch that fits
// and its first out of memory (the max-batch probes), and the pick, the fastest way to the
// effective batch. Reads rows only, through the one results reader; runs nothing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/common/fit_rule.h"
#include "reports/common/trainer_args.h"
#include "reports/results/rows.h"
#include "sweeps/cli/fit.h"
#include "sweeps/worker/point.h"

namespace sweep {

// The key of a technique in Analysis::ok_rows: "bf16|none|adamw|1|none|none|full|hf" (Technique::key).
std::string technique_key(const FitTechnique& t);

// What the rows of OUT say about each technique: the probes of this fit's question (its
// searches), the last row of each point.
struct Analysis {
  std::vector<FitTechnique> techniques;
  std::map<std::string, std::vector<const reports::Row*>> ok_rows;  // technique key -> ok probes
  std::string device_name;
  int64_t budget_bytes = 0;
};

// Whether `row` measured `point` at the row's batch (search max_seq: at the row's seq): its
// point_id is the point's id at that batch (model, every input length, budget, card, technique, settings, suite version), and
// its device is the point's (which the id leaves out).
bool measures(const reports::Row& row, Point point, std::string_view search = "max_batch");

// A row that measured a point of `searches` (at any batch; max_seq: any seq) on another device, or nullptr. The
// id leaves the device out, so the runner would take such a row as that point's and measure
// nothing, while the analysis, reading only the question's device, would find nothing.
const reports::Row* measured_elsewhere(const reports::Results& results,
                                       const std::vector<Point>& searches,
                                       std::string_view search = "max_batch");

// The techniques `wanted`, each with what the probes of `searches` found (max_batch: the
// largest batch; max_seq: the longest seq): fit.yaml's combinations, one point each (its
// searched value is ignored). Rows of another question in the same directory (another budget,
// seq, card, device, technique, search) are not read.
Analysis analyse(const reports::Results& results, const std::vector<Point>& searches,
                 const std::vector<FitTechnique>& wanted, std::string_view search = "max_batch");

struct FitQuestion;
struct FitSearch;

// fit's fourth stage: this question's rows, read back from OUT, per technique.
struct FitRows {
  std::shared_ptr<const reports::Results> results;  // what `analysis` points into
  Analysis analysis;
  int probes = 0;       // max-batch probes of the question, all techniques
  int predictions = 0;  // emulated runs that seeded its searches (OUT/predictions.csv), not probes
  std::string probes_line;  // "34 probes for 17 techniques (2.0 each) ..."
};
FitRows analyse(const FitQuestion& q, const FitSearch& s, const std::vector<FitTechnique>& wanted);

// Why there is no answer when searches stopped on a crash or a timeout before finding a batch
// that fits: "3 of 22 searches stopped before finding a batch that fits (crash: ...)"; "" when
// every search answered. Such a search says nothing about memory: never "nothing fits".
std::string stopped_searches(const Analysis& a);

// The recommended way to the effective batch: the one pick (reports/common/pick.h) among the
// probes that fit (every ok probe: they ran under the cap) whose batch divides it, each at the
// accumulation that reaches it, a confirmation run's measurement replacing the probe's.
struct Pick {
  const FitTechnique* technique = nullptr;
  int64_t batch = 0, accumulation = 1;
  double tokens_per_s = 0, step_ms_cv = 0;
  double peak_reserved = 0;
  bool above_ceiling = false;  // nothing measured stayed under the recommended ceiling
  bool by_memory = false;      // ranked by memory (the CPU; nothing timed), not by speed
  // A micro-batch the search never probed (the largest that divides the effective batch under
  // the cap, or under the recommended ceiling): its
  // peak and throughput are those of the next probe above it until it is measured.
  bool unprobed = false;
  std::string why;             // why not simply the first by that ranking ("" when it is)
  int64_t seq = 0;  // --seq max: the longest seq, the pick's max_length (0: the question's)
};

// The pick as the user's training script sets it (reports/common/trainer_args.h): the setup a
// row of its technique measured (the model's family, LoRA's rank, alpha and targets), at the
// pick's micro-batch and accumulation; nullopt when the analysis holds no row of it.
std::optional<reports::TrainingSetup> training_setup(const Analysis& a, const Pick& p);

// What the pick is chosen under: the rule (its ceiling; the CPU's ranks by memory), the
// effective batch, whether the rows are predicted, those passed over (pick_id: measured out of
// memory at their accumulation) and those measured again at their accumulation (pick_id -> the
// pick as measured then).
struct PickQuestion {
  reports::FitRule rule;
  std::optional<int64_t> effective;
  bool predicted = false;
  bool bf16 = true;  // false: a card without bf16 tensor cores; bf16 and bf16-amp never picked
  std::vector<std::string> refused;
  // Per technique (technique_key), the smallest micro-batch that ran out of memory at its
  // accumulation: memory grows with the batch, so every micro-batch from it up is passed over
  // once gradients accumulate.
  std::map<std::string, int64_t> accumulation_oom;
  std::map<std::string, Pick> confirmed;
  // Only what was measured at its own batch and accumulation: the probes of accumulation 1 and
  // the confirmed picks (no unprobed micro-batch, no accumulation taken from a probe).
  bool measured_only = false;
};
// The pick; nullopt when nothing fits.
std::optional<Pick> pick(const Analysis& a, const PickQuestion& q);
// Changes from plain training (fp32, no checkpointing, AdamW, the cache on, no adapter, no
// offload, full weights; Technique::changes): each costs throughput on a real card.
int technique_count(const FitTechnique& t);
std::string pick_id(const Pick& p);


}  // namespace sweep
