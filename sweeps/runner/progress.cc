// Progress lines; see progress.h.
#include "sweeps/runner/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>

#include "reports/results/rows.h"    // format_bytes
#include "sweeps/runner/estimate.h"  // duration_text

namespace sweep {

Progress::Progress(std::size_t total, bool quiet, bool estimated)
    : total_(total), quiet_(quiet), estimated_(estimated), tty_(isatty(STDERR_FILENO)) {}

void Progress::start(const Point& p) {
  live("ok " + std::to_string(ok_) + " oom " + std::to_string(oom_) + " skipped " +
       std::to_string(skipped_) + " | " + p.label());
}

void Progress::start_work(const std::string& what) { live(what); }

void Progress::live(const std::string& text) {
  if (first_start_ == clock::time_point{}) first_start_ = clock::now();
  if (quiet_ || !tty_) return;
  std::fprintf(stderr, "\r\033[K[%s] %s%s", count().c_str(), text.c_str(), eta().c_str());
}

void Progress::finish_work(const std::string& what, const std::string& detail) {
  ++done_;
  ++measured_;
  if (quiet_) return;
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "[%s] %s%s%s%s\n", count().c_str(), what.c_str(), detail.empty() ? "" : "  ",
               detail.c_str(), eta().c_str());
}

void Progress::finish(const Point& p, Status status, const std::string& detail,
                      const std::string& prefix, const std::string& why) {
  ok_ += status == Status::kOk;
  oom_ += status == Status::kOom;
  skipped_ += status == Status::kSkipped;
  if (status != Status::kSkipped) ++measured_;
  finish(p, to_string(status) + (why.empty() ? "" : " (" + why + ")"), detail, prefix);
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

namespace {

// The allocation an out-of-memory message says failed, in bytes: CUDA's caching allocator
// writes "Tried to allocate 1.23 GiB" (its format_size: bytes, KiB, MiB, GiB), the CPU
// tracking allocator "tried to allocate 1048576 bytes". Negative when it says none.
double asked_bytes(std::string_view message) {
  static const std::regex kAsked(R"(tried to allocate ([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB))",
                                 std::regex::icase);
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(message.begin(), message.end(), m, kAsked)) return -1;
  const std::string unit = m[2].str();
  const double scale = unit == "KiB" ? 1024.0 : unit == "MiB" ? reports::kMiB
                       : unit == "GiB" ? reports::kGiB : unit == "TiB" ? 1024.0 * reports::kGiB : 1.0;
  return std::stod(m[1].str()) * scale;
}

}  // namespace

std::string failure_brief(Status status, std::string_view phase, std::string_view reason,
                          std::string_view message) {
  constexpr std::size_t kMessageChars = 60;  // with the point's label, one 160-column line
  std::string what;
  const double asked = status == Status::kOom ? asked_bytes(message) : -1;
  if (asked >= 0) {
    what = reports::format_bytes(asked) + " asked";
  } else if (!reason.empty()) {
    what = reason;
  } else {
    const std::string_view first = message.substr(0, message.find('\n'));
    what = first.size() > kMessageChars ? std::string(first.substr(0, kMessageChars - 3)) + "..." : std::string(first);
  }
  if (phase.empty()) return what;
  return what.empty() ? std::string(phase) : std::string(phase) + ", " + what;
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
