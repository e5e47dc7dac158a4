// CUDA trackers: the caching allocator's device statistics and CUDA-event step timing.
// Always compiled and linked (CI has the toolkit but no GPU); only constructed with a GPU.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include <fstream>
#include <mutex>
#include <string>

#include <atomic>

#include "sweeps/trackers.h"

namespace sweep {
namespace {

using c10::CachingAllocator::StatType;
namespace alloc = c10::cuda::CUDACachingAllocator;
constexpr auto kAll = static_cast<std::size_t>(StatType::AGGREGATE);

std::atomic<int64_t> g_gap_at_oom{0};
std::mutex g_snapshot_mu;
std::string g_snapshot_prefix;  // set when history is recorded

void write_pickle(const std::string& path) {
  std::ofstream(path, std::ios::binary) << torch::cuda::_memory_snapshot_pickled();
}

class CudaTracker final : public MemoryTracker {
 public:
  CudaTracker() : dev_(c10::cuda::current_device()) {
    // Called by the caching allocator just before it throws OutOfMemoryError.
    alloc::attachOutOfMemoryObserver([](int64_t device, size_t, size_t, size_t) {
      auto s = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
      g_gap_at_oom = s.reserved_bytes[kAll].current - s.allocated_bytes[kAll].current;
      // The allocator calls its observers after releasing its lock, before the tensors of
      // the failing step are freed: the snapshot shows what filled the memory.
      std::lock_guard lock(g_snapshot_mu);
      if (!g_snapshot_prefix.empty()) write_pickle(g_snapshot_prefix + ".oom.pickle");
    });
  }
  int64_t gap_at_oom() override { return g_gap_at_oom.load(); }
  int64_t allocated() override { return stats().allocated_bytes[kAll].current; }
  int64_t reserved() override { return stats().reserved_bytes[kAll].current; }
  int64_t peak_allocated() override { return stats().allocated_bytes[kAll].peak; }
  int64_t peak_reserved() override { return stats().reserved_bytes[kAll].peak; }
  void reset_peaks() override { alloc::resetPeakStats(dev_); }
  int64_t device_used() override {
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(total - free);
  }
  void set_budget(int64_t bytes) override {
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    // The cap is a fraction of total memory and covers only the caching allocator: the
    // context and library workspaces come on top (the runner subtracts an allowance).
    alloc::setMemoryFraction(bytes > 0 ? static_cast<double>(bytes) / total : 1.0, dev_);
  }
  int64_t alloc_retries() override { return stats().num_alloc_retries; }
  bool record_history(const std::string& prefix) override {
    // As torch.cuda.memory._record_memory_history(): every alloc/free with its C++ stack.
    torch::cuda::_record_memory_history("all", "all", "all", /*max_entries=*/100000);
    std::lock_guard lock(g_snapshot_mu);
    g_snapshot_prefix = prefix;
    return true;
  }
  void write_snapshot(const std::string& path) override { write_pickle(path); }
  // torch.cuda.memory._record_memory_history(enabled=None): stop recording, keep what is there.
  void stop_history() override { torch::cuda::_record_memory_history(std::nullopt); }
  void empty_cache() override { alloc::emptyCache(); }

 private:
  c10::CachingDeviceAllocator::DeviceStats stats() { return alloc::getDeviceStats(dev_); }
  c10::DeviceIndex dev_;
};

}  // namespace

std::unique_ptr<MemoryTracker> make_cuda_tracker() { return std::make_unique<CudaTracker>(); }

std::unique_ptr<StepTimer> make_cuda_timer() {
  class CudaTimer final : public StepTimer {
   public:
    CudaTimer() : start_(cudaEventDefault), stop_(cudaEventDefault) {}
    void start() override { start_.record(); }
    double stop_seconds() override {
      stop_.record();
      stop_.synchronize();
      return start_.elapsed_time(stop_) / 1000.0;
    }

   private:
    at::cuda::CUDAEvent start_, stop_;
  };
  return std::make_unique<CudaTimer>();
}

}  // namespace sweep
