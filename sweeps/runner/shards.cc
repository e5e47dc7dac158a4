// Shards of a sweep: the plan, the array task's files, merge and status; see shards.h.
#include "sweeps/runner/shards.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include <unistd.h>

#include "reports/results/rows.h"
#include "sweeps/runner/config.h"
#include "reports/results/files.h"
#include "sweeps/measure/env.h"
#include "reports/results/schema.h"
#include "sweeps/runner/slurm.h"
#include "sweeps/runner/sweep.h"

namespace sweep {
namespace fs = std::filesystem;
namespace {

std::string task_path(const std::string& out, std::size_t task, const std::string& suffix) {
  return (fs::path(shard_dir(out)) / ("task-" + std::to_string(task) + suffix)).string();
}

// The shard files in OUT/shards, by task number.
std::map<std::size_t, std::string> shard_files(const std::string& out) {
  std::map<std::size_t, std::string> files;
  static const std::regex name(R"(task-(\d+)\.csv)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(shard_dir(out), ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name)) files[std::stoul(m[1].str())] = e.path().string();
  }
  return files;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  if (!names_something(path)) return lines;
  // Read as every file sweep reads (files.h): a FIFO is refused, not waited on.
  std::istringstream in(read_regular_file(path, "", "remove it: the task writes it again"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// Point ids and labels task I planned (task-I.plan.json); empty when it has not started.
std::vector<std::pair<std::string, std::string>> task_points(const std::string& out, std::size_t task) {
  std::vector<std::pair<std::string, std::string>> points;
  const std::string path = task_path(out, task, ".plan.json");
  if (!names_something(path)) return points;
  const auto j = nlohmann::json::parse(read_regular_file(path, "", "remove it: the task writes it again"), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("points")) return points;
  try {
    for (const auto& p : j.at("points")) points.emplace_back(p.at("id").get<std::string>(),
                                                            p.at("label").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path, 0, "points", std::string("not a task plan written by sweep: ") + e.what(),
                    "remove it; the task writes it again when it runs");
  }
  return points;
}

// What task I still lacks: labels of points (grid) or combinations (search) not recorded.
std::vector<std::string> task_missing(const std::string& out, const SlurmPlan& plan,
                                      std::size_t task, const std::set<std::string>& recorded) {
  std::vector<std::string> missing;
  if (plan.search) {
    const auto done = finished_combinations(out, task);
    for (const auto& label : plan.tasks[task])
      if (!done.count(label)) missing.push_back("search " + label);
    return missing;
  }
  const auto points = task_points(out, task);
  if (points.empty()) return plan.tasks[task];  // never started: all of it
  for (const auto& [id, label] : points)
    if (!recorded.count(id)) missing.push_back(label);
  return missing;
}

// The rows of a shard. A line that does not parse (torn: a task killed mid-write, then
// appended to by the next) is left out, said in `dropped` as "file:line: why", and the rest
// is read; a file that is no results file at all (its header) throws UserError.
reports::Results read_shard(const std::string& file, std::vector<std::string>& dropped) {
  constexpr std::size_t kMaxDropped = 100;  // beyond that the file is garbage, not torn
  std::vector<std::string> lines;
  std::vector<int> numbers;  // each kept line's number in `file`
  // Beside it, per process (status runs unlocked); no task-N.csv, so never taken for a shard.
  const std::string copy = file + "." + std::to_string(::getpid()) + ".readable";
  for (;;) {
    try {
      if (dropped.empty()) return reports::read_results(file);
      std::ofstream(copy, std::ios::trunc) << [&] {
        std::string text;
        for (const auto& l : lines) text += l + "\n";
        return text;
      }();
      auto rows = reports::read_results(copy);
      fs::remove(copy);
      rows.path = file;
      return rows;
    } catch (const UserError& e) {
      fs::remove(copy);
      if (e.line() <= 1 || dropped.size() >= kMaxDropped) throw;
      if (lines.empty()) {
        std::ifstream in(file);
        for (std::string l; std::getline(in, l);) {
          lines.push_back(l);
          numbers.push_back(static_cast<int>(lines.size()));
        }
      }
      const auto at = static_cast<std::size_t>(e.line() - 1);
      if (at >= lines.size()) throw;
      dropped.push_back(file + ":" + std::to_string(numbers[at]) + ": " + e.what());
      lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at));
      numbers.erase(numbers.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
}

// A row read back, as the json ResultsStore::append takes (cells as they were written).
nlohmann::json row_json(const reports::Row& row) {
  nlohmann::json j;
  for (std::size_t c = 0; c < schema::kColumnCount; ++c)
    if (!row.at(c).empty()) j[std::string(schema::kColumns[c])] = row.at(c);
  return j;
}

}  // namespace

std::string SlurmPlan::path(const std::string& out) {
  return (fs::path(out) / "slurm" / "plan.json").string();
}

bool SlurmPlan::read(const std::string& out, SlurmPlan& plan) {
  if (!names_something(path(out))) return false;
  const std::string hint = "submit again with `sweep run CONFIG --slurm --out " + out + "`";
  const auto j = nlohmann::json::parse(read_regular_file(path(out), "plan", hint), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tasks") || !j.contains("fingerprint"))
    throw UserError(path(out), 0, "plan", "not a plan written by `sweep run --slurm`", hint);
  // Each field by name, so that a wrong type names the file and the field, not only json's
  // "type_error".
  std::string field;
  try {
    auto text = [&](const char* key) {
      field = key;
      return j.contains(key) ? j.at(key).get<std::string>() : std::string();
    };
    plan.config = text("config");
    plan.fingerprint = text("fingerprint");
    plan.array_job = text("array_job");
    plan.merge_job = text("merge_job");
    field = "search";
    plan.search = j.contains("search") && j.at("search").get<bool>();
    field = "tasks";
    plan.tasks = j.at("tasks").get<std::vector<std::vector<std::string>>>();
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path(out), 0, field, std::string("not a plan written by `sweep run --slurm`: ") +
                    e.what(), hint);
  }
  return true;
}

void SlurmPlan::write(const std::string& out) const {
  nlohmann::json j = {{"config", config}, {"fingerprint", fingerprint}, {"search", search},
                      {"tasks", tasks},   {"array_job", array_job},     {"merge_job", merge_job}};
  install_file(path(out), j.dump(1) + "\n", "the Slurm plan", "out", "check permissions and free space");
}

std::string plan_fingerprint(const std::vector<std::vector<Point>>& combos, bool search) {
  std::string text = search ? "search\n" : "grid\n";
  for (const auto& c : combos) {
    for (const auto& p : c) text += p.label() + ";";
    text += "\n";
  }
  return fnv1a_hex(text);
}

std::vector<std::size_t> task_combinations(std::size_t task, std::size_t tasks, std::size_t n) {
  std::vector<std::size_t> owned;
  for (std::size_t j = task; j < n; j += tasks) owned.push_back(j);
  return owned;
}

std::vector<std::string> task_labels(const std::vector<std::vector<Point>>& combos,
                                     const std::vector<std::size_t>& owned, bool search) {
  std::vector<std::string> labels;
  for (std::size_t j : owned) {
    if (search) labels.push_back(combos[j].front().label());
    else
      for (const auto& p : combos[j]) labels.push_back(p.label());
  }
  return labels;
}

std::string shard_dir(const std::string& out) { return (fs::path(out) / "shards").string(); }

std::set<std::string> recorded_ids(const std::string& out, std::vector<std::string>* errors) {
  std::set<std::string> ids;
  std::vector<std::string> files;
  if (fs::exists(fs::path(out) / "results.csv")) files.push_back((fs::path(out) / "results.csv").string());
  for (const auto& [task, file] : shard_files(out)) files.push_back(file);
  for (const auto& f : files) {
    std::vector<std::string> dropped;
    try {
      for (const auto& r : read_shard(f, dropped).rows) ids.insert(r.at(schema::column("point_id")));
    } catch (const UserError& e) {
      if (errors) errors->push_back(e.located());
    }
    if (errors) errors->insert(errors->end(), dropped.begin(), dropped.end());
  }
  return ids;
}

std::set<std::string> finished_combinations(const std::string& out, std::size_t task) {
  const auto lines = lines_of(task_path(out, task, ".done"));
  return {lines.begin(), lines.end()};
}

void write_task_plan(const std::string& out, std::size_t task,
                     const std::vector<std::vector<Point>>& owned, bool search) {
  nlohmann::json plan;
  plan["combinations"] = nlohmann::json::array();
  plan["points"] = nlohmann::json::array();
  for (const auto& c : owned) {
    plan["combinations"].push_back(c.front().label());
    if (!search)
      for (const auto& p : c) plan["points"].push_back({{"id", p.id()}, {"label", p.label()}});
  }
  plan["host"] = host_name();
  fs::create_directories(shard_dir(out));
  install_file(task_path(out, task, ".plan.json"), plan.dump(1) + "\n", "the task's plan", "--out",
               "choose a writable --out on a filesystem the compute nodes share");
}

void reset_task_marks(const std::string& out, std::size_t task) {
  fs::remove(task_path(out, task, ".plan.json"));
  fs::remove(task_path(out, task, ".done"));
}

// --- the array task -----------------------------------------------------------------------

ShardTask::ShardTask(const std::string& out, int index,
                     const std::vector<std::vector<Point>>& combos, bool search)
    : out_(out), index_(static_cast<std::size_t>(index)), search_(search) {
  SlurmPlan plan;
  if (!SlurmPlan::read(out, plan))
    throw UserError(SlurmPlan::path(out), 0, "--slurm-task", "no Slurm plan in " + out,
                      "array tasks are started by `sweep run CONFIG --slurm`, which writes it");
  tasks_ = plan.tasks.size();
  if (index < 0 || index_ >= tasks_)
    throw UserError(SlurmPlan::path(out), 0, "--slurm-task",
                      "task " + std::to_string(index) + " is not one of the plan's " +
                          std::to_string(tasks_) + " tasks",
                      "keep --array within 0-" + std::to_string(tasks_ - 1) + " in the script");
  if (plan_fingerprint(combos, search) != plan.fingerprint)
    throw UserError(SlurmPlan::path(out), 0, "fingerprint",
                      "the config no longer expands to the combinations submitted",
                      "submit the changed config again with `sweep run CONFIG --slurm` (recorded "
                      "points are kept), or restore the config");
}

std::vector<std::vector<Point>> ShardTask::owned(const std::vector<std::vector<Point>>& combos) const {
  std::vector<std::vector<Point>> mine;
  for (std::size_t j : task_combinations(index_, tasks_, combos.size())) mine.push_back(combos[j]);
  return mine;
}

std::string ShardTask::lock_path() const { return task_path(out_, index_, ".lock"); }
std::string ShardTask::shard_dir() const { return sweep::shard_dir(out_); }
std::string ShardTask::shard_file() const { return "task-" + std::to_string(index_) + ".csv"; }

void ShardTask::begin(ResultsStore& store, const std::vector<std::vector<Point>>& owned) const {
  const std::string merged = (fs::path(out_) / "results.csv").string();
  if (names_something(merged)) {  // a regular file (files.h), or refused by name
    ::close(open_regular_file(merged, "", "move it away: the merge job writes results.csv"));
    if (fs::file_size(merged) > 0) store.recall(merged);
  }
  for (const auto& [task, file] : shard_files(out_))
    if (task != index_) store.recall(file);
  write_task_plan(out_, index_, owned, search_);
  std::ofstream(task_path(out_, index_, ".done"), std::ios::trunc);
}

void ShardTask::finished(const std::vector<Point>& combo) const {
  std::ofstream(task_path(out_, index_, ".done"), std::ios::app) << combo.front().label() << "\n";
}

// --- merge and status -----------------------------------------------------------------------

int merge_shard_rows(ResultsStore& store, const std::string& out, int& bad) {
  int merged = 0;
  for (const auto& [task, file] : shard_files(out)) {
    std::vector<std::string> dropped;
    try {
      for (const auto& row : read_shard(file, dropped).rows)
        if (!store.outcome(row.at(schema::column("point_id")))) {
          store.append(row_json(row));
          ++merged;
        }
    } catch (const UserError& e) {
      std::fprintf(stderr, "error: %s (shard skipped)\n", e.located().c_str());
      ++bad;
    }
    for (const auto& d : dropped)
      std::fprintf(stderr, "warning: %s (line left out; the shard's other rows are merged, and "
                           "its point is measured again when the sweep is re-run)\n", d.c_str());
  }
  return merged;
}

RunOutcome merge_shards(const std::string& out, bool quiet) {
  if (!fs::is_directory(out))
    throw UserError(out, 0, "OUT", "no such directory", "name the --out of a `sweep run --slurm`");
  // The same lock as `sweep run`: no local run writes results.csv meanwhile.
  hold_lock((fs::path(out) / ".lock").string(), out);
  ResultsStore store(out);
  int bad = 0;
  const int merged = merge_shard_rows(store, out, bad);
  if (!quiet)
    std::fprintf(stderr, "merged %d new rows from %zu shards into %s\n", merged, shard_files(out).size(),
                 store.path().c_str());
  SlurmPlan plan;
  std::vector<std::string> missing;
  if (SlurmPlan::read(out, plan)) {
    const auto recorded = recorded_ids(out);
    for (std::size_t t = 0; t < plan.tasks.size(); ++t)
      for (auto& label : task_missing(out, plan, t, recorded))
        missing.push_back("task " + std::to_string(t) + ": " + label);
  }
  if (!missing.empty()) {
    std::fprintf(stderr, "%zu %s missing:\n", missing.size(), plan.search ? "searches are" : "points are");
    for (std::size_t i = 0; i < missing.size() && i < 20; ++i)
      std::fprintf(stderr, "  %s\n", missing[i].c_str());
    if (missing.size() > 20) std::fprintf(stderr, "  ... and %zu more\n", missing.size() - 20);
    std::fprintf(stderr, "hint: submit the same config into %s again; it runs only what is missing\n",
                 out.c_str());
  }
  const bool rows = fs::exists(store.path()) && !reports::read_results(store.path()).rows.empty();
  return {bad ? 2 : missing.empty() ? 0 : 1, out, rows};
}

int print_status(const std::string& out) {
  SlurmPlan plan;
  if (!SlurmPlan::read(out, plan))
    throw UserError(SlurmPlan::path(out), 0, "OUT", "no Slurm submission in " + out,
                      "submit one with `sweep run CONFIG --slurm --out " + out + "`");
  std::vector<std::string> errors;
  const auto recorded = recorded_ids(out, &errors);
  std::vector<std::string> jobs;
  for (const auto& j : {plan.array_job, plan.merge_job})
    if (!j.empty()) jobs.push_back(j);
  const auto queue = jobs.empty() ? std::nullopt : queue_states(jobs);
  std::printf("%s: %zu tasks, config %s\n", out.c_str(), plan.tasks.size(), plan.config.c_str());
  if (!plan.array_job.empty())
    std::printf("array job %s, merge job %s%s\n", plan.array_job.c_str(), plan.merge_job.c_str(),
                queue ? "" : " (squeue did not answer: states from the files only)");
  std::printf("%-6s %-12s %-30s %s\n", "task", plan.search ? "searches" : "points", "state", "shard");
  std::size_t done_all = 0, total_all = 0;
  for (std::size_t t = 0; t < plan.tasks.size(); ++t) {
    const std::size_t total = plan.tasks[t].size();
    const std::size_t done = total - task_missing(out, plan, t, recorded).size();
    done_all += done;
    total_all += total;
    std::string state = done == total ? "done" : task_points(out, t).empty() && !plan.search
                                                     ? "not started" : "incomplete";
    const std::string id = plan.array_job + "_" + std::to_string(t);
    if (queue && queue->count(id)) state = queue->at(id);
    const std::string shard = task_path(out, t, ".csv");
    std::printf("%-6zu %-12s %-30s %s\n", t, (std::to_string(done) + "/" + std::to_string(total)).c_str(),
                state.c_str(), fs::exists(shard) ? shard.c_str() : "-");
  }
  // squeue lists a pending array's not yet started tasks as one line, "ARRAY_[2-5%2]".
  if (queue)
    for (const auto& [id, state] : *queue)
      if (id.find('[') != std::string::npos) std::printf("pending: %s %s\n", id.c_str(), state.c_str());
  if (queue && !plan.merge_job.empty() && queue->count(plan.merge_job))
    std::printf("merge: %s\n", queue->at(plan.merge_job).c_str());
  std::size_t merged = 0;
  try {
    if (fs::exists(fs::path(out) / "results.csv")) merged = reports::read_results(out).rows.size();
  } catch (const UserError& e) {
    errors.push_back(e.located());
  }
  std::printf("total: %zu/%zu %s recorded; %s/results.csv holds %zu rows\n", done_all, total_all,
              plan.search ? "searches" : "points", out.c_str(), merged);
  for (const auto& e : errors) std::printf("unreadable: %s\n", e.c_str());
  return 0;
}

}  // namespace sweep
