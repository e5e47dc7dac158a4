// PYTORCH_CUDA_ALLOC_CONF as torch 2.11 reads it: the settings that change what the CUDA
// caching allocator does, and a parser that accepts and rejects what torch accepts and rejects.
// Part of the emulated CUDA device (caching_allocator.h); no torch header, on purpose.
//
// Transcribed from c10/core/AllocatorConfig.{h,cpp} (AcceleratorAllocatorConfig) and
// c10/cuda/CUDAAllocatorConfig.{h,cpp}; line numbers "AllocatorConfig.h:N" are those of the
// 2.11.0 wheel's headers (torch/include/c10/...), which are exactly v2.11.0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sweep::emu {

inline constexpr size_t kMiB = size_t{1} << 20;
// c10/core/AllocatorConfig.h:16-25 (2.11.0 wheel).
inline constexpr size_t kSmallBuffer = 2 * kMiB;     // small allocations packed in 2 MiB segments
inline constexpr size_t kMinBlockSize = 512;         // every size is rounded to at least 512 B
inline constexpr size_t kSmallSize = 1 * kMiB;       // largest small-pool request
inline constexpr size_t kMinLargeAlloc = 10 * kMiB;  // 1..10 MiB requests get a large segment
inline constexpr size_t kRoundLarge = 2 * kMiB;      // larger requests rounded to 2 MiB
// kLargeBuffer (CUDACachingAllocator.cpp): large_segment_size_'s default, AllocatorConfig.h:338.
inline constexpr size_t kLargeBuffer = 20 * kMiB;
// AllocatorConfig.cpp: one roundup_power2_divisions entry per power-of-two interval.
inline constexpr size_t kRoundUpPowerOfTwoIntervals = 16;

// What PYTORCH_CUDA_ALLOC_CONF sets, in the units PyTorch stores (bytes, not MB).
struct AllocatorSettings {
  // AcceleratorAllocatorConfig (AllocatorConfig.h:336-351).
  size_t large_segment_size = kLargeBuffer;                    // large_segment_size_mb
  size_t max_split_size = std::numeric_limits<size_t>::max();  // max_split_size_mb
  size_t max_non_split_rounding_size = kLargeBuffer;           // max_non_split_rounding_mb
  // Divisions per interval: [0] is sizes below 2 MiB, [i] is [2^i MiB, 2^(i+1) MiB), [15]
  // everything from 32 GiB up; 0 or 1 = plain 512 B rounding.
  std::vector<size_t> roundup_power2_divisions =
      std::vector<size_t>(kRoundUpPowerOfTwoIntervals, 0);
  double garbage_collection_threshold = 0;  // (0, 1); 0 = off
  bool expandable_segments = false;
  // CUDAAllocatorConfig (CUDAAllocatorConfig.h:192-201): the allocator applies this one as
  // set_per_process_memory_fraction when it is constructed.
  double per_process_memory_fraction = 1.0;
  // Kept only because the snapshot's allocator_settings reports them; no effect on sizes.
  bool release_lock_on_cudamalloc = false;
  bool pinned_use_cuda_host_register = false;
  size_t pinned_num_register_threads = 1;
  bool graph_capture_record_stream_reuse = false;
  std::string backend = "native";  // or cudaMallocAsync (CUDA's own, not this model's)
  std::string conf;  // the string as given (last_allocator_settings)
};

// Parses `conf` as torch 2.11 does (AcceleratorAllocatorConfig::parseArgs, then the CUDA
// hook CUDAAllocatorConfig::parseArgs). On anything torch would raise on, returns the message
// torch raises, naming the key or value. The one parser of the string: a config's alloc_conf
// is checked with it too. backend:cudaMallocAsync is valid torch but a different allocator,
// which this model does not emulate (make_device_memory refuses it).
std::variant<AllocatorSettings, std::string> parse_alloc_conf(std::string_view conf);
// The keys torch 2.11 takes, sorted, comma-separated (for a hint).
std::string alloc_conf_keys();

// AcceleratorAllocatorConfig::roundup_power2_divisions(size): the divisions for size's interval.
size_t roundup_power2_divisions(const AllocatorSettings& s, size_t size);

}  // namespace sweep::emu
