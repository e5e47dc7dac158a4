// fork/exec of the worker with a result pipe on fd 3, a deadline, and a process group so
// that a timeout kills everything the worker started. PR_SET_PDEATHSIG ends the worker if
// the parent dies (SIGKILL included), so no orphan holds a GPU.
#include "sweeps/runner/isolate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace sweep {
namespace {

// The status the worker's record names; nullopt when it names none (a record cut short).
std::optional<Status> worker_status(const WorkerResult& r) {
  if (!r.record.is_object() || !r.record.contains("status") || !r.record["status"].is_string())
    return std::nullopt;
  return parse_as<Status>(r.record["status"].get<std::string>());
}

std::string log_tail(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.size() > 300 ? last.substr(0, 300) : last;
}

}  // namespace

std::string self_exe() {
  // Read once: the path this binary had when the process first asked, whatever happens to the
  // file later (exec_path).
  static const std::string path = [] {
    std::vector<char> buf(4096);
    const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string("sweep");
  }();
  return path;
}

std::string exec_path(const std::string& exe) {
  // This binary may have been rebuilt or removed since the run started (a rebuild during a
  // long sweep): its path then names another build, or nothing. /proc/self/exe, resolved by
  // the kernel in the forked child that execs it, is still the run's own binary, so every
  // worker and zygote runs the code the run started with.
  return exe == self_exe() ? "/proc/self/exe" : exe;
}

