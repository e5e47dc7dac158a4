// Test-only fault injection; see fault.h.
#include "sweeps/worker/fault.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <thread>

namespace sweep {

Fault Fault::parse(const std::string& spec, const Point& p) {
  Fault f;
  if (spec.empty()) return f;
  std::string s = spec;
  if (auto at = s.find('@'); at != std::string::npos) {
    if (std::stoll(s.substr(at + 1)) != p.batch) return f;
    s = s.substr(0, at);
  }
  if (auto colon = s.find(':'); colon != std::string::npos) {
    f.phase = s.substr(colon + 1);
    s = s.substr(0, colon);
  }
  if (s == "crash") f.kind = Kind::kCrash;
  else if (s == "hang") f.kind = Kind::kHang;
  else if (s == "oom") f.kind = Kind::kOom;
  else throw std::invalid_argument("SWEEP_TEST_FAULT: no fault '" + s + "' (crash, hang or oom:PHASE)");
  return f;
}

BurstHooks fault_hooks(const Fault& fault) {
  BurstHooks hooks;
  if (fault.kind == Fault::Kind::kNone) return hooks;
  hooks.on_phase = [fault](const std::string& phase, MemoryTracker& mem) {
    if (fault.kind == Fault::Kind::kOom && fault.phase == phase) {
      // The next allocation past what is held now fails, as on a full device.
      mem.set_budget(std::max<int64_t>(1, mem.allocated()));
    }
    if (phase != "forward") return;
    if (fault.kind == Fault::Kind::kCrash) std::raise(SIGSEGV);
    if (fault.kind == Fault::Kind::kHang) std::this_thread::sleep_for(std::chrono::hours(24));
  };
  return hooks;
}

}  // namespace sweep
