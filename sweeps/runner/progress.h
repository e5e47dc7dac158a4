// A run's progress on stderr: live on a terminal, one plain line per point (or per unit of
// other work) elsewhere, nothing with --quiet. Each line has the count (k/N; k/~N for a search, whose number of probes is
// known only as it goes), the point's time and, from the first point measured on, the time
// left at the pace measured so far ("| ETA 1 min 10 s").
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "reports/results/vocab.h"
#include "sweeps/worker/point.h"

namespace sweep {

// Not thread-safe: the runner calls it under its lock when points run concurrently (--gpus).
class Progress {
 public:
  // total: the points, or for a search the probes expected (`estimated`).
  Progress(std::size_t total, bool quiet, bool estimated = false);
  // A point starts (the live line on a terminal).
  void start(const Point& p);
  // Work that is not one point (`sweep tables`' model and input: several fits), counted and
  // timed as a point is: "[3/28] a10g, gpt2, seq 512  14 searches in 41.8 s | ETA 12 min".
  void start_work(const std::string& what);
  void finish_work(const std::string& what, const std::string& detail);
  // A point that ran (or was skipped) now, counted by its status; `why` follows the status
  // ("oom (forward, 1.23 GiB asked)", failure_brief).
  void finish(const Point& p, Status status, const std::string& detail, const std::string& prefix = "",
              const std::string& why = "");
  // A point an earlier run recorded ("done"): counted, not timed.
  void finish(const Point& p, const std::string& label, const std::string& detail,
              const std::string& prefix = "");
  // A search that took `probes` where `expected` were counted for it: the total follows.
  void settle(std::size_t probes, std::size_t expected);
  // One line that counts no point (search summaries).
  void note(const std::string& line);

 private:
  using clock = std::chrono::steady_clock;
  void live(const std::string& text);  // the line a terminal shows while work runs
  std::string count() const;
  std::string eta() const;

  std::size_t total_, done_ = 0, measured_ = 0;
  int ok_ = 0, oom_ = 0, skipped_ = 0;
  bool quiet_, estimated_, tty_;
  clock::time_point first_start_;
};

// A failed point's outcome in a few words, so that its progress line stays one terminal line
// (the full message stays in the row and the worker's log): the phase and, for an
// out-of-memory error, the size of the allocation that failed ("forward, 1.23 GiB asked"),
// else the reason ("cublas-alloc-failed", "SIGSEGV") or the message's start. "" when none is known.
std::string failure_brief(Status status, std::string_view phase, std::string_view reason,
                          std::string_view message);

}  // namespace sweep
