// The caching-allocator model, continued: getting segments from the driver and giving them
// back (cudaMalloc, the two release strategies malloc tries before an OOM, empty_cache, the
// garbage collector), statistics and the snapshot. Citations as in caching_allocator.cc.
#include <algorithm>
#include <limits>

#include "sweeps/measure/caching_allocator.h"

namespace sweep::emu {

// DeviceCachingAllocator::alloc_block (the cudaMalloc'd block asserts at CCA.cpp:3369): a new
// segment of alloc_size, unless the memory fraction or the driver refuses it.
bool CachingAllocatorModel::alloc_block(AllocParams& p, bool is_retry) {
  const size_t size = p.alloc_size;
  if (is_retry) stats_.num_alloc_retries += 1;
  // The fraction caps what the allocator holds, checked against the full segment size even
  // when expandable segments will map less.
  if (allowed_memory_maximum_ && total_allocated_memory_ + size > *allowed_memory_maximum_)
    return false;
  if (p.expandable) {
    p.block = try_allocate_expandable_block(p.pool, p.size, p.stream);
    return p.block != nullptr;
  }
  const std::optional<uint64_t> ptr = memory_.malloc(size);
  if (!ptr) return false;  // cudaErrorMemoryAllocation
  total_allocated_memory_ += size;
  p.block = new_block(size, p.pool, *ptr, p.stream);
  for_each_stat(p.stat_types, [&](size_t t) {
    stats_.segment[t].increase(1);
    stats_.reserved_bytes[t].increase(size);
  });
  if (size >= settings_.max_split_size) stats_.oversize_segments.increase(1);
  stats_.num_device_alloc++;
  record_trace(TraceEntry::Action::kSegmentAlloc, *ptr, size);
  return true;
}

// DeviceCachingAllocator::release_available_cached_blocks: with max_split_size set, free the
// request's stream's smallest oversize cached block at least max(request, max_split_size), or
// else its largest oversize ones until they add up to that.
bool CachingAllocatorModel::release_available_cached_blocks(const AllocParams& p) {
  if (settings_.max_split_size == std::numeric_limits<size_t>::max()) return false;
  BlockPool& pool = *p.pool;
  Block key;
  key.stream = p.stream;
  key.size = std::max(p.size, settings_.max_split_size);
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != p.stream || (*it)->expandable_segment) {
    if (it == pool.blocks.begin()) return false;
    size_t total_released = 0;
    --it;  // the largest block (of the stream, if it has one)
    while (total_released < key.size && (*it)->size >= settings_.max_split_size &&
           (*it)->stream == p.stream) {
      auto cur = it;
      const bool is_first = cur == pool.blocks.begin();
      if (!is_first) --it;
      if (!(*cur)->expandable_segment) {
        total_released += (*cur)->size;
        release_block(*cur);
      }
      if (is_first) break;
    }
    if (total_released < key.size) return false;
  } else {
    release_block(*it);
  }
  return true;
}

// DeviceCachingAllocator::release_cached_blocks (CCA.cpp:3473-3478) for the default pool:
// synchronize_and_free_events (nothing outstanding here), then every unsplit cached segment
// of both pools back to the driver.
bool CachingAllocatorModel::release_cached_blocks() {
  stats_.num_sync_all_streams++;
  release_blocks(large_blocks_);
  release_blocks(small_blocks_);
  return true;
}

// DeviceCachingAllocator::release_blocks: unsplit segments are freed; expandable ones give
// back their free whole pages, and a segment left with nothing mapped is dropped.
void CachingAllocatorModel::release_blocks(BlockPool& pool) {
  std::vector<Block*> to_unmap;
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    Block* block = *it++;
    if (block->expandable_segment) {
      to_unmap.push_back(block);
    } else if (!block->prev && !block->next) {
      release_block(block);
    }
  }
  for (Block* block : to_unmap) {
    unmap_block(block);
    if (!block->prev && !block->next) release_expandable_segment(block);
  }
}

// DeviceCachingAllocator::release_block (CCA.cpp:3507): cudaFree one cached segment.
void CachingAllocatorModel::release_block(Block* block) {
  stats_.num_device_free++;
  record_trace(TraceEntry::Action::kSegmentFree, block->ptr, block->size);
  memory_.free(block->ptr, block->size);
  total_allocated_memory_ -= block->size;
  for_each_stat(stat_types(*block->pool), [&](size_t t) {
    stats_.segment[t].decrease(1);
    stats_.reserved_bytes[t].decrease(block->size);
  });
  if (block->size >= settings_.max_split_size) stats_.oversize_segments.decrease(1);
  block->pool->blocks.erase(block);
  delete_block(block);
}

