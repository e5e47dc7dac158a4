// The CUDA card an emulated device predicts (device: emulated): the facts of it that the
// emulation reads. The worker gets it from the point; the runner fills it from the config's
// `gpu:` (a named card of the card table, or the fields written out).
#pragma once

#include <cstdint>
#include <string>

namespace sweep {

struct EmulatedCard {
  std::string name;          // "RTX 3060"
  int64_t memory_bytes = 0;  // the total CUDA reports (cudaMemGetInfo), as OOM messages print it
  // What the CUDA context (and the driver around it) holds before the caching allocator gets
  // anything: the allocator may hold at most memory_bytes - context_bytes.
  int64_t context_bytes = 0;
  int cc_major = 9, cc_minor = 0;  // compute capability (sm_90 = 9, 0)
  int sms = 132;                   // streaming multiprocessors
  // The CPU's choices instead of CUDA's (for-loop optimizers, the CPU's SDPA choice and
  // autocast lists, no allocator rounding, no workspaces): the differential check against
  // the CPU tracking allocator, never a user's card.
  bool cpu = false;

  int sm() const { return cc_major * 10 + cc_minor; }  // 90 for sm_90
};

}  // namespace sweep
