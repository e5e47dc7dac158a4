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

namespace sweep {
namespace {

const std::map<std::string, Fault::Kind>& kinds() {
  static const std::map<std::string, Fault::Kind> k = {
      {"crash", Fault::Kind::kCrash},
      {"hang", Fault::Kind::kHang},
      {"oom", Fault::Kind::kOom},
      {"cublas-alloc", Fault::Kind::kCublasAlloc},
      {"cudnn-alloc", Fault::Kind::kCudnnAlloc},
      {"cuda-oom", Fault::Kind::kCudaOom},
      {"recovered-oom", Fault::Kind::kRecoveredOom}};
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
                                "cuda-oom:PHASE or recovered-oom:PHASE)");
  f.kind = it->second;
  const bool phased = f.kind != Kind::kCrash && f.kind != Kind::kHang;
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
        default: break;
      }
    }
    if (phase != "forward") return;
    if (fault.kind == Fault::Kind::kCrash) std::raise(SIGSEGV);
    if (fault.kind == Fault::Kind::kHang) std::this_thread::sleep_for(std::chrono::hours(24));
  };
  return hooks;
}

}  // namespace sweep
