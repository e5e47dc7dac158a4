// A model of PyTorch 2.11's CUDA caching allocator (DeviceCachingAllocator in
// c10/cuda/CUDACachingAllocator.cpp) for the emulated CUDA device: it replays the storage
// allocations and frees of a run on the Meta device and gives what the real allocator would:
// allocated / reserved bytes and their peaks, the exact allocation that would raise
// OutOfMemoryError and its message, segments and a trace for a memory_viz snapshot.
// No torch header here, on purpose: the model is plain C++ (memory_viz.h pickles it).
//
// Transcribed rule by rule; each rule's comment names the function of CUDACachingAllocator.cpp
// it comes from. v2.11.0 itself (git 70d99e99, the wheel's torch.version.git_version) was not
// to be had as source; the copy read is a stored main-branch copy with exactly the 2.11 API
// (per_process_memory_fraction, large_segment_size, skip_actions; free blocks still ordered by
// (stream, size, address): the registration-counter order came in May 2026, after 2.11). Line
// numbers "CCA.cpp:N" are v2.11.0's, taken from the wheel's assertion strings; the messages
// and config keys were checked against the strings in the wheel's libc10*.so.
//
// What is modelled: one device; streams as PyTorch keeps them apart (a segment belongs to the
// stream it was allocated on, and its blocks are handed out on that stream only); no CUDA
// graphs or private pools; no events: a block used on another stream (record_stream) is freed
// when its last use is gone, as if that stream had finished (PyTorch frees it once the
// stream's event has completed, found at a later malloc); no free-memory callbacks (none frees
// memory outside IPC). APPROXIMATIONS, and what they can move:
//  - driver addresses (alloc_blocks.h, DeviceMemory): only the best-fit tie-break among equal
//    free sizes and the snapshot's addresses depend on them; peaks can move only through that
//    tie-break, i.e. which of two equal blocks is split.
//  - driver granularity: physical memory is counted in 2 MiB pages (all segment sizes are
//    multiples of 2 MiB unless large_segment_size_mb is odd).
//  - the OOM message's "this process has X memory in use" counts all memory CUDA reports used
//    (device_total - free) as this process's; NVML would exclude other processes and the driver.
//  - the trace is always recorded, unbounded (PyTorch: only under _record_memory_history, in a
//    ring buffer), and time_us is an event counter, not a clock. Neither moves any number.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sweeps/measure/alloc_blocks.h"
#include "sweeps/measure/alloc_conf.h"

namespace sweep::emu {

// c10::CachingAllocator::Stat (c10/core/Allocator.h:353-381).
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(size_t amount);
  void decrease(size_t amount);
};
enum StatType : size_t { kAggregate = 0, kSmallPool = 1, kLargePool = 2, kNumStatTypes = 3 };
using StatArray = std::array<Stat, kNumStatTypes>;

// c10::CachingDeviceAllocator::DeviceStats (c10/core/CachingDeviceAllocator.h), as
// torch.cuda.memory_stats() reports it.
struct DeviceStats {
  StatArray allocation, segment, active, inactive_split;
  StatArray allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes;
  int64_t num_alloc_retries = 0;  // cudaMalloc retried after emptying the cache
  int64_t num_ooms = 0;           // OutOfMemoryErrors raised
  Stat oversize_allocations, oversize_segments;
  int64_t num_sync_all_streams = 0, num_device_alloc = 0, num_device_free = 0;
};

// The aggregate numbers most callers want, in bytes.
struct AllocatorStats {
  int64_t allocated = 0, reserved = 0, active = 0, requested = 0;
  int64_t peak_allocated = 0, peak_reserved = 0, peak_active = 0, peak_requested = 0;
  int64_t allocations = 0, segments = 0, peak_segments = 0;  // counts (segment: cudaMalloc'd)
  int64_t inactive_split_bytes = 0;  // free bytes that empty_cache cannot return
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
};

// TraceEntry (c10/core/CachingDeviceAllocator.h:108): one allocator action for device_traces.
struct TraceEntry {
  enum class Action {
    kAlloc,
    kFreeRequested,
    kFreeCompleted,
    kSegmentAlloc,
    kSegmentFree,
    kSegmentMap,
    kSegmentUnmap,
    kSnapshot,
    kOom
  };
  Action action;
  uint64_t addr;  // for kOom: the free device memory CUDA reported
  size_t size;
  int64_t time_us;
};
const char* action_name(TraceEntry::Action action);  // "alloc", "free_requested", ...

// BlockInfo / SegmentInfo (CachingDeviceAllocator.h:75-101): one contiguous mapped range.
struct BlockInfo {
  size_t size = 0, requested_size = 0;
  bool allocated = false, active = false;
};
struct SegmentInfo {
  uint64_t address = 0;
  size_t total_size = 0, requested_size = 0, allocated_size = 0, active_size = 0;
  bool is_large = false, is_expandable = false;
  std::vector<BlockInfo> blocks;
};

// The numbers OutOfMemoryError's message prints (DeviceCachingAllocator::malloc).
struct OomInfo {
  size_t tried_to_allocate = 0;  // the segment size it asked the driver for, not the request
  int64_t device_total = 0, device_free = 0;
  std::optional<size_t> allowed;  // set_per_process_memory_fraction's cap, when set
  int64_t allocated = 0, reserved_unallocated = 0;
  std::string message;
};

