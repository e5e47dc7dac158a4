// The results file's columns: the one contract between the worker that measures and the
// reports that read. Header-only and free of LibTorch so that `reports` can include it
// without linking the training side. Names are stable; others script against them.
// Bump kSchemaVersion when a column changes meaning or goes away (adding one does not).
#pragma once

#include <array>
#include <cstdint>
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
    "trainer",            // "hf" (transformers' Trainer) | "sft" (TRL's SFTTrainer: its fused LM
                          // head); empty in older files = hf
    "completion_share",   // a prompt-completion dataset: the share of each sequence that is the
                          // completion (the only tokens scored); empty: every token is
    "padding_free",       // 1: the batch as one row of packed sequences with position_ids
                          // (SFTConfig padding_free, DataCollatorWithFlattening); empty = 0
    "activation_offloading",  // 1: what autograd saves goes to pinned host memory
                              // (SFTConfig activation_offloading); empty = 0
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
    "phase",              // where an oom/crash happened: load|build|forward|backward|optimizer
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
    "load_peak_bytes",      // a quantised model's from_pretrained and prepare_model_for_kbit_
                            // training (the phase "load", before "build"): QLoRA's peak at small
                            // batches; empty for full weights
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
    "optimizer_peak_bytes", "load_peak_bytes", "leak_bytes_per_step",
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
    "optimizer_peak_bytes", "load_peak_bytes", "leak_bytes_per_step", "oom_retries", "oom_gap_bytes",
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

