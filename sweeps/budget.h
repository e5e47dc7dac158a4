// The memory budget every point of a run gets, from the config and the device measuring it.
// A config can name a target card (`gpu: {name, memory_gib, context_gib}`): on a larger GPU
// each worker's caching allocator is capped at the target's memory less a CUDA context
// allowance (the cap does not cover the context, cuBLAS/cuDNN code, or other processes), which
// is measured on the host by a fresh worker unless the config gives it; on a smaller GPU the
// run is refused; on the CPU the tracking allocator enforces the target's memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sweeps/config.h"

namespace sweep {

// What a fresh CUDA process sees on one GPU (from `sweep worker --probe-device`).
struct HostGpu {
  std::string index;            // as in CUDA_VISIBLE_DEVICES
  std::string name;
  int64_t total_bytes = 0;      // cudaMemGetInfo total
  int64_t context_bytes = 0;    // used on the device, less the caching allocator's reservation
};

struct Budget {
  int64_t bytes = 0;  // 0 = the whole device
  bool emulated = false;
  int64_t context_bytes = 0;  // the allowance subtracted (measured or configured)
  std::string note;           // one line for the run's log
};

// A card counts as the target when its memory is within this fraction of the target's (cards
// sold as "80 GB" report 79.1 GiB).
inline constexpr double kSameCardTolerance = 0.05;

// Pure: the budget for `device` ("cpu" | "cuda"); `gpus` are the probed GPUs (cuda only).
// Throws ConfigError (the config's gpu line) when a GPU is smaller than the target.
Budget resolve_budget(const Config& cfg, const std::string& device, const std::vector<HostGpu>& gpus);

// Starts `exe worker --probe-device` once per GPU index and reads what it reports.
std::vector<HostGpu> probe_gpus(const std::string& exe, const std::vector<std::string>& indices);

// The worker side: initialises CUDA, cuBLAS and a small matmul on the visible GPU, then prints
// a HostGpu as JSON on stdout. Returns the exit code.
int probe_device_main();

}  // namespace sweep
