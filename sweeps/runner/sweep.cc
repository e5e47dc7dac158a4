// The sweep loop; see sweep.h. Failures are results: every point ends as a row.
#include "sweeps/runner/sweep.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "models/zoo.h"
#include "reports/results/rows.h"
#include "sweep_version.h"
#include "sweeps/runner/budget.h"
#include "sweeps/runner/config.h"
#include "sweeps/measure/env.h"
#include "sweeps/runner/estimate.h"
#include "sweeps/runner/grid.h"
#include "reports/results/files.h"
#include "sweeps/runner/progress.h"
#include "sweeps/runner/interrupt.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/runner/results_store.h"
#include "reports/results/schema.h"
#include "sweeps/runner/search.h"
#include "sweeps/runner/shards.h"

namespace sweep {
namespace {

// `wanted` is auto, cuda or cpu (the config and the flag have checked it).
Device resolve_device(const std::string& wanted, const std::string& config_path) {
  const int gpus = cuda_device_count();
  const auto device = wanted == "auto" ? std::optional<Device>() : parse_as<Device>(wanted);
  SWEEP_CHECK(wanted == "auto" || device.has_value(), "device '" + wanted + "' was not checked");
  // A GPU CUDA cannot use (a driver too old for CUDA 13) is said, not trained past on the CPU.
  if (gpus == 0 && (!device || *device == Device::kCuda))
    if (const std::string why = cuda_unusable_reason(); !why.empty())
      throw UserError(config_path, 0, "device", "device " + wanted + ": " + why,
                      "update the NVIDIA driver (nvidia-smi shows its version), or run on the "
                      "CPU with --device cpu");
  if (!device) return gpus > 0 ? Device::kCuda : Device::kCpu;
  if (*device == Device::kCuda && gpus == 0)
    throw UserError(config_path, 0, "device", "device cuda requested but no GPU is visible",
                      "use --device cpu (or auto) on this machine");
  return *device;
}

nlohmann::json point_columns(const Point& p) {
  nlohmann::json j;
  j["schema_version"] = schema::kSchemaVersion;
  j["suite_version"] = SWEEP_VERSION;
  j["point_id"] = p.id();
  j.update(axis_cells(p));
  j["torch_version"] = torch_version();
  j["host"] = host_name();
  j["git_commit"] = SWEEP_GIT_COMMIT;
  j["timestamp"] = rfc3339_now();
  // Under Slurm: the job (array task) that measured, and the GPUs the scheduler gave it.
  auto env = [](const char* name) { const char* v = std::getenv(name); return std::string(v ? v : ""); };
  if (!env("SLURM_ARRAY_JOB_ID").empty())
    j["slurm_job"] = env("SLURM_ARRAY_JOB_ID") + "_" + env("SLURM_ARRAY_TASK_ID");
  else if (!env("SLURM_JOB_ID").empty())
    j["slurm_job"] = env("SLURM_JOB_ID");
  if (!env("SLURM_JOB_GPUS").empty()) j["slurm_gpus"] = env("SLURM_JOB_GPUS");
  return j;
}

// Runs points in isolated workers and appends their rows. Thread-safe: with --gpus one
// thread per GPU shares it.
class Runner {
 public:
  // predictions: where the emulated predictions of a seeded search go (null: none).
  // zygote: one already started on this thread (the GPU probe's), kept as this thread's lane's.
  Runner(const RunOptions& opt, const std::string& out, ResultsStore& store, Progress& progress,
         ResultsStore* predictions = nullptr, std::unique_ptr<Zygote> zygote = nullptr)
      : opt_(opt), out_(out), exe_(self_exe()), store_(store), predictions_(predictions),
        progress_(progress) {
    if (zygote && opt_.zygote) zygotes_[std::this_thread::get_id()] = std::move(zygote);
  }

  // The point's outcome: recorded earlier (resume) unless --force, else measured now.
  ProbeOutcome run(const Point& p, const std::string& gpu, const std::string& search = "",
                   const std::string& prefix = "") {
    return execute(p, gpu, search, prefix, store_, false);
  }
  // A prediction for a seeded search: the point on the emulated device, its row in the
  // predictions file (reused on resume like a probe), counted by no progress line.
  ProbeOutcome predict(const Point& p, const std::string& gpu, std::string_view search) {
    SWEEP_CHECK(predictions_ != nullptr, "a prediction without a predictions file");
    return execute(p, gpu, std::string(search), "", *predictions_, true);
  }

