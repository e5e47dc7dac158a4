// The pre-loaded worker ("zygote"): one `sweep zygote` process per runner lane that has loaded
// LibTorch, the models and the worker code, and then runs nothing that starts threads or
// devices (no CUDA call, no OpenMP pool, no allocator installed, no tensor). For each point it
// fork()s a child that is, from worker_main on, the process `sweep worker` would have been:
// the runner's environment at the time of the point plus the point's variables, its own
// process group, fd 1 and 2 on the point's log, fd 3 the result pipe, PR_SET_PDEATHSIG.
// Loading LibTorch is most of a worker's start (0.47 s of `sweep --version` on the 2-core
// VM); a forked point that does nothing costs 0.03 s (bench/bench_zygote). Isolation per
// point is unchanged: each point is still a process of its own, so a crash, an OOM or a leak
// ends with it.
//
// CUDA does not survive fork() once initialised in the parent; the zygote never initialises
// it (it runs only the loop below), so its children may. Env read at library load (libgomp's
// OMP_*) is the runner's at the zygote's start: a lane restarts its zygote when the runner's
// environment changed since.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace sweep {

// The runner's side: starts `EXE zygote` on first use, asks it for one child per point.
// One point at a time; not thread-safe (one per lane).
// How long the runner waits on a zygote, each wait: for it to load (ready), and for each
// answer (a child's pid; a child's status once that child has ended). A zygote that does not
// answer in time (stopped, wedged) is killed, and the next point gets a fresh one.
struct ZygoteDeadlines {
  int ready_ms = 60'000;  // loading LibTorch: 0.5 s on the 2-core VM, far more under load
  int reply_ms = 10'000;  // a fork, or a waitpid of a child already ended: milliseconds
};

class Zygote {
 public:
  explicit Zygote(std::string exe, ZygoteDeadlines deadlines = {})
      : exe_(std::move(exe)), deadlines_(deadlines) {}
  ~Zygote();
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Starts a child running `point_json` with the runner's environment changed by `env`
  // (an empty value unsets), `log_fd` as its stdout and stderr and `result_fd` as fd 3.
  // Its pid, or nullopt when no zygote can serve (the caller execs the worker instead).
  std::optional<pid_t> spawn(const std::string& point_json, const std::map<std::string, std::string>& env,
                             int log_fd, int result_fd);
  // Starts a child that runs `sweep ARGS...` as an exec of this binary would (the GPU probe's
  // `worker --probe-device`), with `out_fd` as its stdout and `err_fd` as its stderr. Same
  // contract as spawn.
  std::optional<pid_t> spawn_command(const std::vector<std::string>& args,
                                     const std::map<std::string, std::string>& env, int out_fd,
                                     int err_fd);
  // The child's wait status once it ended; nullopt when the zygote died meanwhile (the child
  // then died with it, by PR_SET_PDEATHSIG). A zygote that has not answered reply_ms after its
  // child ended is killed: the status is then the one the kernel kept for the ended child
  // (/proc/PID/stat), nullopt where none could be read. The zygote restarts on the next spawn.
  std::optional<int> wait(pid_t child);

  pid_t pid() const { return pid_; }  // the zygote's, -1 when none runs (tests)
  const std::string& exe() const { return exe_; }

 private:
  bool start();
  std::optional<pid_t> request(const nlohmann::json& what, const std::map<std::string, std::string>& env,
                               int log_fd, int result_fd);
  void stop();

  std::string exe_;
  ZygoteDeadlines deadlines_;
  pid_t pid_ = -1;
  int fd_ = -1;          // our end of the control socket (SOCK_SEQPACKET)
  std::string environ_;  // the environment the zygote started with
};

// The zygote's side (`sweep zygote --control-fd N`): serves spawn requests on `control_fd`
// until the runner closes it. Each child calls `run_point(point_json, 3)`, or for a command
// `run_command(args)`, and exits with its value, as `sweep` returns from main.
int serve_zygote(int control_fd, const std::function<int(const std::string&, int)>& run_point,
                 const std::function<int(const std::vector<std::string>&)>& run_command);

// The runner's environment as one string (sorted NAME=VALUE lines): what a zygote started with.
std::string environment_key();

// This process's environment changed by `changes` (an empty value unsets), as NAME=VALUE
// strings sorted by name: what a child of the runner gets.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& changes);

// Sets both of the allocator's settings variables in `env` to `alloc_conf` ("" unsets both).
// In torch 2.11 the generic settings read PYTORCH_ALLOC_CONF first (c10/core/AllocatorConfig.h),
// the CUDA ones PYTORCH_CUDA_ALLOC_CONF first (c10/cuda/CUDAAllocatorConfig.h), so a value
// inherited in either would override the other. And LibTorch picks the allocator backend from
// them when it loads (BackendStaticInitializer, CUDACachingAllocator.cpp), before main: a
// zygote or a GPU probe that loaded with an inherited backend:cudaMallocAsync would measure,
// and hand every point forked from it, CUDA's stream-ordered allocator, and a point whose
// setting names another backend than the one loaded fails torch's "Allocator backend parsed at
// runtime != allocator backend parsed at load time" assert. So zygotes and probes start with
// both unset (the native caching allocator), and a point sets its own (never a backend: the
// config refuses backend:cudaMallocAsync on CUDA and emulated devices, grid.cc).
void set_alloc_conf(std::map<std::string, std::string>& env, const std::string& alloc_conf);

}  // namespace sweep