class CachingAllocatorModel {
 public:
  // device_total: the card's memory as CUDA reports it (cudaMemGetInfo / totalGlobalMem).
  // device_limit: what cudaMalloc can hand out in all: device_total less the CUDA context and
  // whatever else is not the allocator's. memory_fraction: a torch.cuda.
  // set_per_process_memory_fraction call after start-up, capping at fraction * device_total;
  // 0 = no call (settings.per_process_memory_fraction still applies, as PyTorch applies it).
  CachingAllocatorModel(int64_t device_total, int64_t device_limit, AllocatorSettings settings = {},
                        double memory_fraction = 0);
  ~CachingAllocatorModel();
  CachingAllocatorModel(const CachingAllocatorModel&) = delete;
  CachingAllocatorModel& operator=(const CachingAllocatorModel&) = delete;

  // One storage of `size` bytes on `stream` (0: the default stream). Returns its device
  // address, which is the handle for free(); size 0 returns 0 without touching the allocator
  // (as NativeCachingAllocator::allocate). On OOM: nullopt, after everything PyTorch does
  // first (emptying the cache, counting the retry and the OOM), with last_oom() filled.
  std::optional<uint64_t> malloc(size_t size, int stream = 0);
  void free(uint64_t handle);
  void empty_cache();                         // torch.cuda.empty_cache()
  void set_memory_fraction(double fraction);  // DeviceCachingAllocator::setMemoryFraction
  void reset_peak_stats();                    // torch.cuda.reset_peak_memory_stats()

  AllocatorStats stats() const;
  const DeviceStats& device_stats() const { return stats_; }
  const OomInfo& last_oom() const { return last_oom_; }
  const std::string& last_oom_message() const { return last_oom_.message; }
  const AllocatorSettings& settings() const { return settings_; }
  std::optional<size_t> allowed_memory_maximum() const { return allowed_memory_maximum_; }
  // DeviceCachingAllocator::snapshot: one entry per contiguous mapped range, by address.
  std::vector<SegmentInfo> segments() const;
  const std::vector<TraceEntry>& trace() const { return trace_; }

  // DeviceCachingAllocator::round_size and get_allocation_size, for callers and tests.
  static size_t round_size(const AllocatorSettings& s, size_t size);
  static size_t get_allocation_size(const AllocatorSettings& s, size_t size);

 private:
  using Block = detail::Block;
  using BlockPool = detail::BlockPool;
  struct AllocParams {  // struct AllocParams
    size_t size;        // rounded request
    BlockPool* pool;
    size_t alloc_size;  // the segment size a new cudaMalloc would take
    bool expandable;    // is_expandable_segments_active
    int stream = 0;
    Block* block = nullptr;
    std::array<bool, kNumStatTypes> stat_types{};
  };

  // get_pool (CCA.cpp:3086): <= 1 MiB after rounding is the small pool.
  BlockPool& get_pool(size_t size) { return size <= kSmallSize ? small_blocks_ : large_blocks_; }
  std::array<bool, kNumStatTypes> stat_types(const BlockPool& pool) const;
  bool get_free_block(AllocParams& p);
  void garbage_collect_cached_blocks();
  bool alloc_block(AllocParams& p, bool is_retry);
  bool release_available_cached_blocks(const AllocParams& p);
  bool release_cached_blocks();
  void release_blocks(BlockPool& pool);
  void release_block(Block* block);
  bool should_split(const Block* block, size_t size, bool expandable) const;
  Block* alloc_found_block(const AllocParams& p, size_t orig_size, bool split_remainder);
  void free_block(Block* block);
  size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool);
  void record_oom(const AllocParams& p, size_t size);
  // Expandable segments (caching_allocator_expandable.cc).
  Block* find_expandable_block(BlockPool* pool, size_t size, int stream);
  bool map_block(Block* to_map, size_t size);
  Block* try_allocate_expandable_block(BlockPool* pool, size_t size, int stream);
  void unmap_block(Block* block);
  void release_expandable_segment(Block* block);

  Block* new_block(size_t size, BlockPool* pool, uint64_t ptr, int stream);
  void delete_block(Block* block);
  void record_trace(TraceEntry::Action action, uint64_t addr, size_t size);
  template <typename F>
  void for_each_stat(const std::array<bool, kNumStatTypes>& types, F f) {
    for (size_t t = 0; t < kNumStatTypes; ++t)
      if (types[t]) f(t);
  }

  AllocatorSettings settings_;
  detail::DeviceMemory memory_;
  BlockPool large_blocks_{false};                // free blocks of segments > 1 MiB requests
  BlockPool small_blocks_{true};                 // free blocks of the 2 MiB small segments
  std::unordered_map<uint64_t, Block*> active_;  // handed-out blocks by address
  std::unordered_set<Block*> owned_;             // every Block, for deletion
  std::vector<std::unique_ptr<detail::ExpandableSegment>> expandable_segments_;
  DeviceStats stats_;
  size_t total_allocated_memory_ = 0;  // bytes held from the driver (segments + mapped pages)
  std::optional<size_t> allowed_memory_maximum_;
  std::vector<TraceEntry> trace_;
  int64_t clock_ = 0;
  OomInfo last_oom_;
};

}  // namespace sweep::emu
