// The pre-loaded worker; see zygote.h. The control socket is a SOCK_SEQPACKET socketpair:
// each message one JSON object, the spawn request carrying the log and result fds
// (SCM_RIGHTS). Request {"point", "environ"} or {"argv", "environ"} -> reply {"pid"} (or
// {"error"}), then, once the child ended, {"status": wait status}.
#include "sweeps/runner/zygote.h"

#include "sweeps/runner/isolate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <sstream>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

extern char** environ;

namespace sweep {
namespace {

// A point and an environment: a few KiB. Below malloc's mmap threshold (see resident_file_pages);
// a larger request is refused and the runner execs that worker instead.
constexpr std::size_t kMaxMessage = 96 << 10;

bool send_message(int fd, const nlohmann::json& j, const std::vector<int>& fds = {}) {
  const std::string s = j.dump();
  iovec iov{const_cast<char*>(s.data()), s.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<std::size_t>(1, fds.size())));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    // MSG_NOSIGNAL: a peer that died is an error here, not a SIGPIPE; neither side changes its
    // SIGPIPE disposition, which a child would inherit.
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<std::size_t>(n) == s.size();
    if (errno != EINTR) return false;
  }
}

// One message (and the fds it carries, close-on-exec); nullopt on EOF or error. With
// `timeout_ms` >= 0, nullopt also when nothing came in time.
std::optional<nlohmann::json> recv_message(int fd, std::vector<int>* fds = nullptr, int timeout_ms = -1) {
  if (timeout_ms >= 0) {
    pollfd p{fd, POLLIN, 0};
    int r;
    while ((r = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    if (r <= 0) return std::nullopt;
  }
  // The message's own size first (SOCK_SEQPACKET keeps boundaries): a buffer of that size,
  // so that the zygote's heap, which its children inherit, holds no large leftovers.
  char probe;
  ssize_t size;
  while ((size = recv(fd, &probe, 1, MSG_PEEK | MSG_TRUNC)) < 0 && errno == EINTR) {
  }
  if (size <= 0 || static_cast<std::size_t>(size) > kMaxMessage) return std::nullopt;
  std::string buf(static_cast<std::size_t>(size), '\0');
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n <= 0) return std::nullopt;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    std::vector<int> got(count);
    std::memcpy(got.data(), CMSG_DATA(c), sizeof(int) * count);
    if (fds) fds->insert(fds->end(), got.begin(), got.end());
    else
      for (int f : got) close(f);
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return std::nullopt;
  try {
    buf.resize(static_cast<std::size_t>(n));
    return nlohmann::json::parse(buf);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// The zygote must be what it claims: one thread, so that fork() copies a whole process.
// Anything that started a thread (an OpenMP pool, CUDA) makes it refuse to serve.
int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

// The pages of mapped files (LibTorch's code and data) that are resident in this process: an
// exec'd worker touches them while loading, so they count in its resident set (a CPU row's
// device_used_bytes). fork() copies no page tables of file mappings without private
// copies; a child re-maps these pages (populate_pages) to start with the resident set an
// exec'd worker starts with.
//
// No allocation here reaches malloc's mmap threshold (128 KiB): freeing one would raise
// glibc's dynamic threshold, a state every child would inherit and an exec'd worker does not
// have (it changes which tensors come from the heap, and so the resident set). The pagemap is
// read in 32 KiB pieces, and the ranges live in their own mapping, which the child unmaps.
struct PageRanges {
  std::pair<uintptr_t, std::size_t>* data = nullptr;
  std::size_t size = 0, capacity = 0;
};

PageRanges resident_file_pages() {
  PageRanges ranges;
  constexpr std::size_t kCapacity = 1 << 16;  // ranges; the zygote has a few thousand
  void* mem = mmap(nullptr, kCapacity * sizeof(*ranges.data), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return ranges;
  ranges.data = static_cast<std::pair<uintptr_t, std::size_t>*>(mem);
  ranges.capacity = kCapacity;
  std::ifstream maps("/proc/self/maps");
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return ranges;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::string line;
  uint64_t entries[4096];
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode path": file-backed and readable only
    uintptr_t start = 0, end = 0;
    char perms[8] = {};
    unsigned long long offset = 0, inode = 0;
    char dev[32] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %31s %llu", &start, &end, perms, &offset, dev,
                    &inode) != 6 || inode == 0 || perms[0] != 'r')
      continue;
    for (uintptr_t a = start; a < end;) {
      const std::size_t n = std::min<std::size_t>(std::size(entries), (end - a) / page);
      const ssize_t want = static_cast<ssize_t>(n * sizeof(uint64_t));
      if (pread(pagemap, entries, static_cast<std::size_t>(want), static_cast<off_t>(a / page * sizeof(uint64_t))) != want)
        break;
      for (std::size_t i = 0; i < n; ++i, a += page) {
        if (!(entries[i] >> 63)) continue;  // bit 63: present
        auto* last = ranges.size ? &ranges.data[ranges.size - 1] : nullptr;
        if (last && last->first + last->second == a) last->second += page;
        else if (ranges.size < ranges.capacity) ranges.data[ranges.size++] = {a, page};
      }
    }
  }
  close(pagemap);
  return ranges;
}

// In the child: map what the zygote had resident, then drop the list itself.
void populate_pages(const PageRanges& ranges) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  for (std::size_t r = 0; r < ranges.size; ++r) {
    const auto [start, length] = ranges.data[r];
    if (madvise(reinterpret_cast<void*>(start), length, MADV_POPULATE_READ) == 0) continue;
    // Before Linux 5.14: read one byte a page.
    for (std::size_t off = 0; off < length; off += page)
      (void)*reinterpret_cast<volatile const char*>(start + off);
  }
  if (ranges.data) munmap(ranges.data, ranges.capacity * sizeof(*ranges.data));
}

