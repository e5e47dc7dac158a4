// Submitting a sweep to Slurm; see slurm.h. The tasks' side is sweeps/runner/shards.h.
#include "sweeps/runner/slurm.h"

#include "reports/results/files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "sweeps/measure/env.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/runner/shards.h"

namespace sweep {
namespace fs = std::filesystem;
namespace {

// Refuses a value with a control character before it reaches a script: a newline would end
// an #SBATCH line (a comment to bash) and make the rest a command line of the script.
void check_script_value(const std::string& file, int line, const std::string& key,
                        const std::string& value) {
  if (const std::string c = control_character(value); !c.empty())
    throw UserError(file, line, key, "contains " + c + ", which cannot go into a Slurm script",
                    "write the value on one line, without control characters; nothing was "
                    "written or submitted");
}

// Lines common to both scripts: where the jobs may run and the user's own sbatch options.
std::string placement(const SlurmOptions& o) {
  std::string s;
  if (!o.partition.empty()) s += "#SBATCH --partition=" + shell_quote(o.partition) + "\n";
  if (!o.account.empty()) s += "#SBATCH --account=" + shell_quote(o.account) + "\n";
  for (const auto& a : o.sbatch_args) s += "#SBATCH " + shell_quote(a) + "\n";
  return s;
}

// The job id `sbatch --parsable` printed ("123" or "123;cluster"), after any warnings.
std::string parsed_job_id(const std::string& output) {
  static const std::regex id(R"((^|\n)(\d+)(;[^\n]*)?\n?$)");
  std::smatch m;
  return std::regex_search(output, m, id) ? m[2].str() : "";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Submits `script` (with extra sbatch options first); the job id, or UserError.
std::string sbatch(const std::string& exe, const std::vector<std::string>& options,
                   const std::string& script) {
  std::vector<std::string> argv = {exe, "--parsable"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(script);
  const CommandOutput r = run_command(argv);
  const std::string id = r.exit_code == 0 ? parsed_job_id(r.output) : "";
  if (id.empty())
    throw UserError(script, 0, "sbatch",
                      "the submission was rejected (sbatch exit " + std::to_string(r.exit_code) +
                          "): " + trimmed(r.output),
                      "nothing is queued; fix the option sbatch names (--partition, --gres, "
                      "--time, --account, --sbatch-arg) and run again, or edit and submit " +
                          script + " by hand");
  return id;
}

void write_text(const std::string& path, const std::string& text, bool executable) {
  // The one install_file (files.h): a link planted at the script's name is replaced.
  install_file(path, text, "the Slurm script", "--out", "choose a writable --out on a filesystem the compute nodes share");
  if (executable) fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
}

// The tasks still to run: all of them, less those whose every point is recorded (when this
// host can name the points: their budget does not depend on the node's GPU) or, for a search,
// whose every combination the previous array of the same plan finished.
std::vector<std::size_t> tasks_to_run(const std::string& out, const SlurmPlan& plan,
                                      const std::vector<std::vector<Point>>& combos, bool ids_known,
                                      bool same_plan) {
  std::vector<std::size_t> todo;
  const auto recorded = recorded_ids(out);
  const std::size_t tasks = plan.tasks.size();
  for (std::size_t t = 0; t < tasks; ++t) {
    bool done = true;
    const auto finished = same_plan ? finished_combinations(out, t) : std::set<std::string>{};
    for (std::size_t j : task_combinations(t, tasks, combos.size())) {
      if (plan.search || !ids_known) {
        done = done && finished.count(combos[j].front().label());
      } else {
        for (const auto& p : combos[j]) done = done && recorded.count(p.id());
      }
    }
    if (!done) todo.push_back(t);
  }
  return todo;
}

}  // namespace

std::string shell_quote(const std::string& text) {
  // Python's shlex.quote: a word of only these characters is the same word unquoted.
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && std::strchr("@%+=:,./-_", c));
  };
  if (!text.empty() && std::all_of(text.begin(), text.end(), plain)) return text;
  std::string q = "'";
  for (char c : text) {
    // A quote or a backslash goes outside the quotes, escaped ('\'' and '\\'): so the word
    // reads the same to bash and to sbatch's #SBATCH parser, which (unlike bash) takes a
    // backslash as an escape inside quotes too.
    if (c == '\'' || c == '\\') q += std::string("'\\") + c + "'";
    else q += c;
  }
  return q + "'";
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate.string();
  }
  return "";
}

