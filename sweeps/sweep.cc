// The sweep loop; see sweep.h. Failures are results: every point ends as a row.
#include "sweeps/sweep.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "reports/report.h"
#include "reports/results.h"
#include "sweep_version.h"
#include "sweeps/config.h"
#include "sweeps/env.h"
#include "sweeps/grid.h"
#include "sweeps/isolate.h"
#include "sweeps/results_store.h"
#include "sweeps/schema.h"

namespace sweep {
namespace {

std::string resolve_device(const std::string& wanted, const std::string& config_path) {
  const int gpus = cuda_device_count();
  if (wanted == "auto") return gpus > 0 ? "cuda" : "cpu";
  if (wanted == "cuda" && gpus == 0)
    throw ConfigError(config_path, 0, "device", "device cuda requested but no GPU is visible",
                      "use --device cpu (or auto) on this machine");
  return wanted;
}

nlohmann::json point_columns(const Point& p) {
  nlohmann::json j;
  j["schema_version"] = schema::kSchemaVersion;
  j["suite_version"] = SWEEP_VERSION;
  j["point_id"] = p.id();
  j["model"] = p.model;
  j["family"] = p.family;
  j["mode"] = p.mode;
  j["batch"] = p.batch;
  if (p.seq) j["seq"] = p.seq;
  if (p.target_seq) j["target_seq"] = p.target_seq;
  if (p.audio_s) j["audio_s"] = p.audio_s;
  j["precision"] = p.precision;
  j["checkpointing"] = p.checkpointing;
  j["accumulation"] = p.accumulation;
  j["optimizer"] = p.optimizer;
  j["alloc_conf"] = p.alloc_conf;
  j["steps"] = p.steps;
  j["warmup_steps"] = p.warmup_steps;
  j["repetitions"] = p.repetitions;
  j["budget_bytes"] = p.budget_bytes;
  j["budget_emulated"] = p.budget_emulated ? 1 : 0;
  j["device"] = p.device;
  j["torch_version"] = torch_version();
  j["host"] = host_name();
  j["git_commit"] = SWEEP_GIT_COMMIT;
  j["timestamp"] = rfc3339_now();
  return j;
}

// Live progress on a terminal, one plain line per point elsewhere, nothing with --quiet.
class Progress {
 public:
  Progress(std::size_t total, bool quiet)
      : total_(total), quiet_(quiet), tty_(isatty(STDERR_FILENO)), t0_(clock::now()) {}
  void start(const Point& p) {
    if (quiet_ || !tty_) return;
    std::fprintf(stderr, "\r\033[K[%zu/%zu] ok %d oom %d skipped %d | %s%s", done_, total_, ok_,
                 oom_, skipped_, p.label().c_str(), eta().c_str());
  }
  void finish(const Point& p, const std::string& status, const std::string& detail) {
    ++done_;
    if (status == "ok") ++ok_;
    else if (status == "oom") ++oom_;
    else if (status == "skipped") ++skipped_;
    if (quiet_) return;
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "[%zu/%zu] %-7s %s%s%s\n", done_, total_, status.c_str(),
                 p.label().c_str(), detail.empty() ? "" : "  ", detail.c_str());
  }

 private:
  using clock = std::chrono::steady_clock;
  std::string eta() const {
    if (done_ == 0) return "";
    const double per = std::chrono::duration<double>(clock::now() - t0_).count() / done_;
    return " | ETA " + std::to_string(static_cast<int>(per * (total_ - done_))) + " s";
  }
  std::size_t total_, done_ = 0;
  int ok_ = 0, oom_ = 0, skipped_ = 0;
  bool quiet_, tty_;
  clock::time_point t0_;
};

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

// Key of the "other axes" of a point, for OOM pruning along batch.
std::string prune_key(const Point& p) {
  Point q = p;
  q.batch = 0;
  return q.id();
}

}  // namespace

