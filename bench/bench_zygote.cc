// Per-point overhead, whole process, as the runner pays it: a point forked from the
// pre-loaded worker (sweeps/runner/zygote.h), the same point in an exec'd `sweep worker`, and a
// Python + transformers process doing the same point (scripts/hf_reference.py point --device
// cpu). Each time is from the request to the child's exit status. The points:
//   empty        the worker returns at its entry (SWEEP_TEST_FAULT=state): the overhead alone;
//   tiny_cpu     gpt2-test, batch 1 x 16 tokens, one step (the "tiny GPT-2 point");
//   emulated     gpt2-large batch 4 x 1024, bf16-amp, checkpointing, on an emulated H100;
// and a 200-point grid of tiny points, `sweep run` end to end.
// At the end it prints the ratios of medians measured in this run (run with
// --benchmark_repetitions=7). The Python is $SWEEP_PYTHON, else setup.sh's venv.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "sweeps/runner/isolate.h"
#include "sweeps/runner/zygote.h"

namespace {

using sweep::Point;

Point tiny_cpu() {
  Point p;
  p.model = "gpt2-test";
  p.family = "gpt2";
  p.seq = 16;
  p.steps = 1;
  p.warmup_steps = 0;
  p.repetitions = 1;
  return p;
}

Point emulated_gpt2_large() {
  Point p;
  p.model = "gpt2-large";
  p.family = "gpt2";
  p.batch = 4;
  p.seq = 1024;
  p.precision = sweep::Precision::kBf16Amp;
  p.checkpointing = sweep::Checkpointing::kBlock;
  p.device = sweep::Device::kEmulated;
  p.steps = 3;
  p.warmup_steps = 2;
  p.repetitions = 2;
  p.card.name = "H100";
  p.card.memory_bytes = 85017493504;
  p.card.cc_major = 9;
  p.card.cc_minor = 0;
  p.card.sms = 132;
  return p;
}

void run_point(benchmark::State& state, const Point& p, bool zygote,
               const std::map<std::string, std::string>& env = {}) {
  sweep::Zygote z(SWEEP_BINARY);
  sweep::IsolateOptions o;
  o.exe = SWEEP_BINARY;
  o.log_path = (std::filesystem::temp_directory_path() / "bench_zygote.log").string();
  o.env = env;
  o.zygote = zygote ? &z : nullptr;
  if (zygote) sweep::run_isolated(p, o);  // the zygote's start is paid once per lane, not per point
  for (auto _ : state) {
    const auto r = sweep::run_isolated(p, o);
    if (r.status != sweep::Status::kOk) state.SkipWithError(("the point failed: " + r.message).c_str());
  }
}

void BM_Empty(benchmark::State& state) { run_point(state, tiny_cpu(), state.range(0), {{"SWEEP_TEST_FAULT", "state"}}); }
void BM_TinyCpu(benchmark::State& state) { run_point(state, tiny_cpu(), state.range(0)); }
void BM_Emulated(benchmark::State& state) { run_point(state, emulated_gpt2_large(), state.range(0)); }

void BM_TinyCpuPython(benchmark::State& state) {
  const char* env = std::getenv("SWEEP_PYTHON");
  const std::string python = env ? env : std::string(std::getenv("HOME")) + "/.cache/sweep/torch-2.11.0/bin/python";
  const std::string cmd = python + " " + SWEEP_SOURCE_DIR +
                          "/scripts/hf_reference.py point --device cpu --model gpt2-test --batch 1 "
                          "--seq 16 --steps 1 --warmup 0 --repetitions 1 >/dev/null 2>&1";
  for (auto _ : state)
    if (std::system(cmd.c_str()) != 0) state.SkipWithError(("failed: " + cmd).c_str());
}

// A 200-point grid of tiny CPU points, `sweep run` end to end (gpt2-test, 4 lengths x 50
// batches, one step each), with and without the zygote.
void BM_Grid200(benchmark::State& state) {
  const auto dir = std::filesystem::temp_directory_path() / "bench_zygote_grid";
  std::filesystem::create_directories(dir);
  std::string batches;
  for (int b = 1; b <= 50; ++b) batches += (b > 1 ? ", " : "") + std::to_string(b);
  const std::string config = (dir / "grid.yaml").string();
  FILE* f = std::fopen(config.c_str(), "w");
  std::fprintf(f, "name: grid200\ndevice: cpu\nsteps: 1\nwarmup_steps: 0\nrepetitions: 1\n"
                  "models: [gpt2-test]\ngrid:\n  seq: [8, 16, 32, 64]\n  batch: [%s]\n", batches.c_str());
  std::fclose(f);
  const std::string out = (dir / "out").string();
  const std::string cmd = std::string(SWEEP_BINARY) + " run " + config + " -q --out " + out +
                          (state.range(0) ? "" : " --no-zygote") + " >/dev/null 2>&1";
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove_all(out);
    state.ResumeTiming();
    if (std::system(cmd.c_str()) != 0) state.SkipWithError(("failed: " + cmd).c_str());
  }
}

BENCHMARK(BM_Empty)->ArgName("zygote")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_TinyCpu)->ArgName("zygote")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_TinyCpuPython)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_Emulated)->ArgName("zygote")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Grid200)->ArgName("zygote")->Arg(1)->Arg(0)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);

// Collects each benchmark's median (or its only run), in seconds, and prints the ratios at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      if (r.error_occurred) continue;
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (median || (r.run_type == Run::RT_Iteration && !medians_.count(r.run_name.str())))
        medians_[r.run_name.str()] = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    auto find = [&](const std::string& prefix) -> const std::pair<const std::string, double>* {
      for (const auto& kv : medians_)
        if (kv.first.rfind(prefix, 0) == 0) return &kv;
      return nullptr;
    };
    auto ratio = [&](const char* what, const std::string& a, const std::string& b) {
      const auto *x = find(a), *y = find(b);
      if (x && y)
        std::printf("%s: %.1fx (%.3f s / %.3f s)\n", what, x->second / y->second, x->second, y->second);
    };
    ratio("python + transformers / forked, tiny CPU point", "BM_TinyCpuPython", "BM_TinyCpu/zygote:1");
    ratio("exec'd / forked, tiny CPU point", "BM_TinyCpu/zygote:0", "BM_TinyCpu/zygote:1");
    ratio("exec'd / forked, empty point", "BM_Empty/zygote:0", "BM_Empty/zygote:1");
    ratio("exec'd / forked, emulated gpt2-large point", "BM_Emulated/zygote:0", "BM_Emulated/zygote:1");
    ratio("exec'd / forked, 200-point tiny CPU grid", "BM_Grid200/zygote:0", "BM_Grid200/zygote:1");
  }

 private:
  std::map<std::string, double> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
}
