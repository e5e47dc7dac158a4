// The model's memory snapshot (sweeps/measure/memory_viz.h) read back as torch 2.11's own
// pickle: with python's pickle module, which is what memory_viz tooling uses, and with
// LibTorch's unpickler. Kept apart from caching_allocator_test.cc so that file needs no torch.
#include "sweeps/measure/memory_viz.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace sweep::emu {
namespace {

constexpr size_t MiB = kMiB;

// A 3 MiB tensor kept, a 100 B one freed: one large segment, one small, and a trace.
std::string sample() {
  auto parsed = parse_alloc_conf("max_split_size_mb:64,roundup_power2_divisions:[2:4]");
  CachingAllocatorModel m(int64_t{80} << 30, int64_t{79} << 30,
                          std::get<AllocatorSettings>(parsed));
  m.malloc(3 * MiB);
  m.free(*m.malloc(100));
  return memory_viz_pickle(m);
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return "popen failed";
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(MemoryVizSnapshot, PythonPickleReadsIt) {
  // python3 is a set-up requirement (scripts/setup.sh installs python3-venv).
  ASSERT_EQ(run("python3 -c 'import pickle; print(1)'"), "1\n") << "python3 is needed";
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "sweep_memory_viz_" + std::to_string(::getpid());
  const auto file = dir / (stem + ".pickle"), reader = dir / (stem + ".py");
  std::ofstream(file, std::ios::binary) << sample();
  const std::string script =
      "import pickle, sys\n"
      "d = pickle.load(open(sys.argv[1], 'rb'))\n"
      "print(sorted(d))\n"
      "for s in d['segments']:\n"
      "    print(s['segment_type'], s['total_size'], s['allocated_size'], s['requested_size'],"
      " s['is_expandable'], s['segment_pool_id'], s['address'] == s['blocks'][0]['address'],"
      " [(b['size'], b['requested_size'], b['state'], b['frames']) for b in s['blocks']])\n"
      "print([(e['action'], e['size']) for e in d['device_traces'][0]])\n"
      "a = d['allocator_settings']\n"
      "print(a['PYTORCH_CUDA_ALLOC_CONF'], a['max_split_size'], a['expandable_segments'],"
      " a['roundup_power2_divisions']['1'], a['roundup_power2_divisions']['2'],"
      " a['roundup_power2_divisions']['4'], len(a['roundup_power2_divisions']))\n";
  std::ofstream(reader) << script;
  const std::string out = run("python3 " + reader.string() + " " + file.string());
  std::remove(file.c_str());  // not std::filesystem::remove: see tests/temp_tree.h
  std::remove(reader.c_str());
  EXPECT_EQ(out,
            "['allocator_settings', 'device_traces', 'external_annotations', 'segments']\n"
            "large 20971520 3145728 3145728 False (0, 0) True "
            "[(3145728, 3145728, 'active_allocated', []), (17825792, 0, 'inactive', [])]\n"
            "small 2097152 0 0 False (0, 0) True [(2097152, 100, 'inactive', [])]\n"
            "[('segment_alloc', 20971520), ('alloc', 3145728), ('segment_alloc', 2097152), "
            "('alloc', 100), ('free_requested', 100), ('free_completed', 100)]\n"
            "max_split_size_mb:64,roundup_power2_divisions:[2:4] 67108864 False 4 4 0 16\n");
}

TEST(MemoryVizSnapshot, LibTorchUnpicklesIt) {
  const std::string bytes = sample();
  const c10::IValue v = torch::jit::unpickle(bytes.data(), bytes.size());
  const auto d = v.toGenericDict();
  const auto segments = d.at("segments").toList();
  ASSERT_EQ(segments.size(), 2u);
  const auto large = segments.get(0).toGenericDict();  // sorted by address: S1 first
  EXPECT_EQ(large.at("segment_type").toStringRef(), "large");
  EXPECT_EQ(large.at("address").toInt(), int64_t(detail::DeviceMemory::kBase));
  EXPECT_EQ(large.at("blocks").toList().size(), 2u);
  const auto settings = d.at("allocator_settings").toGenericDict();
  EXPECT_EQ(settings.at("max_split_size").toInt(), int64_t(64 * MiB));
  EXPECT_EQ(d.at("device_traces").toList().get(0).toList().size(), 6u);
  // Unlimited max_split_size is SIZE_MAX, which torch writes as int64 -1.
  CachingAllocatorModel plain(int64_t{80} << 30, int64_t{79} << 30);
  const std::string b2 = memory_viz_pickle(plain);
  EXPECT_EQ(torch::jit::unpickle(b2.data(), b2.size())
                .toGenericDict()
                .at("allocator_settings")
                .toGenericDict()
                .at("max_split_size")
                .toInt(),
            -1);
}

}  // namespace
}  // namespace sweep::emu