std::optional<std::map<std::string, std::string>> queue_states(const std::vector<std::string>& jobs) {
  if (find_on_path("squeue").empty()) return std::nullopt;
  std::string list;
  for (const auto& j : jobs) list += (list.empty() ? "" : ",") + j;
  const CommandOutput r = run_command({"squeue", "-h", "-r", "-j", list, "-o", "%i|%T|%r"});
  std::map<std::string, std::string> states;
  // Jobs that left the queue long enough ago are unknown to it: none is queued.
  if (r.exit_code != 0)
    return r.output.find("Invalid job id") != std::string::npos ? std::optional(states) : std::nullopt;
  std::stringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    std::stringstream cells(line);
    std::string id, state, reason;
    std::getline(cells, id, '|');
    std::getline(cells, state, '|');
    std::getline(cells, reason);
    if (id.empty()) continue;
    states[id] = state + (state == "PENDING" && !reason.empty() ? " (" + reason + ")" : "");
  }
  return states;
}

std::string array_spec(const std::vector<std::size_t>& tasks, int max_parallel) {
  std::string s;
  for (std::size_t i = 0; i < tasks.size();) {
    std::size_t j = i;
    while (j + 1 < tasks.size() && tasks[j + 1] == tasks[j] + 1) ++j;
    s.append(s.empty() ? "" : ",").append(std::to_string(tasks[i]));
    if (j > i) s.append("-").append(std::to_string(tasks[j]));
    i = j + 1;
  }
  if (max_parallel > 0) s += "%" + std::to_string(max_parallel);
  return s;
}

std::string array_script(const ScriptSpec& s) {
  const std::string logs = (fs::path(s.out) / "slurm" / "logs").string();
  std::string t = "#!/bin/bash\n";
  t += "# Written by `sweep run --slurm` on " + rfc3339_now() + ". Array task I runs its share of\n";
  t += "# the combinations into " + s.out + "/shards/task-I.csv. Edit and resubmit by hand with\n";
  t += "#   sbatch " + s.out + "/slurm/sweep.sbatch\n";
  t += "# then merge with `sweep merge " + s.out + "` (or sbatch --dependency=afterany:JOBID merge.sbatch).\n";
  t += "#SBATCH --job-name=" + shell_quote("sweep-" + s.name) + "\n";
  t += "#SBATCH --array=" + shell_quote(s.array) + "\n";
  t += "#SBATCH --output=" + shell_quote(logs + "/task-%a-%A.out") + "\n";
  t += "#SBATCH --ntasks=1\n";
  if (!s.slurm.gres.empty()) t += "#SBATCH --gres=" + shell_quote(s.slurm.gres) + "\n";
  if (!s.slurm.time.empty()) t += "#SBATCH --time=" + shell_quote(s.slurm.time) + "\n";
  t += placement(s.slurm);
  t += "exec " + shell_quote(s.exe) + " run " + shell_quote(s.config) + " --out " + shell_quote(s.out) +
       " --slurm-task \"$SLURM_ARRAY_TASK_ID\"";
  for (const auto& a : s.task_args) t.append(" ").append(shell_quote(a));
  return t + "\n";
}

std::string merge_script(const ScriptSpec& s) {
  const std::string logs = (fs::path(s.out) / "slurm" / "logs").string();
  std::string t = "#!/bin/bash\n";
  t += "# Written by `sweep run --slurm`: after the array, merges its shards into results.csv\n";
  t += "# (each point once), names the points missing and renders the report.\n";
  t += "#SBATCH --job-name=" + shell_quote("sweep-" + s.name + "-merge") + "\n";
  t += "#SBATCH --output=" + shell_quote(logs + "/merge-%j.out") + "\n";
  t += "#SBATCH --ntasks=1\n";
  t += placement(s.slurm);
  return t + "exec " + shell_quote(s.exe) + " merge " + shell_quote(s.out) + "\n";
}

