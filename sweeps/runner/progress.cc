// Progress lines; see progress.h.
#include "sweeps/runner/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "sweeps/runner/estimate.h"  // duration_text

namespace sweep {

Progress::Progress(std::size_t total, bool quiet, bool estimated)
    : total_(total), quiet_(quiet), estimated_(estimated), tty_(isatty(STDERR_FILENO)) {}

void Progress::start(const Point& p) {
  if (first_start_ == clock::time_point{}) first_start_ = clock::now();
  if (quiet_ || !tty_) return;
  std::fprintf(stderr, "\r\033[K[%s] ok %d oom %d skipped %d | %s%s", count().c_str(), ok_, oom_,
               skipped_, p.label().c_str(), eta().c_str());
}

void Progress::finish(const Point& p, Status status, const std::string& detail,
                      const std::string& prefix) {
  ok_ += status == Status::kOk;
  oom_ += status == Status::kOom;
  skipped_ += status == Status::kSkipped;
  if (status != Status::kSkipped) ++measured_;
  finish(p, to_string(status), detail, prefix);
}

void Progress::finish(const Point& p, const std::string& label, const std::string& detail,
                      const std::string& prefix) {
  ++done_;
  if (quiet_) return;
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "[%s] %s%-7s %s%s%s%s\n", count().c_str(), prefix.c_str(), label.c_str(),
               p.label().c_str(), detail.empty() ? "" : "  ", detail.c_str(), eta().c_str());
}

void Progress::settle(std::size_t probes, std::size_t expected) {
  total_ = std::max(done_, total_ + probes - std::min(expected, total_ + probes));
}

void Progress::note(const std::string& line) {
  if (quiet_) return;
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", line.c_str());
}

// Never past the total: a search that takes more probes than were counted for it raises the
// estimate ("[301/~302]") until it settles, and a count that outgrew a fixed total shows it.
std::string Progress::count() const {
  if (!total_) return std::to_string(done_);
  const std::size_t shown = done_ <= total_ ? total_ : estimated_ ? done_ + 1 : done_;
  return std::to_string(done_) + (estimated_ && done_ < shown ? "/~" : "/") + std::to_string(shown);
}

// From the first point measured on: the time since it started over the points measured
// since (reused points cost nothing), times the points left.
std::string Progress::eta() const {
  if (!measured_ || done_ >= total_) return "";
  const double per = std::chrono::duration<double>(clock::now() - first_start_).count() /
                     static_cast<double>(measured_);
  return " | ETA " + duration_text(per * static_cast<double>(total_ - done_));
}

}  // namespace sweep