 private:
  ProbeOutcome execute(const Point& p, const std::string& gpu, const std::string& search,
                       const std::string& prefix, ResultsStore& store, bool prediction) {
    const std::string id = p.id();
    {
      std::lock_guard lock(mu_);
      if (!opt_.force || forced_.count(id)) {
        if (const auto* o = store.outcome(id)) {
          if (!prediction) progress_.finish(p, "done", "already in " + store.path(), prefix);
          return *o;
        }
      }
      if (!prediction) progress_.start(p);
    }
    auto row = point_columns(p);
    if (!search.empty()) row["search"] = search;
    IsolateOptions iso;
    iso.exe = exe_;
    iso.log_path = (std::filesystem::path(out_) / "logs" / (id + ".log")).string();
    // Both allocator readers get the axis value, "" unsetting both (set_alloc_conf).
    set_alloc_conf(iso.env, p.alloc_conf);
    if (opt_.snapshot && !prediction && (p.device == Device::kCuda || p.device == Device::kEmulated))
      iso.env["SWEEP_SNAPSHOT"] = (std::filesystem::path(out_) / "snapshots" / id).string();
    // `gpu` is already this process's CUDA_VISIBLE_DEVICES entry for the --gpus index.
    if (!gpu.empty()) iso.env["CUDA_VISIBLE_DEVICES"] = gpu;
    if (p.device == Device::kCuda)
      row["gpu_index"] = gpu.empty() ? visible_device(std::getenv("CUDA_VISIBLE_DEVICES"), 0) : gpu;
    iso.zygote = zygote();
    const WorkerResult r = run_isolated(p, iso);
    for (const auto& [k, v] : r.record.items())
      if (k != "status") row[k] = v;
    row["status"] = to_string(r.status);
    if (!r.message.empty()) row["message"] = r.message;
    if (r.exit_code) row["exit_code"] = *r.exit_code;
    if (r.signal) {
      row["signal"] = *r.signal;
      row["reason"] = std::string("SIG") + sigabbrev_np(*r.signal);
    }
    if (!r.started) row["reason"] = kNotStartedReason;
    row["wall_s"] = std::round(r.wall_s * 1000) / 1000;
    std::string detail;
    if (r.status == Status::kOk || r.status == Status::kOom)
      detail = "peak " + reports::format_bytes(row.value("peak_allocated_bytes", 0.0));
    if (r.status == Status::kOk && row.contains("tokens_per_s"))
      detail += ", " + std::to_string(static_cast<int64_t>(row["tokens_per_s"].get<double>())) + " tokens/s";
    // The line stays one terminal line: a failure in a few words, its message in the row and
    // the log (a CUDA out-of-memory message is 400 characters).
    const std::string why =
        r.status == Status::kOk ? "" : failure_brief(r.status, row.value("phase", std::string()),
                                                     row.value("reason", std::string()),
                                                     row.value("message", std::string()));
    char took[32];
    std::snprintf(took, sizeof took, "%s%.2f s", detail.empty() ? "" : ", ", r.wall_s);
    detail += took;
    if (!gpu.empty()) detail += " [gpu " + gpu + "]";
    std::lock_guard lock(mu_);
    store.append(row);
    forced_.insert(id);
    if (prediction) return *store.outcome(id);
    ++measured_;
    if (r.status == Status::kCrash || r.status == Status::kTimeout) ++failed_;
    count_kept_row();
    progress_.finish(p, r.status, detail, prefix, why);
    return *store.outcome(id);
  }

 public:

  void skip(const Point& p, const std::string& message) {
    std::lock_guard lock(mu_);
    if ((!opt_.force || forced_.count(p.id())) && store_.outcome(p.id())) {
      progress_.finish(p, "done", "already in " + store_.path());
      return;
    }
    auto row = point_columns(p);
    row["status"] = to_string(Status::kSkipped);
    row["reason"] = "implied-oom";
    row["message"] = message;
    store_.append(row);
    count_kept_row();
    forced_.insert(p.id());
    progress_.finish(p, Status::kSkipped, "implied-oom");
  }

