// Test-only fault injection; see fault.h.
#include "sweeps/worker/fault.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/Parallel.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/core/CPUAllocator.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <vector>

extern char** environ;

namespace sweep {
namespace {

const std::map<std::string, Fault::Kind>& kinds() {
  static const std::map<std::string, Fault::Kind> k = {
      {"crash", Fault::Kind::kCrash},
      {"hang", Fault::Kind::kHang},
      {"stopped", Fault::Kind::kStopped},
      {"oom", Fault::Kind::kOom},
      {"cublas-alloc", Fault::Kind::kCublasAlloc},
      {"cudnn-alloc", Fault::Kind::kCudnnAlloc},
      {"cuda-oom", Fault::Kind::kCudaOom},
      {"cudnn-no-engine", Fault::Kind::kCudnnNoEngine},
      {"no-engine", Fault::Kind::kNoEngine},
      {"recovered-oom", Fault::Kind::kRecoveredOom},
      {"state", Fault::Kind::kState}};
  return k;
}

// cudaErrorMemoryAllocation (driver_types.h), the code c10_cuda_check_implementation puts in
// the AcceleratorError it throws.
constexpr int32_t kCudaErrorMemoryAllocation = 2;

// The errors torch 2.11 throws when a library runs out of device memory outside the caching
// allocator, worded as its check macros word them (ATen/cuda/Exceptions.h, c10/cuda/
// CUDAException.h; the strings as libtorch_cuda.so, libc10_cuda.so and cuDNN 9 hold them).
[[noreturn]] void throw_library_oom(Fault::Kind kind) {
  const c10::SourceLocation here{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  switch (kind) {
    case Fault::Kind::kCublasAlloc:
      throw c10::Error(here, "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`");
    case Fault::Kind::kCudnnAlloc:
      throw c10::Error(here, "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED");
    default:
      throw c10::AcceleratorError(
          here, kCudaErrorMemoryAllocation,
          "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some "
          "other API call, so the stacktrace below might be incorrect.");
  }
}

// An allocation the device cannot hold, caught as cuDNN's plan search catches a workspace
// that does not fit (aten/src/ATen/native/cudnn/Conv_v8.cpp: `catch (c10::OutOfMemoryError&)`,
// then the next plan). On the CPU the tracking allocator is capped at what it holds for the
// attempt; elsewhere the request is larger than any card, so the allocator's out-of-memory
// path (and its observer) runs.
void recovered_oom(Device device, int64_t budget, MemoryTracker& mem) {
  try {
    if (device == Device::kCpu) {
      mem.set_budget(std::max<int64_t>(1, mem.allocated()));
      auto t = torch::empty({1 << 20}, torch::kByte);
    } else {
      const auto on = device == Device::kCuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kMeta);
      auto t = torch::empty({int64_t{1} << 50}, torch::TensorOptions(torch::kByte).device(on));
    }
  } catch (const c10::OutOfMemoryError&) {
  }
  if (device == Device::kCpu) mem.set_budget(budget);
}

}  // namespace

Fault Fault::parse(const std::string& spec, const Point& p) {
  Fault f;
  f.budget = p.budget_bytes;
  f.device = p.device;
  if (spec.empty()) return f;
  std::string s = spec;
  if (auto at = s.find('@'); at != std::string::npos) {
    if (std::stoll(s.substr(at + 1)) != p.batch) return f;
    s = s.substr(0, at);
  }
  if (auto colon = s.find(':'); colon != std::string::npos) {
    f.phase = s.substr(colon + 1);
    s = s.substr(0, colon);
    if (auto hash = f.phase.find('#'); hash != std::string::npos) {
      f.nth = std::stoll(f.phase.substr(hash + 1));
      f.phase = f.phase.substr(0, hash);
      if (f.nth < 1) throw std::invalid_argument("SWEEP_TEST_FAULT: '" + spec + "': #N counts from 1");
    }
  }
  const auto it = kinds().find(s);
  if (it == kinds().end())
    throw std::invalid_argument("SWEEP_TEST_FAULT: no fault '" + s +
                                "' (crash, hang, oom:PHASE, cublas-alloc:PHASE, cudnn-alloc:PHASE, "
                                "cuda-oom:PHASE, cudnn-no-engine:PHASE, no-engine:PHASE, recovered-oom:PHASE, "
                                "state or stopped)");
  f.kind = it->second;
  const bool phased = f.kind != Kind::kCrash && f.kind != Kind::kHang && f.kind != Kind::kState &&
                      f.kind != Kind::kStopped;
  if (phased == f.phase.empty())
    throw std::invalid_argument("SWEEP_TEST_FAULT: '" + spec + "': " +
                                (phased ? "name the phase (KIND:PHASE)" : "takes no phase"));
  return f;
}

BurstHooks fault_hooks(const Fault& fault) {
  BurstHooks hooks;
  if (fault.kind == Fault::Kind::kNone) return hooks;
  // Entries into the fault's phase so far, and whether a one-shot cap is to be lifted.
  auto entries = std::make_shared<int64_t>(0);
  auto capped = std::make_shared<bool>(false);
  hooks.on_phase = [fault, entries, capped](const std::string& phase, MemoryTracker& mem) {
    if (*capped) {
      mem.set_budget(fault.budget);
      *capped = false;
    }
    if (!fault.phase.empty() && fault.phase == phase && (fault.nth == 0 || ++*entries == fault.nth)) {
      switch (fault.kind) {
        case Fault::Kind::kOom:
          // The next allocation past what is held now fails, as on a full device.
          mem.set_budget(std::max<int64_t>(1, mem.allocated()));
          *capped = fault.nth > 0;
          break;
        case Fault::Kind::kRecoveredOom: recovered_oom(fault.device, fault.budget, mem); break;
        case Fault::Kind::kCublasAlloc:
        case Fault::Kind::kCudnnAlloc:
        case Fault::Kind::kCudaOom: throw_library_oom(fault.kind);
        case Fault::Kind::kCudnnNoEngine:
          recovered_oom(fault.device, fault.budget, mem);  // each plan's workspace, caught
          [[fallthrough]];
        case Fault::Kind::kNoEngine:
          throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                           "FIND was unable to find an engine to execute this computation");
        default: break;
      }
    }
    if (phase != "forward") return;
    if (fault.kind == Fault::Kind::kCrash) std::raise(SIGSEGV);
    if (fault.kind == Fault::Kind::kHang) std::this_thread::sleep_for(std::chrono::hours(24));
  };
  return hooks;
}

