// The results file's columns: the one contract between the worker that measures and the
// reports that read. Header-only and free of LibTorch so that `reports` can include it
// without linking the training side. Names are stable; others script against them.
// Bump kSchemaVersion when a column changes meaning or goes away (adding one does not).
#pragma once

#include <array>
#include <string_view>

namespace sweep::schema {

// 2: `mfu` is no longer a column: it is derived from a datasheet, so the reports compute it
// (reports::mfu) from `tflops`; version 1 files still read (their mfu cells are ignored).
// 3: `driver_version` is the NVIDIA driver's version ("580.159.04", from NVML or
// /proc/driver/nvidia/version); versions 1 and 2 wrote the CUDA driver API version there
// ("13.0", cudaDriverGetVersion), which is now `cuda_driver_version`. Older files still read.
inline constexpr int kSchemaVersion = 3;
// From this version on, versions differ in environment columns only (what a number means is
// the same), so `compare` reads a baseline of one against results of another, with a note.
// 3, not 2: the step-time syncs changed right after the bump to 3 (a repetition is one CUDA
// event span, issue 24), so versions 2 and 3 time steps differently.
inline constexpr int kSameMeasurementsSince = 3;

// Every row of results.csv, in this order. Units are in the names. Empty cell = not
// applicable (e.g. `audio_s` for GPT-2) or not measured (e.g. `tflops` of a model without a FLOP count).
inline constexpr std::array kColumns = std::to_array<std::string_view>({
    // identity and axes
    "schema_version",     // 1
    "suite_version",      // "0.1.0"
    "point_id",           // 16 hex digits: hash of the axes and the suite version
    "model",              // "gpt2-medium"
    "family",             // "gpt2" | "t5" | "whisper" | "whisper-cls" | "llama" | "phi3"
    "mode",               // "train" | "eval"
    "batch",              // micro-batch size
    "seq",                // tokens per sample (GPT-2; T5 encoder); empty for Whisper
    "target_seq",         // T5 decoder tokens; empty otherwise
    "audio_s",            // Whisper seconds of audio; empty otherwise
    "precision",          // "fp32" | "fp16-amp" | "bf16-amp" | "bf16"
    "checkpointing",      // "none" | "block"
    "accumulation",       // micro-batches per optimizer step
    "optimizer",          // "adamw" | "adamw-fused" | "sgd" | "adafactor" | "adamw8bit" |
                          // "paged-adamw8bit" | "paged-adamw32bit"
    "use_cache",          // 1: transformers' default cache (off under checkpointing); 0: use_cache=False
    "adapter",            // "none" (every weight trains) | "lora" (PEFT's LoRA: base frozen)
    "lora_r",             // LoRA rank; empty unless adapter is lora
    "lora_alpha",         // LoRA alpha (the update is scaled by alpha / r)
    "lora_dropout",       // dropout on the adapters' input
    "lora_targets",       // adapted modules, ';'-separated: "c_attn", "q;v"
    "offload",            // "none" | "optimizer" (ZeRO-Offload: AdamW's state and fp32 master
                          // weights in host memory, stepped on the CPU); empty in older files
    "weights",            // "full" | "int8" (frozen base weights as bitsandbytes' Linear8bitLt
                          // keeps them: int8 with per-row scales; models/int8.h); empty in
                          // older files = full
    "alloc_conf",         // PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF of the worker, "" = unset
    "allocator_settings", // what the CUDA caching allocator parsed (as a snapshot's
                          // allocator_settings); empty on the CPU
    "steps",              // timed optimizer steps per repetition
    "warmup_steps",       // untimed steps before them
    "repetitions",        // timed repetitions
    "search",             // "max_batch" for a probe of the max-batch search; empty for a grid point
    // outcome
    "status",             // "ok" | "oom" | "crash" | "timeout" | "skipped"
    "reason",             // why skipped ("implied-oom"), signal name of a crash, ...
    "phase",              // where an oom/crash happened: build|forward|backward|optimizer
    "message",            // first line of the error, empty when ok
    "exit_code",          // worker exit code, empty if killed by a signal
    "signal",             // signal number that ended the worker, empty otherwise
    // memory, bytes
    "budget_bytes",       // memory the point was allowed (0 = the whole device)
    "budget_emulated",    // 1 when the budget emulates a smaller card than the one measuring
    "weights_bytes",      // parameters (and buffers) after the model is built
    "grads_bytes",        // .grad tensors after the first backward
    "optimizer_bytes",    // optimizer state in the device's allocator after the first step
                          // (0 offloaded; paged state: paged_bytes)
    "activations_bytes",  // peak during forward/backward above what persists
    "peak_allocated_bytes",
    "peak_reserved_bytes",  // caching allocator's reserved peak (= allocated on the CPU)
    "device_used_bytes",    // whole-device use at peak (CUDA context included); CPU: peak RSS
    "peak_phase",           // phase in which peak_allocated_bytes was reached
    // what memory held at the moment of peak_allocated_bytes; the four add up to it exactly
    "at_peak_weights_bytes",
    "at_peak_grads_bytes",
    "at_peak_optimizer_bytes",
    "at_peak_activations_bytes",  // the rest: activations, inputs and temporaries
    "forward_peak_bytes",         // each phase's peak over every step
    "backward_peak_bytes",
    "optimizer_peak_bytes",
    "leak_bytes_per_step",  // growth of allocated memory per step after the second; empty if none
    "oom_retries",          // allocator retries (CUDA) at failure
    "oom_gap_bytes",        // reserved minus allocated at failure
    "host_peak_bytes",      // offload: host memory the technique held at most (master weights,
                            // gradient buffer, moments, the CPU step's temporaries; pinned
                            // blocks as the CUDA host allocator rounds them); empty otherwise
    "paged_bytes",          // paged optimizers: the state bitsandbytes puts in CUDA unified
                            // memory (cudaMallocManaged, parameters of 1e5 elements or more),
                            // outside the caching allocator: in neither peak_allocated_bytes,
                            // peak_reserved_bytes nor optimizer_bytes; in device_used_bytes
                            // while it is resident on the GPU (the driver pages it to the host
                            // when the allocator needs the room, so it never runs a card out
                            // of memory); 0 on the CPU (bnb keeps it in ordinary memory there,
                            // in optimizer_bytes); empty for other optimizers
    // time
    "step_ms",           // median over repetitions of the mean optimizer-step time
    "step_ms_mean",
    "step_ms_stddev",
    "step_ms_cv",        // stddev / mean
    "step_ms_samples",   // per-repetition step times, ';'-separated, for statistics later
    "tokens_per_s",      // tokens (all micro-batches) per second at the median step
    "samples_per_s",
    "tflops",            // achieved, from the model's FLOP count (recompute included)
    "offload_transfer_ms",  // offload: gradients to the host plus parameters back, per step
    "wall_s",            // worker wall time, start to exit
    // environment
    "device",            // "cuda" | "cpu" | "emulated" (a card predicted, not measured)
    "card",              // device emulated: the card predicted and the facts the prediction
                         // used, "RTX 3060 (sm_86, 28 SMs, memory 12616466432 B, context
                         // 536870912 B)" (reports/results/cards.h); empty otherwise
    "gpu_index",         // which local GPU measured (CUDA_VISIBLE_DEVICES), empty on cpu
    "slurm_job",         // Slurm job that measured it, "ARRAY_TASK" for an array task; else empty
    "slurm_gpus",        // GPUs Slurm gave that job (SLURM_JOB_GPUS, "0,1"); else empty
    "device_name",       // "NVIDIA H100 80GB HBM3" | CPU model
    "device_memory_bytes",
    "driver_version",    // the NVIDIA driver, "580.159.04" (schema 1 and 2: the CUDA driver
                         // API version); empty on cpu and emulated
    "torch_version",
    "cuda_version",      // the CUDA runtime torch was built with, "13.0"
    "cuda_driver_version",  // the CUDA version the driver supports (cudaDriverGetVersion), "13.0"
    "host",
    "git_commit",
    "timestamp",         // RFC 3339, UTC
});

inline constexpr std::size_t kColumnCount = kColumns.size();

// Index of a column by name at compile time; fails the build for a misspelled name.
consteval std::size_t column(std::string_view name) {
  for (std::size_t i = 0; i < kColumns.size(); ++i)
    if (kColumns[i] == name) return i;
  throw "unknown results column";
}

// Index of a column named at run time; kColumnCount when there is none.
constexpr std::size_t find_column(std::string_view name) {
  for (std::size_t i = 0; i < kColumns.size(); ++i)
    if (kColumns[i] == name) return i;
  return kColumns.size();
}

// Numeric columns: the reader checks every non-empty cell is a finite number within the
// range of int64 (what every command converts counts to), and not negative unless listed in
// kSignedColumns. step_ms_samples is a ';'-separated list of them.
inline constexpr std::array kNumberColumns = std::to_array<std::string_view>({
    "schema_version", "batch", "seq", "target_seq", "audio_s", "accumulation", "lora_r",
    "lora_alpha", "lora_dropout", "steps",
    "warmup_steps", "repetitions", "exit_code", "signal", "budget_bytes", "budget_emulated",
    "weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
    "peak_allocated_bytes", "peak_reserved_bytes", "device_used_bytes",
    "at_peak_weights_bytes", "at_peak_grads_bytes", "at_peak_optimizer_bytes",
    "at_peak_activations_bytes", "forward_peak_bytes", "backward_peak_bytes",
    "optimizer_peak_bytes", "leak_bytes_per_step",
    "oom_retries", "oom_gap_bytes", "step_ms", "step_ms_mean", "step_ms_stddev", "step_ms_cv",
    "tokens_per_s", "samples_per_s", "tflops", "wall_s", "device_memory_bytes",
    "host_peak_bytes", "paged_bytes", "offload_transfer_ms",
});
constexpr bool is_number_column(std::string_view name) {
  for (auto c : kNumberColumns)
    if (c == name) return true;
  return false;
}
// Memory can shrink between steps: a leak rate may be negative.
inline constexpr std::array kSignedColumns = std::to_array<std::string_view>({"leak_bytes_per_step"});
// Counts: whole numbers (bytes, steps, lengths in tokens, codes). The others of
// kNumberColumns are measurements or settings that may have a fraction.
inline constexpr std::array kIntegerColumns = std::to_array<std::string_view>({
    "schema_version", "batch", "seq", "target_seq", "accumulation", "lora_r", "steps",
    "warmup_steps", "repetitions", "exit_code", "signal", "budget_bytes", "budget_emulated",
    "weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
    "peak_allocated_bytes", "peak_reserved_bytes", "device_used_bytes",
    "at_peak_weights_bytes", "at_peak_grads_bytes", "at_peak_optimizer_bytes",
    "at_peak_activations_bytes", "forward_peak_bytes", "backward_peak_bytes",
    "optimizer_peak_bytes", "leak_bytes_per_step", "oom_retries", "oom_gap_bytes",
    "device_memory_bytes", "host_peak_bytes", "paged_bytes",
});
// Cells every row has: a row without them measured nothing any command can place. The
// columns are required in the header too; batch and accumulation are at least 1.
inline constexpr std::array kRequiredCells =
    std::to_array<std::string_view>({"point_id", "model", "status", "batch"});
inline constexpr std::array kAtLeastOneColumns = std::to_array<std::string_view>({"batch", "accumulation"});
// Cells a row with status ok has: the peaks every command compares against a card.
inline constexpr std::array kRequiredWhenOk =
    std::to_array<std::string_view>({"peak_allocated_bytes", "peak_reserved_bytes"});

// The point's axes: the columns that say what was measured, one entry each, in the order the
// point id names them. The worker side builds from this table and one Point member per entry
// (SWEEP_POINT_AXES, sweeps/worker/point.h, checked against it at compile time): the point's
// cells in a row, its id and the grid's axis values; `compare` its configuration key, the run
// summary its configuration. Adding an axis is one line here and one there.
enum class Cell {
  kAlways,    // every row has the cell
  kIfSet,     // 0 means "not applicable to this model" and leaves the cell empty (seq for Whisper)
  kWithLora,  // only a row with adapter lora has it
};
enum class Named {
  kAlways,         // in the point id since the first release
  kUnlessDefault,  // added later: named only when its cell is not `fallback`, so that the
                   // points measured before it keep their ids
  kWithLora,       // named after the adapter, when it is lora
  kNever,          // not part of the identity (it follows from the others, or is the machine's)
};
struct Axis {
  std::string_view column;
  Cell cell;
  Named id;
  std::string_view fallback;  // what an empty cell means (an older file); "" = nothing
};
inline constexpr std::array kAxes = std::to_array<Axis>({
    {"model", Cell::kAlways, Named::kAlways, ""},
    {"family", Cell::kAlways, Named::kNever, ""},
    {"mode", Cell::kAlways, Named::kAlways, ""},
    {"batch", Cell::kAlways, Named::kAlways, ""},
    {"seq", Cell::kIfSet, Named::kAlways, ""},
    {"target_seq", Cell::kIfSet, Named::kAlways, ""},
    {"audio_s", Cell::kIfSet, Named::kAlways, ""},
    {"precision", Cell::kAlways, Named::kAlways, ""},
    {"checkpointing", Cell::kAlways, Named::kAlways, ""},
    {"accumulation", Cell::kAlways, Named::kAlways, ""},
    {"optimizer", Cell::kAlways, Named::kAlways, ""},
    {"use_cache", Cell::kAlways, Named::kUnlessDefault, "1"},
    {"adapter", Cell::kAlways, Named::kUnlessDefault, "none"},
    {"lora_r", Cell::kWithLora, Named::kWithLora, ""},
    {"lora_alpha", Cell::kWithLora, Named::kWithLora, ""},
    {"lora_dropout", Cell::kWithLora, Named::kWithLora, ""},
    {"lora_targets", Cell::kWithLora, Named::kWithLora, ""},
    {"offload", Cell::kAlways, Named::kUnlessDefault, "none"},
    {"weights", Cell::kAlways, Named::kUnlessDefault, "full"},
    {"alloc_conf", Cell::kAlways, Named::kAlways, ""},
    {"steps", Cell::kAlways, Named::kAlways, ""},
    {"warmup_steps", Cell::kAlways, Named::kAlways, ""},
    {"repetitions", Cell::kAlways, Named::kAlways, ""},
    {"budget_bytes", Cell::kAlways, Named::kAlways, ""},
    {"budget_emulated", Cell::kAlways, Named::kNever, ""},
    {"device", Cell::kAlways, Named::kNever, ""},
    // Two emulated cards are two points; measured points have none, so their ids stay.
    {"card", Cell::kIfSet, Named::kUnlessDefault, ""},
});

// The axes' column names, in kAxes order.
consteval std::array<std::string_view, kAxes.size()> axis_columns() {
  std::array<std::string_view, kAxes.size()> names{};
  for (std::size_t i = 0; i < kAxes.size(); ++i) names[i] = kAxes[i].column;
  return names;
}

// The axis of a column; nullptr when the column is no axis.
constexpr const Axis* find_axis(std::string_view column) {
  for (const auto& a : kAxes)
    if (a.column == column) return &a;
  return nullptr;
}

// Every axis is a column (fails the build otherwise).
consteval bool axes_are_columns() {
  for (const auto& a : kAxes)
    if (find_column(a.column) == kColumnCount) return false;
  return true;
}
static_assert(axes_are_columns(), "an entry of kAxes names no column of kColumns");

// Every integer column is a numeric column (fails the build otherwise).
consteval bool integers_are_numbers() {
  for (auto c : kIntegerColumns)
    if (!is_number_column(c)) return false;
  for (auto c : kAtLeastOneColumns)
    if (!is_number_column(c)) return false;
  return true;
}
static_assert(integers_are_numbers(), "an integer column is not in kNumberColumns");

}  // namespace sweep::schema
