// Test-only fault injection: the seam through which tests make a worker crash, hang or run
// out of memory in a chosen phase. Read by the worker from SWEEP_TEST_FAULT, never from a
// config; the burst only sees a phase hook and knows nothing of faults.
#pragma once

#include <string>

#include "sweeps/worker/burst.h"
#include "sweeps/worker/point.h"

namespace sweep {

//   "crash[@B]"        SIGSEGV at the forward phase (points with batch B only)
//   "hang[@B]"         sleep forever at the forward phase
//   "oom:PHASE[@B]"    out of memory on entering PHASE (build|forward|backward|optimizer)
struct Fault {
  enum class Kind { kNone, kCrash, kHang, kOom };
  Kind kind = Kind::kNone;
  std::string phase;  // for oom
  // Throws std::invalid_argument for a spec of no known kind (a typo in a test).
  static Fault parse(const std::string& spec, const Point& p);
};

// Burst hooks that carry out the fault (no hooks for an empty one).
BurstHooks fault_hooks(const Fault& fault);

}  // namespace sweep
