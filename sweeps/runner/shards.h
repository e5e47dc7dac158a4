// A sweep split into shards: the plan a Slurm submission writes (OUT/slurm/plan.json), the
// array task that runs one share of the combinations into its own shard file
// (OUT/shards/task-I.csv, append-only like results.csv), and the two readers of the shards:
// `sweep merge OUT` (each point once into results.csv, then the report) and `sweep status OUT`.
//
// Files under OUT/shards/, per task I:
//   task-I.csv        its rows (ResultsStore: whole rows, fsync'ed)
//   task-I.lock       flock held while the task runs
//   task-I.plan.json  the points it runs, with the identities its own budget gives them
//   task-I.done       one line per combination it finished
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "sweeps/worker/point.h"
#include "sweeps/runner/results_store.h"
#include "sweeps/runner/sweep.h"

namespace sweep {

// Slurm's default MaxArraySize is 1001 (indices 0-1000): more combinations share tasks.
inline constexpr std::size_t kMaxArrayTasks = 1000;

// What was submitted: written before submission, job ids added after.
struct SlurmPlan {
  std::string config;       // absolute path of the config the tasks expand
  std::string fingerprint;  // hash of the combinations' labels, in order
  bool search = false;
  // Per task: labels of the points it runs (grid) or of the combinations it searches.
  std::vector<std::vector<std::string>> tasks;
  std::string array_job, merge_job;  // empty until submitted (and with --dry-run)

  static std::string path(const std::string& out);  // OUT/slurm/plan.json
  // Reads OUT's plan; false when there is none. Throws UserError when it is malformed.
  static bool read(const std::string& out, SlurmPlan& plan);
  // Writes it atomically (a task reading it sees the old or the new one).
  void write(const std::string& out) const;
};

// The fingerprint of a run's combinations (labels do not depend on the budget).
std::string plan_fingerprint(const std::vector<std::vector<Point>>& combos, bool search);
// The combinations task `task` of `tasks` runs: every index j with j % tasks == task.
std::vector<std::size_t> task_combinations(std::size_t task, std::size_t tasks, std::size_t n);
// Labels a plan lists for one task.
std::vector<std::string> task_labels(const std::vector<std::vector<Point>>& combos,
                                     const std::vector<std::size_t>& owned, bool search);

std::string shard_dir(const std::string& out);  // OUT/shards
// Every point_id in OUT/results.csv and the shards. Files that do not parse are named in
// `errors` ("file:line: message") and skipped.
std::set<std::string> recorded_ids(const std::string& out, std::vector<std::string>* errors = nullptr);
// Combinations task I's .done file lists.
std::set<std::string> finished_combinations(const std::string& out, std::size_t task);
// Writes task I's plan: its combinations and (grid) its points with their identities.
void write_task_plan(const std::string& out, std::size_t task,
                     const std::vector<std::vector<Point>>& owned, bool search);
// Forgets task I's plan and progress marks (before it is submitted again); keeps its rows.
void reset_task_marks(const std::string& out, std::size_t task);

// One array task (`sweep run CONFIG --slurm-task I`, started by Slurm).
class ShardTask {
 public:
  // Reads OUT/slurm/plan.json; throws UserError when there is none, when I is not one of
  // its tasks, or when the config no longer expands to the combinations submitted.
  ShardTask(const std::string& out, int index, const std::vector<std::vector<Point>>& combos,
            bool search);
  // This task's share of `combos` (the whole run's, as given to the constructor).
  std::vector<std::vector<Point>> owned(const std::vector<std::vector<Point>>& combos) const;
  std::string lock_path() const;
  std::string shard_dir() const;
  std::string shard_file() const;  // task-I.csv
  // Before the first point: recalls what results.csv and the other shards hold (resume),
  // writes task-I.plan.json and clears task-I.done.
  void begin(ResultsStore& store, const std::vector<std::vector<Point>>& owned) const;
  void finished(const std::vector<Point>& combo) const;  // appends its label to task-I.done

 private:
  std::string out_;
  std::size_t index_, tasks_;
  bool search_;
};

// Appends to `store` (OUT/results.csv) each shard row whose point it lacks; returns how many.
// A shard that does not parse is named on stderr, counted in `bad` and skipped.
int merge_shard_rows(ResultsStore& store, const std::string& out, int& bad);

// `sweep merge OUT`: appends each shard row whose point results.csv lacks (each point once),
// names the points still missing, renders the report. 0: complete; 1: points missing (rows
// merged, report written); 2: a file that does not parse (the others are merged).
RunOutcome merge_shards(const std::string& out, bool quiet);

// `sweep status OUT`: done/total per task, and the array's state where squeue answers.
int print_status(const std::string& out);

}  // namespace sweep