// The point's axes: the columns that say what was measured, one declaration each, in the
// order the point id names them. Every reader and writer of a point's parameters iterates
// this table; only the code that *does* an axis (the model's cache, the worker's offload) names
// it. From each entry:
//   - the results: whether a row has the cell (Cell), what an empty cell means (fallback: an
//     older file without the column);
//   - the identity: whether the point id names it (Named); `compare` joins on the identity;
//   - a config: whether `grid:` takes it and where it nests (grid), its values and their check
//     (Values, max);
//   - the readers: what it is (Role: the reports group by the input, a technique is the value of
//     every technique axis), the plain configuration's value (a change from it is a technique),
//     and the technique's name where it is not plain (phrase in reports and fit, key in
//     compare's names, in name_rank order);
//   - fit: whether it searches the axis (one combination per value), a setting's flag;
//   - the Trainer: its word in TrainingArguments or LoraConfig, where one keyword runs it.
// The worker side builds from this table and one Point member per entry (SWEEP_POINT_AXES,
// sweeps/worker/point.h, checked against it at compile time); the typed technique and LoRA
// settings are reports/results/technique.h (SWEEP_TECHNIQUE_AXES, SWEEP_LORA_SETTINGS, checked
// the same way). Adding an axis is an entry here, its member there, and what it does
// (docs/development.md, "Adding an axis").
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
enum class Role {
  kInput,      // what is trained: the model, its input's shape, the batch; reports group by it
  kTechnique,  // how it is trained: a technique is the value of each technique axis
  kLora,       // LoRA's settings: part of the technique when the adapter is lora
  kRun,        // how long it is measured
  kWhere,      // the device and the memory it ran under
};
// How a config spells an axis's values, and their check (sweeps/runner/config.cc).
enum class Values {
  kNone,         // not a config's
  kVocabulary,   // the names of the vocabulary whose key is the column (vocab.h)
  kBool,         // true | false (the cell: 1 | 0)
  kCount,        // a whole number from 1 to `max`
  kSeconds,      // a number of seconds above 0, at most `max`
  kAllocConf,    // PYTORCH_CUDA_ALLOC_CONF as torch 2.11 parses it
  kPositive,     // a number above 0, at most `max`
  kProbability,  // a number from 0 up to, not including, 1
  kNames,        // module names (the cell ';'-separated), each naming a layer of the model
};
struct Axis {
  std::string_view column;
  Cell cell = Cell::kAlways;
  Named id = Named::kAlways;
  std::string_view fallback = "";  // what an empty cell means (an older file); "" = nothing
  Role role = Role::kInput;
  int grid = 0;  // a config's grid key, nested in this order (1 outermost); 0: none
  // A setting (Role::kLora): a config's top-level key for every point of it, and fit's flag
  // --COLUMN ('_' as '-'). What it is: the hint of a config's value out of range, and the
  // flag's help unless `flag` says it otherwise; what the flag's value is in its check's
  // message ("'0' is not a rank from 1 to 65536").
  std::string_view help = "";
  std::string_view flag = "";
  std::string_view flag_value = "";
  Values values = Values::kNone;
  int64_t max = 0;  // kCount, kSeconds: the largest value a config may give
  // A technique axis: the plain configuration's cell ('|' between alternatives); a technique
  // counts each axis whose cell is not plain as a change.
  std::string_view plain = "";
  // Where a technique's name says this axis (rows, run summaries, reports, fit, compare's
  // names): 0 never (the head of each name says precision, checkpointing, optimizer and the
  // batch its own way), else in this order, and only where the cell is not plain. "{}" is
  // the cell, "{column}" another axis's cell.
  int name_rank = 0;
  std::string_view phrase = "";  // "offload {}": reports, fit, the run's summary
  std::string_view key = "";     // "offload-{}": compare's names (dashboards), no spaces
  // A report's table column shows the cell, a flag as Python spells it ("False"), or this,
  // plain or not: "{} r{lora_r}" ("lora r8").
  std::string_view shown = "";
  // fit searches it: one technique combination per value, nested in this order (1 outermost;
  // sweeps/cli/fit_plan.cc); 0: not searched.
  int fit = 0;
  // fit searches a value other than plain only where this axis is plain (the model's cache
  // off only without checkpointing, which turns it off in training anyway).
  std::string_view fit_without = "";
  // The Trainer's word for the axis, where one keyword runs it as it is
  // (reports/common/trainer_args.cc): a technique axis's TrainingArguments flag (True or False
  // as the row's cell), a setting's LoraConfig argument. Where the row's cell is not
  // `trainer_default`, what the Trainer's default would do instead is a note under the arguments.
  std::string_view trainer = "";
  std::string_view trainer_default = "";
  std::string_view trainer_note = "";
};
inline constexpr std::array kAxes = std::to_array<Axis>({
    {.column = "model", .values = Values::kNone},
    {.column = "family", .id = Named::kNever},
    {.column = "mode", .grid = 1, .values = Values::kVocabulary},
    {.column = "batch", .grid = 12, .values = Values::kCount, .max = int64_t{1} << 30},
    {.column = "seq", .cell = Cell::kIfSet, .grid = 2, .values = Values::kCount, .max = int64_t{1} << 20},
    {.column = "target_seq", .cell = Cell::kIfSet, .grid = 3, .values = Values::kCount,
     .max = int64_t{1} << 20},
    {.column = "audio_s", .cell = Cell::kIfSet, .grid = 4, .values = Values::kSeconds, .max = 30},
    {.column = "precision", .role = Role::kTechnique, .grid = 5, .values = Values::kVocabulary,
     .plain = "fp32", .fit = 1},
    {.column = "checkpointing", .role = Role::kTechnique, .grid = 6, .values = Values::kVocabulary,
     .plain = "none", .fit = 2},
    {.column = "accumulation", .role = Role::kTechnique, .grid = 8, .values = Values::kCount,
     .max = int64_t{1} << 20, .plain = "1"},
    {.column = "optimizer", .role = Role::kTechnique, .grid = 7, .values = Values::kVocabulary,
     .plain = "adamw|none", .fit = 3},
    // TrainingArguments.use_cache (transformers 5.x; trainer.py: model.config.use_cache =
    // args.use_cache, whose default is False); a row's model kept transformers' model default
    // (True) unless it says otherwise.
    {.column = "use_cache", .id = Named::kUnlessDefault, .fallback = "1", .role = Role::kTechnique,
     .grid = 13, .values = Values::kBool, .plain = "1", .name_rank = 2, .phrase = "use_cache=False",
     .key = "no-cache", .fit = 7, .fit_without = "checkpointing", .trainer = "use_cache",
     .trainer_default = "0",
     .trainer_note = "use_cache=True as measured (the model's cache kept alive in training); "
                     "Trainer's default is False, which it writes into model.config"},
    {.column = "adapter", .id = Named::kUnlessDefault, .fallback = "none", .role = Role::kTechnique,
     .grid = 10, .values = Values::kVocabulary, .plain = "none", .name_rank = 1,
     .phrase = "{} r{lora_r}", .key = "{}-r{lora_r}", .shown = "{} r{lora_r}", .fit = 4},
    {.column = "lora_r", .cell = Cell::kWithLora, .id = Named::kWithLora, .role = Role::kLora,
     .help = "LoRA's rank (LoraConfig r; default 8)", .flag_value = "a rank",
     .values = Values::kCount, .max = int64_t{1} << 16, .trainer = "r"},
    {.column = "lora_alpha", .cell = Cell::kWithLora, .id = Named::kWithLora, .role = Role::kLora,
     .help = "LoRA's alpha: the update scaled by alpha / r (PEFT's default 8)",
     .flag = "LoRA's alpha: the update scaled by alpha / r (default 8)", .flag_value = "an alpha",
     .values = Values::kPositive, .max = 1000000, .trainer = "lora_alpha"},
    {.column = "lora_dropout", .cell = Cell::kWithLora, .id = Named::kWithLora, .role = Role::kLora,
     .help = "dropout on the adapters' input, from 0 (PEFT's default: none) up to, not including, 1",
     .flag = "Dropout on the adapters' input, from 0 up to 1 (default 0)",
     .flag_value = "a dropout probability", .values = Values::kProbability, .trainer = "lora_dropout"},
    {.column = "lora_targets", .cell = Cell::kWithLora, .id = Named::kWithLora, .role = Role::kLora,
     .help = "the modules LoRA adapts (LoraConfig target_modules: names, or all-linear; default the "
             "family's, as PEFT's)",
     .flag = "Modules LoRA adapts (default PEFT's for the family, e.g. q_proj,v_proj), or "
             "all-linear (every linear layer but the output embedding)",
     .values = Values::kNames, .trainer = "target_modules"},
    {.column = "offload", .id = Named::kUnlessDefault, .fallback = "none", .role = Role::kTechnique,
     .grid = 11, .values = Values::kVocabulary, .plain = "none", .name_rank = 3,
     .phrase = "offload {}", .key = "offload-{}", .fit = 5},
    {.column = "weights", .id = Named::kUnlessDefault, .fallback = "full", .role = Role::kTechnique,
     .grid = 14, .values = Values::kVocabulary, .plain = "full", .name_rank = 4,
     .phrase = "{} weights", .key = "weights-{}", .fit = 6},
    // The trainer whose step runs: transformers' Trainer (the model's loss over the whole
    // logits) or TRL 1.16's SFTTrainer, whose fused LM head scores the logits in tiles
    // (models/fused_lm_head.h) and runs the backbone without its cache.
    {.column = "trainer", .id = Named::kUnlessDefault, .fallback = "hf", .role = Role::kTechnique,
     .grid = 15, .values = Values::kVocabulary, .plain = "hf", .name_rank = 6,
     .phrase = "trainer {}", .key = "trainer-{}", .fit = 8},
    // A prompt-completion dataset (SFTTrainer's completion_only_loss, its default for one; a
    // Trainer's labels -100 over the prompt): each sequence's last completion_share * seq tokens
    // (rounded half up, at least one) are the completion and the only ones scored. Empty (0):
    // a language-modelling dataset, every token scored. Only the count of scored tokens moves
    // memory, and only where it is counted: the compact head on CUDA (models/fused_lm_head.h).
    {.column = "completion_share", .cell = Cell::kIfSet, .id = Named::kUnlessDefault,
     .role = Role::kInput, .grid = 16, .help = "the completion's share of each sequence",
     .values = Values::kPositive, .max = 1},
    // Padding-free batches: the micro-batch's sequences as one row of batch * seq tokens with
    // position_ids and no attention mask, as SFTConfig(padding_free=True) and transformers'
    // DataCollatorWithFlattening collate them; the model masks each sequence from the others
    // (a block-diagonal causal mask under SDPA: masking_utils' packed sequences).
    {.column = "padding_free", .id = Named::kUnlessDefault, .fallback = "0", .role = Role::kTechnique,
     .grid = 17, .values = Values::kBool, .plain = "0", .name_rank = 7, .phrase = "padding-free",
     .key = "padding-free"},
    // TRL's activation offloading (SFTConfig(activation_offloading=True)): each tensor autograd
    // saves outside a checkpointed block, and each block's input, copied to pinned host memory
    // on a second stream and brought back when backward needs it (sweeps/worker/
    // activation_offload.h). SFTTrainer's, on a card.
    {.column = "activation_offloading", .id = Named::kUnlessDefault, .fallback = "0",
     .role = Role::kTechnique, .grid = 18, .values = Values::kBool, .plain = "0", .name_rank = 8,
     .phrase = "activation offloading", .key = "offload-activations"},
    {.column = "alloc_conf", .role = Role::kTechnique, .grid = 9, .values = Values::kAllocConf,
     .plain = "", .name_rank = 5, .phrase = "alloc_conf {}", .key = "alloc={}"},
    {.column = "steps", .role = Role::kRun},
    {.column = "warmup_steps", .role = Role::kRun},
    {.column = "repetitions", .role = Role::kRun},
    {.column = "budget_bytes", .role = Role::kWhere},
    {.column = "budget_emulated", .id = Named::kNever, .role = Role::kWhere},
    {.column = "device", .id = Named::kNever, .role = Role::kWhere},
    // Two emulated cards are two points; measured points have none, so their ids stay.
    {.column = "card", .cell = Cell::kIfSet, .id = Named::kUnlessDefault, .role = Role::kWhere},
});

