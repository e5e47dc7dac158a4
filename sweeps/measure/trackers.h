// Trackers: what the training burst measures with, knowing nothing of models. Memory:
// allocated/reserved bytes and peaks; time: one step's duration.
// CUDA: the caching allocator's own statistics. CPU: a tracking allocator installed in
// place of c10's default CPU allocator, which counts every byte and throws
// c10::OutOfMemoryError past the point's budget, so OOM behaves on the CPU as on a GPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Storage.h>

#include "sweeps/measure/emulated_card.h"

namespace sweep {

// What memory holds by kind, kept current by the burst (weights after the build, gradients
// after each accumulation, optimizer state around each step).
struct Ledger {
  std::atomic<int64_t> weights{0}, grads{0}, optimizer{0};
};
// The ledger as it stood at a peak.
struct Breakdown {
  int64_t weights = 0, grads = 0, optimizer = 0;
};

class MemoryTracker {
 public:
  virtual ~MemoryTracker() = default;
  // The ledger to read at peaks. The CPU tracker copies it at every new peak, so
  // peak_breakdown() is exact; the CUDA allocator reports no per-allocation event, so there
  // it is the ledger as it stood when the peaks were last reset (a phase's start).
  virtual void set_ledger(const Ledger* ledger) { ledger_ = ledger; }
  virtual Breakdown peak_breakdown() { return at_reset_; }
  virtual int64_t allocated() = 0;  // bytes held by live tensors now
  virtual int64_t reserved() = 0;   // bytes the allocator holds now (>= allocated)
  // Peaks since the last reset_peaks().
  virtual int64_t peak_allocated() = 0;
  virtual int64_t peak_reserved() = 0;
  virtual void reset_peaks() = 0;
  // Call after reset_peaks(): remembers the ledger for trackers without per-peak snapshots.
  void note_reset() { at_reset_ = read_ledger(); }
  // Whole-device use now (CUDA: total - free, context included; CPU: resident set size).
  virtual int64_t device_used() = 0;
  // Caps what the allocator may hold (0 = no cap).
  virtual void set_budget(int64_t bytes) = 0;
  // The allocator settings string the allocator parsed from the environment (CUDA); empty
  // where there is none (the CPU).
  virtual std::string allocator_settings() { return ""; }
  // Allocator retries so far (CUDA: cudaMalloc retried after freeing cached blocks).
  virtual int64_t alloc_retries() { return 0; }
  // Reserved minus allocated bytes at the allocator's last out-of-memory failure since
  // forget_oom(), taken before the exception unwinds and frees the step's tensors; nullopt when
  // the allocator has not failed since (its observer never fired: an OOM raised outside it, by
  // cuBLAS, cuDNN or the CUDA runtime, has no gap to report).
  virtual std::optional<int64_t> gap_at_oom() { return std::nullopt; }
  // Forgets the last failure, and the `prefix.oom.pickle` it wrote (record_history): a failure
  // that was caught and recovered from (cuDNN's plan search tries workspaces that may not fit)
  // is not one that ends the burst. The burst calls it on entering each phase, the worker when
  // the burst did not end in the allocator's out-of-memory failure.
  virtual void forget_oom() {}
  // Frees cached, unused blocks (CUDA); no-op on the CPU.
  virtual void empty_cache() {}
  // Memory snapshots for PyTorch's visualizer (pytorch.org/memory_viz), CUDA only: records
  // the allocator's history from now on, writes `prefix.oom.pickle` at the moment of an
  // out-of-memory failure (until forget_oom()), and write_snapshot(path) writes the history so far. Returns false
  // where there is no allocator history (the CPU).
  virtual bool record_history(const std::string& /*prefix*/) { return false; }
  virtual void write_snapshot(const std::string& /*path*/) {}
  // Stops recording the allocator history (before the timed steps, which it would slow).
  virtual void stop_history() {}

 protected:
  Breakdown read_ledger() const {
    if (!ledger_) return {};
    return {ledger_->weights.load(), ledger_->grads.load(), ledger_->optimizer.load()};
  }
  const Ledger* ledger_ = nullptr;
  Breakdown at_reset_;
};

// Host memory a technique keeps off the device (optimizer offload). While a HostScope is alive
// on a thread, the CPU tracking allocator counts that thread's allocations as host memory:
// outside the device budget, the device counters, their peaks and the ledger. On a CPU device
// "device" and "host" are the same RAM; the scope is what tells them apart. A CPU tensor made
// in a scope stays host memory until it is freed, wherever that happens. Only allocations
// through the tracking allocator are counted: on CUDA, call install_cpu_tracking() first;
// pinned memory comes from the CUDA host allocator and is not seen here.
class HostScope {
 public:
  HostScope();
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;

