// Known GPUs as the reports read them: the card table of the results contract
// (reports/results/cards.h: memory, datasheet peaks, compute capability, SMs, context
// allowance). `recommend` uses the memory to turn a card's name into a budget, the reports
// the peaks for MFU; `sweep gpus` lists the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "reports/results/cards.h"
#include "reports/results/rows.h"

namespace CLI {
class App;
}

namespace sweep::reports {

// A card of the one table (reports/results/cards.h, which the training side reads too).
using GpuSpec = ::sweep::CardSpec;

// The memory the rule for "fits" reads for a card of the table: as CUDA reports it where
// known, else as sold (a little more than CUDA will report: ECC and the driver's
// reservation; `--memory-gib` with nvidia-smi's memory.total is exact).
inline int64_t memory_bytes(const GpuSpec& gpu) { return card_memory_bytes(gpu); }

// The table, in ascending memory.
inline const std::vector<GpuSpec>& gpus() { return cards(); }

// A card by key, name or CUDA device name (find_card).
inline const GpuSpec* find_gpu(std::string_view name) { return find_card(name); }

// Peak dense TFLOP/s for a precision (fp16-amp runs on the fp16 path, bf16-amp and bf16 on the
// bf16 one). nullopt when the card has no such path.
std::optional<double> peak_tflops(const GpuSpec& gpu, Precision precision);

// Model FLOPs utilisation of a row: its achieved `tflops` over the measuring card's dense
// peak for its precision. Computed when reporting, from the raw measurement, so that a
// corrected datasheet corrects every results file; nullopt on the CPU, on an unknown card,
// or without tflops.
std::optional<double> mfu(const Row& row);

// `sweep gpus`: the table as text (one line a card: key, name, memory CUDA reports and
// whether known, context allowance and whether measured, compute capability, SMs, peaks) and
// as JSON (`gpus_json_version` 1, one object a card with the same facts in bytes).
std::string gpus_text();
nlohmann::json gpus_json();
// Adds `gpus [--json]`.
void register_gpus_command(CLI::App& app, int& exit_code);

}  // namespace sweep::reports