  // Points measured by this run, and those that crashed or timed out (RunOutcome).
  std::size_t measured() const { return measured_; }
  std::size_t failed() const { return failed_; }

  void note(const std::string& line) {
    std::lock_guard lock(mu_);
    progress_.note(line);
  }
  void settle(std::size_t probes, std::size_t expected) {
    std::lock_guard lock(mu_);
    progress_.settle(probes, expected);
  }

 private:
  // This lane's pre-loaded worker (one per thread: a zygote serves one point at a time, and
  // it dies with the thread that started it); null with --no-zygote.
  Zygote* zygote() {
    if (!opt_.zygote) return nullptr;
    std::lock_guard lock(zygote_mu_);
    auto& z = zygotes_[std::this_thread::get_id()];
    if (!z) z = std::make_unique<Zygote>(exe_);
    return z.get();
  }

  const RunOptions& opt_;
  std::string out_, exe_;
  std::mutex zygote_mu_;
  std::map<std::thread::id, std::unique_ptr<Zygote>> zygotes_;
  ResultsStore& store_;
  ResultsStore* predictions_;
  Progress& progress_;
  std::mutex mu_;
  std::set<std::string> forced_;  // with --force: points already re-run by this run
  std::size_t measured_ = 0, failed_ = 0;
};

// The grid, one combination: batches in order; past an OOM, larger batches are implied.
void run_combination(Runner& runner, const std::vector<Point>& points, bool prune,
                     const std::string& gpu) {
  std::optional<int64_t> oom_at;
  for (const auto& p : points) {
    if (prune && oom_at && p.batch > *oom_at) {
      runner.skip(p, "batch " + std::to_string(*oom_at) + " already ran out of memory");
      continue;
    }
    if (runner.run(p, gpu).status == Status::kOom && !oom_at) oom_at = p.batch;
  }
}

// A search over one combination (max_batch: from its smallest grid batch to search_max_batch;
// max_seq: from its shortest grid seq, in kSeqStep steps, to search_max_seq or the model's
// longest input). With a predictor (an emulated card standing for the device,
// sweeps/runner/search.h), the same search on it first, its answer the search's seed.
// Returns the probes it took.
std::size_t search_combination(Runner& runner, const std::vector<Point>& points, const Config& cfg,
                               const std::string& gpu, const std::string& prefix,
                               const std::optional<EmulatedCard>& predictor) {
  const SearchedAxis axis = searched_axis(cfg.search);
  const Point base = points.front();
  const int64_t lo = axis.value_of(base);
  int64_t hi = std::max(lo, cfg.search_max_batch);
  if (axis.column == "seq") {
    int64_t longest = cfg.search_max_seq;
    if (const auto* spec = models::find_model(base.model); spec && models::longest_context(*spec) > 0)
      longest = std::min(longest, models::longest_context(*spec));
    hi = std::max(lo, longest / axis.step);
  }
  const auto budget = static_cast<double>(base.budget_bytes);
  std::optional<int64_t> predicted;
  std::string seed;
  if (predictor) {
    Point e = base;
    e.device = Device::kEmulated;
    e.card = *predictor;
    const auto t0 = std::chrono::steady_clock::now();
    const SearchResult pr = search_max_batch(lo, hi, budget, [&](int64_t v) {
      Point q = e;
      axis.set(q, v);
      return runner.predict(q, gpu, axis.search);
    }, std::nullopt, axis);
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (pr.stopped.empty()) {
      predicted = pr.largest_fit.value_or(lo - 1);
      seed = "; predicted " + (pr.largest_fit ? std::to_string(*pr.largest_fit * axis.step) : std::string("none")) +
             " by " + predictor_name(*predictor) + " in " + std::to_string(pr.probed.size()) +
             " runs, " + took + ", not counted as probes";
    } else {
      seed = "; no prediction (" + predictor_name(*predictor) + " stopped at " + pr.stopped + ")";
    }
  }
  const SearchResult r = search_max_batch(
      lo, hi, budget,
      [&](int64_t v) {
        Point p = base;
        axis.set(p, v);
        return runner.run(p, gpu, std::string(axis.search), prefix);
      },
      predicted, axis);
  Point shown = base;
  axis.set(shown, r.largest_fit.value_or(0));
  std::string line = prefix + (axis.column == "seq" ? "longest seq " : "max batch ") +
                     (r.largest_fit ? std::to_string(*r.largest_fit * axis.step) : std::string("none")) +
                     " for " + shown.label() + " (" + std::to_string(r.probed.size()) +
                     " probes in [" + std::to_string(lo * axis.step) + ", " +
                     std::to_string(hi * axis.step) + "]" + seed;
  if (!r.stopped.empty()) line += "; stopped at " + r.stopped;
  runner.note(line + ")");
  return r.probed.size();
}

}  // namespace

std::vector<std::string> resolve_gpus(const std::string& list, const std::string& config,
                                      Device device, const char* visible, int count) {
  std::vector<std::string> gpus;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) gpus.push_back(item);
  if (!gpus.empty() && device != Device::kCuda)
    throw UserError(config, 0, "--gpus",
                    "--gpus needs device cuda (this run is " +
                        std::string(device == Device::kEmulated ? "emulated: no GPU runs it" : "on the CPU") + ")",
                    "drop --gpus, or run with --device cuda on a GPU host");
  // Indices count the GPUs this process sees: each becomes the CUDA_VISIBLE_DEVICES entry that
  // names it (index i of an inherited CUDA_VISIBLE_DEVICES=2,3 is GPU "2" or "3").
  std::set<std::string> seen;
  for (auto& g : gpus) {
    const std::string given = g;
    if (g.find_first_not_of("0123456789") != std::string::npos || g.size() > 4 || std::stoi(g) >= count)
      throw UserError(config, 0, "--gpus", "no GPU " + g + " on this host (" + std::to_string(count) +
                          " visible)",
                      "list local GPU indices, e.g. --gpus 0,1");
    g = visible_device(visible, static_cast<std::size_t>(std::stoi(g)));
    // One lane per GPU: two on one GPU would time each other's points and share its memory.
    if (!seen.insert(g).second)
      throw UserError(config, 0, "--gpus", "'" + list + "' names GPU " + given + " twice",
                      "list each GPU once, e.g. --gpus 0,1");
  }
  return gpus;
}

