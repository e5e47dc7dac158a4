// The pieces the caching-allocator model (caching_allocator.h) is built from: blocks, the two
// block pools, expandable segments and the CUDA driver's memory as the allocator sees it.
// Transcribed from c10/cuda/CUDACachingAllocator.cpp (struct Block, BlockPool, the
// comparators, ExpandableSegment); see caching_allocator.h for the version read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "sweeps/measure/alloc_conf.h"

namespace sweep::emu::detail {

struct BlockPool;
struct ExpandableSegment;

// struct Block: one contiguous piece of a segment, free or handed out. Single device, and no
// events (see the header), so the device and event fields of the original are absent.
struct Block {
  int stream = 0;             // the stream its segment was allocated on (0: the default)
  size_t size = 0;            // block size in bytes
  size_t requested_size = 0;  // what the caller asked for, kept after free as PyTorch does
  BlockPool* pool = nullptr;
  uint64_t ptr = 0;  // device address
  bool allocated = false;
  bool mapped = true;  // false only for the unmapped rest of an expandable segment
  Block* prev = nullptr;
  Block* next = nullptr;
  int64_t gc_count_base = 0;  // pool->get_free_blocks_call_count when inserted
  ExpandableSegment* expandable_segment = nullptr;

  bool is_split() const { return prev != nullptr || next != nullptr; }
  // Block::splice: put this block between `before` and `after`.
  void splice(Block* before, Block* after) {
    if (before) before->next = this;
    prev = before;
    if (after) after->prev = this;
    next = after;
  }
};

// BlockComparatorSize (stream, size, ptr) and BlockComparatorAddress (stream, ptr): the best
// fit is the smallest block of the stream that fits, the lowest address among equal sizes.
struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};
struct ByAddress {
  bool operator()(const Block* a, const Block* b) const {
    return a->stream != b->stream ? a->stream < b->stream : a->ptr < b->ptr;
  }
};

// struct BlockPool: the free (cached) blocks of one pool, and its unmapped expandable ranges.
struct BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  std::set<Block*, BySize> blocks;
  std::set<Block*, ByAddress> unmapped;
  const bool is_small;
  int64_t get_free_blocks_call_count = 0;

  // BlockPool::insert_into_blocks: stamps the gc age base.
  void insert_into_blocks(Block* b) {
    b->gc_count_base = get_free_blocks_call_count;
    blocks.insert(b);
  }
  // Block::gc_count: how many get_free_block calls this pool saw since `b` was cached.
  size_t gc_count(const Block* b) const {
    return static_cast<size_t>(static_cast<int>(get_free_blocks_call_count - b->gc_count_base));
  }
};

// What the CUDA driver hands out, as far as the allocator can tell: physical memory (cudaMalloc,
// cuMemCreate) capped at `limit`, and virtual addresses. APPROXIMATION: the driver's address
// choice is not documented; this one places an allocation at the lowest released range that
// fits (first fit) and otherwise after everything handed out so far, 2 MiB aligned. Only the
// best-fit tie-break (equal sizes, lowest address) and snapshot addresses depend on it.
class DeviceMemory {
 public:
  static constexpr uint64_t kBase = 0x7f0000000000;  // where the first address goes
  static constexpr size_t kPage = 2 * kMiB;          // cudaMalloc's granularity for these sizes

  DeviceMemory(int64_t total, int64_t limit) : total_(total), limit_(limit) {}

  // cudaMalloc: nullopt when the physical memory is not there.
  std::optional<uint64_t> malloc(size_t size) {
    if (!create(size)) return std::nullopt;
    return reserve(size);
  }
  void free(uint64_t ptr, size_t size) {  // cudaFree
    release(size);
    unreserve(ptr, size);
  }
  // cuMemCreate / cuMemRelease: physical pages without an address.
  bool create(size_t size) {
    const int64_t bytes = static_cast<int64_t>(round_up(size));
    if (used_ + bytes > limit_) return false;
    used_ += bytes;
    return true;
  }
  void release(size_t size) { used_ -= static_cast<int64_t>(round_up(size)); }
  // cuMemAddressReserve / cuMemAddressFree: addresses without physical pages.
  uint64_t reserve(size_t size);
  void unreserve(uint64_t ptr, size_t size);

  int64_t total() const { return total_; }
  // cudaMemGetInfo's free: the limit minus what the allocator holds from the driver.
  int64_t free_bytes() const { return std::max<int64_t>(0, limit_ - used_); }

 private:
  static size_t round_up(size_t size) { return (size + kPage - 1) / kPage * kPage; }
  int64_t total_;
  int64_t limit_;
  int64_t used_ = 0;
  uint64_t end_ = kBase;
  std::map<uint64_t, uint64_t> released_;  // address -> size, merged neighbours
};

// struct ExpandableSegment: a virtual range of ~1 1/8 of the card, mapped page by page
// (2 MiB pages in the small pool, large_segment_size pages in the large pool).
struct ExpandableSegment {
  ExpandableSegment(DeviceMemory& memory, size_t segment_size);
  // map(range): maps every page [range) touches; the range actually mapped, size 0 when the
  // physical memory is not there (cuMemCreate OOM: nothing stays mapped).
  std::pair<uint64_t, size_t> map(uint64_t ptr, size_t size);
  // unmap(range): unmaps the pages entirely inside [range); the range unmapped (maybe empty).
  std::pair<uint64_t, size_t> unmap(uint64_t ptr, size_t size);
  size_t size() const { return max_handles * segment_size; }

  DeviceMemory* memory;
  size_t segment_size;
  size_t max_handles;
  uint64_t base;
  std::vector<bool> handles;  // which pages are mapped
  size_t mapped_size = 0;
};

}  // namespace sweep::emu::detail
