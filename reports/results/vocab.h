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

#include "reports/results/error.h"

namespace sweep {

enum class Mode { kTrain, kEval };
enum class Precision { kFp32, kFp16Amp, kBf16Amp, kBf16 };
enum class Checkpointing { kNone, kBlock };
// kNone: an eval point trains nothing (its row says optimizer "none"); configs cannot ask for it.
enum class OptimizerKind { kAdamW, kAdamWFused, kSgd, kAdafactor, kAdamW8bit, kNone };
enum class Adapter { kNone, kLora };
enum class Offload { kNone, kOptimizer };
enum class Weights { kFull, kInt8 };
enum class Device { kCpu, kCuda };
enum class Status { kOk, kOom, kCrash, kTimeout, kSkipped };

// Each enum's names, in the order of its enumerators, and the key (config key, column) whose
// values they are.
template <class E>
struct VocabTable;
template <>
struct VocabTable<Mode> {
  static constexpr std::string_view key = "mode";
  static constexpr std::array<std::string_view, 2> names = {"train", "eval"};
};
template <>
struct VocabTable<Precision> {
  static constexpr std::string_view key = "precision";
  static constexpr std::array<std::string_view, 4> names = {"fp32", "fp16-amp", "bf16-amp", "bf16"};
};
template <>
struct VocabTable<Checkpointing> {
  static constexpr std::string_view key = "checkpointing";
  static constexpr std::array<std::string_view, 2> names = {"none", "block"};
};
template <>
struct VocabTable<OptimizerKind> {
  static constexpr std::string_view key = "optimizer";
  static constexpr std::array<std::string_view, 6> names = {"adamw", "adamw-fused", "sgd",
                                                            "adafactor", "adamw8bit", "none"};
};
template <>
struct VocabTable<Adapter> {
  static constexpr std::string_view key = "adapter";
  static constexpr std::array<std::string_view, 2> names = {"none", "lora"};
};
template <>
struct VocabTable<Offload> {
  static constexpr std::string_view key = "offload";
  static constexpr std::array<std::string_view, 2> names = {"none", "optimizer"};
};
template <>
struct VocabTable<Weights> {
  static constexpr std::string_view key = "weights";
  static constexpr std::array<std::string_view, 2> names = {"full", "int8"};
};
template <>
struct VocabTable<Device> {
  static constexpr std::string_view key = "device";
  static constexpr std::array<std::string_view, 2> names = {"cpu", "cuda"};
};
template <>
struct VocabTable<Status> {
  static constexpr std::string_view key = "status";
  static constexpr std::array<std::string_view, 5> names = {"ok", "oom", "crash", "timeout",
                                                            "skipped"};
};

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
// The names for a hint: "fp32, fp16-amp, bf16-amp, bf16".
template <Vocabulary E>
std::string choices() {
  std::string s;
  for (auto n : VocabTable<E>::names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace sweep