// Whether `fd` has something to read within `timeout_ms` (a message, or its end).
bool pollable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int r;
  while ((r = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return r > 0;
}

// Another process's child as the kernel shows it: still running, or ended, with the wait
// status it left while a zombie (/proc/PID/stat, field 52 "exit_code", Linux 3.5+).
struct ChildState {
  bool running = false;
  std::optional<int> status;
};
ChildState child_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return {};  // gone: reaped
  const auto close_paren = text.rfind(')');  // the name may hold spaces and parentheses
  if (close_paren == std::string::npos || close_paren + 2 >= text.size()) return {};
  std::istringstream fields(text.substr(close_paren + 2));
  std::string state;
  fields >> state;  // field 3
  if (state != "Z" && state != "X") return {.running = true};
  std::string field;
  for (int f = 4; f <= 52 && (fields >> field); ++f)
    if (f == 52) return {.running = false, .status = std::atoi(field.c_str())};
  return {};
}

}  // namespace

std::vector<std::string> environment_with(const std::map<std::string, std::string>& changes) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const auto& [k, v] : changes) {
    if (v.empty()) env.erase(k);
    else env[k] = v;
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

void set_alloc_conf(std::map<std::string, std::string>& env, const std::string& alloc_conf) {
  env["PYTORCH_ALLOC_CONF"] = alloc_conf;
  env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf;
}

std::string environment_key() {
  std::string key;
  for (const auto& kv : environment_with({})) key += kv + '\n';
  return key;
}

Zygote::~Zygote() { stop(); }

void Zygote::stop() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

bool Zygote::start() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return false;
  const std::vector<std::string> args = {exe_, "zygote", "--control-fd", "3"};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string program = exec_path(exe_);  // the runner's own binary, even if rebuilt since
  // LibTorch loads in the zygote with the allocator settings unset (set_alloc_conf's reasons);
  // each point sets its own.
  std::map<std::string, std::string> unset;
  set_alloc_conf(unset, "");
  const std::vector<std::string> environment = environment_with(unset);
  std::vector<char*> envp;
  for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return false;
  }
  if (pid == 0) {  // only async-signal-safe calls until execv: the runner has threads
    setpgid(0, 0);  // a terminal's Ctrl-C is the runner's to handle, as for exec'd workers
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // with the runner's thread, the zygote and its children end
    if (getppid() != parent) _exit(126);
    dup2(sv[1], 3);
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
      if (null > 2) close(null);
    }
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(sv[1]);
  fd_ = sv[0];
  pid_ = pid;
  environ_ = environment_key();
  // Ready once LibTorch is loaded; a zygote that cannot start (an old binary without the
  // subcommand, a broken install) says nothing and the runner execs workers as before.
  const auto ready = recv_message(fd_, nullptr, deadlines_.ready_ms);
  if (!ready || !ready->value("ready", false)) {
    stop();
    return false;
  }
  return true;
}

std::optional<pid_t> Zygote::spawn(const std::string& point_json,
                                   const std::map<std::string, std::string>& env, int log_fd,
                                   int result_fd) {
  return request({{"point", point_json}}, env, log_fd, result_fd);
}

std::optional<pid_t> Zygote::spawn_command(const std::vector<std::string>& args,
                                           const std::map<std::string, std::string>& env, int out_fd,
                                           int err_fd) {
  return request({{"argv", args}}, env, out_fd, err_fd);
}

