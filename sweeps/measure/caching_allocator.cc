// The caching-allocator model: allocation path, free path, cache release and statistics,
// transcribed from DeviceCachingAllocator in c10/cuda/CUDACachingAllocator.cpp (torch 2.11).
// "CCA.cpp:N" cites a line of v2.11.0 where the 2.11.0 wheel's own assertion strings pin it
// (libc10_cuda.so: "...INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp:N"); other rules
// cite their function, read in the stored copy described in caching_allocator.h.
#include "sweeps/measure/caching_allocator.h"

#include <bit>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "reports/results/error.h"

namespace sweep::emu {

namespace {

// c10::CachingAllocator::format_size (c10/core/Allocator.h:432-449).
std::string format_size(uint64_t size) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (size <= 1024) {
    os << size << " bytes";
  } else if (size <= 1048576) {
    os << static_cast<double>(size) / 1024.0 << " KiB";
  } else if (size <= 1073741824ULL) {
    os << static_cast<double>(size) / 1048576.0 << " MiB";
  } else {
    os << static_cast<double>(size) / 1073741824.0 << " GiB";
  }
  return os.str();
}

bool is_power_of_2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

// DeviceCachingAllocator::roundup_power2_next_division: the next of `divisions` equal steps
// between the powers of two around size (1200 with 4 divisions: 1024, 1280, ... -> 1280).
size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (is_power_of_2(size)) return size;
  const size_t power2_floor = size_t{1} << (63 - std::countl_zero(static_cast<uint64_t>(size)));
  const size_t power2_division =
      power2_floor >> (63 - std::countl_zero(static_cast<uint64_t>(divisions)));
  if (power2_division == 0) return power2_floor << 1;
  const size_t round_size_floor = size & ~(power2_division - 1);
  return round_size_floor == size ? size : round_size_floor + power2_division;
}

}  // namespace

void Stat::increase(size_t amount) {
  current += static_cast<int64_t>(amount);
  peak = std::max(current, peak);
  allocated += static_cast<int64_t>(amount);
}
void Stat::decrease(size_t amount) {
  current -= static_cast<int64_t>(amount);
  freed += static_cast<int64_t>(amount);
}

const char* action_name(TraceEntry::Action action) {
  // memory_snapshot.cpp's action_to_str.
  switch (action) {
    case TraceEntry::Action::kAlloc:
      return "alloc";
    case TraceEntry::Action::kFreeRequested:
      return "free_requested";
    case TraceEntry::Action::kFreeCompleted:
      return "free_completed";
    case TraceEntry::Action::kSegmentAlloc:
      return "segment_alloc";
    case TraceEntry::Action::kSegmentFree:
      return "segment_free";
    case TraceEntry::Action::kSegmentMap:
      return "segment_map";
    case TraceEntry::Action::kSegmentUnmap:
      return "segment_unmap";
    case TraceEntry::Action::kSnapshot:
      return "snapshot";
    case TraceEntry::Action::kOom:
      return "oom";
  }
  return "?";
}

CachingAllocatorModel::CachingAllocatorModel(int64_t device_total, int64_t device_limit,
                                             AllocatorSettings settings, double memory_fraction)
    : settings_(std::move(settings)), memory_(device_total, device_limit) {
  settings_.roundup_power2_divisions.resize(kRoundUpPowerOfTwoIntervals, 0);
  // The constructor applies per_process_memory_fraction from the config
  // (DeviceCachingAllocator::DeviceCachingAllocator); a later Python call overrides it.
  set_memory_fraction(settings_.per_process_memory_fraction);
  if (memory_fraction != 0) set_memory_fraction(memory_fraction);
}

CachingAllocatorModel::~CachingAllocatorModel() {
  for (Block* b : owned_) delete b;
}