// Whether `cell` is the plain configuration's value of `a` (one of its '|' alternatives).
constexpr bool is_plain(const Axis& a, std::string_view cell) {
  for (std::size_t b = 0;;) {
    const std::size_t e = a.plain.find('|', b);
    if (a.plain.substr(b, e == std::string_view::npos ? e : e - b) == cell) return true;
    if (e == std::string_view::npos) return false;
    b = e + 1;
  }
}

// The config's grid keys in nesting order (outermost first).
consteval auto grid_axes() {
  constexpr std::size_t n = [] {
    std::size_t k = 0;
    for (const auto& a : kAxes) k += a.grid > 0;
    return k;
  }();
  std::array<std::string_view, n> names{};
  for (const auto& a : kAxes)
    if (a.grid > 0) names[static_cast<std::size_t>(a.grid - 1)] = a.column;
  return names;
}
// Each grid rank is taken once, from 1 up (fails the build otherwise).
consteval bool grid_ranks_are_dense() {
  for (auto name : grid_axes())
    if (name.empty()) return false;
  return true;
}
static_assert(grid_ranks_are_dense(), "kAxes' grid ranks must run 1, 2, ... without a gap or a repeat");

// The axes fit searches in nesting order (outermost first).
consteval auto fit_axes() {
  constexpr std::size_t n = [] {
    std::size_t k = 0;
    for (const auto& a : kAxes) k += a.fit > 0;
    return k;
  }();
  std::array<const Axis*, n> axes{};
  for (const auto& a : kAxes)
    if (a.fit > 0) axes[static_cast<std::size_t>(a.fit - 1)] = &a;
  return axes;
}
consteval bool fit_ranks_are_dense() {
  for (const Axis* a : fit_axes())
    if (a == nullptr) return false;
  return true;
}
static_assert(fit_ranks_are_dense(), "kAxes' fit ranks must run 1, 2, ... without a gap or a repeat");

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