std::optional<pid_t> Zygote::request(const nlohmann::json& what,
                                     const std::map<std::string, std::string>& env, int log_fd,
                                     int result_fd) {
  nlohmann::json request = what;
  request["environ"] = environment_with(env);
  // A request the zygote would refuse (an environment over kMaxMessage): exec'd, without
  // starting (or killing) a zygote for it. Before, two fresh zygotes per point refused it.
  if (request.dump().size() > kMaxMessage) return std::nullopt;
  if (pid_ > 0 && environment_key() != environ_) stop();  // a child must see today's environment
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (pid_ < 0 && !start()) return std::nullopt;
    if (send_message(fd_, request, {log_fd, result_fd})) {
      const auto reply = recv_message(fd_, nullptr, deadlines_.reply_ms);
      if (reply && reply->contains("pid")) return (*reply)["pid"].get<pid_t>();
      if (reply && reply->contains("error")) {
        stop();
        return std::nullopt;  // it refused (threads): exec instead, and a fresh zygote next time
      }
    }
    stop();  // it died (or its creating thread ended): start another once
  }
  return std::nullopt;
}

std::optional<int> Zygote::wait(pid_t child) {
  // The child is the zygote's, not ours: while it runs (a command may close its output and
  // go on), no deadline applies; once it has ended, the zygote has reply_ms to say so.
  std::optional<int> ended;  // its status, read from the kernel while it is a zombie
  auto since = std::chrono::steady_clock::now();
  while (true) {
    if (pollable(fd_, 100)) {
      const auto reply = recv_message(fd_);
      if (reply && reply->contains("status")) return (*reply)["status"].get<int>();
      break;  // it died, or said something else
    }
    const ChildState state = child_state(child);
    if (state.running) {
      since = std::chrono::steady_clock::now();
      continue;
    }
    if (state.status) ended = state.status;
    if (std::chrono::steady_clock::now() - since >= std::chrono::milliseconds(deadlines_.reply_ms)) break;
  }
  // Dead, or stalled (stopped, wedged) with its child ended: killed, and replaced next time.
  kill(-child, SIGKILL);  // whatever is left of its group
  stop();
  return ended;
}

int serve_zygote(int control_fd, const std::function<int(const std::string&, int)>& run_point,
                 const std::function<int(const std::vector<std::string>&)>& run_command) {
  const pid_t self = getpid();
  const PageRanges resident = resident_file_pages();
  if (!send_message(control_fd, {{"ready", true}})) return 1;
  while (true) {
    std::vector<int> fds;
    const auto request = recv_message(control_fd, &fds);
    if (!request) return 0;  // the runner closed the socket (or died): done
    const int threads = thread_count();
    const bool point = request->contains("point") && (*request)["point"].is_string();
    const bool command = request->contains("argv") && (*request)["argv"].is_array();
    if (fds.size() != 2 || point == command || !request->contains("environ") || threads != 1) {
      for (int f : fds) close(f);
      send_message(control_fd, {{"error", threads != 1 ? "the zygote has " + std::to_string(threads) +
                                                             " threads; fork would not copy them"
                                                       : std::string("malformed request")}});
      if (threads != 1) return 1;
      continue;
    }
    const int log_fd = fds[0], result_fd = fds[1];  // a command's: stdout, stderr
    const std::string point_json = point ? (*request)["point"].get<std::string>() : std::string();
    const auto args = command ? (*request)["argv"].get<std::vector<std::string>>() : std::vector<std::string>();
    const auto env = (*request)["environ"].get<std::vector<std::string>>();
    const pid_t pid = fork();
    if (pid == 0) {
      // What `sweep worker` gets from run_isolated's exec: its own process group, death with
      // its parent, the log on 1 and 2, the result pipe on 3, and the environment asked for.
      close(control_fd);
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self) _exit(126);
      // A command's two fds are its stdout and stderr; it has no result pipe.
      dup2(log_fd, 1);
      dup2(point ? log_fd : result_fd, 2);
      if (point) dup2(result_fd, 3);
      if (log_fd > 3) close(log_fd);
      if (result_fd > 3) close(result_fd);
      populate_pages(resident);
      clearenv();
      for (const auto& kv : env) {
        const auto eq = kv.find('=');
        setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
      }
      const int rc = point ? run_point(point_json, 3) : run_command(args);
      // The row is written: end as the process the runner waits for, without LibTorch's
      // static teardown (deregistering every operator: ~10% of a tiny point, measured with
      // perf). Nothing of ours finishes at exit; stdio buffers (a log, an allocator trace)
      // are flushed here.
      close(3);
      std::cout.flush();
      std::cerr.flush();
      std::fflush(nullptr);
      _exit(rc);
    }
    close(log_fd);
    close(result_fd);
    if (pid < 0) {
      send_message(control_fd, {{"error", std::string("fork: ") + std::strerror(errno)}});
      continue;
    }
    if (!send_message(control_fd, {{"pid", pid}})) {
      kill(-pid, SIGKILL);
      return 0;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!send_message(control_fd, {{"status", st}})) return 0;
  }
}

}  // namespace sweep
