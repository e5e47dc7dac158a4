// Test-only fault injection: the seam through which tests make a worker crash, hang or run
// out of memory in a chosen phase. Read by the worker from SWEEP_TEST_FAULT, never from a
// config; the burst only sees a phase hook and knows nothing of faults.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "sweeps/worker/burst.h"
#include "sweeps/worker/point.h"

namespace sweep {

//   "crash[@B]"        SIGSEGV at the forward phase (points with batch B only)
//   "hang[@B]"         sleep forever at the forward phase
//   "oom:PHASE[@B]"    out of memory on entering PHASE (build|forward|backward|optimizer)
//   "state"            no burst: the record is the process's state at the worker's entry
//                      (process_state), to show a zygote's child equal to an exec'd worker
struct Fault {
  enum class Kind { kNone, kCrash, kHang, kOom, kState };
  Kind kind = Kind::kNone;
  std::string phase;  // for oom
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