int run_sweep(const RunOptions& opt) {
  const Config cfg = load_config(opt.config);
  RunSettings run;
  run.device = resolve_device(opt.device_given ? opt.device : cfg.device, cfg.path);
  if (cfg.budget_gib > 0) run.budget_bytes = static_cast<int64_t>(cfg.budget_gib * (1ull << 30));
  if (cfg.gpu && run.device == "cpu") {
    // No CUDA context on the CPU: the emulated card's memory less the configured allowance.
    const double usable = cfg.gpu->memory_gib - cfg.gpu->context_gib.value_or(0.0);
    run.budget_bytes = static_cast<int64_t>(usable * (1ull << 30));
    run.budget_emulated = true;
  }
  const auto points = expand_grid(cfg, run);
  const std::string out = opt.out.empty() ? cfg.out : opt.out;
  if (opt.dry_run) {
    for (const auto& p : points) std::cout << p.id() << "  " << p.label() << "\n";
    std::cout << points.size() << " points, device " << run.device << ", output " << out << "\n";
    return 0;
  }
  std::filesystem::create_directories(out);
  // One run per output directory: the lock is held until this process exits (or dies).
  const std::string lock_path = (std::filesystem::path(out) / ".lock").string();
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    throw ConfigError(lock_path, 0, "out", "another sweep is writing to " + out,
                      "wait for it to finish, or choose another --out");
  ResultsStore store(out);
  std::filesystem::create_directories(std::filesystem::path(out) / "logs");
  Progress progress(points.size(), opt.quiet);
  std::map<std::string, int64_t> oom_at;  // prune key -> smallest batch that OOMed
  const std::string exe = self_exe();
  for (const auto& p : points) {
    const std::string id = p.id();
    if (!opt.force && store.recorded().count(id)) {
      progress.finish(p, "done", "already in " + store.path());
      continue;
    }
    auto row = point_columns(p);
    auto pk = prune_key(p);
    if (cfg.prune_oom && oom_at.count(pk) && p.batch > oom_at[pk]) {
      row["status"] = schema::kSkipped;
      row["reason"] = "implied-oom";
      row["message"] = "batch " + std::to_string(oom_at[pk]) + " already ran out of memory";
      store.append(row);
      progress.finish(p, "skipped", "implied-oom");
      continue;
    }
    progress.start(p);
    IsolateOptions iso;
    iso.exe = exe;
    iso.log_path = (std::filesystem::path(out) / "logs" / (id + ".log")).string();
    iso.env["PYTORCH_CUDA_ALLOC_CONF"] = p.alloc_conf;
    const WorkerResult r = run_isolated(p, iso);
    for (const auto& [k, v] : r.record.items())
      if (k != "status") row[k] = v;
    row["status"] = r.status;
    if (!r.message.empty()) row["message"] = r.message;
    if (r.exit_code) row["exit_code"] = *r.exit_code;
    if (r.signal) {
      row["signal"] = *r.signal;
      row["reason"] = std::string("SIG") + sigabbrev_np(*r.signal);
    }
    row["wall_s"] = std::round(r.wall_s * 1000) / 1000;
    store.append(row);
    std::string detail;
    if (r.status == "ok" || r.status == "oom")
      detail = "peak " + gib(row.value("peak_allocated_bytes", 0.0));
    if (r.status == "ok" && row.contains("step_ms"))
      detail += ", " + std::to_string(static_cast<int64_t>(row["tokens_per_s"].get<double>())) + " tokens/s";
    if (r.status != "ok") detail += (detail.empty() ? "" : ", ") + r.message;
    if (r.status == "oom" && (!oom_at.count(pk) || p.batch < oom_at[pk])) oom_at[pk] = p.batch;
    progress.finish(p, r.status, detail);
  }
  if (!opt.quiet) std::fprintf(stderr, "results: %s\n", store.path().c_str());
  // The report reads only the results file, like any later `sweep report`.
  try {
    reports::write_report(out, out);
    if (!opt.quiet) std::fprintf(stderr, "report:  %s/report.md (and report.html)\n", out.c_str());
  } catch (const reports::ResultsError& e) {
    std::fprintf(stderr, "error: %s\n", e.located().c_str());
    return 2;
  }
  return 0;
}

}  // namespace sweep