std::map<std::string, std::optional<EmulatedCard>> lane_predictors(
    const std::vector<std::string>& lanes, const std::vector<HostGpu>& probed) {
  std::map<std::string, std::optional<EmulatedCard>> out;
  if (lanes.empty()) {  // one lane, on the first visible GPU: the first probe
    if (!probed.empty()) out[""] = predictor_for(probed.front());
    return out;
  }
  for (const auto& lane : lanes)
    for (const auto& g : probed)
      if (g.index == lane) out[lane] = predictor_for(g);
  return out;
}

std::vector<std::vector<Point>> combinations(const std::vector<Point>& points, std::string_view search) {
  const SearchedAxis axis = searched_axis(search);
  std::vector<std::vector<Point>> out;
  std::map<std::string, std::size_t> index;
  for (const auto& p : points) {
    auto [it, added] = index.emplace(combination_key(p, search), out.size());
    if (added) out.emplace_back();
    out[it->second].push_back(p);
  }
  for (auto& c : out)
    std::stable_sort(c.begin(), c.end(),
                     [&](const Point& a, const Point& b) { return axis.value_of(a) < axis.value_of(b); });
  return out;
}

void hold_lock(const std::string& lock_path, const std::string& out) {
  static std::mutex mu;
  static std::set<std::string> held;  // the locks this process holds, as named
  std::lock_guard guard(mu);
  if (held.count(lock_path)) return;
  std::filesystem::create_directories(std::filesystem::path(lock_path).parent_path());
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0)
    throw UserError(lock_path, 0, "out", std::string("cannot open the lock file: ") + std::strerror(errno),
                    "choose an output directory you can write to with --out DIR");
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    throw UserError(lock_path, 0, "out", "another sweep is writing to " + out,
                    "wait for it to finish, or choose another --out");
  held.insert(lock_path);
}

