// The caching-allocator model (sweeps/measure/caching_allocator.h), one test per rule of
// DeviceCachingAllocator (c10/cuda/CUDACachingAllocator.cpp, torch 2.11), each with the numbers
// worked out by hand from the rule it cites. Config parsing: caching_allocator_conf_test.cc.
#include "sweeps/measure/caching_allocator.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace sweep::emu {
namespace {

constexpr size_t MiB = kMiB;
constexpr int64_t GiB = int64_t{1} << 30;
constexpr uint64_t kBase = detail::DeviceMemory::kBase;  // the first address the driver gives

AllocatorSettings conf(std::string_view text) {
  auto parsed = parse_alloc_conf(text);
  if (auto* error = std::get_if<std::string>(&parsed)) ADD_FAILURE() << *error;
  return std::get<AllocatorSettings>(parsed);
}

// An 80 GiB card with room to spare, unless a test is about running out.
CachingAllocatorModel big(AllocatorSettings s = {}) { return {80 * GiB, 79 * GiB, std::move(s)}; }

// round_size: 512 B minimum and granularity.
TEST(CachingAllocatorModel, RoundSizeIsAMultipleOf512) {
  const AllocatorSettings s;
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 1), 512u);
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 512), 512u);
  EXPECT_EQ(CachingAllocatorModel::round_size(s, 513), 1024u);
  EXPECT_EQ(CachingAllocatorModel::round_size(s, MiB + 1), MiB + 512);
}

// get_pool + get_allocation_size: <= 1 MiB (after rounding) is the small pool, packed into
// 2 MiB segments; 1 MiB + 1 B rounds to 1 MiB + 512 B, the large pool and a 20 MiB segment.
TEST(CachingAllocatorModel, SmallRequestGetsA2MiBSegment) {
  auto m = big();
  ASSERT_TRUE(m.malloc(1));
  EXPECT_EQ(m.stats().allocated, 512);
  EXPECT_EQ(m.stats().reserved, int64_t(2 * MiB));
  ASSERT_TRUE(m.malloc(MiB));  // exactly 1 MiB is still small: fits the same segment's rest
  EXPECT_EQ(m.stats().reserved, int64_t(2 * MiB));
  EXPECT_EQ(m.stats().allocated, int64_t(MiB + 512));
  ASSERT_TRUE(m.malloc(MiB));  // 1 MiB - 512 B left there: a second 2 MiB segment
  EXPECT_EQ(m.stats().reserved, int64_t(4 * MiB));
  EXPECT_EQ(m.device_stats().reserved_bytes[kSmallPool].current, int64_t(4 * MiB));
  ASSERT_TRUE(m.malloc(MiB + 1));
  EXPECT_EQ(m.device_stats().reserved_bytes[kLargePool].current, int64_t(20 * MiB));
}

// get_allocation_size: 1..10 MiB requests take a large_segment_size (20 MiB) segment.
TEST(CachingAllocatorModel, ThreeMiBRequestGetsA20MiBSegment) {
  auto m = big();
  ASSERT_TRUE(m.malloc(3 * MiB));
  EXPECT_EQ(m.stats().reserved, int64_t(20 * MiB));
  EXPECT_EQ(m.stats().allocated, int64_t(3 * MiB));
  EXPECT_EQ(m.stats().segments, 1);
}

// get_allocation_size: from 10 MiB on, the request rounded up to 2 MiB; should_split: the 1 MiB
// left is not > kSmallSize, so the block is not split and allocated counts all 16 MiB.
TEST(CachingAllocatorModel, FifteenMiBRequestGetsA16MiBSegmentCountedWhole) {
  auto m = big();
  ASSERT_TRUE(m.malloc(15 * MiB));
  EXPECT_EQ(m.stats().reserved, int64_t(16 * MiB));
  EXPECT_EQ(m.stats().allocated, int64_t(16 * MiB));
  EXPECT_EQ(m.stats().requested, int64_t(15 * MiB));
  EXPECT_EQ(m.stats().inactive_split_bytes, 0);
  // 12.5 MiB: a 14 MiB segment, 1.5 MiB over > 1 MiB, so it is split.
  auto m2 = big();
  ASSERT_TRUE(m2.malloc(12 * MiB + MiB / 2));
  EXPECT_EQ(m2.stats().allocated, int64_t(12 * MiB + MiB / 2));
  EXPECT_EQ(m2.stats().inactive_split_bytes, int64_t(MiB + MiB / 2));
}