// DeviceCachingAllocator::setMemoryFraction: the cap is fraction * totalGlobalMem, and only
// a fraction below 1 sets one (so 1.0 removes it; 0 allows nothing).
void CachingAllocatorModel::set_memory_fraction(double fraction) {
  if (!(fraction >= 0 && fraction <= 1))
    throw std::invalid_argument("invalid fraction:" + std::to_string(fraction) +
                                ". Please set within [0, 1].");
  allowed_memory_maximum_.reset();
  if (fraction < 1.0)
    allowed_memory_maximum_ = static_cast<size_t>(fraction * static_cast<double>(memory_.total()));
}

// DeviceCachingAllocator::round_size: under 512 B -> 512 B; with roundup_power2_divisions set
// for the size's interval (and the size above 512 B * divisions), the next division step;
// otherwise a multiple of 512 B.
size_t CachingAllocatorModel::round_size(const AllocatorSettings& s, size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = roundup_power2_divisions(s, size);
  if (divisions > 1 && size > kMinBlockSize * divisions)
    return roundup_power2_next_division(size, divisions);
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

// DeviceCachingAllocator::get_allocation_size: the segment a new cudaMalloc takes.
size_t CachingAllocatorModel::get_allocation_size(const AllocatorSettings& s, size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return s.large_segment_size;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

std::array<bool, kNumStatTypes> CachingAllocatorModel::stat_types(const BlockPool& pool) const {
  std::array<bool, kNumStatTypes> t{};  // get_stat_types_for_pool
  t[kAggregate] = true;
  t[pool.is_small ? kSmallPool : kLargePool] = true;
  return t;
}

// DeviceCachingAllocator::malloc (its OOM branch asserts at CCA.cpp:1482).
std::optional<uint64_t> CachingAllocatorModel::malloc(size_t orig_size, int stream) {
  // NativeCachingAllocator::allocate: size 0 never reaches the device allocator, and a
  // request of 1 EB or more fails before it (no OOM counted).
  if (orig_size == 0) return 0;
  if (orig_size >= (size_t{1} << 60)) {
    last_oom_ = OomInfo{};
    last_oom_.message = "CUDA out of memory. Tried to allocate more than 1EB memory.";
    return std::nullopt;
  }
  // process_events: nothing to do without record_stream.
  const size_t size = round_size(settings_, orig_size);
  BlockPool& pool = get_pool(size);
  AllocParams p{size, &pool, get_allocation_size(settings_, size), settings_.expandable_segments,
                stream};
  p.stat_types = stat_types(pool);

  // Search the pool (the free-memory callbacks that would follow free nothing here).
  bool found = get_free_block(p);
  if (!found) {
    if (allowed_memory_maximum_ && settings_.garbage_collection_threshold > 0.0)
      garbage_collect_cached_blocks();
    // cudaMalloc; else free enough oversize cached blocks and retry; else free every
    // unsplit cached block and retry (the one attempt counted in num_alloc_retries).
    found = alloc_block(p, false) ||
            (release_available_cached_blocks(p) && alloc_block(p, false)) ||
            (release_cached_blocks() && alloc_block(p, true));
  }
  if (!found) {
    record_oom(p, size);
    return std::nullopt;
  }
  const bool split = should_split(p.block, p.size, p.expandable);
  return alloc_found_block(p, orig_size, split)->ptr;
}

// The OOM branch of malloc (CCA.cpp:1482 onwards): the message OutOfMemoryError carries.
void CachingAllocatorModel::record_oom(const AllocParams& p, size_t size) {
  const int64_t device_free = memory_.free_bytes();
  const int64_t device_total = memory_.total();
  record_trace(TraceEntry::Action::kOom, static_cast<uint64_t>(device_free), size);
  stats_.num_ooms += 1;
  const int64_t allocated = stats_.allocated_bytes[kAggregate].current;
  const int64_t reserved = stats_.reserved_bytes[kAggregate].current;
  last_oom_ = OomInfo{p.alloc_size, device_total,         device_free, allowed_memory_maximum_,
                      allocated,    reserved - allocated, {}};
  std::string allowed_info;
  if (allowed_memory_maximum_) allowed_info = format_size(*allowed_memory_maximum_) + " allowed; ";
  // reportProcessMemoryInfo (NVML); see the header for what this assumes.
  const std::string proc_info = "Including non-PyTorch memory, this process has " +
                                format_size(static_cast<uint64_t>(device_total - device_free)) +
                                " memory in use. ";
  last_oom_.message =
      "CUDA out of memory. Tried to allocate " + format_size(p.alloc_size) +
      ". GPU 0 has a total capacity of " + format_size(static_cast<uint64_t>(device_total)) +
      " of which " + format_size(static_cast<uint64_t>(device_free)) + " is free. " + proc_info +
      allowed_info + "Of the allocated memory " + format_size(static_cast<uint64_t>(allocated)) +
      " is allocated by PyTorch, and " + format_size(static_cast<uint64_t>(reserved - allocated)) +
      " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
      "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
      "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/"
      "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
}

// DeviceCachingAllocator::get_free_block (after get_pool, CCA.cpp:3086): the smallest cached block
// that fits, lowest address first among equal sizes, unless the oversize rules refuse it.
bool CachingAllocatorModel::get_free_block(AllocParams& p) {
  BlockPool& pool = *p.pool;
  // Block ages for the garbage collector count only when it can run.
  if (allowed_memory_maximum_ && settings_.garbage_collection_threshold > 0.0)
    ++pool.get_free_blocks_call_count;
  Block key;
  key.stream = p.stream;
  key.size = p.size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != p.stream) return false;
  if ((*it)->expandable_segment) {
    if (p.expandable) {
      // A free block at the end of an expandable segment counts as the size it could grow to.
      auto expandable_size = [](const Block* b) {
        return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
      };
      auto next = std::next(it);
      while ((*it)->expandable_segment && next != pool.blocks.end() &&
             (*next)->stream == p.stream && expandable_size(*next) < expandable_size(*it))
        it = next++;
    } else {  // expandable_segments turned off since: skip expandable blocks
      do {
        ++it;
      } while (it != pool.blocks.end() && (*it)->expandable_segment && (*it)->stream == p.stream);
      if (it == pool.blocks.end() || (*it)->stream != p.stream) return false;
    }
  }
  // Do not return an oversized block for a request below max_split_size...
  if (p.size < settings_.max_split_size && (*it)->size >= settings_.max_split_size) return false;
  // ...and for a large request only one less than max_non_split_rounding bigger.
  if (p.size >= settings_.max_split_size &&
      (*it)->size >= p.size + settings_.max_non_split_rounding_size)
    return false;
  p.block = *it;
  pool.blocks.erase(it);
  return true;
}

// DeviceCachingAllocator::should_split: small pool (and expandable segments) keep any
// remainder of 512 B or more; the large pool only one over 1 MiB, and never for a request of
// max_split_size or more.
bool CachingAllocatorModel::should_split(const Block* block, size_t size, bool expandable) const {
  const size_t remaining = block->size - size;
  if (block->pool->is_small || expandable) return remaining >= kMinBlockSize;
  return size < settings_.max_split_size && remaining > kSmallSize;
}

// DeviceCachingAllocator::alloc_found_block (CCA.cpp:1651): split off the remainder, count
// the WHOLE block as allocated (so an unsplit block counts all its bytes).
CachingAllocatorModel::Block* CachingAllocatorModel::alloc_found_block(const AllocParams& p,
                                                                       size_t orig_size,
                                                                       bool split_remainder) {
  Block* block = p.block;
  const bool already_split = block->is_split();
  if (split_remainder) {
    Block* remaining = block;
    block = new_block(p.size, p.pool, remaining->ptr, remaining->stream);
    block->expandable_segment = remaining->expandable_segment;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    remaining->prev = block;
    remaining->ptr += p.size;
    remaining->size -= p.size;
    p.pool->insert_into_blocks(remaining);
    if (already_split && !block->expandable_segment) {
      for_each_stat(p.stat_types,
                    [&](size_t t) { stats_.inactive_split_bytes[t].decrease(block->size); });
    } else if (!block->expandable_segment) {
      for_each_stat(p.stat_types, [&](size_t t) {
        stats_.inactive_split_bytes[t].increase(remaining->size);
        stats_.inactive_split[t].increase(1);
      });
    }
  } else if (already_split && !block->expandable_segment) {
    for_each_stat(p.stat_types, [&](size_t t) {
      stats_.inactive_split_bytes[t].decrease(block->size);
      stats_.inactive_split[t].decrease(1);
    });
  }
  block->allocated = true;
  block->requested_size = orig_size;
  record_trace(TraceEntry::Action::kAlloc, block->ptr, orig_size);
  active_[block->ptr] = block;
  for_each_stat(p.stat_types, [&](size_t t) {
    stats_.allocation[t].increase(1);
    stats_.allocated_bytes[t].increase(block->size);
    stats_.active[t].increase(1);
    stats_.active_bytes[t].increase(block->size);
    stats_.requested_bytes[t].increase(block->requested_size);
  });
  if (block->size >= settings_.max_split_size) stats_.oversize_allocations.increase(1);
  return block;
}

// DeviceCachingAllocator::free: without record_stream the block goes straight to free_block.
void CachingAllocatorModel::free(uint64_t handle) {
  if (handle == 0) return;  // the null storage of a 0-byte allocation
  auto it = active_.find(handle);
  SWEEP_CHECK(it != active_.end(), "free of an address the model did not hand out");
  Block* block = it->second;
  active_.erase(it);  // NativeCachingAllocator::free drops it from allocated_blocks
  block->allocated = false;
  const auto types = stat_types(*block->pool);
  for_each_stat(types, [&](size_t t) {
    stats_.allocation[t].decrease(1);
    stats_.allocated_bytes[t].decrease(block->size);
  });
  record_trace(TraceEntry::Action::kFreeRequested, block->ptr, block->requested_size);
  if (block->size >= settings_.max_split_size) stats_.oversize_allocations.decrease(1);
  free_block(block);
}

// DeviceCachingAllocator::free_block (CCA.cpp:2967): merge with free neighbours of the same
// segment, then back into the pool.
void CachingAllocatorModel::free_block(Block* block) {
  record_trace(TraceEntry::Action::kFreeCompleted, block->ptr, block->requested_size);
  const size_t original_block_size = block->size;
  const size_t requested_size = block->requested_size;
  BlockPool& pool = *block->pool;
  int64_t net_blocks = 0, net_size = 0;
  for (Block* candidate : {block->prev, block->next}) {
    const size_t subsumed = try_merge_blocks(block, candidate, pool);
    if (subsumed > 0) {
      net_blocks -= 1;
      net_size -= static_cast<int64_t>(subsumed);
    }
  }
  pool.insert_into_blocks(block);
  if (block->is_split()) {
    net_blocks += 1;
    net_size += static_cast<int64_t>(block->size);
  }
  for_each_stat(stat_types(pool), [&](size_t t) {
    // Expandable segments are left out of inactive_split, as PyTorch leaves them out.
    if (!block->expandable_segment) {
      if (net_blocks > 0) stats_.inactive_split[t].increase(static_cast<size_t>(net_blocks));
      if (net_blocks < 0) stats_.inactive_split[t].decrease(static_cast<size_t>(-net_blocks));
      if (net_size > 0) stats_.inactive_split_bytes[t].increase(static_cast<size_t>(net_size));
      if (net_size < 0) stats_.inactive_split_bytes[t].decrease(static_cast<size_t>(-net_size));
    }
    stats_.active[t].decrease(1);
    stats_.active_bytes[t].decrease(original_block_size);
    stats_.requested_bytes[t].decrease(requested_size);
  });
}

// DeviceCachingAllocator::try_merge_blocks (CCA.cpp:3048): absorb a free neighbour that is
// mapped the same way; returns the bytes absorbed.
size_t CachingAllocatorModel::try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
  if (!src || src->allocated || dst->mapped != src->mapped) return 0;
  if (dst->prev == src) {  // [src dst]
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const size_t subsumed = src->size;
  dst->size += subsumed;
  if (src->mapped) {
    pool.blocks.erase(src);
  } else {
    pool.unmapped.erase(src);
  }
  delete_block(src);
  return subsumed;
}

}  // namespace sweep::emu
