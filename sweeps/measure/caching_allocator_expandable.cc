// The caching-allocator model, continued: expandable segments (expandable_segments:True) and
// the driver memory model underneath both kinds of segment. Citations as in
// caching_allocator.cc. What changes reserved bytes here: pages are mapped one segment_size at
// a time (2 MiB in the small pool, large_segment_size, 20 MiB by default, in the large pool)
// as requests need them, and empty_cache (or an OOM retry) unmaps the free whole pages.
#include <algorithm>

#include "reports/results/error.h"
#include "sweeps/measure/caching_allocator.h"

namespace sweep::emu {

namespace detail {

uint64_t DeviceMemory::reserve(size_t size) {
  const uint64_t bytes = round_up(size);
  for (auto it = released_.begin(); it != released_.end(); ++it) {  // first fit
    if (it->second < bytes) continue;
    const uint64_t ptr = it->first;
    const uint64_t rest = it->second - bytes;
    released_.erase(it);
    if (rest > 0) released_.emplace(ptr + bytes, rest);
    return ptr;
  }
  const uint64_t ptr = end_;
  end_ += bytes;
  return ptr;
}

void DeviceMemory::unreserve(uint64_t ptr, size_t size) {
  uint64_t begin = ptr, bytes = round_up(size);
  auto next = released_.lower_bound(begin);
  if (next != released_.begin()) {  // merge with the range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      bytes += prev->second;
      released_.erase(prev);
    }
  }
  if (next != released_.end() && begin + bytes == next->first) {  // and the one after
    bytes += next->second;
    released_.erase(next);
  }
  if (begin + bytes == end_) {
    end_ = begin;  // the top of the space comes back whole
  } else {
    released_.emplace(begin, bytes);
  }
}

// ExpandableSegment::ExpandableSegment: address space for 1 1/8 of the card's memory.
ExpandableSegment::ExpandableSegment(DeviceMemory& m, size_t seg_size)
    : memory(&m), segment_size(seg_size) {
  const auto total = static_cast<size_t>(m.total());
  max_handles = (total + total / 8 + segment_size - 1) / segment_size;
  base = m.reserve(size());
}

// ExpandableSegment::map: creates a physical page for every page the range touches; if one
// cannot be created, releases those created and reports nothing mapped.
std::pair<uint64_t, size_t> ExpandableSegment::map(uint64_t ptr, size_t size) {
  const size_t begin = (ptr - base) / segment_size;
  const size_t end = (ptr + size - base + segment_size - 1) / segment_size;
  if (begin == end) return {base + begin * segment_size, 0};
  if (end > handles.size()) handles.resize(end, false);
  for (size_t i = begin; i < end; ++i) {
    SWEEP_CHECK(!handles[i], "page mapped twice");
    if (!memory->create(segment_size)) {  // cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY
      for (size_t j = begin; j < i; ++j) {
        memory->release(segment_size);
        handles[j] = false;
      }
      while (!handles.empty() && !handles.back()) handles.pop_back();  // trimHandles
      return {base + begin * segment_size, 0};
    }
    handles[i] = true;
  }
  mapped_size += (end - begin) * segment_size;
  return {base + begin * segment_size, (end - begin) * segment_size};
}

// ExpandableSegment::unmap: only pages lying wholly inside the range.
std::pair<uint64_t, size_t> ExpandableSegment::unmap(uint64_t ptr, size_t size) {
  const size_t begin = (ptr - base + segment_size - 1) / segment_size;
  const size_t end = (ptr + size - base) / segment_size;
  if (begin >= end) return {ptr, 0};
  for (size_t i = begin; i < end; ++i) {
    memory->release(segment_size);
    handles[i] = false;
  }
  while (!handles.empty() && !handles.back()) handles.pop_back();
  mapped_size -= (end - begin) * segment_size;
  return {base + begin * segment_size, (end - begin) * segment_size};
}

}  // namespace detail