// alloc_found_block: the remainder of a split goes back to the pool and serves the next request
// from the same segment, at the next address.
TEST(CachingAllocatorModel, SplitRemainderStaysInThePool) {
  auto m = big();
  auto a = m.malloc(3 * MiB);  // 20 MiB segment: 3 used, 17 free
  auto b = m.malloc(5 * MiB);  // from the 17: 5 used, 12 free
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, kBase);
  EXPECT_EQ(*b, kBase + 3 * MiB);
  EXPECT_EQ(m.stats().reserved, int64_t(20 * MiB));
  EXPECT_EQ(m.stats().allocated, int64_t(8 * MiB));
  EXPECT_EQ(m.stats().inactive_split_bytes, int64_t(12 * MiB));
  EXPECT_EQ(m.stats().num_device_alloc, 1);
  // Small pool: 1000 B -> 1024 B, the rest of the 2 MiB (>= 512 B) stays for the next one.
  auto c = m.malloc(1000);
  auto d = m.malloc(600);
  ASSERT_TRUE(c && d);
  EXPECT_EQ(*d, *c + 1024);
  EXPECT_EQ(m.stats().reserved, int64_t(22 * MiB));
}

// get_free_block + BlockComparatorSize: the smallest cached block that fits, and among equal
// sizes the lowest address, whatever order they were freed in.
TEST(CachingAllocatorModel, BestFitIsSmallestThenLowestAddress) {
  auto m = big();
  auto a = m.malloc(30 * MiB);  // kBase
  auto b = m.malloc(24 * MiB);  // kBase + 30 MiB
  auto c = m.malloc(24 * MiB);  // kBase + 54 MiB
  ASSERT_TRUE(a && b && c);
  m.free(*c);
  m.free(*a);
  m.free(*b);
  auto d = m.malloc(22 * MiB);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, kBase + 30 * MiB);
  EXPECT_EQ(m.stats().allocated, int64_t(22 * MiB));  // 24 - 22 = 2 MiB > 1 MiB: split
  EXPECT_EQ(m.stats().reserved, int64_t(78 * MiB));
}

// free_block + try_merge_blocks: a freed block absorbs free neighbours; only a whole segment
// free again is unsplit, and only then can empty_cache give it back.
TEST(CachingAllocatorModel, FreeMergesNeighbours) {
  auto m = big();
  auto a = m.malloc(3 * MiB);
  auto b = m.malloc(5 * MiB);
  auto c = m.malloc(4 * MiB);  // 20 MiB: a 3 | b 5 | c 4 | free 8
  ASSERT_TRUE(a && b && c);
  m.free(*b);
  m.free(*a);  // merges with b: free 8 | c 4 | free 8
  auto seg = m.segments();
  ASSERT_EQ(seg.size(), 1u);
  ASSERT_EQ(seg[0].blocks.size(), 3u);
  EXPECT_EQ(seg[0].blocks[0].size, 8 * MiB);
  EXPECT_FALSE(seg[0].blocks[0].allocated);
  EXPECT_EQ(seg[0].blocks[1].size, 4 * MiB);
  EXPECT_EQ(seg[0].blocks[2].size, 8 * MiB);
  m.empty_cache();  // still split: nothing to give back
  EXPECT_EQ(m.stats().reserved, int64_t(20 * MiB));
  m.free(*c);  // merges both ways: one free 20 MiB block
  EXPECT_EQ(m.segments()[0].blocks.size(), 1u);
  EXPECT_EQ(m.stats().inactive_split_bytes, 0);
  m.empty_cache();
  EXPECT_EQ(m.stats().reserved, 0);
  EXPECT_EQ(m.stats().num_device_free, 1);
}

// get_free_block: a freed block is reused at the same address, no new cudaMalloc.
TEST(CachingAllocatorModel, FreedBlockIsReused) {
  auto m = big();
  auto a = m.malloc(100 * MiB);
  ASSERT_TRUE(a);
  m.free(*a);
  auto b = m.malloc(100 * MiB);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(m.stats().reserved, int64_t(100 * MiB));
  EXPECT_EQ(m.stats().num_device_alloc, 1);
}

