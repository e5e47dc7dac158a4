// Known GPUs: memory and peak dense TFLOP/s from vendor datasheets. `recommend` uses the
// memory to turn a card's name into a budget; the worker uses the peaks for MFU. A plain
// data table (gpus.cc) with its sources.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "reports/results/rows.h"

namespace sweep::reports {

struct GpuSpec {
  std::string_view key;     // "rtx3060": what configs and `--gpu` use
  std::string_view name;    // "RTX 3060": what tables print
  std::string_view tokens;  // "rtx 3060": words that identify it in a CUDA device name
  double memory_gib = 0;    // as sold (the device reports a little less)
  // Peak dense (no 2:4 sparsity) TFLOP/s, FP32 accumulation for the tensor-core rows;
  // 0 = the card has no such path (T4 and V100 have no TF32 or BF16 tensor cores).
  double fp32_tflops = 0;  // CUDA cores, no tensor cores
  double tf32_tflops = 0;
  double fp16_tflops = 0;
  double bf16_tflops = 0;
  // Total memory as CUDA reports it (cudaMemGetInfo), where known: measured by this project,
  // or from a PyTorch OOM message quoted in a public issue (sources in gpus.cc); 0 = unknown.
  int64_t reported_bytes = 0;
};

// The memory the rule for "fits" reads for a card of the table: as CUDA reports it where
// known, else as sold (a little more than CUDA will report: ECC and the driver's
// reservation; `--memory-gib` with nvidia-smi's memory.total is exact).
int64_t memory_bytes(const GpuSpec& gpu);

// The table, in ascending memory.
const std::vector<GpuSpec>& gpus();

// A card by `key`, by `name` (case, spaces and dashes ignored: "RTX 3060", "rtx-3060"), or
// by a CUDA device name ("NVIDIA GeForce RTX 3060"; the entry whose `tokens` all occur in
// it, the most specific one winning). nullptr when none matches.
const GpuSpec* find_gpu(std::string_view name);

// Peak dense TFLOP/s for a precision (fp16-amp runs on the fp16 path, bf16-amp and bf16 on the
// bf16 one). nullopt when the card has no such path.
std::optional<double> peak_tflops(const GpuSpec& gpu, Precision precision);

// Model FLOPs utilisation of a row: its achieved `tflops` over the measuring card's dense
// peak for its precision. Computed when reporting, from the raw measurement, so that a
// corrected datasheet corrects every results file; nullopt on the CPU, on an unknown card,
// or without tflops.
std::optional<double> mfu(const Row& row);

}  // namespace sweep::reports
