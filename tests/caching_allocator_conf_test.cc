// PYTORCH_CUDA_ALLOC_CONF as torch 2.11 parses it (sweeps/measure/alloc_conf.h), and the
// roundup_power2_divisions rounding it drives. Suite CachingAllocatorModel, as the rules in
// caching_allocator_test.cc. Messages are those compiled into the 2.11.0 wheel's libc10.so and
// libc10_cuda.so (checked with strings(1)).
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "sweeps/measure/caching_allocator.h"

namespace sweep::emu {
namespace {

constexpr size_t MiB = kMiB;

AllocatorSettings accepted(std::string_view text) {
  auto parsed = parse_alloc_conf(text);
  if (auto* error = std::get_if<std::string>(&parsed)) ADD_FAILURE() << text << ": " << *error;
  return std::get<AllocatorSettings>(parsed);
}

// The message of a refused string ("" and a failure when it was accepted).
std::string refused(std::string_view text) {
  auto parsed = parse_alloc_conf(text);
  if (!std::holds_alternative<std::string>(parsed)) {
    ADD_FAILURE() << text << " was accepted";
    return "";
  }
  return std::get<std::string>(parsed);
}

// AcceleratorAllocatorConfig defaults (AllocatorConfig.h:336-351) and the keys both parsers take.
TEST(CachingAllocatorModel, ConfAcceptsWhatTorchAccepts) {
  const AllocatorSettings d = accepted("");
  EXPECT_EQ(d.max_split_size, std::numeric_limits<size_t>::max());
  EXPECT_EQ(d.max_non_split_rounding_size, 20 * MiB);
  EXPECT_EQ(d.large_segment_size, 20 * MiB);
  EXPECT_EQ(d.roundup_power2_divisions, std::vector<size_t>(16, 0));
  EXPECT_FALSE(d.expandable_segments);

  const AllocatorSettings s = accepted(
      "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:4],"
      "garbage_collection_threshold:0.6,expandable_segments:False");
  EXPECT_EQ(s.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(s.garbage_collection_threshold, 0.6);
  // [256:1] also fills every interval below 256 MiB; ">" every one after 512 MiB.
  EXPECT_EQ(s.roundup_power2_divisions,
            (std::vector<size_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 4, 4, 4, 4, 4}));

  EXPECT_TRUE(accepted(" expandable_segments : True ").expandable_segments);  // spaces dropped

  const AllocatorSettings c = accepted(
      "backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,"
      "pinned_num_register_threads:8,graph_capture_record_stream_reuse:True,"
      "per_process_memory_fraction:0.5,pinned_use_background_threads:True,"
      "pinned_reserve_segment_size_mb:64,large_segment_size_mb:40,max_non_split_rounding_mb:64");
  EXPECT_EQ(c.large_segment_size, 40 * MiB);
  EXPECT_EQ(c.max_non_split_rounding_size, 64 * MiB);
  EXPECT_DOUBLE_EQ(c.per_process_memory_fraction, 0.5);
  EXPECT_EQ(c.pinned_num_register_threads, 8u);
  EXPECT_TRUE(c.release_lock_on_cudamalloc);
  EXPECT_EQ(c.backend, "native");
  // Valid torch (CUDA's stream-ordered allocator), recorded; the emulator refuses it.
  EXPECT_EQ(accepted("backend:cudaMallocAsync").backend, "cudaMallocAsync");
}

// ConfigTokenizer::checkToken (AllocatorConfig.h:65-68) only checks the index: a ':' where a
// ',' belongs passes in 2.11, so it passes here.
TEST(CachingAllocatorModel, ConfIgnoresAWrongSeparatorAsTorchDoes) {
  const AllocatorSettings s = accepted("expandable_segments:True:max_split_size_mb:64");
  EXPECT_TRUE(s.expandable_segments);
  EXPECT_EQ(s.max_split_size, 64 * MiB);
}

TEST(CachingAllocatorModel, ConfRejectsWhatTorchRejects) {
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  // An unknown key, after a good one: the Accelerator parser refuses it (AllocatorConfig.cpp).
  const std::string foo = refused("expandable_segments:True,foo");
  EXPECT_TRUE(has(foo, "Unrecognized key 'foo' in Accelerator allocator config.")) << foo;
  EXPECT_TRUE(has(refused("max_split_size_mb:10"),
                  "CachingAllocator option max_split_size_mb too small, must be >= 20"));
  EXPECT_TRUE(has(refused("large_segment_size_mb:10"),
                  "CachingAllocator option large_segment_size_mb must be > 10 MB"));
  // large_segment_size_mb is read first and raises max_split_size_mb's minimum.
  EXPECT_TRUE(has(refused("max_split_size_mb:30,large_segment_size_mb:40"), "must be >= 40"));
  EXPECT_TRUE(has(refused("max_non_split_rounding_mb:8"), "max_non_split_rounding_mb too small"));
  EXPECT_TRUE(has(refused("garbage_collection_threshold:1"),
                  "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"));
  EXPECT_TRUE(has(refused("expandable_segments:true"),
                  "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"));
  EXPECT_TRUE(has(refused("roundup_power2_divisions:3"),
                  "For roundups, the divisions has to be power of 2 "));
  EXPECT_TRUE(has(refused("roundup_power2_divisions:[100:2]"),
                  "For roundups, the intervals have to be power of 2 "));
  EXPECT_TRUE(has(refused("roundup_power2_divisions:[256:2"), "Index out of bounds"));
  EXPECT_TRUE(has(refused("max_split_size_mb"), "Index out of bounds in ConfigTokenizer"));
  EXPECT_TRUE(has(refused("max_split_size_mb:abc"), "stoull"));
  EXPECT_TRUE(has(refused("backend:foo"),
                  "Unknown allocator backend, options are native and cudaMallocAsync"));
  // NUL: torch reads a C string, so a NUL cannot reach it; the config refuses one before.
  EXPECT_TRUE(has(refused(std::string("expandable_segments:True") + '\0'), "got 'True"));
  EXPECT_TRUE(has(refused("per_process_memory_fraction:1.5"),
                  "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"));
  EXPECT_TRUE(has(refused("pinned_num_register_threads:3"),
                  "Number of register threads has to be power of 2, got 3"));
}

// round_size with roundup_power2_divisions:4: only above 512 B * 4 = 2 KiB does the power-of-2
// division apply (so 1200 B is 1536, not the 1280 the docs' example gives); powers of two and
// exact division steps stay.
TEST(CachingAllocatorModel, RoundSizeWithPowerOfTwoDivisions) {
  const AllocatorSettings s = accepted("roundup_power2_divisions:4");
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 1200), 1536u);
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 3000), 3072u);        // 2048 + k * 512
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 1153434), 1310720u);  // 1.1 -> 1.25 MiB
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 1310720), 1310720u);
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 1048576), 1048576u);
  // Per interval: [256:1,512:2,>:4].
  const AllocatorSettings l = accepted("roundup_power2_divisions:[256:1,512:2,>:4]");
  EXPECT_EQ(CachingAllocatorModel::round_size(l, 300 * MiB + 1), 300 * MiB + 512);  // 1: off
  EXPECT_EQ(CachingAllocatorModel::round_size(l, 600 * MiB), 768 * MiB);  // halves of 512..1024
  EXPECT_EQ(CachingAllocatorModel::round_size(l, 2048 * MiB + 1), 2560 * MiB);  // quarters
}

// The rounded size decides the segment: 1.1 MiB rounds to 1.25 MiB (large pool, 20 MiB).
TEST(CachingAllocatorModel, RoundedSizeIsWhatIsAllocated) {
  CachingAllocatorModel m(int64_t{80} << 30, int64_t{79} << 30,
                          accepted("roundup_power2_divisions:4"));
  ASSERT_TRUE(m.malloc(1153434));
  EXPECT_EQ(m.stats().allocated, 1310720);
  EXPECT_EQ(m.stats().requested, 1153434);
  EXPECT_EQ(m.stats().reserved, int64_t(20 * MiB));
}

}  // namespace
}  // namespace sweep::emu