// A segment belongs to the stream it was allocated on: its cached blocks serve that stream
// alone (BlockComparatorSize orders by stream first), an expandable segment too; emptying the
// cache releases every stream's.
TEST(CachingAllocatorModel, AStreamsCachedBlocksServeThatStreamAlone) {
  for (const char* alloc_conf : {"", "expandable_segments:True"}) {
    SCOPED_TRACE(alloc_conf);
    auto m = big(conf(alloc_conf));
    auto a = m.malloc(100 * MiB, /*stream=*/1);
    ASSERT_TRUE(a);
    m.free(*a);
    auto b = m.malloc(100 * MiB);  // the default stream: a segment of its own
    ASSERT_TRUE(b);
    EXPECT_NE(*b, *a);
    EXPECT_EQ(m.stats().reserved, int64_t(2 * 100 * MiB));
    auto c = m.malloc(100 * MiB, 1);  // stream 1 again: its cached block
    ASSERT_TRUE(c);
    EXPECT_EQ(*c, *a);
    EXPECT_EQ(m.stats().reserved, int64_t(2 * 100 * MiB));
    m.free(*b);
    m.free(*c);
    m.empty_cache();
    EXPECT_EQ(m.stats().reserved, 0);
  }
}

// get_free_block's oversize rules with max_split_size_mb:100: a cached block >= 100 MiB never
// serves a request below 100 MiB; a request of 100 MiB or more takes one only if it is less
// than max_non_split_rounding (20 MiB) bigger, and then unsplit (should_split).
TEST(CachingAllocatorModel, MaxSplitSizeOversizeRules) {
  auto m = big(conf("max_split_size_mb:100"));
  auto a = m.malloc(120 * MiB);
  ASSERT_TRUE(a);
  m.free(*a);
  ASSERT_TRUE(m.malloc(30 * MiB));  // refused the 120: a new 30 MiB segment
  EXPECT_EQ(m.stats().reserved, int64_t(150 * MiB));
  ASSERT_TRUE(m.malloc(100 * MiB));  // 120 >= 100 + 20: refused, a new 100 MiB segment
  EXPECT_EQ(m.stats().reserved, int64_t(250 * MiB));
  auto d = m.malloc(110 * MiB);  // 120 < 110 + 20: taken whole
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, *a);
  EXPECT_EQ(m.stats().reserved, int64_t(250 * MiB));
  EXPECT_EQ(m.stats().allocated, int64_t(250 * MiB));
  EXPECT_EQ(m.stats().requested, int64_t(240 * MiB));
  EXPECT_EQ(m.device_stats().oversize_allocations.current, 2);  // the 100 and the 120
}

// release_available_cached_blocks: when cudaMalloc fails, free the largest oversize cached
// blocks until they cover max(request, max_split_size), then retry (not counted as a retry).
TEST(CachingAllocatorModel, ReleaseAvailableCachedBlocksFreesOversizeBlocks) {
  CachingAllocatorModel m(GiB, 400 * int64_t(MiB), conf("max_split_size_mb:100"));
  auto a = m.malloc(100 * MiB);
  auto b = m.malloc(120 * MiB);
  auto c = m.malloc(150 * MiB);  // driver holds 370 of 400 MiB
  ASSERT_TRUE(a && b && c);
  m.free(*a);
  m.free(*b);
  // 150 MiB: nothing cached fits, 370 + 150 > 400; free the 120 (120 < 150), then the 100.
  ASSERT_TRUE(m.malloc(150 * MiB));
  EXPECT_EQ(m.stats().reserved, int64_t(300 * MiB));
  EXPECT_EQ(m.stats().num_device_free, 2);
  EXPECT_EQ(m.stats().num_alloc_retries, 0);
  EXPECT_EQ(m.stats().num_ooms, 0);
}

// malloc's last resort, release_cached_blocks (= empty_cache) and one counted retry: the
// allocation succeeds once the cache is gone.
TEST(CachingAllocatorModel, OomRetryAfterEmptyingTheCacheSucceeds) {
  CachingAllocatorModel m(GiB, 100 * int64_t(MiB));
  auto a = m.malloc(60 * MiB);
  ASSERT_TRUE(a);
  m.free(*a);                   // 60 MiB cached
  auto b = m.malloc(80 * MiB);  // 60 + 80 > 100: empty the cache, retry
  ASSERT_TRUE(b);
  EXPECT_EQ(m.stats().reserved, int64_t(80 * MiB));
  EXPECT_EQ(m.stats().peak_reserved, int64_t(80 * MiB));
  EXPECT_EQ(m.stats().num_alloc_retries, 1);
  EXPECT_EQ(m.stats().num_ooms, 0);
}