namespace {

// The config file with the command line's key=value overrides applied, in memory: every
// check of a config file applies, and an error in an override names it as typed. A run (not
// a dry run) keeps the config it ran as OUT/configs/sweep-config-<hash>.yaml: named by
// content, it never replaces the config of an earlier run.
Config load_with_overrides(const RunOptions& opt) {
  load_config(opt.config);  // the file itself first, with its own lines
  Config cfg = load_config(opt.config, opt.overrides);
  if (opt.dry_run) return cfg;
  const std::string text = apply_overrides(opt.config, opt.overrides);
  const auto dir = std::filesystem::path(opt.out.empty() ? cfg.out : opt.out) / "configs";
  const auto kept = dir / ("sweep-config-" + fnv1a_hex(text) + ".yaml");
  std::filesystem::create_directories(dir);
  install_file(kept, text, "the config with the overrides", "--out",
               "choose an output directory you can write to with --out DIR");
  if (!opt.quiet) std::fprintf(stderr, "config with the overrides: %s\n", kept.c_str());
  return cfg;
}

}  // namespace

RunSettings run_settings(const Config& cfg, Device device, const Budget& budget) {
  RunSettings run;
  run.device = device;
  run.budget_bytes = budget.bytes;
  run.budget_emulated = budget.emulated;
  if (device == Device::kEmulated) run.card = emulated_card_of(cfg);
  return run;
}

Config load_run_config(const RunOptions& opt, std::string& out) {
  Config cfg = opt.overrides.empty() ? load_config(opt.config) : load_with_overrides(opt);
  if (!opt.search.empty()) {
    cfg.search = opt.search == "none" ? "" : opt.search == "max-seq" ? "max_seq" : "max_batch";
    cfg.search_line = 0;
  }
  out = opt.out.empty() ? cfg.out : opt.out;
  if (const std::string c = control_character(out); !c.empty())
    throw UserError(opt.out.empty() ? cfg.path : "", 0, opt.out.empty() ? "out" : "--out",
                    "the directory's name holds " + c, "name the directory without control characters");
  return cfg;
}

namespace {

// --dry-run: the points and what they will take, estimated from the rows of the output
// directory (its resume skips the points recorded there) and of --estimate-from.
int dry_run(const RunOptions& opt, const Config& cfg, Device device,
            const std::string& out, const std::vector<std::vector<Point>>& combos, bool search) {
  WallHistory history;
  Recorded recorded;
  const auto own = std::filesystem::path(out) / "results.csv";
  if (std::filesystem::exists(own)) {
    const auto results = reports::read_results(own.string());
    history.add(results);
    if (!opt.force) recorded.add(results);
  }
  for (const auto& from : opt.estimate_from) history.add(reports::read_results(from));
  DryRun d{cfg.path, to_string(device), out, "", search, cfg.search_max_batch,
           estimate_plan(combos, cfg.search, history, recorded, cfg.search_max_batch)};
  // An emulated run says what it predicts: its rows will not be measurements.
  if (device == Device::kEmulated) d.predicted = predicted_by(emulated_card_of(cfg).name);
  std::cout << (opt.json ? d.json().dump(2) + "\n" : d.text());
  return 0;
}

}  // namespace

