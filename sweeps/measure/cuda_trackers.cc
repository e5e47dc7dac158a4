// CUDA trackers: the caching allocator's device statistics and CUDA-event step timing.
// Always compiled and linked (CI has the toolkit but no GPU); only constructed with a GPU.
// Read against the torch 2.11 headers (ATen/Context.h, c10/cuda/CUDACachingAllocator.h,
// c10/core/AllocatorConfig.h) and c10/cuda/CUDACachingAllocator.cpp, whose order constraints
// the comments below cite.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>

#include "sweeps/measure/trackers.h"

namespace sweep {
namespace {

using c10::CachingAllocator::StatType;
namespace alloc = c10::cuda::CUDACachingAllocator;
constexpr auto kAll = static_cast<std::size_t>(StatType::AGGREGATE);

std::atomic<int64_t> g_gap_at_oom{-1};  // -1: no failure since forget_oom()
std::mutex g_snapshot_mu;
std::string g_snapshot_prefix;  // set when history is recorded
bool g_oom_snapshot_written = false;

void write_pickle(const std::string& path) {
  std::ofstream(path, std::ios::binary) << torch::cuda::_memory_snapshot_pickled();
}

class CudaTracker final : public MemoryTracker {
 public:
  CudaTracker() {
    // The caching allocator exists only once CUDA is initialised (CUDAHooks::init calls
    // CUDACachingAllocator::init(device_count)), which the first CUDA tensor or
    // torch.cuda._lazy_init does; before that getDeviceStats/resetPeakStats throw "Invalid
    // device argument" and setMemoryFraction "Allocator not initialized for device".
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    dev_ = c10::cuda::current_device();
    // NativeCachingAllocator::attachOutOfMemoryObserver attaches to the device allocators that
    // exist now, hence after the initialisation; once per process. The allocator calls it
    // just before it throws OutOfMemoryError.
    static std::once_flag attached;
    std::call_once(attached, [] {
      alloc::attachOutOfMemoryObserver([](int64_t device, size_t, size_t, size_t) {
        auto s = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
        g_gap_at_oom = s.reserved_bytes[kAll].current - s.allocated_bytes[kAll].current;
        // The allocator calls its observers after releasing its lock, before the tensors of
        // the failing step are freed: the snapshot shows what filled the memory.
        std::lock_guard lock(g_snapshot_mu);
        if (!g_snapshot_prefix.empty()) {
          write_pickle(g_snapshot_prefix + ".oom.pickle");
          g_oom_snapshot_written = true;
        }
      });
    });
  }
  std::optional<int64_t> gap_at_oom() override {
    const int64_t gap = g_gap_at_oom.load();
    return gap < 0 ? std::nullopt : std::optional<int64_t>(gap);
  }
  // A failure the caller recovered from (cuDNN's plan search catches the OutOfMemoryError of a
  // workspace that does not fit, aten/src/ATen/native/cudnn/Conv_v8.cpp) fired the observer
  // too: its gap and snapshot go.
  void forget_oom() override {
    g_gap_at_oom = -1;
    std::lock_guard lock(g_snapshot_mu);
    if (g_oom_snapshot_written) std::remove((g_snapshot_prefix + ".oom.pickle").c_str());
    g_oom_snapshot_written = false;
  }
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
    // The cap is a fraction of the device's totalGlobalMem (DeviceCachingAllocator::
    // setMemoryFraction: allowed_memory_maximum = fraction * device_prop.totalGlobalMem) and
    // covers only the caching allocator: the context and library workspaces come on top (the
    // runner subtracts an allowance). It is set only when a cap is wanted: a plain PyTorch
    // process has none, and NativeCachingAllocator asserts 0 <= fraction <= 1.
    if (bytes <= 0) {
      if (capped_) alloc::setMemoryFraction(1.0, dev_);  // 1.0 clears the cap
      capped_ = false;
      return;
    }
    const auto total = static_cast<int64_t>(at::cuda::getDeviceProperties(dev_)->totalGlobalMem);
    TORCH_CHECK(bytes <= total, "budget of ", bytes, " bytes exceeds this GPU's memory (", total,
                " bytes): a cap cannot add memory");
    alloc::setMemoryFraction(static_cast<double>(bytes) / static_cast<double>(total), dev_);
    capped_ = true;
  }
  // What AcceleratorAllocatorConfig parsed (PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF):
  // the string a snapshot records as allocator_settings (config_metadata.last_allocator_settings).
  std::string allocator_settings() override { return c10::CachingAllocator::getAllocatorSettings(); }
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
  c10::DeviceIndex dev_ = 0;
  bool capped_ = false;
};

}  // namespace

std::unique_ptr<MemoryTracker> make_cuda_tracker() { return std::make_unique<CudaTracker>(); }

CudaProps cuda_device_props() {
  const auto* prop = at::cuda::getDeviceProperties(0);
  return {prop->multiProcessorCount, prop->major, prop->minor};
}

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