// The OOM branch of malloc: nullopt after the cache was emptied and the retry counted, the
// live allocations untouched, num_ooms counted, and PyTorch's message with its numbers
// (format_size prints exactly 1 GiB as "1024.00 MiB": its GiB branch starts above 2^30).
TEST(CachingAllocatorModel, OomFailsCleanlyWithPyTorchsMessage) {
  CachingAllocatorModel m(GiB, 100 * int64_t(MiB));
  auto a = m.malloc(60 * MiB);
  auto x = m.malloc(20 * MiB);
  ASSERT_TRUE(a && x);
  m.free(*x);                        // reserved 80, allocated 60
  EXPECT_FALSE(m.malloc(50 * MiB));  // 80 + 50 > 100; emptied: 60 + 50 > 100 still
  const AllocatorStats s = m.stats();
  EXPECT_EQ(s.allocated, int64_t(60 * MiB));
  EXPECT_EQ(s.reserved, int64_t(60 * MiB));  // the cached 20 MiB went back first
  EXPECT_EQ(s.peak_reserved, int64_t(80 * MiB));
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(m.last_oom().tried_to_allocate, 50 * MiB);
  EXPECT_EQ(m.last_oom().device_free, int64_t(40 * MiB));
  EXPECT_EQ(
      m.last_oom_message(),
      "CUDA out of memory. Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 1024.00 "
      "MiB of which 40.00 MiB is free. Including non-PyTorch memory, this process has "
      "984.00 MiB memory in use. Of the allocated memory 60.00 MiB is allocated by PyTorch, "
      "and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated "
      "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
      "avoid fragmentation.  See documentation for Memory Management  "
      "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-"
      "pytorch-cuda-alloc-conf)");
  EXPECT_EQ(m.trace().back().action, TraceEntry::Action::kOom);
  EXPECT_TRUE(m.malloc(30 * MiB));  // 60 + 30 fits: the model goes on after an OOM
}

// The message prints the segment size asked of the driver: 3 MiB asks for 20 MiB.
TEST(CachingAllocatorModel, OomMessagePrintsTheSegmentSize) {
  CachingAllocatorModel m(GiB, 10 * int64_t(MiB));
  EXPECT_FALSE(m.malloc(3 * MiB));
  EXPECT_EQ(m.last_oom().tried_to_allocate, 20 * MiB);
  EXPECT_NE(m.last_oom_message().find("Tried to allocate 20.00 MiB."), std::string::npos);
}

// setMemoryFraction + alloc_block: fraction * total caps the bytes held, checked with the
// segment size; the message names the cap.
TEST(CachingAllocatorModel, MemoryFractionCapsReserved) {
  CachingAllocatorModel m(GiB, GiB, {}, 0.25);  // 256 MiB allowed
  EXPECT_EQ(m.allowed_memory_maximum(), 256 * MiB);
  ASSERT_TRUE(m.malloc(200 * MiB));
  EXPECT_FALSE(m.malloc(60 * MiB));  // 200 + 60 > 256, though the card has 824 MiB free
  EXPECT_EQ(m.last_oom().device_free, int64_t(824 * MiB));
  EXPECT_NE(m.last_oom_message().find("is free. Including non-PyTorch memory, this process has "
                                      "200.00 MiB memory in use. 256.00 MiB allowed; Of the"),
            std::string::npos);
  // per_process_memory_fraction in the config does the same at construction; 1.0 is no cap.
  CachingAllocatorModel c(GiB, GiB, conf("per_process_memory_fraction:0.25"));
  EXPECT_EQ(c.allowed_memory_maximum(), 256 * MiB);
  c.set_memory_fraction(1.0);
  EXPECT_FALSE(c.allowed_memory_maximum());
  // The check uses alloc_size: 3 MiB needs a 20 MiB segment, more than 10 MiB allowed.
  CachingAllocatorModel small(GiB, GiB, {}, 10.0 / 1024);
  EXPECT_FALSE(small.malloc(3 * MiB));
}