namespace {

using Predictors = std::map<std::string, std::optional<EmulatedCard>>;

// A search on a GPU or the CPU is seeded by the emulated device's prediction (search.h): the
// emulated card of the GPU each lane runs on (probing the GPUs if the budget did not), or the
// emulator configured as the CPU; by lane (--gpus entry, or "").
Predictors search_predictors(Device device, const std::vector<std::string>& gpus,
                             const char* visible, std::vector<HostGpu>& probed, Zygote* zygote,
                             bool quiet) {
  Predictors predictors;
  if (device == Device::kCpu) {
    predictors[""] = emulated_cpu();
  } else if (device == Device::kCuda) {
    if (probed.empty())
      probed = probe_gpus(self_exe(), gpus.empty() ? std::vector<std::string>{visible_device(visible, 0)} : gpus,
                          false, kProbeDeviceTimeoutS, zygote);
    predictors = lane_predictors(gpus, probed);
    for (const auto& g : probed)
      if (!predictor_for(g) && !quiet)
        std::fprintf(stderr, "note: GPU %s, %s, is no card of the table (`sweep gpus`): its "
                             "searches are not seeded by a prediction\n", g.index.c_str(), g.name.c_str());
  }
  return predictors;
}

// One thread per lane (one in all without --gpus), each taking the next of `count`
// combinations and running `run_one(i, lane)`. A thread that throws (a full disk) stops the
// others taking more; the first failure is rethrown here, after every row in flight is
// written, for the CLI to print.
void run_lanes(const std::vector<std::string>& lanes, std::size_t count,
               const std::function<void(std::size_t, const std::string&)>& run_one) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mu;
  auto work = [&](const std::string& gpu) noexcept {
    try {
      for (std::size_t i; (i = next++) < count;) run_one(i, gpu);
    } catch (...) {
      std::lock_guard lock(failure_mu);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };
  if (lanes.size() <= 1) {
    work(lanes.empty() ? "" : lanes.front());
  } else {
    std::vector<std::thread> threads;
    for (const auto& g : lanes) threads.emplace_back(work, g);
    for (auto& t : threads) t.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

// The CPU device builds each model's weights in fp32 in this machine's memory before anything
// else (then casts or quantises them, as from_pretrained would have loaded them): a model whose
// fp32 weights alone exceed the machine's memory cannot start there. Refused before the first
// point (a dry run too), naming the model's line.
namespace {
void check_cpu_memory(const Config& cfg, const std::vector<Point>& points) {
  const int64_t host = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  std::set<std::string> seen;
  for (const auto& p : points) {
    if (!seen.insert(p.model).second) continue;
    const auto* spec = models::find_model(p.model);
    if (!spec || spec->parameters * 4 <= host) continue;
    int line = 0;
    for (const auto& g : cfg.sweeps)
      for (const auto& m : g.models)
        if (!line && models::find_model(m) == spec) line = g.line;
    const int64_t need = spec->parameters * 4;
    throw UserError(cfg.path, line, "models",
                    p.model + ": its weights alone are " + reports::format_bytes(need) + " (" +
                        std::to_string(spec->parameters) +
                        " parameters in fp32, as the CPU device builds them before any cast or "
                        "quantisation), more than this machine's " + reports::format_bytes(host) +
                        " of memory",
                    "predict it instead: `--device emulated` with a `gpu:` card builds no weights "
                    "(`sweep fit " + p.model + " --gpu CARD`)");
  }
}
}  // namespace

// A max_seq search varies the tokens per sample: every model of the grid must take them.
namespace {
void check_seq_search(const Config& cfg, const std::vector<Point>& points) {
  if (cfg.search != "max_seq") return;
  for (const auto& p : points) {
    const auto* spec = models::find_model(p.model);
    if (spec && std::find(spec->axes.begin(), spec->axes.end(), "seq") == spec->axes.end())
      throw UserError(cfg.path, cfg.search_line, cfg.search_line ? "search" : "--search",
                      "search max_seq looks for the longest seq, and " + p.model +
                          " takes no tokens per sample (" + spec->family + ")",
                      "search max_batch for it, or give it a sweeps: group of its own in another config");
  }
}
}  // namespace

RunOutcome run_sweep(const RunOptions& opt) {
  std::string out;
  Config cfg = load_run_config(opt, out);
  RunSettings run;
  run.device = resolve_device(opt.device_given ? opt.device : cfg.device, cfg.path);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::vector<std::string> gpus =
      resolve_gpus(opt.gpus, opt.config, run.device, visible, cuda_device_count());
  // The budget: measured GPUs only where it matters (a target card or a budget on CUDA), each
  // the GPU its workers get: the --gpus ones, else the first visible one; its context
  // allowance only where the config does not give it.
  // The probe is forked from the zygote that then runs this thread's points.
  std::vector<HostGpu> probed;
  std::unique_ptr<Zygote> zygote = opt.zygote ? std::make_unique<Zygote>(self_exe()) : nullptr;
  if (run.device == Device::kCuda && (cfg.gpu || cfg.budget_gib > 0) && !opt.dry_run)
    probed = probe_gpus(self_exe(), gpus.empty() ? std::vector<std::string>{visible_device(visible, 0)}
                                                 : gpus,
                        probe_measures_context(cfg), kProbeDeviceTimeoutS, zygote.get());
  const Budget budget = resolve_budget(cfg, run.device, probed);
  run = run_settings(cfg, run.device, budget);
  run.max_points = opt.max_points;
  auto points = expand_grid(cfg, run);
  if (run.device == Device::kCpu) check_cpu_memory(cfg, points);
  check_seq_search(cfg, points);
  auto combos = combinations(points, cfg.search);
  const bool search = !cfg.search.empty();
  // A Slurm array task runs its own share of the combinations into its own shard file.
  std::optional<ShardTask> task;
  if (opt.slurm.task >= 0) {
    task.emplace(out, opt.slurm.task, combos, !cfg.search.empty());
    combos = task->owned(combos);
    points.clear();
    for (const auto& c : combos) points.insert(points.end(), c.begin(), c.end());
  }
  if (opt.dry_run) return {dry_run(opt, cfg, run.device, out, combos, search), out};
  make_output_directory(out, "--out");  // a dangling link said "File exists"
  // One run per output directory (per shard for a Slurm task): the lock is held until this
  // process exits (or dies).
  const std::string lock_path = task ? task->lock_path() : (std::filesystem::path(out) / ".lock").string();
  hold_lock(lock_path, out);
  ResultsStore store(task ? task->shard_dir() : out, task ? task->shard_file() : "results.csv");
  if (task) task->begin(store, combos);
  // A local run into the output of a Slurm sweep first takes in what its shards hold.
  int bad_shards = 0;
  if (const int n = task ? 0 : merge_shard_rows(store, out, bad_shards); n > 0 && !opt.quiet)
    std::fprintf(stderr, "merged %d rows from %s\n", n, shard_dir(out).c_str());
  if (bad_shards)
    throw UserError(shard_dir(out), 0, "shards", "a shard does not parse (named above)",
                      "repair or move it, then run again");
  std::filesystem::create_directories(std::filesystem::path(out) / "logs");
  // Not in a Slurm array task (its shard is its only file) nor with --no-prediction.
  const Predictors predictors = search && opt.predict && !task
                                    ? search_predictors(run.device, gpus, visible, probed,
                                                        zygote.get(), opt.quiet)
                                    : Predictors{};
  const bool seeded = std::any_of(predictors.begin(), predictors.end(), [](auto& p) { return p.second.has_value(); });
  std::optional<ResultsStore> predictions;
  if (seeded) predictions.emplace(out, kPredictionsFile);
  const std::size_t per_search = seeded ? 2 : kProbesPerSearch;
  Progress progress(search ? combos.size() * per_search : points.size(), opt.quiet, search);
  // Rows, not points: a point re-run (--force) or skipped is a row of its own on disk.
  exit_on_interrupt(store.path(), static_cast<int>(store.rows()), search ? "probes" : "points");
  if (!budget.note.empty() && !opt.quiet) std::fprintf(stderr, "%s\n", budget.note.c_str());
  if (opt.snapshot) {
    // An emulated card writes its allocator model's segments and trace, in the same format.
    if (run.device == Device::kCuda || run.device == Device::kEmulated)
      std::filesystem::create_directories(std::filesystem::path(out) / "snapshots");
    else
      std::fprintf(stderr, "note: --snapshot records the CUDA allocator's history; on the CPU "
                           "there is none, so no snapshots are written\n");
  }
  Runner runner(opt, out, store, progress, predictions ? &*predictions : nullptr, std::move(zygote));

  // An emulated card is no device to share: one worker per core, each its own process.
  std::vector<std::string> lanes = gpus;
  if (run.device == Device::kEmulated && lanes.empty())
    lanes.assign(std::max(1u, std::thread::hardware_concurrency()), "");
  run_lanes(lanes, combos.size(), [&](std::size_t i, const std::string& gpu) {
    if (search) {
      const std::string prefix =
          "search " + std::to_string(i + 1) + "/" + std::to_string(combos.size()) + ": ";
      const auto lane = predictors.find(gpu);
      runner.settle(search_combination(runner, combos[i], cfg, gpu, prefix,
                                       lane == predictors.end() ? std::nullopt : lane->second),
                    per_search);
    } else {
      run_combination(runner, combos[i], cfg.prune_oom, gpu);
    }
    if (task) task->finished(combos[i]);
  });
  if (!opt.quiet) std::fprintf(stderr, "results: %s\n", store.path().c_str());
  // A Slurm task leaves the report to the merge job, which writes results.csv.
  return {0, out, !task, !task, runner.measured(), runner.failed()};
}

}  // namespace sweep
