// The CUDA path on a GPU host (every test here is named *_CUDA: main.cc filters them out where
// no GPU is visible): tiny bursts of each family in each precision with each optimizer, a
// capped point running out of memory with what an OOM must record, --snapshot with the
// allocator settings of the alloc_conf axis, and --gpus landing on the GPU it names.
#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <iterator>
#include <tuple>

#include "reports/results/rows.h"
#include "models/int8.h"
#include "models/lora.h"
#include "models/nf4.h"
#include "models/zoo.h"
#include "sweeps/worker/burst.h"
#include "sweeps/worker/load_int8.h"
#include "sweeps/measure/env.h"
#include "sweeps/measure/trackers.h"
#include "test_util.h"

namespace sweep {
namespace {

using reports::read_results;
using schema::column;

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CudaTracker, AllocatorCallsWorkBeforeTheFirstTensor_CUDA) {
  // In a process that has made no CUDA tensor yet, these threw before the tracker
  // initialised CUDA itself ("Invalid device argument", "Allocator not initialized").
  auto mem = make_cuda_tracker();
  mem->reset_peaks();
  EXPECT_GE(mem->reserved(), mem->allocated());
  mem->set_budget(int64_t{1} << 30);
  mem->set_budget(0);  // clears the cap
  EXPECT_GT(mem->device_used(), 0);
}

using BurstCase = std::tuple<std::string, std::string, std::string>;  // model, precision, optimizer

class CudaBurst : public ::testing::TestWithParam<BurstCase> {};

TEST_P(CudaBurst, RunsOkWithAFiniteLoss) {
  const auto& [model, precision, optimizer] = GetParam();
  Point p = tiny_point(model, Device::kCuda, *parse_as<Precision>(precision), *parse_as<OptimizerKind>(optimizer));
  p.steps = 2;
  p.repetitions = 2;
  static auto mem = make_cuda_tracker();
  static auto timer = make_cuda_timer();
  const auto m = run_burst(p, *mem, *timer);
  ASSERT_EQ(m.status, Status::kOk) << m.message;
  std::printf("%s: loss %.5f, peak %lld bytes, %lld skipped steps, %.3f ms/step\n",
              p.label().c_str(), m.loss, static_cast<long long>(m.peak_allocated_bytes),
              static_cast<long long>(m.skipped_steps), m.step_ms.value_or(0));
  EXPECT_TRUE(std::isfinite(m.loss));
  EXPECT_GT(m.peak_allocated_bytes, m.weights_bytes);
  EXPECT_GE(m.peak_reserved_bytes, m.peak_allocated_bytes);
  EXPECT_GT(m.step_ms.value_or(0), 0);
  EXPECT_LT(m.skipped_steps, p.warmup_steps + p.steps * p.repetitions);
}

INSTANTIATE_TEST_SUITE_P(
    FamiliesPrecisionsOptimizers, CudaBurst,
    ::testing::Combine(::testing::Values("gpt2-test", "t5-test", "whisper-test"),
                     ::testing::Values("fp32", "fp16-amp", "bf16-amp", "bf16"),
                     ::testing::Values("adamw", "adamw-fused", "sgd", "adafactor")),
    [](const auto& info) {
      std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" +
                      std::get<2>(info.param) + "_CUDA";  // the suffix the test main filters
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

std::string gpu_config(const std::filesystem::path& dir, const std::string& extra) {
  return testing::write_file(dir / "gpu.yaml", R"(
device: cuda
steps: 1
warmup_steps: 1
repetitions: 1
timeout_s: 300
models: [gpt2-test]
)" + extra);
}

TEST(CudaSweep, ACappedPointOomsWithItsPhaseGapAndSnapshot_CUDA) {
  auto dir = testing::temp_dir("cuda_oom");
  // 128 x 256 tokens x 1024 vocabulary: the fp32 logits alone are 128 MiB, over the cap.
  auto cfg = gpu_config(dir, "budget_gib: 0.1\ngrid: {seq: 256, batch: 128}\n");
  const auto out = dir / "out";
  auto r = testing::run_sweep_cli("run " + cfg + " --snapshot --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_results(out.string()).rows;
  ASSERT_EQ(rows.size(), 1u);
  const auto& row = rows[0];
  ASSERT_EQ(row.at(column("status")), "oom") << row.at(column("message"));
  EXPECT_FALSE(row.at(column("phase")).empty());
  EXPECT_GT(row.number(column("oom_gap_bytes")).value_or(0), 0);
  EXPECT_LE(row.number(column("peak_allocated_bytes")).value_or(0),
            row.number(column("budget_bytes")).value_or(0));
  const auto pickle = out / "snapshots" / (row.at(column("point_id")) + ".oom.pickle");
  EXPECT_TRUE(std::filesystem::exists(pickle)) << pickle;
  EXPECT_GT(std::filesystem::file_size(pickle), 0u);
}

TEST(CudaSweep, SnapshotShowsTheAllocConfOverAnInheritedOne_CUDA) {
  auto dir = testing::temp_dir("cuda_snapshot");
  auto cfg = gpu_config(dir, "grid: {seq: 32, batch: 2, alloc_conf: \"expandable_segments:True\"}\n");
  const auto out = dir / "out";
  // Inherited values in both variables: the axis must win over each reader's first choice.
  auto r = testing::run_sweep_cli("run " + cfg + " --snapshot --out " + out.string(),
                                  "PYTORCH_ALLOC_CONF=max_split_size_mb:64 "
                                  "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_results(out.string()).rows;
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(rows[0].at(column("status")), "ok") << rows[0].at(column("message"));
  EXPECT_EQ(rows[0].at(column("allocator_settings")), "expandable_segments:True");
  const auto pickle = out / "snapshots" / (rows[0].at(column("point_id")) + ".pickle");
  ASSERT_TRUE(std::filesystem::exists(pickle)) << pickle;
  // The pickle's allocator_settings hold the parsed string as a plain (BINUNICODE) string.
  const std::string bytes = slurp(pickle);
  EXPECT_NE(bytes.find("allocator_settings"), std::string::npos);
  EXPECT_NE(bytes.find("expandable_segments:True"), std::string::npos);
  EXPECT_EQ(bytes.find("max_split_size_mb"), std::string::npos);
}

TEST(CudaSweep, GpusIndexLandsOnTheGpuItNamesThroughVisibleDevices_CUDA) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  // This process sees every GPU (its own CUDA_VISIBLE_DEVICES, if any, is what the sweep
  // inherits); listing them in reverse, --gpus 0 must mean the last one.
  std::string reversed;
  for (int i = n - 1; i >= 0; --i)
    reversed += visible_device(std::getenv("CUDA_VISIBLE_DEVICES"), static_cast<std::size_t>(i)) +
                (i ? "," : "");
  const std::string expected = reversed.substr(0, reversed.find(','));
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, n - 1), cudaSuccess);
  auto dir = testing::temp_dir("cuda_gpus");
  auto cfg = gpu_config(dir, "grid: {seq: 32, batch: 2}\n");
  const auto out = dir / "out";
  auto r = testing::run_sweep_cli("run " + cfg + " --gpus 0 --out " + out.string(),
                                  "CUDA_VISIBLE_DEVICES=" + reversed);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_results(out.string()).rows;
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at(column("status")), "ok") << rows[0].at(column("message"));
  EXPECT_EQ(rows[0].at(column("gpu_index")), expected);
  EXPECT_EQ(rows[0].at(column("device_name")), prop.name);
  EXPECT_EQ(rows[0].number(column("device_memory_bytes")).value_or(0),
            static_cast<double>(prop.totalGlobalMem));
}


// driver_version is the NVIDIA driver ("580.159.04", NVML or /proc/driver/nvidia/version), the
// CUDA version the driver supports is cuda_driver_version ("13.0").
TEST(Environment, DriverVersionIsTheDriversNotTheCudaApis_CUDA) {
  const DeviceInfo d = query_device(Device::kCuda);
  std::printf("driver %s, CUDA driver API %s, runtime %s\n", d.driver_version.c_str(),
              d.cuda_driver_version.c_str(), d.cuda_version.c_str());
  EXPECT_TRUE(std::regex_match(d.driver_version, std::regex(R"(\d{3,}\.\d+(\.\d+)?)"))) << d.driver_version;
  EXPECT_TRUE(std::regex_match(d.cuda_driver_version, std::regex(R"(\d{2}\.\d)"))) << d.cuda_driver_version;
}

// The 8-bit load onto the GPU holds the values the CPU's in-place conversion gives (bnb's
// kernel computes what its reference code does; ours computes on the host and copies in).
TEST(Int8Load, OntoTheGpuTheWeightsAreTheCpusConversion_CUDA) {
  for (const char* name : {"gpt2-test", "t5-test", "whisper-test"}) {
    const auto* spec = models::find_model(name);
    torch::manual_seed(0);
    auto cpu = spec->make();
    torch::manual_seed(0);
    auto gpu = spec->make();
    models::quantize_int8(*cpu, spec->family);
    load_int8(*gpu, spec->family, torch::Device(torch::kCUDA, 0), torch::kFloat);
    auto a = models::int8_layers(*cpu, spec->family), b = models::int8_layers(*gpu, spec->family);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(b[i].weight.is_cuda()) << name << " " << b[i].name;
      EXPECT_TRUE(torch::equal(a[i].weight, b[i].weight.cpu())) << name << " " << b[i].name;
      EXPECT_TRUE(torch::equal(*a[i].module->named_buffers(false).find("SCB"),
                               b[i].module->named_buffers(false).find("SCB")->cpu()))
          << name << " " << b[i].name;
    }
    for (const auto& t : gpu->parameters()) EXPECT_TRUE(t.is_cuda()) << name;
  }
}

