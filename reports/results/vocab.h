// The suite's vocabulary: the values of each enumerated axis and of a row's status, each with
// its one table of names, as configs, results files and the worker's JSON spell them. Code
// compares the enums; text exists only at the edges (parsing a config or a row, writing one).
// Header-only and free of LibTorch, like the rest of the results contract.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reports/results/error.h"

namespace sweep {

enum class Mode { kTrain, kEval };
enum class Precision { kFp32, kFp16Amp, kBf16Amp, kBf16 };
enum class Checkpointing { kNone, kBlock };
// kPagedAdamW8bit, kPagedAdamW32bit: bitsandbytes' paged AdamW (QLoRA's recipes), whose state
// of large parameters lives in CUDA unified memory. kNone: an eval point trains nothing (its
// row says optimizer "none"); configs cannot ask for it.
enum class OptimizerKind { kAdamW, kAdamWFused, kSgd, kAdafactor, kAdamW8bit, kPagedAdamW8bit,
                           kPagedAdamW32bit, kNone };
enum class Adapter { kNone, kLora };
enum class Offload { kNone, kOptimizer };
// kNf4, kFp4: the frozen base in 4 bit (QLoRA: bitsandbytes' Linear4bit, double quantisation).
enum class Weights { kFull, kInt8, kNf4, kFp4 };
// kEmulated: a named CUDA card predicted on any machine, without computing (sweeps/worker/emulate/).
enum class Device { kCpu, kCuda, kEmulated };
// The trainer whose step a point runs: kHf, transformers' Trainer (the model's own loss over the
// whole logits); kSft, TRL 1.16's SFTTrainer (its fused LM head: models/fused_lm_head.h).
enum class Trainer { kHf, kSft };
enum class Status { kOk, kOom, kCrash, kTimeout, kSkipped };

// Each enum's names, in the order of its enumerators, and the key (config key, column) whose
// values they are. SWEEP_VOCABULARY(E, last enumerator, key, names...) defines one and fails
// the build when the names are fewer or more than the enumerators.
template <class E>
struct VocabTable;
#define SWEEP_VOCABULARY(E, last, column, ...)                                              \
  template <>                                                                               \
  struct VocabTable<E> {                                                                    \
    static constexpr std::string_view key = column;                                         \
    static constexpr auto names = std::to_array<std::string_view>({__VA_ARGS__});           \
    static_assert(names.size() == static_cast<std::size_t>(E::last) + 1,                    \
                  "a name for each enumerator of " #E ", in order");                        \
  };
SWEEP_VOCABULARY(Mode, kEval, "mode", "train", "eval")
SWEEP_VOCABULARY(Precision, kBf16, "precision", "fp32", "fp16-amp", "bf16-amp", "bf16")
SWEEP_VOCABULARY(Checkpointing, kBlock, "checkpointing", "none", "block")
SWEEP_VOCABULARY(OptimizerKind, kNone, "optimizer", "adamw", "adamw-fused", "sgd", "adafactor",
                 "adamw8bit", "paged-adamw8bit", "paged-adamw32bit", "none")
SWEEP_VOCABULARY(Adapter, kLora, "adapter", "none", "lora")
SWEEP_VOCABULARY(Offload, kOptimizer, "offload", "none", "optimizer")
SWEEP_VOCABULARY(Weights, kFp4, "weights", "full", "int8", "nf4", "fp4")
SWEEP_VOCABULARY(Device, kEmulated, "device", "cpu", "cuda", "emulated")
SWEEP_VOCABULARY(Trainer, kSft, "trainer", "hf", "sft")
SWEEP_VOCABULARY(Status, kSkipped, "status", "ok", "oom", "crash", "timeout", "skipped")
#undef SWEEP_VOCABULARY

template <class E>
concept Vocabulary = requires { VocabTable<E>::names; };

// The name of a value: name_of(Precision::kBf16Amp) is "bf16-amp".
template <Vocabulary E>
constexpr std::string_view name_of(E e) {
  const auto i = static_cast<std::size_t>(e);
  SWEEP_CHECK(i < VocabTable<E>::names.size(), "an enumerator without a name");
  return VocabTable<E>::names[i];
}
// The same, as a string to build messages with.
template <Vocabulary E>
std::string to_string(E e) {
  return std::string(name_of(e));
}
// A value that may be unknown (an older file's empty cell): its name, "" when unknown.
template <Vocabulary E>
std::string to_string(std::optional<E> e) {
  return e ? to_string(*e) : std::string();
}
// The value a name spells; nullopt for none.
template <Vocabulary E>
constexpr std::optional<E> parse_as(std::string_view name) {
  for (std::size_t i = 0; i < VocabTable<E>::names.size(); ++i)
    if (VocabTable<E>::names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}
// Every value, in table order.
template <Vocabulary E>
constexpr auto all_of() {
  std::array<E, VocabTable<E>::names.size()> values{};
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<E>(i);
  return values;
}
// The names of the vocabulary whose key is `column` (an axis, or `status`), in enumerator
// order; empty for a column with none.
inline std::vector<std::string_view> vocabulary_names(std::string_view column) {
  std::vector<std::string_view> names;
  auto add = [&]<class E>(E) {
    if (VocabTable<E>::key == column) names.assign(VocabTable<E>::names.begin(), VocabTable<E>::names.end());
  };
  (add(Mode{}), add(Precision{}), add(Checkpointing{}), add(OptimizerKind{}), add(Adapter{}),
   add(Offload{}), add(Weights{}), add(Device{}), add(Trainer{}), add(Status{}));
  return names;
}
// The names for a hint: "fp32, fp16-amp, bf16-amp, bf16".
template <Vocabulary E>
std::string choices() {
  std::string s;
  for (auto n : VocabTable<E>::names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace sweep