nlohmann::json process_state() {
  nlohmann::json j;
  {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Threads:", 0) == 0) j["threads"] = std::stoi(line.substr(8));
  }
  long pages = 0, resident = 0;
  std::ifstream("/proc/self/statm") >> pages >> resident;
  j["resident_bytes"] = static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
  j["own_process_group"] = getpgrp() == getpid();
  // LibTorch's global state (reading some of it creates it, as the burst would next).
  j["intra_op_threads"] = at::get_num_threads();
  j["inter_op_threads"] = at::get_num_interop_threads();
  auto gen = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard lock(gen.mutex());
    j["cpu_generator_seed"] = gen.current_seed();
    j["cpu_generator_draw"] = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  j["grad_enabled"] = at::GradMode::is_enabled();
  for (auto [name, type] : {std::pair{"cpu", at::kCPU}, std::pair{"cuda", at::kCUDA}}) {
    j["autocast"][name] = {{"enabled", at::autocast::is_autocast_enabled(type)},
                           {"dtype", c10::toString(at::autocast::get_autocast_dtype(type))}};
  }
  j["autocast_cache_enabled"] = at::autocast::is_autocast_cache_enabled();
  j["cpu_allocator_is_default"] = c10::GetAllocator(at::kCPU) == c10::GetDefaultCPUAllocator();
  using Config = c10::CachingAllocator::AcceleratorAllocatorConfig;
  j["alloc_conf"] = {{"expandable_segments", Config::use_expandable_segments()},
                     {"max_split_size", Config::max_split_size()},
                     {"garbage_collection_threshold", Config::garbage_collection_threshold()}};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::sort(env.begin(), env.end());
  j["environ"] = env;
  sigset_t mask;
  sigprocmask(SIG_BLOCK, nullptr, &mask);
  std::string dispositions, blocked;
  for (int sig = 1; sig < SIGRTMIN; ++sig) {
    struct sigaction sa {};
    sigaction(sig, nullptr, &sa);
    dispositions += sa.sa_handler == SIG_DFL ? 'D' : sa.sa_handler == SIG_IGN ? 'I' : 'H';
    blocked += sigismember(&mask, sig) ? '1' : '0';
  }
  j["signal_dispositions"] = dispositions;
  j["signals_blocked"] = blocked;
  // Open fds and what they are (pipe and socket inodes differ between any two processes).
  std::map<int, std::string> fds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(e.path().filename().string());
    std::error_code ec;
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("pipe:", 0) == 0 || target.rfind("socket:", 0) == 0) target = target.substr(0, target.find(':'));
    if (!ec && target != "/proc/" + std::to_string(getpid()) + "/fd") fds[fd] = target;  // not the iterator's own
  }
  for (const auto& [fd, target] : fds) j["fds"][std::to_string(fd)] = target;
  j["cwd"] = std::filesystem::current_path().string();
  const mode_t mask_now = umask(0);
  umask(mask_now);
  j["umask"] = mask_now;
  for (auto [name, res] : {std::pair{"nofile", RLIMIT_NOFILE}, std::pair{"stack", RLIMIT_STACK},
                           std::pair{"as", RLIMIT_AS}, std::pair{"fsize", RLIMIT_FSIZE}}) {
    rlimit rl{};
    getrlimit(res, &rl);
    j["rlimit"][name] = {rl.rlim_cur, rl.rlim_max};
  }
  j["nice"] = getpriority(PRIO_PROCESS, 0);
  return j;
}

}  // namespace sweep
