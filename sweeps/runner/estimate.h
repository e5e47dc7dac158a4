// How long a run will take, from rows measured before: never a constant. `sweep run
// --dry-run` and `sweep fit` estimate through this one function. A row's wall time splits
// into the worker start (everything but the training steps: process, LibTorch, model build)
// and its steps (warm-up + steps x repetitions, at the row's median step time); a point is
// estimated as the median start plus its own step count at the median step time of the most
// similar rows measured: as measured at the point's batch, else per sample times its batch;
// per micro-batch (its accumulation multiplies it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results/rows.h"
#include "sweeps/worker/point.h"

namespace sweep {

// Probes one max-batch search takes on average (doubling, then a bisection steered by the
// peaks); the end-to-end search test measures 4 to 6 on the tiny models.
inline constexpr int kProbesPerSearch = 6;

// One point's estimate and what it rests on.
struct PointEstimate {
  double seconds = 0;  // start_s + (warm-up + steps x repetitions) x step time
  double start_s = 0;  // median worker start of the rows used
  double step_s = 0;   // median time per optimizer step at the point's accumulation
  int rows = 0;        // how many rows it comes from
  std::string basis;   // "same model, shape, precision and batch" | "same model, shape and
                       // precision" | "same model"
};

// The ok rows of earlier results that carry a wall time and a step time.
class WallHistory {
 public:
  // With `device` (and `host`), only rows measured there: a CPU row says nothing of a GPU's
  // time, nor one machine's of another's.
  void add(const reports::Results& results, std::optional<Device> device = std::nullopt,
           const std::string& host = "");
  // Whether a row of `model` was added.
  bool knows(const std::string& model) const;
  // The estimate from the most similar rows, or nullopt: nothing of this model measured.
  std::optional<PointEstimate> estimate(const Point& p) const;
  // Median worker start over every row added; nullopt without rows.
  std::optional<double> start_s() const;
  int rows() const { return static_cast<int>(samples_.size()); }
  const std::vector<std::string>& sources() const { return sources_; }

 private:
  struct Sample {
    std::string model;
    std::optional<Mode> mode;
    std::optional<Precision> precision;
    double seq = 0, target_seq = 0, audio_s = 0, batch = 0;
    double start_s = 0, micro_step_s = 0;  // step time per micro-batch
  };
  std::vector<Sample> samples_;
  std::vector<std::string> sources_;
};

// A point's combination of the other axes: its id at batch 0, or for a max_seq search at seq
// 0 (sweep.h combinations()).
std::string combination_key(const Point& p, std::string_view search = "");

// What a results file holds already (resume reuses it): the latest status of each point, by
// id and, for the searches, by combination and searched value (in the search's steps).
struct Recorded {
  std::map<std::string, Status> points;
  std::map<std::string, std::map<int64_t, Status>> searches;
  void add(const reports::Results& results);
};

// The estimate of a whole plan: each combination of the other axes (sweep.h combinations())
// runs its points, or with `search` ("max_batch" or "max_seq"; "" a grid) one search of about
// `probes_per_search` probes (a max-batch search in [its first batch, search_max_batch]) from
// its first point. What `recorded` holds costs
// nothing: its points are skipped on resume, and a search whose answer is on record (a fitting
// batch next to one out of memory, or the range's end) replays without a probe; one begun
// costs what it has left.
struct PlanEstimate {
  struct Unit {
    const Point* point = nullptr;  // the point, or the search's first point
    int runs = 1;                  // 1, or the probes a search has left
    bool recorded = false;         // nothing left to run
    std::optional<PointEstimate> each;  // per run; nullopt: never measured here
  };
  std::vector<Unit> units;
  double total_s = 0;   // over the units with an estimate
  int estimated = 0, recorded = 0, unknown = 0;
  std::optional<double> start_s;  // the history's median worker start
  int rows = 0;                   // rows the estimate comes from
  std::vector<std::string> sources;

  // "about 3 min 10 s for 6 points (worker start 2.1 s, from 12 rows of results.csv); ..."
  std::string summary(const std::string& unit_name) const;
  // The runs left: points, or the probes the searches have left.
  int runs_left() const;
  // Before a search's first probe (fit): "about 8 probes to run (2 a search where the
  // prediction is exact), 2 of the 6 searches already answered in PATH (reused); about 1 min
  // 10 s for those estimated (...)", or "nothing to run: ...".
  std::string search_summary(const std::string& results_path, bool seeded) const;
};

PlanEstimate estimate_plan(const std::vector<std::vector<Point>>& combinations, std::string_view search,
                           const WallHistory& history, const Recorded& recorded,
                           int64_t search_max_batch = 0, int probes_per_search = kProbesPerSearch);

// "45 s", "3 min 10 s", "2 h 05 min"
std::string duration_text(double seconds);

// What --dry-run prints: the points (or, for a search, one per combination searched: the
// estimate's units) and the estimate. `config_path`, `device` and `out` are the run's.
struct DryRun {
  std::string config_path, device, out;
  std::string predicted;  // device emulated: "predicted by emulation of RTX 3060, not measured"
  bool search = false;
  int64_t search_max_batch = 0;
  PlanEstimate estimate;

  nlohmann::json json() const;
  std::string text() const;
};

}  // namespace sweep
