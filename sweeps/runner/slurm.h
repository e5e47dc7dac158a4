// `sweep run CONFIG --slurm`: the sweep as one Slurm job array plus a dependent merge job.
// Task I of the array runs its share of whole combinations of the other axes (as --gpus
// does on one host, so OOM pruning and the max-batch search stay inside a task) into
// OUT/shards/task-I.csv; the merge job (`sweep merge OUT`, after the array, whatever its
// end) writes results.csv with each point once and renders the report. The scripts are
// written to OUT/slurm/ before submission; --dry-run writes them only.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sweeps/runner/isolate.h"
#include "sweeps/runner/sweep.h"

namespace sweep {

// `text` as one word that bash and sbatch's #SBATCH parser both read back unchanged: POSIX
// single quotes, a ' or a \ written outside them, escaped (sbatch, unlike bash, takes a
// backslash as an escape inside quotes too); as it is when it holds only letters, digits and
// @%+=:,./-_ (as Python's shlex.quote). The one quoting of every value in a script; values
// with control characters are refused before (submit_slurm).
std::string shell_quote(const std::string& text);

// The executable `name` on the PATH, or "" when there is none.
std::string find_on_path(const std::string& name);

// squeue's state of each listed job still in the queue ("123_4" -> "RUNNING", a pending
// array's rest "123_[5-7%2]" -> "PENDING (JobArrayTaskLimit)"); nullopt when squeue is missing
// or does not answer.
std::optional<std::map<std::string, std::string>> queue_states(const std::vector<std::string>& jobs);

// "0-3,5,7-8%2": Slurm's --array value for these task indices (ascending), %N when N > 0.
std::string array_spec(const std::vector<std::size_t>& tasks, int max_parallel);

// What the generated scripts say; pure, so the text is tested without Slurm.
struct ScriptSpec {
  std::string name;  // the config's name: job names sweep-NAME and sweep-NAME-merge
  std::string exe, config, out;  // absolute paths
  std::string array;             // array_spec(...)
  std::vector<std::string> task_args;  // after `run CONFIG --out OUT --slurm-task I`
  SlurmOptions slurm;
};
std::string array_script(const ScriptSpec& s);
std::string merge_script(const ScriptSpec& s);

// Submits (or with --dry-run writes) the array and the merge job. Returns the exit code;
// throws UserError for bad input, a missing sbatch, a rejected submission or an unwritable
// OUT, having submitted nothing (a merge job refused after its array cancels the array).
RunOutcome submit_slurm(const RunOptions& opt);

}  // namespace sweep
