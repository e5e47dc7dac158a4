// Test-only fault injection: the seam through which tests make a worker crash, hang or run
// out of memory in a chosen phase. Read by the worker from SWEEP_TEST_FAULT, never from a
// config; the burst only sees a phase hook and knows nothing of faults.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "sweeps/worker/burst.h"
#include "sweeps/worker/point.h"

namespace sweep {

//   "crash[@B]"          SIGSEGV at the forward phase (points with batch B only)
//   "hang[@B]"           sleep forever at the forward phase
//   "oom:PHASE[@B]"      out of memory on entering PHASE (build|forward|backward|optimizer):
//                        the allocator's own failure, the next allocation past what is held
//   "KIND:PHASE[@B]"     on entering PHASE, the error a library throws when it runs out of
//                        memory outside the caching allocator, as torch 2.11 words it:
//                          cublas-alloc   "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling
//                                         `cublasCreate(handle)`" (TORCH_CUDABLAS_CHECK)
//                          cudnn-alloc    "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_
//                                         ALLOCATION_FAILED" (AT_CUDNN_CHECK, cuDNN 9)
//                          cuda-oom       c10::AcceleratorError with cudaErrorMemoryAllocation,
//                                         "CUDA error: out of memory" (C10_CUDA_CHECK; what a
//                                         lazily loaded module's launch reports near capacity)
//                          cudnn-no-engine  every cuDNN plan's workspace out of memory (a
//                                         recovered-oom, below), then "FIND was unable to find
//                                         an engine to execute this computation" (Conv_v8.cpp)
//                          no-engine      that error alone: no plan supports the convolution
//   "recovered-oom:PHASE[@B]"  on entering PHASE, an allocation the device cannot hold, caught
//                        and recovered from as cuDNN's plan search does (the point goes on)
//   "state"              no burst: the record is the process's state at the worker's entry
//                        (process_state), to show a zygote's child equal to an exec'd worker
//   "stopped[@B]"        SIGSTOP as the worker starts, before it says so (kWorkerStarted): a
//                        worker stopped, or starved, before it ran
// PHASE#N fires on the N-th entry into PHASE only (warm-up steps included; 1 = the first),
// once: an oom's cap is lifted again on the next phase entered, as after an OOM that a
// retry survives (a fragmentation OOM, say).
struct Fault {
  enum class Kind {
    kNone, kCrash, kHang, kOom, kCublasAlloc, kCudnnAlloc, kCudaOom, kCudnnNoEngine, kNoEngine,
    kRecoveredOom, kState, kStopped
  };
  Kind kind = Kind::kNone;
  std::string phase;   // for the phase faults
  int64_t nth = 0;     // PHASE#N: the entry that fires (0: every entry)
  int64_t budget = 0;  // the point's own budget, restored after a one-shot oom
  Device device = Device::kCpu;  // where recovered-oom allocates
  // Throws std::invalid_argument for a spec of no known kind (a typo in a test).
  static Fault parse(const std::string& spec, const Point& p);
};

// Burst hooks that carry out the fault (no hooks for an empty one).
BurstHooks fault_hooks(const Fault& fault);

// What a worker process starts with, beyond its point: threads, LibTorch's global state
// (intra/inter-op threads, the CPU generator, autocast, grad mode, the CPU allocator, the
// allocator configuration read from PYTORCH_ALLOC_CONF), the environment, signal dispositions
// and mask, open fds, working directory, umask, limits, process group and resident bytes.
nlohmann::json process_state();

}  // namespace sweep