// The 4-bit load onto the GPU holds the CPU's quantisation (computed on the host, copied in),
// and a LoRA step on it runs bnb's fallback (dequantise + F.linear) at 64 tokens on an H100
// (_gemm_4bit_use_custom_cuda), with the dequantised values ATen makes in chunks.
TEST(Nf4Load, OntoTheGpuTheWeightsAreTheCpusAndLoraTrains_CUDA) {
  const auto* spec = models::find_model("gpt2-test");
  const models::Quant4Settings s{models::Quant4::kNf4, torch::kBFloat16};
  torch::manual_seed(0);
  auto cpu = spec->make();
  torch::manual_seed(0);
  auto gpu = spec->make();
  cpu->to(torch::kBFloat16);
  models::quantize_4bit(*cpu, spec->family, s);
  const auto props = cuda_device_props();
  models::set_cuda_dispatch_props({props.sms, props.major, props.minor});
  load_4bit(*gpu, spec->family, torch::Device(torch::kCUDA, 0), torch::kBFloat16, s);
  auto a = models::layers_4bit(*cpu, spec->family), b = models::layers_4bit(*gpu, spec->family);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].weight.is_cuda()) << b[i].name;
    EXPECT_TRUE(torch::equal(a[i].weight, b[i].weight.cpu())) << b[i].name;
    const auto *sa = models::state_4bit(*a[i].module), *sb = models::state_4bit(*b[i].module);
    EXPECT_TRUE(torch::equal(sa->absmax, sb->absmax.cpu())) << b[i].name;
    EXPECT_TRUE(torch::equal(models::dequantize_4bit(a[i].weight, *sa),
                             models::dequantize_4bit(b[i].weight, *sb).cpu()))
        << b[i].name;
  }
  models::add_lora(*gpu, {8, 8, 0, models::default_lora_targets(spec->family)});
  gpu->train(true);
  auto gen = at::detail::createCPUGenerator(1);
  auto loss = gpu->loss(gpu->synthetic_batch({4, 16, 0, 0}, torch::Device(torch::kCUDA, 0), gen));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

// The CUDA runtime out of memory outside the caching allocator (injected as C10_CUDA_CHECK
// throws it, an AcceleratorError): on a GPU, too, the row is an oom at its phase, not a crash.
TEST(CudaSweep, AnOomOutsideTheAllocatorIsAnOomRow_CUDA) {
  auto dir = testing::temp_dir("cuda_cublas_oom");
  auto cfg = testing::write_file(dir / "c.yaml", R"(
device: cuda
steps: 1
warmup_steps: 1
repetitions: 1
models: [gpt2-test]
grid: {seq: 64, batch: [1, 2]}
)");
  auto r = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "out").string(),
                                  "SWEEP_TEST_FAULT=cuda-oom:backward@2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& row : read_results((dir / "out").string()).rows) {
    const bool failed = row.at(column("batch")) == "2";
    EXPECT_EQ(row.at(column("status")), failed ? "oom" : "ok");
    if (failed) EXPECT_EQ(row.at(column("reason")), "cuda-out-of-memory");
    EXPECT_FALSE(row.at(column("driver_version")).empty());
  }
}

}  // namespace
}  // namespace sweep
