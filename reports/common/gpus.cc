// Datasheet peaks and MFU over the card table, and `sweep gpus`; the table itself is
// reports/results/cards.cc.
#include "reports/common/gpus.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

namespace sweep::reports {
namespace {

// Bumped when a key of `sweep gpus --json` changes meaning or goes away.
constexpr int kGpusJsonVersion = 2;  // 2: memory_source for memory_reported; context_source

std::string peak_text(double tflops) {
  return tflops > 0 ? fixed(tflops, tflops < 100 ? 1 : 0) : "-";
}

}  // namespace

std::optional<double> peak_tflops(const GpuSpec& gpu, Precision precision) {
  double v = 0;
  switch (precision) {
    case Precision::kFp32: v = gpu.fp32_tflops; break;
    case Precision::kFp16Amp: v = gpu.fp16_tflops; break;
    case Precision::kBf16Amp:
    case Precision::kBf16: v = gpu.bf16_tflops; break;
  }
  if (v <= 0) return std::nullopt;
  return v;
}

std::optional<double> mfu(const Row& row) {
  const auto tflops = row.number(schema::column("tflops"));
  const auto precision = row.value<Precision>();
  if (row.value<Device>() != Device::kCuda || !tflops || !precision) return std::nullopt;
  const GpuSpec* gpu = find_gpu(row.at(schema::column("device_name")));
  if (!gpu) return std::nullopt;
  const auto peak = peak_tflops(*gpu, *precision);
  if (!peak || *peak <= 0) return std::nullopt;
  return *tflops / *peak;
}

std::string gpus_text() {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-10s %-14s %-22s %-20s %4s %4s %6s %6s %6s %6s\n", "key",
                "name", "memory (CUDA)", "context", "sm", "SMs", "fp32", "tf32", "fp16", "bf16");
  out += line;
  for (const auto& g : gpus()) {
    const std::string memory =
        format_bytes(static_cast<double>(memory_bytes(g)));
    const std::string context = format_bytes(static_cast<double>(card_context_bytes(g))) +
                                (g.context_bytes ? " measured" : " H100's");
    std::snprintf(line, sizeof line, "%-10s %-14s %-22s %-20s %4s %4d %6s %6s %6s %6s\n",
                  std::string(g.key).c_str(), std::string(g.name).c_str(), memory.c_str(),
                  context.c_str(),
                  ("sm_" + std::to_string(g.cc_major) + std::to_string(g.cc_minor)).c_str(), g.sms,
                  peak_text(g.fp32_tflops).c_str(), peak_text(g.tf32_tflops).c_str(),
                  peak_text(g.fp16_tflops).c_str(), peak_text(g.bf16_tflops).c_str());
    out += line;
  }
  out +=
      "\nmemory: as CUDA reports it (cudaMemGetInfo), never as sold: the lowest total seen in "
      "public PyTorch out-of-memory messages naming the card, or measured (one source each in "
      "reports/results/cards.cc). context: the CUDA context allowance the rule for \"fits\" "
      "subtracts, measured on the card where marked, else \"H100's\": " +
      std::string(kDefaultContextSource) + ". Peaks: dense TFLOP/s (\"-\": none or not published). Any card can "
      "be "
      "predicted with `device: emulated` and `gpu: KEY` (sources: reports/results/cards.cc).\n";
  return out;
}

nlohmann::json gpus_json() {
  nlohmann::json j;
  j["gpus_json_version"] = kGpusJsonVersion;
  j["default_context_bytes"] = kDefaultCudaContextBytes;
  j["gpus"] = nlohmann::json::array();
  auto peak = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  for (const auto& g : gpus())
    j["gpus"].push_back(
        {{"key", g.key},
         {"name", g.name},
         {"memory_gib_sold", g.memory_gib},
         {"memory_bytes", memory_bytes(g)},
         {"memory_source", g.memory_source},
         {"context_bytes", card_context_bytes(g)},
         {"context_measured", g.context_bytes > 0},
         {"context_source", context_allowance_source(g)},
         {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
         {"sms", g.sms},
         {"fp32_tflops", peak(g.fp32_tflops)},
         {"tf32_tflops", peak(g.tf32_tflops)},
         {"fp16_tflops", peak(g.fp16_tflops)},
         {"bf16_tflops", peak(g.bf16_tflops)}});
  return j;
}

void register_gpus_command(CLI::App& app, int& exit_code) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "gpus",
      "List the card table: memory CUDA reports, context allowance, compute capability, SMs, "
      "peaks (the cards --gpu and `device: emulated` know)");
  cmd->add_flag("--json", *json, "The table as JSON on stdout");
  cmd->callback([json, &exit_code] {
    exit_code = run_guarded([&] {
      std::cout << (*json ? gpus_json().dump(2) + "\n" : gpus_text());
      return 0;
    });
  });
}

}  // namespace sweep::reports