// Expandable segments: one segment per pool grows by mapping pages (20 MiB in the large pool,
// 2 MiB in the small one) as far as the rounded request needs; empty_cache unmaps only whole
// free pages; with nothing mapped the segment goes.
TEST(CachingAllocatorModel, ExpandableSegmentsMapPagesAsNeeded) {
  auto m = big(conf("expandable_segments:True"));
  auto a = m.malloc(3 * MiB);  // maps page 0
  ASSERT_TRUE(a);
  EXPECT_EQ(m.stats().reserved, int64_t(20 * MiB));
  EXPECT_EQ(m.stats().segments, 0);  // map_block counts reserved bytes, not segments
  auto b = m.malloc(25 * MiB);       // the free 17 MiB tail plus page 1: 25 MiB at a + 3 MiB
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, *a + 3 * MiB);
  EXPECT_EQ(m.stats().reserved, int64_t(40 * MiB));  // without: 20 + 26 MiB
  EXPECT_EQ(m.stats().allocated, int64_t(28 * MiB));
  auto seg = m.segments();
  ASSERT_EQ(seg.size(), 1u);
  EXPECT_TRUE(seg[0].is_expandable);
  EXPECT_EQ(seg[0].total_size, 40 * MiB);
  m.free(*a);
  m.empty_cache();  // free: [0, 3) and [28, 40) MiB, no whole page
  EXPECT_EQ(m.stats().reserved, int64_t(40 * MiB));
  m.free(*b);
  m.empty_cache();
  EXPECT_EQ(m.stats().reserved, 0);
  EXPECT_EQ(m.segments().size(), 0u);
  ASSERT_TRUE(m.malloc(45 * MiB));  // ceil(45 / 20) = 3 pages
  EXPECT_EQ(m.stats().reserved, int64_t(60 * MiB));
  ASSERT_TRUE(m.malloc(512));  // small pool: its own segment of 2 MiB pages
  EXPECT_EQ(m.device_stats().reserved_bytes[kSmallPool].current, int64_t(2 * MiB));
}

// garbage_collect_cached_blocks: with a memory fraction and a threshold, once the allocator
// holds more than threshold * allowed, cached unsplit large blocks at least as old as the
// average (in get_free_block calls) go back before a new cudaMalloc.
TEST(CachingAllocatorModel, GarbageCollectionFreesOldCachedBlocks) {
  // allowed 512 MiB, gc above 256 MiB. Ages: A cached at call 2, B at call 3; D's search is
  // call 4, so A is 2 old and B 1, the average 1.5: only A goes.
  auto run = [](const char* settings, double fraction) {
    CachingAllocatorModel m(GiB, GiB, conf(settings), fraction);
    auto a = m.malloc(100 * MiB);
    auto b = m.malloc(100 * MiB);
    m.free(*a);
    auto c = m.malloc(120 * MiB);  // holds 200 <= 256: no gc yet; then 320
    m.free(*b);
    auto d = m.malloc(150 * MiB);  // holds 320 > 256: collect 64 MiB or more
    EXPECT_TRUE(c && d);
    return m.stats();
  };
  const AllocatorStats gc = run("garbage_collection_threshold:0.5", 0.5);
  EXPECT_EQ(gc.reserved, int64_t(370 * MiB));  // B 100 + C 120 + D 150
  EXPECT_EQ(gc.num_device_free, 1);
  EXPECT_EQ(run("", 0.5).reserved, int64_t(470 * MiB));  // no threshold: A stays cached
  EXPECT_EQ(run("garbage_collection_threshold:0.5", 0).reserved,
            int64_t(470 * MiB));  // no fraction: gc never runs
}

// record_trace: what a free-and-empty round trip leaves in device_traces.
TEST(CachingAllocatorModel, TraceRecordsEachAction) {
  auto m = big();
  auto a = m.malloc(100);
  m.free(*a);
  m.empty_cache();
  using A = TraceEntry::Action;
  std::vector<A> actions;
  for (const auto& e : m.trace()) actions.push_back(e.action);
  EXPECT_EQ(actions, (std::vector<A>{A::kSegmentAlloc, A::kAlloc, A::kFreeRequested,
                                     A::kFreeCompleted, A::kSegmentFree}));
  EXPECT_EQ(m.trace()[1].size, 100u);  // alloc reports the request, not the 512 B block
  EXPECT_EQ(m.trace()[0].size, 2 * MiB);
}

