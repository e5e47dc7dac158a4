// The memory budget every point of a run gets, from the config and the device measuring it.
// A config can name a target card (`gpu: {name, memory_gib, context_gib}`): on a larger GPU
// each worker's caching allocator is capped at the target's memory less a CUDA context
// allowance (the cap does not cover the context, cuBLAS/cuDNN code, or other processes), which
// is measured on the host by a fresh worker unless the config gives it; on a smaller GPU the
// run is refused; on the CPU the tracking allocator enforces the target's memory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sweeps/measure/emulated_card.h"
#include "sweeps/runner/config.h"

namespace sweep {

class Zygote;

// What a fresh CUDA process sees on one GPU (from `sweep worker --probe-device`).
struct HostGpu {
  std::string index;            // the GPU's CUDA_VISIBLE_DEVICES entry
  std::string name;
  int64_t total_bytes = 0;      // cudaMemGetInfo total
  // This process's device memory outside the caching allocator after a representative
  // training step (context, loaded kernels, library handles), other processes excluded.
  int64_t context_bytes = 0;
  int64_t other_bytes = 0;      // used by other processes when the probe started
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

// The card device emulated predicts: the config's `gpu:` with its context allowance (given
// with context_gib, else the card table's: measured where it was, else the default). Throws
// UserError when the config names no card, or one without a compute capability or SMs.
EmulatedCard emulated_card_of(const Config& cfg);

// What seeds a max-batch search (search.h) with a prediction: on the CPU the emulator
// configured as the CPU (CardFacts::cpu; its compute capability is only the card cell's form,
// the CPU's choices ignore it); on a GPU the card table's entry for it (find_card by its
// name) with the memory and context measured on it, nullopt when the table has none.
EmulatedCard emulated_cpu();
std::optional<EmulatedCard> predictor_for(const HostGpu& gpu);
// "the emulator configured as the CPU", "emulation of H100 80GB" (for progress lines).
std::string predictor_name(const EmulatedCard& card);

// Pure: the budget for `device`; `gpus` are the probed GPUs (cuda only). On device emulated
// no budget is set unless budget_gib asks (the worker's emulated allocator holds at most the
// card's memory less its context allowance), and budget_gib may not exceed that.
// Throws UserError at the config's line when a GPU is smaller than the target card, or than
// an explicit budget_gib: a cap cannot add memory.
Budget resolve_budget(const Config& cfg, Device device, const std::vector<HostGpu>& gpus);

// Whether a run's probe must measure the context allowance: only for a target card whose
// context_gib the config does not give (a budget_gib needs the card's memory only).
bool probe_measures_context(const Config& cfg);

// How long a probe may take before it is killed and the run stops with the reason: the whole
// `worker --probe-device` (its bursts load every kernel a sweep uses), and its second bare
// context (`worker --probe-context`).
inline constexpr double kProbeDeviceTimeoutS = 900;
inline constexpr double kProbeContextTimeoutS = 120;

// Starts `exe worker --probe-device` once per GPU, each with CUDA_VISIBLE_DEVICES set to the
// GPU's entry (as its workers get), and reads what it reports; with measure_context false
// (`--probe-device --no-context`) only the GPU's name and memory, so context_bytes and
// other_bytes are 0. Throws std::runtime_error when a probe fails or runs past timeout_s.
// With a zygote (of `exe`) each probe is forked from it, as the points are; its second bare
// context (`worker --probe-context`) is a process of its own, exec'd from the probe.
// The environment a probe of `device` runs with: CUDA_VISIBLE_DEVICES, and both allocator
// settings unset, so that it measures the native caching allocator its points will run.
std::map<std::string, std::string> probe_environment(const std::string& device);
std::vector<HostGpu> probe_gpus(const std::string& exe, const std::vector<std::string>& devices,
                                bool measure_context = true,
                                double timeout_s = kProbeDeviceTimeoutS, Zygote* zygote = nullptr);

// The compute modes of cudaDevAttrComputeMode (driver_types.h cudaComputeMode) the probe
// tells apart.
inline constexpr int kComputeModeDefault = 0, kComputeModeProhibited = 2,
                     kComputeModeExclusiveProcess = 3;
// Whether another process may open a context on a GPU while this one holds one: not in
// EXCLUSIVE_PROCESS mode (common on Slurm clusters), where a second context fails at once.
bool second_context_allowed(int compute_mode);
// Other processes' device memory when the probe started: the device's use then less one bare
// context (with_second less used_at_start, what a second fresh process's context added).
// EXCLUSIVE_PROCESS: 0, exactly (no other process can hold the GPU while the probe does), and
// with_second is not measured.
int64_t other_processes_bytes(int compute_mode, int64_t used_at_start, int64_t with_second);

// The worker side (`worker --probe-device`), on the one visible GPU: creates the CUDA context,
// reads the GPU's compute mode, has a second fresh process (`worker --probe-context`, killed
// after kProbeContextTimeoutS) report the device's use with one more bare context where the
// mode lets one in, runs a tiny training burst of each family in each precision with each
// optimizer, and prints a HostGpu as JSON on stdout. measure_context false (`--no-context`):
// the name and memory only, no second context and no bursts. Returns the exit code.
int probe_device_main(bool measure_context = true);
// `worker --probe-context`: creates a bare CUDA context and prints the device's used bytes.
int probe_context_main();

}  // namespace sweep