namespace {

// Every flag that does not combine with --slurm, and every value that reaches a script,
// refused before anything is written.
void check_slurm_options(const RunOptions& opt, const Config& cfg, const std::string& out) {
  const SlurmOptions& so = opt.slurm;
  if (opt.force)
    throw UserError(opt.config, 0, "--force", "--force does not combine with --slurm",
                      "to measure recorded points again, submit into a new --out");
  if (!opt.gpus.empty())
    throw UserError(opt.config, 0, "--gpus", "--gpus does not combine with --slurm",
                      "ask Slurm for GPUs with --gres gpu:1; each array task uses the GPU it is given");
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--partition", so.partition},
                                    {"--account", so.account}, {"--gres", so.gres}, {"--time", so.time},
                                    {opt.out.empty() ? "out" : "--out", out}})
    check_script_value(opt.config, 0, flag, value);
  check_script_value(opt.config, 0, "name", cfg.name);  // load_config refuses it already
  check_script_value(opt.config, 0, "CONFIG (the config's path)", opt.config);
  check_script_value(self_exe(), 0, "the sweep binary's path", self_exe());
  for (const auto& a : so.sbatch_args) check_script_value(opt.config, 0, "--sbatch-arg", a);
  for (const auto& a : so.sbatch_args)
    if (a.rfind("-", 0) != 0)
      throw UserError(opt.config, 0, "--sbatch-arg", "'" + a + "' is not an sbatch option",
                        "pass one option each, attached: --sbatch-arg=--qos=high");
}

// A previous submission into OUT that is still queued would run the same points again.
void refuse_if_still_queued(const std::string& out, const SlurmPlan& previous) {
  if (previous.array_job.empty()) return;
  std::vector<std::string> jobs = {previous.array_job};
  if (!previous.merge_job.empty()) jobs.push_back(previous.merge_job);
  if (auto queued = queue_states(jobs); queued && !queued->empty())
    throw UserError(SlurmPlan::path(out), 0, "--out",
                      "array job " + previous.array_job + " of an earlier submission into " + out +
                          " is still queued or running",
                      "wait for it (sweep status " + out + "), or cancel it: scancel " +
                          previous.array_job + " " + previous.merge_job);
}

ScriptSpec script_spec(const RunOptions& opt, const Config& cfg, const SlurmPlan& plan,
                       const std::string& out, const std::vector<std::size_t>& todo) {
  ScriptSpec spec;
  spec.name = cfg.name.empty() ? fs::path(opt.config).stem().string() : cfg.name;
  spec.exe = self_exe();
  spec.config = plan.config;
  spec.out = fs::absolute(out).lexically_normal().string();
  spec.array = array_spec(todo, opt.slurm.max_parallel);
  spec.slurm = opt.slurm;
  if (opt.device_given) spec.task_args.insert(spec.task_args.end(), {"--device", opt.device});
  if (!opt.search.empty()) spec.task_args.insert(spec.task_args.end(), {"--search", opt.search});
  if (opt.snapshot) spec.task_args.push_back("--snapshot");
  if (!opt.zygote) spec.task_args.push_back("--no-zygote");  // else one zygote per array task
  return spec;
}

// The marks of the tasks submitted now start afresh; a task left out because its points are
// all recorded gets a plan naming them, so status and merge count it done.
void mark_tasks(const std::string& out, const std::vector<std::vector<Point>>& combos,
                std::size_t tasks, const std::vector<std::size_t>& todo, bool same_plan,
                bool search, bool ids_known) {
  for (std::size_t t = 0, next = 0; t < tasks; ++t) {
    const bool submitted = next < todo.size() && todo[next] == t;
    if (submitted) ++next;
    if (submitted || !same_plan) reset_task_marks(out, t);
    if (!submitted && !search && ids_known) {
      std::vector<std::vector<Point>> owned;
      for (std::size_t j : task_combinations(t, tasks, combos.size())) owned.push_back(combos[j]);
      write_task_plan(out, t, owned, search);
    }
  }
}

// The array job, then the merge job after it; nothing half-way: the array is cancelled when
// the merge job cannot be submitted.
void submit_jobs(const std::string& exe, SlurmPlan& plan, const std::string& array_path,
                 const std::string& merge_path) {
  plan.array_job = sbatch(exe, {}, array_path);
  try {
    plan.merge_job = sbatch(exe, {"--dependency=afterany:" + plan.array_job}, merge_path);
  } catch (const UserError&) {
    run_command({"scancel", plan.array_job});
    throw;
  }
}

}  // namespace