// A step-like sequence, every number by hand (S1..S5 are the segments in address order).
TEST(CachingAllocatorModel, MixedSequencePeaks) {
  auto m = big();
  auto w1 = m.malloc(4 * MiB);  // S1 20 MiB: w1 4 | free 16
  auto w2 = m.malloc(4 * MiB);  // S1: w1 4 | w2 4 | free 12
  auto bias = m.malloc(4096);   // S2 2 MiB (small pool)
  auto x = m.malloc(12 * MiB);  // S1's free 12 exactly: S1 full
  auto h = m.malloc(30 * MiB);  // S3 30 MiB
  auto y = m.malloc(6 * MiB);   // S4 20 MiB: y 6 | free 14
  ASSERT_TRUE(w1 && w2 && bias && x && h && y);
  EXPECT_EQ(m.stats().allocated, int64_t(56 * MiB + 4096));
  EXPECT_EQ(m.stats().reserved, int64_t(72 * MiB));
  m.free(*h);
  auto g = m.malloc(30 * MiB);  // S3 again
  m.free(*x);                   // S1: w1 | w2 | free 12
  auto gw = m.malloc(8 * MiB);  // best fit 12 (not S4's 14): S1 ... gw 8 | free 4
  auto t = m.malloc(25 * MiB);  // nothing cached fits: S5 26 MiB, 1 MiB left: unsplit
  ASSERT_TRUE(g && gw && t);
  EXPECT_EQ(*gw, kBase + 8 * MiB);
  EXPECT_EQ(m.stats().allocated, int64_t(78 * MiB + 4096));  // 4+4+4K+30+6+8+26
  for (auto p : {*t, *g, *y, *gw}) m.free(p);
  m.empty_cache();  // S3, S4 (y merged back whole), S5 go; S1 and S2 are still in use
  const AllocatorStats s = m.stats();
  EXPECT_EQ(s.peak_allocated, int64_t(78 * MiB + 4096));
  EXPECT_EQ(s.peak_requested, int64_t(77 * MiB + 4096));
  EXPECT_EQ(s.peak_reserved, int64_t(98 * MiB));  // 20 + 2 + 30 + 20 + 26
  EXPECT_EQ(s.allocated, int64_t(8 * MiB + 4096));
  EXPECT_EQ(s.reserved, int64_t(22 * MiB));
  EXPECT_EQ(s.num_device_alloc, 5);
  EXPECT_EQ(s.num_device_free, 3);
  m.reset_peak_stats();
  EXPECT_EQ(m.stats().peak_reserved, int64_t(22 * MiB));
}

// Not a rule but the bookkeeping under all of them: over a long random trace (OOMs included)
// the segments add up to reserved, the allocated blocks to allocated, no two free blocks of a
// segment sit side by side unmerged, and reserved never passes what the driver has.
TEST(CachingAllocatorModel, RandomTraceKeepsTheBooksBalanced) {
  for (const char* settings : {"", "expandable_segments:True", "max_split_size_mb:40",
                               "roundup_power2_divisions:4,garbage_collection_threshold:0.7"}) {
    CachingAllocatorModel m(GiB, 600 * int64_t(MiB), conf(settings), 0.9);
    std::vector<uint64_t> live;
    uint64_t rng = 42;
    auto next = [&] { return rng = rng * 6364136223846793005ULL + 1442695040888963407ULL; };
    for (int step = 0; step < 4000; ++step) {
      const uint64_t r = next() >> 33;
      if (!live.empty() && r % 5 < 2) {
        const size_t i = (next() >> 33) % live.size();
        m.free(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (r % 97 == 0) {
        m.empty_cache();
      } else {
        const size_t sizes[] = {1 + r % 4096, 1 + r % MiB, MiB + r % (9 * MiB), r % (60 * MiB)};
        if (auto p = m.malloc(sizes[(r >> 8) % 4])) {
          if (*p) live.push_back(*p);
        }
      }
      size_t reserved = 0, allocated = 0;
      for (const SegmentInfo& seg : m.segments()) {
        reserved += seg.total_size;
        allocated += seg.allocated_size;
        for (size_t b = 1; b < seg.blocks.size(); ++b)
          ASSERT_FALSE(!seg.blocks[b - 1].allocated && !seg.blocks[b].allocated) << settings;
      }
      ASSERT_EQ(int64_t(reserved), m.stats().reserved) << settings << " step " << step;
      ASSERT_EQ(int64_t(allocated), m.stats().allocated) << settings << " step " << step;
      ASSERT_LE(m.stats().reserved, 600 * int64_t(MiB)) << settings;
    }
    EXPECT_GT(m.stats().num_ooms, 0) << settings;  // the trace does reach the limit
  }
}

// NativeCachingAllocator::allocate: a 0-byte storage never reaches the allocator.
TEST(CachingAllocatorModel, ZeroBytesTouchNothing) {
  auto m = big();
  EXPECT_EQ(m.malloc(0), 0u);
  m.free(0);
  EXPECT_EQ(m.stats().reserved, 0);
  EXPECT_TRUE(m.trace().empty());
}

}  // namespace
}  // namespace sweep::emu