// DeviceCachingAllocator::garbage_collect_cached_blocks: once the allocator holds more than
// threshold * allowed memory, free unsplit large cached blocks at least as old as the
// average (age = get_free_block calls on the pool since cached), round after round, until
// the excess is reclaimed.
void CachingAllocatorModel::garbage_collect_cached_blocks() {
  const auto gc_threshold = static_cast<size_t>(settings_.garbage_collection_threshold *
                                                static_cast<double>(*allowed_memory_maximum_));
  if (total_allocated_memory_ <= gc_threshold) return;
  const size_t target_size = total_allocated_memory_ - gc_threshold;
  size_t gc_reclaimed = 0;
  size_t total_age = 0;
  int freeable_block_count = 0;
  for (const Block* b : large_blocks_.blocks) {
    if (!b->is_split()) {
      total_age += large_blocks_.gc_count(b);
      ++freeable_block_count;
    }
  }
  if (freeable_block_count == 0) return;
  bool block_freed = true;
  while (gc_reclaimed < target_size && block_freed && freeable_block_count > 0) {
    const double age_threshold = static_cast<double>(total_age) / freeable_block_count;
    block_freed = false;
    for (auto it = large_blocks_.blocks.begin(); it != large_blocks_.blocks.end();) {
      Block* block = *it++;
      if (!block->is_split() && !block->expandable_segment &&
          static_cast<double>(large_blocks_.gc_count(block)) >= age_threshold) {
        block_freed = true;
        gc_reclaimed += block->size;
        total_age -= large_blocks_.gc_count(block);
        freeable_block_count--;
        release_block(block);
      }
    }
  }
}

void CachingAllocatorModel::empty_cache() { release_cached_blocks(); }  // emptyCache

// DeviceCachingAllocator::resetPeakStats: every peak back to its current value.
void CachingAllocatorModel::reset_peak_stats() {
  for (StatArray* a : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                       &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                       &stats_.inactive_split_bytes, &stats_.requested_bytes})
    for (Stat& s : *a) s.peak = s.current;
  stats_.oversize_allocations.peak = stats_.oversize_allocations.current;
  stats_.oversize_segments.peak = stats_.oversize_segments.current;
}

AllocatorStats CachingAllocatorModel::stats() const {
  AllocatorStats s;
  s.allocated = stats_.allocated_bytes[kAggregate].current;
  s.reserved = stats_.reserved_bytes[kAggregate].current;
  s.active = stats_.active_bytes[kAggregate].current;
  s.requested = stats_.requested_bytes[kAggregate].current;
  s.peak_allocated = stats_.allocated_bytes[kAggregate].peak;
  s.peak_reserved = stats_.reserved_bytes[kAggregate].peak;
  s.peak_active = stats_.active_bytes[kAggregate].peak;
  s.peak_requested = stats_.requested_bytes[kAggregate].peak;
  s.allocations = stats_.allocation[kAggregate].current;
  s.segments = stats_.segment[kAggregate].current;
  s.peak_segments = stats_.segment[kAggregate].peak;
  s.inactive_split_bytes = stats_.inactive_split_bytes[kAggregate].current;
  s.num_alloc_retries = stats_.num_alloc_retries;
  s.num_ooms = stats_.num_ooms;
  s.num_device_alloc = stats_.num_device_alloc;
  s.num_device_free = stats_.num_device_free;
  return s;
}

// DeviceCachingAllocator::snapshot: a segment per contiguous mapped range (an expandable
// segment's mapped runs are reported separately), sorted by address. The SNAPSHOT trace entry
// PyTorch records here lands after the traces it returns, so it is left out.
std::vector<SegmentInfo> CachingAllocatorModel::segments() const {
  std::vector<const Block*> all;
  for (const BlockPool* pool : {&small_blocks_, &large_blocks_})
    all.insert(all.end(), pool->blocks.begin(), pool->blocks.end());
  for (const auto& [ptr, b] : active_) all.push_back(b);
  std::vector<SegmentInfo> result;
  for (const Block* head : all) {
    if (head->prev && head->prev->mapped) continue;
    SegmentInfo& seg = result.emplace_back();
    seg.address = head->ptr;
    seg.is_large = !head->pool->is_small;
    seg.is_expandable = head->expandable_segment != nullptr;
    for (const Block* b = head; b != nullptr && b->mapped; b = b->next) {
      // active: allocated, or freed with work still pending on another stream (never here).
      const BlockInfo info{b->size, b->requested_size, b->allocated, b->allocated};
      seg.blocks.push_back(info);
      seg.total_size += info.size;
      if (info.allocated) seg.allocated_size += info.size;
      if (info.active) {
        seg.active_size += info.size;
        seg.requested_size += info.requested_size;
      }
    }
  }
  std::sort(result.begin(), result.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
  return result;
}

detail::Block* CachingAllocatorModel::new_block(size_t size, BlockPool* pool, uint64_t ptr,
                                                int stream) {
  auto* b = new Block;
  b->stream = stream;
  b->size = size;
  b->pool = pool;
  b->ptr = ptr;
  owned_.insert(b);
  return b;
}

void CachingAllocatorModel::delete_block(Block* block) {
  owned_.erase(block);
  delete block;
}

// DeviceCachingAllocator::record_trace, as if _record_memory_history were on with no limit.
void CachingAllocatorModel::record_trace(TraceEntry::Action action, uint64_t addr, size_t size) {
  trace_.push_back(TraceEntry{action, addr, size, clock_++});
}

}  // namespace sweep::emu