CommandOutput run_command(const std::vector<std::string>& argv, const CommandOptions& options) {
  CommandOutput r;
  if (argv.empty()) return r;
  // Built before fork: the child of a threaded process may only make async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string program = exec_path(argv.front());
  const std::vector<std::string> environment = environment_with(options.env);
  std::vector<char*> envp;
  for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return r;
  pid_t pid = -1;
  const bool from_zygote = options.zygote && argv.front() == options.zygote->exe();
  if (from_zygote) {
    if (const auto child = options.zygote->spawn_command({argv.begin() + 1, argv.end()}, options.env,
                                                         fds[1], options.keep_stderr ? 2 : fds[1]))
      pid = *child;
    if (pid < 0) {  // no zygote could serve: exec it
      close(fds[0]);
      close(fds[1]);
      CommandOptions exec = options;
      exec.zygote = nullptr;
      return run_command(argv, exec);
    }
  } else {
    const pid_t parent = getpid();
    pid = fork();
    if (pid < 0) {
      close(fds[0]);
      close(fds[1]);
      r.output = std::string("fork: ") + strerror(errno);
      return r;
    }
    if (pid == 0) {
      setpgid(0, 0);  // a timeout kills the group: what the command started too
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // and so does this process's end (Ctrl-C included)
      if (getppid() != parent) _exit(126);
      dup2(fds[1], 1);
      if (!options.keep_stderr) dup2(fds[1], 2);
      execvpe(program.c_str(), args.data(), envp.data());
      dprintf(1, "%s: %s", args[0], strerror(errno));
      _exit(127);
    }
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.timeout_s);
  char buf[4096];
  while (true) {
    int wait_ms = -1;
    if (options.timeout_s > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        r.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the command (and what shares its output) closed it
    r.output.append(buf, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  if (r.timed_out) kill(-pid, SIGKILL);
  int status = 0;
  if (from_zygote) {
    const auto ended = options.zygote->wait(pid);
    if (!ended) {  // the zygote died under it, and the command with it: run it again, exec'd
      CommandOptions exec = options;
      exec.zygote = nullptr;
      return run_command(argv, exec);
    }
    status = *ended;
  } else {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  r.exit_code = !r.timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

namespace {

struct Started {
  pid_t pid = -1;
  bool from_zygote = false;
};

// The point's worker, its fd 3 the write end of the result pipe: forked by the zygote when
// there is one and it serves, else fork and exec `sweep worker`.
Started start_worker(const std::string& point_json, const IsolateOptions& opt, int result_fd) {
  Started w;
  if (opt.zygote) {
    const int log = open(opt.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log >= 0) {
      if (const auto child = opt.zygote->spawn(point_json, opt.env, log, result_fd)) {
        w.pid = *child;
        w.from_zygote = true;
      }
      close(log);
    }
  }
  if (w.pid >= 0) return w;
  const pid_t parent = getpid();
  const std::string program = exec_path(opt.exe);
  w.pid = fork();  // no zygote (or it could not serve): exec a worker
  if (w.pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (w.pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
    dup2(result_fd, 3);  // dup2 clears close-on-exec on the copy
    int log = open(opt.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    for (const auto& [k, v] : opt.env) {
      if (v.empty()) unsetenv(k.c_str());
      else setenv(k.c_str(), v.c_str(), 1);
    }
    const char* argv[] = {opt.exe.c_str(), "worker", "--point", point_json.c_str(),
                          "--result-fd", "3", nullptr};
    execv(program.c_str(), const_cast<char* const*>(argv));
    _exit(127);
  }
  return w;
}

// What the worker writes on its result pipe, appended to `out`, until it closes it (it
// exited) or `deadline` passes (true: it passed); with `first_byte`, also once `out` holds
// anything (the worker's start, kWorkerStarted).
using Deadline = std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<double>>;
bool read_result(int fd, Deadline deadline, std::string& out, bool first_byte = false) {
  char buf[4096];
  while (true) {
    if (first_byte && !out.empty()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd pfd{fd, POLLIN, 0};
    int pr = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) return false;  // EOF: the worker closed fd 3 (exited)
  }
}

// The point's outcome from the worker's record and exit: the record's status when it exited
// 0, else a timeout or a crash with why (one that never started: no result).
void classify(WorkerResult& r, const Point& p, const IsolateOptions& opt, bool timed_out,
              bool never_started) {
  if (never_started) {
    r.status = Status::kCrash;
    std::ostringstream s;
    s << "the worker did not start within " << opt.start_limit_s
      << " s (stopped or starved before it ran) and was killed; no result: the point runs again "
         "on resume";
    r.message = s.str();
    r.started = false;
  } else if (timed_out) {
    r.status = Status::kTimeout;
    std::ostringstream s;
    s << "killed after the point's time limit of " << p.timeout_s << " s";
    r.message = s.str();
  } else if (const auto status = worker_status(r); status && r.exit_code == 0) {
    r.status = *status;
  } else {
    r.status = Status::kCrash;
    if (r.record.is_object() && r.record.contains("message"))
      r.message = r.record["message"].get<std::string>();
    else if (r.signal)
      r.message = std::string("killed by signal ") + std::to_string(*r.signal) + " (SIG" +
                  sigabbrev_np(*r.signal) + ")";
    else
      r.message = log_tail(opt.log_path);
    // 126: it could not set itself up as the runner's child; 127: the exec failed. Either
    // way no worker ran, and the row is no result (started = false).
    if (r.exit_code == 127) r.message = "could not start the worker: " + opt.exe;
    if (r.exit_code == 126) r.message = "the worker could not start under the runner";
    r.started = !(r.exit_code == 126 || r.exit_code == 127);
  }
}

}  // namespace

WorkerResult run_isolated(const Point& p, const IsolateOptions& opt) {
  WorkerResult r;
  const std::string point_json = nlohmann::json(p).dump();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  const Started w = start_worker(point_json, opt, fds[1]);
  close(fds[1]);
  // The point's clock starts with its own worker, when it says it started: waits on a zygote
  // (its start, its answer) and on a worker that has not run yet (stopped, starved) are the
  // runner's, never the point's time. A worker silent for start_limit_s never started.
  const auto spawned = std::chrono::steady_clock::now();
  auto t0 = spawned;
  std::string out;
  const bool never_started =
      read_result(fds[0], t0 + std::chrono::duration<double>(opt.start_limit_s), out, true);
  if (!out.empty() && out.front() == kWorkerStarted) t0 = std::chrono::steady_clock::now();
  const bool timed_out =
      !never_started && read_result(fds[0], t0 + std::chrono::duration<double>(p.timeout_s), out);
  if (timed_out || never_started) {
    kill(-w.pid, SIGKILL);
    kill(w.pid, SIGKILL);
  }
  close(fds[0]);
  int st = 0;
  if (w.from_zygote) {
    const auto status = opt.zygote->wait(w.pid);
    if (!status) {
      // The zygote died under the point (killed from outside): its child died with it, so
      // the point has no outcome of its own. Run it again, exec'd. (A zygote that stalled
      // after its child ended was killed, and the child's own status came back.)
      IsolateOptions again = opt;
      again.zygote = nullptr;
      return run_isolated(p, again);
    }
    st = *status;
  } else {
    while (waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - spawned).count();
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  // The record: the first line after the start byte.
  if (const auto begin = out.find_first_not_of(kWorkerStarted); begin != std::string::npos) {
    try {
      r.record = nlohmann::json::parse(out.substr(begin, out.find('\n', begin) - begin));
    } catch (const nlohmann::json::exception&) {
      r.record = nlohmann::json();
    }
  }
  classify(r, p, opt, timed_out, never_started);
  return r;
}

}  // namespace sweep
