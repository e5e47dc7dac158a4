// The emulated device against an H100 running PyTorch + transformers: the 8 points of
// tests/fixtures/h100-public.jsonl (measured on an H100 80GB HBM3 with torch 2.11.0+cu130 by
// tests/fixtures/hf_h100_reference.py, one point per process; a copy of shared/ref/), each run
// here as `sweep run` runs it, in its own worker process, emulating that card. The bar: peak
// allocated within 1% and peak reserved within 3% of what the H100 measured (Whisper: see below).
// And the same bar on an H200 against sweep's own CUDA worker there (EmulatedH200).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "test_util.h"

namespace sweep {
namespace {

// The H100 80GB HBM3 the points ran on: the total CUDA reported there (81559 MiB,
// device_memory_bytes of bench/baselines/ci-gpu/results.csv), sm_90, 132 SMs.
nlohmann::json h100() {
  return {{"name", "H100 80GB HBM3"}, {"memory_bytes", 85017493504LL}, {"context_bytes", 0},
          {"cc_major", 9}, {"cc_minor", 0}, {"sms", 132}, {"cpu", false}};
}

// The worker's point for a reference row: its steps (one warm-up and the rest), its loop.
nlohmann::json point_for(const nlohmann::json& r) {
  std::string model = r.at("model");
  const std::string family = model.rfind("gpt2", 0) == 0 ? "gpt2" : model.rfind("t5", 0) == 0 ? "t5" : "whisper-cls";
  // hf_h100_reference.py measured Whisper as WhisperForAudioClassification: whisper-*-cls.
  if (family == "whisper-cls") model += "-cls";
  nlohmann::json p = {{"model", model}, {"family", family}, {"batch", r.at("batch")},
                      {"precision", r.at("precision")},
                      {"checkpointing", r.at("ckpt").get<int>() ? "block" : "none"},
                      {"accumulation", r.at("accum")}, {"optimizer", r.at("optimizer")},
                      {"mode", r.at("mode")}, {"alloc_conf", r.at("alloc_conf")},
                      {"device", "emulated"}, {"warmup_steps", 1},
                      {"steps", r.at("steps").get<int>() - 1}, {"repetitions", 1}, {"card", h100()}};
  // hf_h100_reference.py: T5 takes seq tokens in and seq label tokens; Whisper 30 s of audio.
  if (family != "whisper-cls") p["seq"] = r.at("seq");
  if (family == "t5") p["target_seq"] = r.at("seq");
  if (family == "whisper-cls") p["audio_s"] = 30;
  // The reference ran transformers 5.17: T5's mask in the bias's layout (models/model.h).
  if (r.contains("transformers")) p["transformers"] = r.at("transformers");
  return p;
}

// The emulated peaks of a worker point, {allocated, reserved}.
std::pair<double, double> emulated_peaks(const nlohmann::json& p) {
  const auto run = testing::run_sweep_cli_split("worker --point '" + p.dump() + "' --result-fd 1");
  EXPECT_EQ(run.exit_code, 0) << p.dump() << "\n" << run.out << run.err;
  if (run.exit_code != 0) return {0, 0};
  const auto m = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
  EXPECT_EQ(m.at("status"), "ok") << p.dump() << ": " << m.dump();
  return {m.at("peak_allocated_bytes").get<double>(), m.at("peak_reserved_bytes").get<double>()};
}

TEST(EmulatedH100, PublicPointsWithinOnePercentAllocatedThreeReserved) {
  std::ifstream in(SWEEP_SOURCE_DIR "/tests/fixtures/h100-public.jsonl");
  ASSERT_TRUE(in) << "tests/fixtures/h100-public.jsonl";
  int points = 0;
  std::printf("%-40s %14s %14s %8s %14s %14s %8s\n", "point", "H100 alloc", "emulated", "ratio",
              "H100 reserved", "emulated", "ratio");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto r = nlohmann::json::parse(line);
    const auto p = point_for(r);
    const auto run = testing::run_sweep_cli_split("worker --point '" + p.dump() + "' --result-fd 1");
    ASSERT_EQ(run.exit_code, 0) << p.dump() << "\n" << run.out << run.err;
    const auto m = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
    ASSERT_EQ(m.at("status"), "ok") << p.dump() << ": " << m.dump();
    const double alloc = m.at("peak_allocated_bytes").get<double>() / r.at("peak_alloc").get<double>();
    const double reserved = m.at("peak_reserved_bytes").get<double>() / r.at("peak_reserved").get<double>();
    const std::string label = r.at("model").get<std::string>() + " b" + r.at("batch").dump() + " " +
                              r.at("precision").get<std::string>() + (r.at("ckpt").get<int>() ? " ckpt" : "") +
                              " " + r.at("optimizer").get<std::string>() +
                              (r.at("alloc_conf").get<std::string>().empty() ? "" : " expandable");
    std::printf("%-40s %14lld %14lld %8.4f %14lld %14lld %8.4f\n", label.c_str(),
                r.at("peak_alloc").get<long long>(), m.at("peak_allocated_bytes").get<long long>(), alloc,
                r.at("peak_reserved").get<long long>(), m.at("peak_reserved_bytes").get<long long>(), reserved);
    // Whisper's convolutions run through cuDNN, whose workspaces (sized by its heuristics,
    // through the caching allocator) and cuDNN attention's forward workspace are not modelled:
    // whisper-small b8 fp16-amp reads 0.9% low allocated and 2.9% low reserved, within the bar
    // since LayerNorm's contiguous copies are (it read 1.1% and 3.4% low; docs/fidelity.md).
    EXPECT_NEAR(alloc, 1.0, 0.01) << label << ": peak allocated";
    EXPECT_NEAR(reserved, 1.0, 0.03) << label << ": peak reserved";
    // The weights as the model holds them once on the device, to the byte.
    EXPECT_EQ(m.at("weights_bytes"), r.at("after_load_alloc")) << label;
    ++points;
  }
  EXPECT_EQ(points, 8);
}

// Issue 36 item 3: T5 follows transformers 5.23 by default, whose contiguous position-bias mask
// lets CUDA run SDPA's memory-efficient kernel. The two t5-small rows of
// bench/baselines/ci-gpu/results.csv were measured on an H100 by sweep's CUDA device when its
// T5 already passed the mask contiguous (docs/fidelity.md): the default emulation holds them to
// the public points' bar, and 5.17's layout, named, does not (the math path's probabilities).
TEST(EmulatedH100, T5FollowsTransformers523ByDefaultAnd517WhereNamed) {
  const auto results = reports::read_results(SWEEP_SOURCE_DIR "/bench/baselines/ci-gpu/results.csv");
  using schema::column;
  int points = 0;
  for (const auto& r : results.rows) {
    if (r.at(column("model")) != "t5-small") continue;
    nlohmann::json p = {{"model", "t5-small"}, {"family", "t5"},
                        {"batch", *r.number(column("batch"))}, {"seq", *r.number(column("seq"))},
                        {"target_seq", *r.number(column("target_seq"))},
                        {"precision", r.at(column("precision"))}, {"checkpointing", "none"},
                        {"optimizer", "adamw"}, {"mode", "train"}, {"device", "emulated"},
                        {"warmup_steps", 1}, {"steps", 2}, {"repetitions", 1}, {"card", h100()}};
    const double alloc = *r.number(column("peak_allocated_bytes"));
    const double reserved = *r.number(column("peak_reserved_bytes"));
    const auto [a23, r23] = emulated_peaks(p);
    p["transformers"] = "5.17";
    const auto [a17, r17] = emulated_peaks(p);
    const std::string label = "t5-small b8 256/64 " + r.at(column("precision"));
    std::printf("%-28s measured %12.0f %12.0f | 5.23 %12.0f %12.0f (%.4f %.4f) | 5.17 %12.0f %12.0f (%.4f %.4f)\n",
                label.c_str(), alloc, reserved, a23, r23, a23 / alloc, r23 / reserved, a17, r17,
                a17 / alloc, r17 / reserved);
    EXPECT_NEAR(a23 / alloc, 1.0, 0.01) << label << ": peak allocated, 5.23";
    // fp16-amp reserved 60 MiB more than the H100 did (+3.75%) until the engine's gradient sums
    // were made in place on the emulated device (emulate/grad_accumulation.h): -0.4% now.
    EXPECT_NEAR(r23 / reserved, 1.0, 0.03) << label << ": peak reserved, 5.23";
    EXPECT_GT(a17 / alloc, 1.05) << label << ": 5.17's layout keeps the math path's probabilities";
    ++points;
  }
  EXPECT_EQ(points, 2);
}

// The emulated H200 against sweep's own CUDA worker on the H200 lent on 2026-11-27 (torch
// 2.11.0+cu130; bench/baselines/h200-fidelity/results.csv, configs/fidelity.yaml): one point
// of each family and of each new decoder, held to the public points' bar. TinyLlama's QLoRA at
// fp32 is the grouped-query call that the memory-efficient kernel refuses (math on CUDA): the
// emulator said 47% low before it followed that rule. docs/fidelity.md has all 38 rows.
TEST(EmulatedH200, OneRowOfEachFamilyWithinOnePercentAllocatedThreeReserved) {
  using schema::column;
  const auto results = reports::read_results(SWEEP_SOURCE_DIR "/bench/baselines/h200-fidelity/results.csv");
  const nlohmann::json h200 = {{"name", "H200"}, {"memory_bytes", 150109880320LL}, {"context_bytes", 0},
                               {"cc_major", 9}, {"cc_minor", 0}, {"sms", 132}, {"cpu", false}};
  // model, batch, precision, checkpointing, accumulation
  const std::vector<std::tuple<std::string, int, std::string, std::string, int>> chosen = {
      {"gpt2-medium", 2, "fp32", "none", 4},
      {"t5-base", 4, "bf16-amp", "none", 1},
      {"whisper-small", 2, "fp32", "block", 1},
      {"qwen2.5-0.5b", 2, "bf16-amp", "block", 1},
      {"llama-3.2-1b-instruct", 2, "bf16-amp", "none", 1},
      {"tinyllama-1.1b-chat-v1.0", 2, "fp32", "none", 1}};
  int points = 0;
  for (const auto& r : results.rows) {
    const auto key = std::tuple{r.at(column("model")), static_cast<int>(*r.number(column("batch"))),
                                r.at(column("precision")), r.at(column("checkpointing")),
                                static_cast<int>(*r.number(column("accumulation")))};
    if (std::find(chosen.begin(), chosen.end(), key) == chosen.end()) continue;
    if (r.at(column("optimizer")) != "adamw") continue;
    nlohmann::json p = {{"model", r.at(column("model"))}, {"family", r.at(column("family"))},
                        {"batch", *r.number(column("batch"))}, {"precision", r.at(column("precision"))},
                        {"checkpointing", r.at(column("checkpointing"))},
                        {"accumulation", *r.number(column("accumulation"))}, {"optimizer", "adamw"},
                        {"mode", "train"}, {"device", "emulated"}, {"warmup_steps", 1}, {"steps", 2},
                        {"repetitions", 1}, {"card", h200}, {"weights", r.at(column("weights"))},
                        {"adapter", r.at(column("adapter"))}};
    if (r.number(column("seq"))) p["seq"] = *r.number(column("seq"));
    if (r.number(column("target_seq"))) p["target_seq"] = *r.number(column("target_seq"));
    if (r.number(column("audio_s"))) p["audio_s"] = *r.number(column("audio_s"));
    if (r.at(column("adapter")) == "lora") {
      std::vector<std::string> targets;
      std::stringstream list(r.at(column("lora_targets")));
      for (std::string t; std::getline(list, t, ';');) targets.push_back(t);
      p["lora_r"] = *r.number(column("lora_r"));
      p["lora_alpha"] = *r.number(column("lora_alpha"));
      p["lora_dropout"] = *r.number(column("lora_dropout"));
      p["lora_targets"] = targets;
    }
    const double alloc = *r.number(column("peak_allocated_bytes"));
    const double reserved = *r.number(column("peak_reserved_bytes"));
    const auto [a, res] = emulated_peaks(p);
    const std::string label = r.at(column("model")) + " b" + std::to_string(std::get<1>(key)) + " " +
                              r.at(column("precision")) + " " + r.at(column("checkpointing"));
    std::printf("%-44s measured %12.0f %12.0f | emulated %12.0f %12.0f (%.4f %.4f)\n", label.c_str(),
                alloc, reserved, a, res, a / alloc, res / reserved);
    EXPECT_NEAR(a / alloc, 1.0, 0.01) << label << ": peak allocated";
    EXPECT_NEAR(res / reserved, 1.0, 0.03) << label << ": peak reserved";
    ++points;
  }
  EXPECT_EQ(points, 6);
}

// The attention kernels our H100 and H200 rows never took by default, forced as a user forces
// one (torch.nn.attention.sdpa_kernel) and measured with PyTorch + transformers on the H200 lent
// on 2026-11-28 (bench/baselines/h200-reference/reference.jsonl, the lines with --sdpa):
// FlashAttention-2, which fp16/bf16 attention takes on every sm80/86/89 card, and the
// memory-efficient kernel, which T5's position bias takes there. The emulated H200 with the same
// kernel forced (SWEEP_SDPA_KERNEL, at::Context's flags) is held to the public points' bar, and
// fails where PyTorch failed: T5's float mask has no flash kernel.
TEST(EmulatedH200, ForcedFlashAndMemoryEfficientKernelsAgainstTransformers) {
  std::ifstream in(SWEEP_SOURCE_DIR "/bench/baselines/h200-reference/reference.jsonl");
  ASSERT_TRUE(in);
  const nlohmann::json h200 = {{"name", "H200"}, {"memory_bytes", 150109880320LL}, {"context_bytes", 0},
                               {"cc_major", 9}, {"cc_minor", 0}, {"sms", 132}, {"cpu", false}};
  // hf_reference.py's names for the zoo's: model, family.
  const std::map<std::string, std::pair<std::string, std::string>> zoo = {
      {"gpt2-medium", {"gpt2-medium", "gpt2"}}, {"t5-base", {"t5-base", "t5"}},
      {"whisper-small", {"whisper-small", "whisper"}},
      {"Qwen/Qwen2.5-0.5B", {"qwen2.5-0.5b", "llama"}},
      {"meta-llama/Llama-3.2-1B-Instruct", {"llama-3.2-1b-instruct", "llama"}}};
  int points = 0, refused = 0;
  for (std::string line; std::getline(in, line);) {
    const auto ref = nlohmann::json::parse(line);
    std::map<std::string, std::string> a;
    const auto& args = ref.at("args");
    for (size_t i = 0; i + 1 < args.size(); i += 2) a[args[i]] = args[i + 1];
    if (!a.count("--sdpa")) continue;
    const auto& [model, family] = zoo.at(a.at("--model"));
    nlohmann::json p = {{"model", model}, {"family", family}, {"batch", std::stoi(a.at("--batch"))},
                        {"precision", a.at("--precision")},
                        {"checkpointing", a.count("--checkpointing") ? a.at("--checkpointing") : "none"},
                        {"accumulation", 1}, {"optimizer", "adamw"}, {"mode", "train"},
                        {"device", "emulated"}, {"warmup_steps", 1}, {"steps", 2},
                        {"repetitions", 1}, {"card", h200}};
    if (family == "whisper") {
      p["audio_s"] = 30;
      p["target_seq"] = 128;
    } else {
      p["seq"] = std::stoi(a.at("--seq"));
      if (family == "t5") p["target_seq"] = 128;  // hf_reference.py's default
    }
    if (a.count("--adapter") && a.at("--adapter") == "lora") {
      p["adapter"] = "lora";  // PEFT's defaults, as the reference's: r 8, alpha 8, q_proj and v_proj
      p["lora_r"] = 8;
      p["lora_alpha"] = 8.0;
      p["lora_dropout"] = 0.0;
      p["lora_targets"] = {"q_proj", "v_proj"};
    }
    const std::string label = model + " b" + a.at("--batch") + " " + a.at("--precision") + " " +
                              p.at("checkpointing").get<std::string>() + " sdpa " + a.at("--sdpa");
    const auto run = testing::run_sweep_cli_split("worker --point '" + p.dump() + "' --result-fd 1",
                                                  "SWEEP_SDPA_KERNEL=" + a.at("--sdpa"));
    const auto m = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
    if (ref.contains("error")) {
      // PyTorch's words, on the GPU and on the emulated card.
      EXPECT_NE(ref.at("error").get<std::string>().find("No available kernel"), std::string::npos);
      EXPECT_NE(m.at("status"), "ok") << label;
      EXPECT_NE(m.dump().find("No available kernel"), std::string::npos) << label << ": " << m.dump();
      ++refused;
      continue;
    }
    ASSERT_EQ(m.at("status"), "ok") << label << ": " << m.dump() << run.err;
    const double alloc = m.at("peak_allocated_bytes").get<double>() / ref.at("peak_allocated_bytes").get<double>();
    const double reserved = m.at("peak_reserved_bytes").get<double>() / ref.at("peak_reserved_bytes").get<double>();
    std::printf("%-56s allocated %.4f reserved %.4f\n", label.c_str(), alloc, reserved);
    EXPECT_NEAR(alloc, 1.0, 0.01) << label << ": peak allocated";
    EXPECT_NEAR(reserved, 1.0, 0.03) << label << ": peak reserved";
    ++points;
  }
  EXPECT_EQ(points, 9);
  EXPECT_EQ(refused, 1);
}

}  // namespace
}  // namespace sweep
