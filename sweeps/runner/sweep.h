// `sweep run`: config -> points -> isolated workers -> rows appended to results.csv.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sweeps/runner/budget.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "sweeps/worker/point.h"

namespace sweep {

// The version of `sweep run --json`'s object (the closing summary and the dry run's), bumped
// when a key changes meaning or goes away (new keys do not bump it; keys: README).
inline constexpr int kRunJsonVersion = 1;

// `sweep run --slurm ...`: submit the sweep as a Slurm job array (sweeps/runner/slurm.h).
struct SlurmOptions {
  bool submit = false;
  std::string partition, gres, time, account;
  int max_parallel = 0;  // the array's %N; 0 = no limit
  std::vector<std::string> sbatch_args;
  int task = -1;  // >= 0: run array task `task` of OUT/slurm/plan.json (internal)
};

struct RunOptions {
  std::string config;
  // `key=value` arguments after the config: any config key, dotted into mappings
  // (`grid.batch=[1,2]`, `models=[gpt2]`, `steps=5`), the value in YAML. The config with them
  // applied is checked as a config file is (an error names that file's line) and a run keeps
  // it as OUT/configs/<hash>.yaml.
  std::vector<std::string> overrides;
  std::string out;              // overrides the config's `out`
  std::string device = "auto";  // overrides the config's device unless "auto"... see run.cc
  bool device_given = false;
  bool dry_run = false;
  bool quiet = false;
  bool json = false;  // the summary (or the dry run) as one JSON object on stdout
  // Results whose rows the dry run's estimate also reads (beside those of the output).
  std::vector<std::string> estimate_from;
  bool force = false;  // re-run points already recorded
  std::string search;  // "max-batch" | "max-seq" | "none" overrides the config's `search`; "" keeps it
  std::string gpus;    // "0,1": one worker per GPU at a time, points spread over them
  std::size_t max_points = 10000;  // a larger grid is refused before it is expanded
  bool snapshot = false;  // CUDA allocator history per point: OUT/snapshots/<point_id>.pickle
  // Fork each point's worker from a pre-loaded one (sweeps/runner/zygote.h) instead of
  // exec'ing `sweep worker`: the same isolation without loading LibTorch per point.
  bool zygote = true;
  // Seed each max-batch search on a GPU or the CPU with the emulated device's prediction
  // (sweeps/runner/search.h); its runs' rows go to OUT/predictions.csv, not counted as probes.
  bool predict = true;
  SlurmOptions slurm;
};

// What a run (or a merge of a Slurm run's shards) leaves for the CLI: the runner never
// renders reports; the CLI writes OUT/report.md and the closing summary from the file.
struct RunOutcome {
  int exit_code = 0;
  std::string out;       // the output directory
  bool report = false;   // OUT/results.csv was written here and holds rows: report on it
  bool summary = false;  // a local run's closing summary is due too
  // The points (probes) this run measured, and those of them that crashed or timed out: a
  // broken build or machine, where an OOM is a result. `sweep run` exits kExitPointsFailed when
  // any did; `fit` and `tables`, which run sweeps of their own, read the rows instead.
  std::size_t measured = 0, failed = 0;
};

// `sweep run`'s exit status when every point ran but some crashed or timed out (their rows are
// written and the report too): 0 is reserved for runs whose every point is a result (ok, oom
// or skipped), 2 stays bad input (docs/errors.md).
inline constexpr int kExitPointsFailed = 3;

// The file of a seeded search's predictions, beside results.csv: emulated rows, not
// measurements of the run's device, so no report reads them as such.
inline constexpr const char* kPredictionsFile = "predictions.csv";

// Runs the sweep (a Slurm array task: its share). Throws UserError for bad input (the
// caller prints it, exit 2).
RunOutcome run_sweep(const RunOptions& opt);

// --gpus "0,1" on a run of `device`: the CUDA_VISIBLE_DEVICES entry of each index (`visible`
// is this process's CUDA_VISIBLE_DEVICES, `count` the GPUs it sees). Throws UserError for
// --gpus off CUDA, an index not on this host, or a GPU named twice ("0,0": two lanes sharing
// one GPU would time each other's points).
std::vector<std::string> resolve_gpus(const std::string& list, const std::string& config,
                                      Device device, const char* visible, int count);
// The card that seeds each lane's searches: the emulated card of the GPU the lane runs on
// (predictor_for its probe), keyed by the lane's --gpus entry ("" for the one lane without
// --gpus, the first probe). A lane on a GPU the table lacks maps to nullopt.
std::map<std::string, std::optional<EmulatedCard>> lane_predictors(
    const std::vector<std::string>& lanes, const std::vector<HostGpu>& probed);

// Points grouped by their other axes (everything but batch; for a max_seq search everything
// but seq), ascending on that axis, in the order the grid first names each combination. One
// combination is one unit of work: OOM pruning and the search stay within it, so combinations
// can run on different GPUs or nodes.
std::vector<std::vector<Point>> combinations(const std::vector<Point>& points,
                                             std::string_view search = "");

// Takes the lock a writer of OUT holds until it exits (flock on `lock_path`, created with its
// folder); UserError naming it when another process holds it. Taking a lock this process
// already holds is a no-op (`fit` runs its search, then its pick, into one directory).
void hold_lock(const std::string& lock_path, const std::string& out);

// How the points of `cfg` run on `device` under `budget` (resolve_budget): their budget and,
// on device emulated, the card. `fit` derives its points' ids from the same settings.
RunSettings run_settings(const Config& cfg, Device device, const Budget& budget);

// The config with the run's overrides applied (--search), and its output directory.
Config load_run_config(const RunOptions& opt, std::string& out);

}  // namespace sweep
