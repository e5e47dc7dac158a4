// Issue 36 item 5 (the CUDA paths, read against torch 2.11's sources), issue 38's inherited
// allocator setting, and issue 36 item 7's small things: what of each can be shown without a
// GPU. The GPU halves are named *_CUDA elsewhere (zygote_test, optim8bit_test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/results/cards.h"
#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "sweeps/cli/env_check.h"
#include "sweeps/measure/env.h"
#include "sweeps/runner/budget.h"
#include "sweeps/runner/progress.h"
#include "sweeps/runner/results_store.h"
#include "sweeps/runner/sweep.h"
#include "sweeps/runner/zygote.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Issue 38: `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb=512` (an `=` for the `:`) aborted every
// command, `--version` included, with a c10 INTERNAL ASSERT and a stack trace from LibTorch's
// static initializer. The check runs from the executable's .preinit_array, before any shared
// library's initializer: the variable is named, why, a hint, exit 2.
TEST(InheritedAllocConf, ARejectedValueIsNamedBeforeLibTorchLoads) {
  for (const std::string var : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const auto r = testing::run_sweep_cli_split("--version", var + "=max_split_size_mb=512");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("error: " + var + ": inherited from the environment, and PyTorch 2.11 "
                          "rejects it", 0),
              0u)
        << r.err;
    EXPECT_NE(r.err.find("\nhint: unset it (unset " + var + ")"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("INTERNAL ASSERT"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Exception raised from"), std::string::npos) << r.err;
  }
  // What torch takes passes, and so does the backend it takes (zygotes and probes unset it).
  for (const std::string ok : {"expandable_segments:True", "max_split_size_mb:512",
                               "backend:cudaMallocAsync"}) {
    const auto r = testing::run_sweep_cli_split("--version", "PYTORCH_CUDA_ALLOC_CONF=" + ok);
    EXPECT_EQ(r.exit_code, 0) << ok << ": " << r.err;
    EXPECT_EQ(r.out.rfind("sweep ", 0), 0u) << r.out;
  }
}

TEST(InheritedAllocConf, OnlyTheAllocatorVariablesAreRead) {
  std::vector<std::string> env = {"PATH=/bin", "PYTORCH_CUDA_ALLOC_CONF_X=nonsense",
                                  "XPYTORCH_ALLOC_CONF=nonsense", "PYTORCH_ALLOC_CONF="};
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  EXPECT_FALSE(environment_error(envp.data()));
  std::string bad = "PYTORCH_ALLOC_CONF=roundup_power2_divisions:3";
  envp.insert(envp.begin(), bad.data());
  const auto e = environment_error(envp.data());
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("error: PYTORCH_ALLOC_CONF: "), std::string::npos) << *e;
}

// Issue 36 item 5: LibTorch fixes the allocator backend when it loads (BackendStaticInitializer),
// so a zygote that loaded with an exported backend:cudaMallocAsync handed it to every forked
// point. The zygote starts with both variables unset; a point sets its own.
TEST(Zygote, StartsWithTheAllocatorSettingsUnset) {
  setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 1);
  const auto dir = testing::temp_dir("zygote_alloc_conf");
  {
    Zygote zygote(SWEEP_BINARY);
    const int out = ::open((dir / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const auto child = zygote.spawn_command({"--version"}, {}, out, out);
    ::close(out);
    ASSERT_TRUE(child);
    zygote.wait(*child);
    ASSERT_GT(zygote.pid(), 0);
    const std::string environ = slurp("/proc/" + std::to_string(zygote.pid()) + "/environ");
    EXPECT_NE(environ.find("PATH="), std::string::npos);
    EXPECT_EQ(environ.find("ALLOC_CONF"), std::string::npos) << "the zygote loaded LibTorch with them";
  }
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  // The GPU probe too: it measures the allocator the points will run.
  const auto env = probe_environment("3");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(env.at("PYTORCH_CUDA_ALLOC_CONF"), "");  // "" unsets
  EXPECT_EQ(env.at("PYTORCH_ALLOC_CONF"), "");
}

// ...and a point that asks for that backend on a CUDA card (or an emulated one) is refused at
// load, with the line: forked it would fail torch's "parsed at runtime != parsed at load
// time" assert, and cudaMallocAsync has no OOM observer. The CPU ignores the setting.
TEST(AllocConf, CudaMallocAsyncIsRefusedOnACudaCard) {
  const auto dir = testing::temp_dir("alloc_conf_async");
  const auto cfg = testing::write_file(dir / "c.yaml",
                                       "models: [gpt2-test]\ngpu: rtx3060\ngrid:\n  batch: 1\n"
                                       "  alloc_conf: [\"expandable_segments:True\", \"backend:cudaMallocAsync\"]\n");
  const auto r = testing::run_sweep_cli("run " + cfg + " --dry-run --device emulated");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cfg + ":5: grid.alloc_conf: alloc_conf 'backend:cudaMallocAsync' selects "
                          "backend cudaMallocAsync"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("hint: drop backend from alloc_conf"), std::string::npos) << r.output;
  EXPECT_EQ(testing::run_sweep_cli("run " + cfg + " --dry-run --device cpu").exit_code, 0);
  const auto native = testing::write_file(dir / "n.yaml",
                                          "models: [gpt2-test]\ngpu: rtx3060\ngrid:\n  batch: 1\n"
                                          "  alloc_conf: \"backend:native\"\n");
  EXPECT_EQ(testing::run_sweep_cli("run " + native + " --dry-run --device emulated").exit_code, 0);
}

// Issue 36 item 5: a driver too old for CUDA 13 made cudaGetDeviceCount fail, which read as
// "0 GPUs" and trained on the CPU without a word. The error is named where a driver is
// installed; no device, or no driver at all (a CPU machine), is still no GPU.
TEST(CudaDevices, ADriverTooOldIsNamedNotTakenForNoGpu) {
  constexpr int kInsufficientDriver = 35, kNoDevice = 100, kSystemDriverMismatch = 803;
  const auto old = cuda_count_error(kInsufficientDriver, "cudaErrorInsufficientDriver",
                                    "CUDA driver version is insufficient for CUDA runtime version",
                                    "535.104.05");
  EXPECT_EQ(old, "CUDA cannot use the GPU: CUDA driver version is insufficient for CUDA runtime "
                 "version (cudaErrorInsufficientDriver) with NVIDIA driver 535.104.05; this "
                 "build's CUDA 13 (torch 2.11.0+cu130) needs driver 580 or newer");
  EXPECT_NE(cuda_count_error(kSystemDriverMismatch, "cudaErrorSystemDriverMismatch", "mismatch",
                             "580.65.06")
                .find("(cudaErrorSystemDriverMismatch) with NVIDIA driver 580.65.06"),
            std::string::npos);
  EXPECT_EQ(cuda_count_error(kNoDevice, "cudaErrorNoDevice", "no CUDA-capable device", "580.1"), "");
  EXPECT_EQ(cuda_count_error(kInsufficientDriver, "cudaErrorInsufficientDriver", "x", ""), "");
  EXPECT_EQ(cuda_count_error(0, "cudaSuccess", "no error", "580.1"), "");
  // This machine (no GPU): whatever CUDA says, auto still means the CPU, with nothing to report
  // unless a driver is installed.
  if (nvidia_driver_version().empty()) EXPECT_EQ(cuda_unusable_reason(), "");
}

// Issue 36 item 5: `--gpus 0,0` ran two lanes on one GPU.
TEST(Gpus, AGpuListedTwiceIsRefused) {
  EXPECT_EQ(resolve_gpus("0,1", "c.yaml", Device::kCuda, nullptr, 2),
            (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(resolve_gpus("1,0", "c.yaml", Device::kCuda, "5,7", 2),
            (std::vector<std::string>{"7", "5"}));
  for (const std::string twice : {"0,0", "1,0,1", "0,00"}) {
    try {
      resolve_gpus(twice, "c.yaml", Device::kCuda, nullptr, 2);
      ADD_FAILURE() << twice << " accepted";
    } catch (const UserError& e) {
      EXPECT_EQ(e.key(), "--gpus");
      EXPECT_EQ(e.file(), "c.yaml");
      EXPECT_NE(std::string(e.what()).find("names GPU"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("list each GPU once"), std::string::npos);
    }
  }
  EXPECT_THROW(resolve_gpus("2", "c.yaml", Device::kCuda, nullptr, 2), UserError);
  // Issue 38: on an emulated run --gpus named the CPU.
  try {
    resolve_gpus("0", "c.yaml", Device::kEmulated, nullptr, 0);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("this run is emulated: no GPU runs it"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(resolve_gpus("", "c.yaml", Device::kCpu, nullptr, 0).empty());
}

// Issue 36 item 5: the seeded search seeded every lane from GPU 0's card. Each lane's searches
// are seeded by the card of the GPU that lane runs on.
TEST(SeededSearch, EachLaneIsSeededByItsOwnGpusCard) {
  const std::vector<HostGpu> probed = {
      {"0", "NVIDIA GeForce RTX 3060", 12616466432, 0, 0},
      {"1", "NVIDIA A100-SXM4-80GB", 85095874560, 0, 0},
      {"2", "Some Unknown Accelerator", 1 << 30, 0, 0}};
  const auto lanes = lane_predictors({"0", "1", "2"}, probed);
  ASSERT_EQ(lanes.size(), 3u);
  ASSERT_TRUE(lanes.at("0"));
  ASSERT_TRUE(lanes.at("1"));
  EXPECT_EQ(lanes.at("0")->name, "RTX 3060");
  EXPECT_EQ(lanes.at("1")->name, "A100 80GB");
  EXPECT_EQ(lanes.at("1")->memory_bytes, 85095874560);  // what that GPU reported
  EXPECT_FALSE(lanes.at("2"));  // no card of the table: unseeded
  const auto one = lane_predictors({}, probed);  // no --gpus: the one lane, the first probe
  ASSERT_TRUE(one.at(""));
  EXPECT_EQ(one.at("")->name, "RTX 3060");
}

// Issue 36 item 5: cuDNN's plan search near the cap tries each plan, catching the out-of-memory
// of its workspace, and then says "FIND was unable to find an engine to execute this
// computation": that is out of memory, not a crash. The same error with no allocator failure
// before it (no engine supports the convolution) is still a crash. Shown on the emulated card,
// whose allocator fails as CUDA's does.
TEST(CudnnNoEngine, AfterEveryPlansWorkspaceRanOutItIsAnOomRow) {
  nlohmann::json p = {{"model", "gpt2-test"}, {"family", "gpt2"}, {"batch", 2}, {"seq", 32},
                      {"device", "emulated"}, {"warmup_steps", 1}, {"steps", 1}, {"repetitions", 1},
                      {"card", {{"name", "RTX 3060"}, {"memory_bytes", 12616466432LL},
                                {"context_bytes", 0}, {"cc_major", 8}, {"cc_minor", 6},
                                {"sms", 28}, {"cpu", false}}}};
  const auto oom = testing::run_sweep_cli_split("worker --point '" + p.dump() + "' --result-fd 1",
                                                "SWEEP_TEST_FAULT=cudnn-no-engine:forward");
  ASSERT_EQ(oom.exit_code, 0) << oom.out << oom.err;
  const auto m = nlohmann::json::parse(oom.out.substr(oom.out.rfind('{')));
  EXPECT_EQ(m.at("status"), "oom") << m.dump();
  EXPECT_EQ(m.at("reason"), "cudnn-no-engine-fits") << m.dump();
  EXPECT_EQ(m.at("phase"), "forward") << m.dump();
  EXPECT_NE(m.at("message").get<std::string>().find("unable to find an engine"), std::string::npos);

  const auto crash = testing::run_sweep_cli_split("worker --point '" + p.dump() + "' --result-fd 1",
                                                  "SWEEP_TEST_FAULT=no-engine:forward");
  EXPECT_NE(crash.exit_code, 0) << crash.out;
  const auto c = nlohmann::json::parse(crash.out.substr(crash.out.rfind('{')));
  EXPECT_EQ(c.at("status"), "crash") << c.dump();
  EXPECT_NE(c.at("message").get<std::string>().find("unable to find an engine"), std::string::npos);
}

// Issue 36 item 7: Ctrl-C said "33 points kept" with 38 rows on disk: it counted points on
// record, and not the skipped rows appended since. It counts rows.
TEST(ResultsStoreRows, ARePointsRerunAndSkippedRowsToo) {
  const auto dir = testing::temp_dir("store_rows");
  auto row = [](const std::string& id, const std::string& status) {
    return nlohmann::json{{"schema_version", schema::kSchemaVersion}, {"point_id", id},
                          {"model", "gpt2-test"}, {"family", "gpt2"}, {"mode", "train"},
                          {"batch", 1}, {"status", status}};
  };
  {
    ResultsStore store(dir.string());
    store.append(row("00000000000000aa", "oom"));
    store.append(row("00000000000000aa", "oom"));  // re-run (--force)
    store.append(row("00000000000000bb", "skipped"));
    EXPECT_EQ(store.rows(), 3u);
    EXPECT_EQ(store.recorded(), 2u);
  }
  ResultsStore again(dir.string());
  EXPECT_EQ(again.rows(), 3u);
  EXPECT_EQ(again.recorded(), 2u);
}

// Issue 36 item 7: progress counters ran past their total ("[301/300]"): a search that takes
// more probes than were counted for it raises the estimate until it settles.
TEST(ProgressCount, NeverRunsPastItsTotal) {
  Point p;
  p.model = "gpt2-test";
  ::testing::internal::CaptureStderr();
  {
    Progress progress(2, /*quiet=*/false, /*estimated=*/true);
    for (int i = 0; i < 3; ++i) progress.finish(p, Status::kOk, "");
    progress.settle(3, 2);
    progress.finish(p, Status::kOk, "");
  }
  {
    Progress fixed(1, false, false);
    fixed.finish(p, Status::kOk, "");
    fixed.finish(p, Status::kOk, "");
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[1/~2] "), std::string::npos) << err;
  EXPECT_NE(err.find("[2/2] "), std::string::npos) << err;
  EXPECT_NE(err.find("[3/~4] "), std::string::npos) << err;
  EXPECT_NE(err.find("[2/2] "), std::string::npos) << err;
  EXPECT_EQ(err.find("[3/2]"), std::string::npos) << err;
  EXPECT_EQ(err.find("[2/1]"), std::string::npos) << err;
}

// Issue 36 item 7: the report of an emulated run with skipped rows read "predicted by emulation
// of , not measured" and "For . The rule...": a skipped row never ran, so it has no device name.
TEST(EmulatedReport, SkippedRowsNameNoEmptyCard) {
  const auto dir = testing::temp_dir("emulated_skipped");
  const auto cfg = testing::write_file(dir / "c.yaml",
                                       "device: emulated\ngpu: rtx3060\nsteps: 1\nwarmup_steps: 1\n"
                                       "repetitions: 1\nmodels: [gpt2-test]\n"
                                       "grid: {seq: 32, batch: [1, 2, 4, 8]}\n");
  const auto r = testing::run_sweep_cli("run " + cfg + " --out " + (dir / "out").string(),
                                        "SWEEP_TEST_FAULT=oom:forward@2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int skipped = 0;
  for (const auto& row : reports::read_results((dir / "out").string()).rows)
    skipped += row.at(schema::column("status")) == "skipped";
  ASSERT_GE(skipped, 1) << r.output;
  const std::string report = slurp(dir / "out" / "report.md");
  ASSERT_FALSE(report.empty());
  EXPECT_EQ(report.find("emulation of ,"), std::string::npos) << report;
  EXPECT_EQ(report.find("For ."), std::string::npos) << report;
  EXPECT_NE(report.find(predicted_by("RTX 3060")), std::string::npos) << report;
}

}  // namespace
}  // namespace sweep