RunOutcome submit_slurm(const RunOptions& opt) {
  std::string out;
  if (!opt.overrides.empty())
    throw UserError(opt.config, 0, opt.overrides.front(), "key=value overrides do not combine with --slurm",
                    "write them into the config: the array's tasks read the config file");
  Config cfg = load_run_config(opt, out);
  check_slurm_options(opt, cfg, out);
  // The points' identities depend on the budget; this host knows it unless the nodes
  // measure their GPUs' context allowance (a target card on CUDA without context_gib).
  const std::string device = opt.device_given ? opt.device : cfg.device;
  RunSettings run;
  run.device = parse_as<Device>(device).value_or(Device::kCpu);  // auto: as on the CPU
  const bool ids_known = cfg.budget_gib > 0 || !cfg.gpu || run.device == Device::kCpu;
  const Budget budget = resolve_budget(cfg, run.device, {});
  run.budget_bytes = budget.bytes;
  run.budget_emulated = budget.emulated;
  const auto combos = combinations(expand_grid(cfg, run), cfg.search);
  const bool search = !cfg.search.empty();  // probes are not known before they run

  SlurmPlan plan;
  plan.config = fs::absolute(opt.config).lexically_normal().string();
  plan.fingerprint = plan_fingerprint(combos, search);
  plan.search = search;
  const std::size_t tasks = std::min(combos.size(), kMaxArrayTasks);
  for (std::size_t t = 0; t < tasks; ++t)
    plan.tasks.push_back(task_labels(combos, task_combinations(t, tasks, combos.size()), search));

  SlurmPlan previous;
  const bool had_plan = fs::exists(SlurmPlan::path(out)) && SlurmPlan::read(out, previous);
  if (had_plan) refuse_if_still_queued(out, previous);
  const bool same_plan = had_plan && previous.fingerprint == plan.fingerprint;
  const auto todo = tasks_to_run(out, plan, combos, ids_known, same_plan);
  const ScriptSpec spec = script_spec(opt, cfg, plan, out, todo);
  const std::string dir = (fs::path(spec.out) / "slurm").string();
  const std::string array_path = dir + "/sweep.sbatch", merge_path = dir + "/merge.sbatch";

  if (todo.empty()) {
    std::printf("every point of %s is already recorded in %s: nothing to submit\n", opt.config.c_str(),
                out.c_str());
    return had_plan ? merge_shards(out, opt.quiet) : RunOutcome{0, out};
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "logs", ec);
  if (ec || access(dir.c_str(), W_OK) != 0)
    throw UserError(out, 0, "--out", "cannot create or write " + dir + (ec ? ": " + ec.message() : ""),
                      "choose a writable --out on a filesystem the compute nodes share");
  write_text(array_path, array_script(spec), true);
  write_text(merge_path, merge_script(spec), true);
  plan.write(out);
  const std::string command = "sbatch " + array_path + "; then sbatch --dependency=afterany:ARRAY " + merge_path;
  if (opt.dry_run) {
    std::printf("wrote %s and %s (%zu array tasks: --array=%s, %zu combinations); nothing submitted\n",
                array_path.c_str(), merge_path.c_str(), todo.size(), spec.array.c_str(), combos.size());
    std::printf("submit: %s\n", command.c_str());
    return {0, out};
  }
  const std::string exe = find_on_path("sbatch");
  if (exe.empty())
    throw UserError(array_path, 0, "--slurm", "sbatch is not on the PATH: nothing was submitted",
                      "run on a host with Slurm's client commands (a login node), or add their "
                      "directory to PATH; the scripts are written, to submit by hand: " + command);
  mark_tasks(out, combos, tasks, todo, same_plan, search, ids_known);
  submit_jobs(exe, plan, array_path, merge_path);
  plan.write(out);
  std::printf("submitted array job %s (%zu tasks, --array=%s) and merge job %s\n", plan.array_job.c_str(),
              todo.size(), spec.array.c_str(), plan.merge_job.c_str());
  std::printf("follow:  sweep status %s   (or squeue -r -j %s,%s; logs in %s/logs)\n", out.c_str(),
              plan.array_job.c_str(), plan.merge_job.c_str(), dir.c_str());
  std::printf("cancel:  scancel %s %s\n", plan.array_job.c_str(), plan.merge_job.c_str());
  std::printf("resume:  run the same command again: it submits only what is not recorded\n");
  return {0, out};
}

}  // namespace sweep