 private:
  bool outer_;
};
// Whether this thread is in a HostScope (the emulated device's allocator asks too).
bool in_host_scope();
// Counts host memory that another allocator made in a HostScope (the emulated device's host
// tensors); negative when it is freed.
void count_host_bytes(int64_t delta);
// Host bytes allocated in HostScopes and still alive, and the most since reset_host_peak().
int64_t host_allocated();
int64_t host_peak();
void reset_host_peak();

// Unified memory (cudaMallocManaged) that bitsandbytes' paged optimizers keep their large
// states in: outside the caching allocator, so in none of its counters, peaks or budget, and
// never the reason a card runs out of memory (the driver pages it to the host when cudaMalloc
// needs the room). While a UnifiedScope is alive on a thread, the emulated device's allocator
// counts that thread's allocations as unified memory; its device_used() adds what is alive, up
// to the card's memory. The CUDA device needs no scope: the optimizer calls cudaMallocManaged
// itself, and cudaMemGetInfo sees the pages while they are resident.
class UnifiedScope {
 public:
  UnifiedScope();
  ~UnifiedScope();
  UnifiedScope(const UnifiedScope&) = delete;
  UnifiedScope& operator=(const UnifiedScope&) = delete;

 private:
  bool outer_;
};
bool in_unified_scope();
// Unified bytes the emulated device's allocator made in UnifiedScopes and still alive.
int64_t unified_allocated();

// An in-place update the emulated device's allocator replays though PyTorch runs it out of place
// on Meta (emulate/grad_accumulation.h): the next allocation on this thread of `bytes` takes
// `storage`'s block instead of a new one, and the storage's own release then frees nothing, so
// that the device holds what `storage.add_(...)` leaves on a real card. Cleared by the next
// allocation, or by calling it again with an undefined storage.
void reuse_for_next_allocation(const c10::Storage& storage, int64_t bytes);

// Installs the tracking allocator as c10's CPU allocator, once per process (make_cpu_tracker
// calls it). Tensors that exist already keep the allocator they were made with.
void install_cpu_tracking();
// Installs the tracking allocator as c10's CPU allocator (once per process) and returns a
// tracker reading it. Later calls return trackers over the same counters.
std::unique_ptr<MemoryTracker> make_cpu_tracker();
// With SWEEP_TRACE_ALLOC set: writes "# NOTE" into the allocation trace (a phase change, say).
void trace_alloc_note(const std::string& note);
// Tracker over the CUDA caching allocator of the current device. Initialises CUDA (as the
// first CUDA tensor would) before any allocator call. Compiled on every build (the torch wheel
// is a CUDA build); only called when a GPU is present.
std::unique_ptr<MemoryTracker> make_cuda_tracker();
// This process's CUDA device as torch.cuda.get_device_properties(0) describes it: its SMs and
// compute capability (what bitsandbytes' kernel dispatch asks).
struct CudaProps {
  int sms = 0, major = 0, minor = 0;
};
CudaProps cuda_device_props();

// Tracker of the emulated device (device: emulated): installs an allocator for the Meta device
// (once per process) whose every storage is replayed through a model of the card's caching
// allocator (sweeps/measure/emulated_allocator.h), or counted exactly when the card stands for
// the CPU. Allocations in a HostScope are host memory and not counted. Out of memory throws
// c10::OutOfMemoryError at the allocation where the card's allocator would fail.
std::unique_ptr<MemoryTracker> make_emulated_tracker(const EmulatedCard& card,
                                                     const std::string& alloc_conf);

// Times a span of steps (a repetition: one pair of CUDA events on the current stream on a GPU,
// as the reference brackets its N steps, so no host sync falls between them; a steady clock on
// the CPU).
class StepTimer {
 public:
  virtual ~StepTimer() = default;
  virtual void start() = 0;
  virtual double stop_seconds() = 0;  // waits for the device to finish the span's work
};
std::unique_ptr<StepTimer> make_cpu_timer();
std::unique_ptr<StepTimer> make_cuda_timer();

}  // namespace sweep
