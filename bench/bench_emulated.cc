// Times one point on the emulated device as `sweep run` pays for it: a whole worker process
// (`sweep worker --point ...`, LibTorch's start included) that builds the model on Meta, runs
// its steps and replays the caching allocator. The issue's bar: gpt2-large batch 4 x 1024
// bf16-amp with checkpointing in under 5 s on the project's 2-core machine. And what the
// predicted step time (issue 35: one step's kernels recorded and costed) adds to a point: the
// same point on the H100 with and without it (a card of another name, which the card table
// does not know, gets the same emulation and no step time); the bar is 10%. And a Llama 3.1
// 70B QLoRA point, whose bar is 10 s.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

namespace {

void run_point(benchmark::State& state, const std::string& point) {
  const std::string cmd = std::string(SWEEP_BINARY) + " worker --point '" + point +
                          "' --result-fd 1 >/dev/null 2>&1";
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) state.SkipWithError("the worker failed");
  }
}

// A point's JSON from its pieces (appended, not a chain of +, which GCC 12 at -O2 misreads
// as overflowing a small string).
std::string joined(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (auto p : parts) s.append(p);
  return s;
}

// An H100 80GB HBM3 (tests/emulated_h100_test.cc) and an RTX 3060 (sm_86, 28 SMs, 11.75 GiB).
const char* kH100 = R"("card":{"name":"H100","memory_bytes":85017493504,"cc_major":9,"cc_minor":0,"sms":132})";
const char* kRtx3060 = R"("card":{"name":"RTX 3060","memory_bytes":12616466432,"cc_major":8,"cc_minor":6,"sms":28})";

void BM_EmulatedGpt2LargeB4x1024Bf16AmpCkpt(benchmark::State& state) {
  run_point(state, joined({R"({"model":"gpt2-large","family":"gpt2","batch":4,"seq":1024,)",
                           R"("precision":"bf16-amp","checkpointing":"block","device":"emulated",)",
                           R"("steps":3,"warmup_steps":2,"repetitions":2,)", kH100, "}"}));
}
BENCHMARK(BM_EmulatedGpt2LargeB4x1024Bf16AmpCkpt)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_EmulatedWhisperLargeV3B8Bf16Amp(benchmark::State& state) {
  // The whole model (1.54B parameters) at its longest labels.
  run_point(state, joined({R"({"model":"whisper-large-v3","family":"whisper","batch":8,)",
                           R"("audio_s":30,"target_seq":448,"precision":"bf16-amp","device":"emulated",)",
                           R"("steps":3,"warmup_steps":2,"repetitions":2,)", kRtx3060, "}"}));
}
BENCHMARK(BM_EmulatedWhisperLargeV3B8Bf16Amp)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_EmulatedLlama31_70BQloraB1x2048Bf16AmpCkpt(benchmark::State& state) {
  // Issue 34's bar: a Llama 3.1 70B QLoRA point (NF4 with double quantisation, LoRA on
  // q_proj and v_proj, bf16-amp, checkpointing) in under 10 s on the 2-core machine.
  run_point(state, joined({R"({"model":"meta-llama/Llama-3.1-70B","family":"llama","batch":1,)",
                           R"("seq":2048,"precision":"bf16-amp","checkpointing":"block",)",
                           R"("adapter":"lora","weights":"nf4","device":"emulated",)",
                           R"("steps":3,"warmup_steps":2,"repetitions":2,)", kH100, "}"}));
}
BENCHMARK(BM_EmulatedLlama31_70BQloraB1x2048Bf16AmpCkpt)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// The same H100 without a step time: cost::card_for finds no card of this name.
const char* kH100Unpriced = R"("card":{"name":"H100 without step time","memory_bytes":85017493504,"cc_major":9,"cc_minor":0,"sms":132})";
const char* kH100Named = R"("card":{"name":"H100 80GB HBM3","memory_bytes":85017493504,"cc_major":9,"cc_minor":0,"sms":132})";

std::string gpt2_medium_point(const char* card) {
  return joined({R"({"model":"gpt2-medium","family":"gpt2","batch":14,"seq":512,)",
                 R"("precision":"bf16-amp","checkpointing":"block","device":"emulated",)",
                 R"("steps":3,"warmup_steps":2,"repetitions":2,)", card, "}"});
}
void BM_EmulatedGpt2MediumB14WithStepTime(benchmark::State& state) {
  run_point(state, gpt2_medium_point(kH100Named));
}
void BM_EmulatedGpt2MediumB14WithoutStepTime(benchmark::State& state) {
  run_point(state, gpt2_medium_point(kH100Unpriced));
}
BENCHMARK(BM_EmulatedGpt2MediumB14WithoutStepTime)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK(BM_EmulatedGpt2MediumB14WithStepTime)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace


// Issue 53's bars: an emulated Llama-3.1-8B LoRA point at 32,768 tokens under SFTTrainer (its
// fused LM head: no whole logits) in under 2 s, and `fit --seq max` for one technique in under
// 30 s on the 2-core machine.
void BM_EmulatedLlama31_8BLoraSftB1x32768Bf16AmpCkpt(benchmark::State& state) {
  run_point(state, joined({R"({"model":"meta-llama/Llama-3.1-8B","family":"llama","batch":1,)",
                           R"("seq":32768,"precision":"bf16-amp","checkpointing":"block",)",
                           R"("adapter":"lora","trainer":"sft","use_cache":false,"device":"emulated",)",
                           R"("steps":1,"warmup_steps":1,"repetitions":3,)", kH100, "}"}));  // fit's probe
}
BENCHMARK(BM_EmulatedLlama31_8BLoraSftB1x32768Bf16AmpCkpt)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_FitSeqMaxOneTechnique(benchmark::State& state) {
  const std::string out = "/tmp/sweep-bench-fit-seq-max";
  const std::string cmd = std::string(SWEEP_BINARY) +
                          " fit meta-llama/Llama-3.1-8B --gpu rtx3060 --seq max --trainer sft --adapter lora "
                          "--weights nf4 --precision bf16-amp --checkpointing block --optimizer adamw "
                          "--offload none --quiet --out " + out + " >/dev/null 2>&1";
  for (auto _ : state) {
    state.PauseTiming();
    std::system(("rm -rf " + out).c_str());  // a cold fit: every probe runs
    state.ResumeTiming();
    if (std::system(cmd.c_str()) != 0) state.SkipWithError("fit failed");
  }
}
BENCHMARK(BM_FitSeqMaxOneTechnique)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

BENCHMARK_MAIN();