// DeviceCachingAllocator::find_expandable_block: the lowest address with room for `size` in
// free and unmapped blocks of an existing segment of the stream, else a new segment for it.
detail::Block* CachingAllocatorModel::find_expandable_block(BlockPool* pool, size_t size,
                                                            int stream) {
  auto allocatable = [](const Block* b) { return b != nullptr && !b->allocated; };
  auto has_available_address_space = [&](const Block* b) {
    size_t bytes = 0;
    while (bytes < size && allocatable(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  Block key;
  key.stream = stream;
  for (auto it = pool->unmapped.lower_bound(&key);
       it != pool->unmapped.end() && (*it)->stream == stream; ++it) {
    Block* c = *it;
    if (allocatable(c->prev)) c = c->prev;  // a free block just before the unmapped range
    if (has_available_address_space(c)) return c;
  }
  const size_t segment_size = pool->is_small ? kSmallBuffer : settings_.large_segment_size;
  auto& es = expandable_segments_.emplace_back(
      std::make_unique<detail::ExpandableSegment>(memory_, segment_size));
  Block* candidate = new_block(es->size(), pool, es->base, stream);
  candidate->mapped = false;
  candidate->expandable_segment = es.get();
  pool->unmapped.insert(candidate);
  return candidate;
}

// DeviceCachingAllocator::map_block (CCA.cpp:2865-2875): map the pages under the start of an
// unmapped block, merge with free neighbours, and count the pages as reserved.
bool CachingAllocatorModel::map_block(Block* to_map, size_t size) {
  SWEEP_CHECK(!to_map->mapped && size <= to_map->size, "map_block on a mapped block");
  const auto [ptr, mapped] = to_map->expandable_segment->map(to_map->ptr, size);
  if (mapped == 0) return false;
  SWEEP_CHECK(ptr == to_map->ptr && mapped >= size, "mapped range disagrees with block");
  BlockPool& pool = *to_map->pool;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (mapped < to_map->size) {
    Block* remaining =
        new_block(to_map->size - mapped, &pool, to_map->ptr + mapped, to_map->stream);
    remaining->mapped = false;
    remaining->expandable_segment = to_map->expandable_segment;
    remaining->splice(to_map, to_map->next);
    pool.unmapped.insert(remaining);
    to_map->size = mapped;
  }
  try_merge_blocks(to_map, to_map->prev, pool);
  try_merge_blocks(to_map, to_map->next, pool);
  pool.insert_into_blocks(to_map);
  total_allocated_memory_ += mapped;
  for_each_stat(stat_types(pool), [&](size_t t) { stats_.reserved_bytes[t].increase(mapped); });
  stats_.num_device_alloc++;
  record_trace(TraceEntry::Action::kSegmentMap, ptr, mapped);
  return true;
}

// DeviceCachingAllocator::try_allocate_expandable_block (CCA.cpp:2946): map pages until the
// candidate (free tail + unmapped space) holds `size` (the rounded request, not alloc_size).
detail::Block* CachingAllocatorModel::try_allocate_expandable_block(BlockPool* pool, size_t size,
                                                                    int stream) {
  Block* candidate = find_expandable_block(pool, size, stream);
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) return nullptr;
  while (candidate->size < size) {
    const size_t remaining = size - candidate->size;
    Block* new_candidate = candidate->next;
    if (!map_block(new_candidate, std::min(remaining, new_candidate->size))) return nullptr;
    candidate = new_candidate;  // map_block merged the old candidate into it
  }
  pool->blocks.erase(candidate);
  return candidate;
}

// DeviceCachingAllocator::unmap_block (CCA.cpp:3607): give back the whole pages of a
// free block; the partial pages at either end stay mapped as free blocks.
void CachingAllocatorModel::unmap_block(Block* block) {
  const auto [ptr, unmapped] = block->expandable_segment->unmap(block->ptr, block->size);
  if (unmapped == 0) return;
  BlockPool& pool = *block->pool;
  pool.blocks.erase(block);
  const size_t before_size = ptr - block->ptr;
  if (before_size > 0) {
    Block* before_free = new_block(before_size, &pool, block->ptr, block->stream);
    before_free->expandable_segment = block->expandable_segment;
    before_free->splice(block->prev, block);
    pool.insert_into_blocks(before_free);
  }
  const size_t after_size = block->size - (before_size + unmapped);
  if (after_size > 0) {
    Block* after_free = new_block(after_size, &pool, ptr + unmapped, block->stream);
    after_free->expandable_segment = block->expandable_segment;
    after_free->splice(block, block->next);
    pool.insert_into_blocks(after_free);
  }
  block->ptr = ptr;
  block->size = unmapped;
  block->mapped = false;
  try_merge_blocks(block, block->prev, pool);
  try_merge_blocks(block, block->next, pool);
  pool.unmapped.insert(block);
  total_allocated_memory_ -= unmapped;
  for_each_stat(stat_types(pool), [&](size_t t) { stats_.reserved_bytes[t].decrease(unmapped); });
  stats_.num_device_free++;
  record_trace(TraceEntry::Action::kSegmentUnmap, ptr, unmapped);
}

// DeviceCachingAllocator::release_expandable_segment (CCA.cpp:3489-3497): a segment with
// nothing mapped gives its address space back.
void CachingAllocatorModel::release_expandable_segment(Block* block) {
  SWEEP_CHECK(!block->mapped && block->size == block->expandable_segment->size(),
              "block disagrees with segment");
  auto it = std::find_if(expandable_segments_.begin(), expandable_segments_.end(),
                         [&](const auto& es) { return es.get() == block->expandable_segment; });
  SWEEP_CHECK(it != expandable_segments_.end(), "unknown expandable segment");
  memory_.unreserve((*it)->base, (*it)->size());
  expandable_segments_.erase(it);
  block->pool->unmapped.erase(block);
  delete_block(block);
}

}  // namespace sweep::emu
