// Times one training step of the tiny GPT-2 on the CPU (forward, backward, AdamW, zero_grad),
// with and without block checkpointing: the cost the burst adds around the model itself.
#include <benchmark/benchmark.h>

#include "models/zoo.h"
#include "sweeps/worker/checkpoint.h"
#include "sweeps/worker/optim.h"

namespace {

void BM_TinyGpt2Step(benchmark::State& state) {
  torch::manual_seed(0);
  auto model = sweep::models::find_model("gpt2-test")->make();
  model->train();
  if (state.range(1)) model->set_block_runner(&sweep::checkpoint_block);
  auto opt = sweep::make_optimizer({sweep::OptimizerKind::kAdamW, 1e-3, 0.01}, model->parameters());
  auto gen = at::detail::createCPUGenerator(1);
  auto batch = model->synthetic_batch({state.range(0), 64, 0, 0}, torch::kCPU, gen);
  for (auto _ : state) {
    model->loss(batch).backward();
    opt->step();
    opt->zero_grad();
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(batch.tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TinyGpt2Step)->ArgsProduct({{1, 8}, {0, 1}})->ArgNames({"batch", "ckpt"})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
