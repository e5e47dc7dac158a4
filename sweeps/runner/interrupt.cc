// SIGINT during a run; see interrupt.h.
#include "sweeps/runner/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <iterator>
#include <mutex>

namespace sweep {
namespace {

// What the handler writes, prepared outside it: it may only call async-signal-safe functions
// (write, _exit), so the count is formatted by hand.
std::atomic<int> kept_rows{0};
std::string before_count, after_count, after_one;  // "\ninterrupted: " N " probes kept in ...\n"

void on_sigint(int) {
  char digits[16];
  const int kept = kept_rows.load();
  int n = kept, len = 0;
  do {
    digits[sizeof digits - 1 - len++] = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n > 0 && len < 15);
  auto out = [](const char* p, std::size_t size) {
    while (size > 0) {
      const ssize_t w = write(STDERR_FILENO, p, size);
      if (w <= 0) return;
      p += w;
      size -= static_cast<std::size_t>(w);
    }
  };
  out(before_count.data(), before_count.size());
  out(digits + sizeof digits - len, static_cast<std::size_t>(len));
  const std::string& after = kept == 1 ? after_one : after_count;
  out(after.data(), after.size());
  _exit(130);
}

}  // namespace

std::string shell_quoted(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                               "0123456789-_./=:,+@%") == std::string::npos)
    return text;
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), {});
  std::string line;
  for (std::size_t start = 0; start < all.size();) {
    const std::size_t end = all.find('\0', start);
    const std::string arg = all.substr(start, end == std::string::npos ? end : end - start);
    if (!line.empty()) line += ' ';
    line += shell_quoted(arg);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return line;
}

void exit_on_interrupt(const std::string& results_path, int kept, const std::string& noun) {
  static std::mutex mu;
  static std::string installed;
  std::lock_guard lock(mu);
  if (installed == results_path) return;
  // Blocked while the texts change, so the handler never reads half of one.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  kept_rows = kept;
  before_count = "\ninterrupted: ";
  const std::string rest = " kept in " + results_path +
                           " (every one that finished; the one in flight is measured again)\n"
                           "hint: resume with the same command, which reuses them:\n  " +
                           command_line() + "\n";
  after_count = " " + noun + rest;
  after_one = " " + (noun.ends_with('s') ? noun.substr(0, noun.size() - 1) : noun) + rest;  // "probes" -> "probe"
  installed = results_path;
  std::signal(SIGINT, on_sigint);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void count_kept_row() { ++kept_rows; }

}  // namespace sweep
