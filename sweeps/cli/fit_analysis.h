// What the rows of a fit's results directory say: each technique's largest batch that fits
// and its first out of memory (the max-batch probes), and the pick, the fastest way to the
// effective batch. Reads rows only, through the one results reader; runs nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results/rows.h"
#include "sweeps/cli/fit.h"

namespace sweep {

// What the rows of OUT say about each technique: the probes of this model and input under
// this budget, accumulation 1, the last row of each point.
struct Analysis {
  std::vector<FitTechnique> techniques;
  std::map<std::string, std::vector<const reports::Row*>> ok_rows;  // technique key -> ok probes
  std::string device_name;
  int64_t budget_bytes = 0;
};

// The techniques `wanted`, each with what the probes of `model` under `budget` found.
Analysis analyse(const reports::Results& results, const std::string& model, int64_t budget,
                 const std::vector<FitTechnique>& wanted);

// The fastest way to the effective batch: among every fitting probe whose batch divides it,
// the highest measured tokens/s; ties go to the fewer techniques (listed order).
struct Pick {
  const FitTechnique* technique = nullptr;
  int64_t batch = 0, accumulation = 1;
  double tokens_per_s = 0, step_ms_cv = 0;
  double peak_reserved = 0;
};

// The pick, passing over those named in `refused` (pick_id: measured out of memory at their
// accumulation); nullopt when nothing fits.
std::optional<Pick> pick(const Analysis& a, std::optional<int64_t> effective,
                         const std::vector<std::string>& refused);
// The same on device emulated, where nothing is timed: ranked by memory. Among the same
// probes, the fewest changes from plain training (technique_count), then the largest
// micro-batch (the fewest accumulation steps), then the lowest peak reserved memory.
std::optional<Pick> pick_by_memory(const Analysis& a, std::optional<int64_t> effective,
                                   const std::vector<std::string>& refused);
// Changes from plain training (fp32, no checkpointing, AdamW, the cache on, no adapter, no
// offload, full weights): each costs throughput on a real card.
int technique_count(const FitTechnique& t);
std::string pick_id(const Pick& p);

// The row measured this technique (its precision, checkpointing, optimizer, use_cache,
// adapter, offload and weights).
bool same_technique(const reports::Row& r, const FitTechnique& t);
// The technique's axes as fit's JSON names them.
nlohmann::json technique_json(const FitTechnique& t);

}  // namespace sweep
