// `sweep fit MODEL --gpu NAME | --memory-gib N`: what fits on a card, and what is fastest.
// For each technique combination (every axis fit searches, reports/results/technique.h), a
// max-batch search under the card's usable memory, each probe an
// isolated worker; then the recommendation, measured: the fastest way to the effective batch.
// It writes an ordinary results directory (OUT/fit.yaml is the config it ran), so `report`,
// `recommend` and `compare` read it and a second `fit` reuses every probe already measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results/technique.h"
#include "reports/results/vocab.h"

namespace sweep {

// A setting as a flag holds it: absent, or as given (a list: empty when absent).
template <class T>
struct FlagOf {
  using type = std::optional<T>;
};
template <class T>
struct FlagOf<std::vector<T>> {
  using type = std::vector<T>;
};

// LoRA's settings as fit's --lora-* flags (schema::kAxes of Role::kLora: the flag
// --COLUMN, '_' as '-'), absent where not given: PEFT's defaults.
struct LoraFlags {
#define SWEEP_LORA_FLAG(T, column, plain) typename FlagOf<T>::type column;
  SWEEP_LORA_SETTINGS(SWEEP_LORA_FLAG)
#undef SWEEP_LORA_FLAG

  // f(column, flag) for each, in the table's order.
  template <class F>
  void for_each(F&& f) { each(*this, f); }
  template <class F>
  void for_each(F&& f) const { each(*this, f); }

 private:
  template <class Self, class F>
  static void each(Self& self, F& f) {
#define SWEEP_LORA_VISIT(type, column, plain) f(std::string_view(#column), self.column);
    SWEEP_LORA_SETTINGS(SWEEP_LORA_VISIT)
#undef SWEEP_LORA_VISIT
  }
};

// A setting's flag: "--lora-r" for lora_r.
inline std::string flag_of(std::string_view column) {
  std::string flag = "--";
  for (char c : column) flag += c == '_' ? '-' : c;
  return flag;
}

struct FitOptions {
  std::string model;
  std::string gpu;                  // --gpu NAME (reports/common/gpus.h), or
  std::optional<double> memory_gib;  // --memory-gib N: the card's memory as CUDA reports it
  std::optional<int64_t> seq, target_seq;
  // --seq max: the longest seq per technique (a max_seq search at --batch, default 1), not
  // the largest batch.
  bool seq_max = false;
  std::optional<int64_t> batch;  // --batch N: the batch the longest seq is searched at
  std::optional<double> audio_s;
  std::optional<int64_t> effective_batch;  // micro-batch x accumulation to reach
  std::vector<std::string> precisions, checkpointing, optimizers, adapters, offloads;  // empty: the defaults
  std::vector<std::string> weights;  // empty: full; int8 is tried with lora only
  // empty: hf, and sft too for a config.json decoder (TRL's SFTTrainer trains causal LMs)
  std::vector<std::string> trainers;
  // LoraConfig's settings for --adapter lora (absent: PEFT's defaults), as a config's lora_* keys.
  LoraFlags lora;
  std::string device = "auto";
  double margin = 0.1;                 // fraction of the card kept free, as `recommend`
  std::optional<double> context_gib;   // CUDA context allowance; measured when absent
  int64_t max_batch = 1024;
  std::string out;  // default results/fit-<model>-<card>
  bool json = false, quiet = false;
  bool zygote = true;  // --no-zygote: exec each probe's worker (RunOptions::zygote)
  bool predict = true;  // --no-prediction: searches not seeded by emulation (RunOptions::predict)
};

// One technique combination (the axes fit searches) and what its search found.
struct FitTechnique : Technique {
  // What the search varies (the batch; with --seq max the seq, at the question's batch):
  std::optional<int64_t> largest;    // the largest that fits; none: not even the first
  std::optional<int64_t> first_oom;  // the smallest measured out of memory
  int probes = 0;
  double peak_reserved = 0, peak_allocated = 0, tokens_per_s = 0, step_ms_cv = 0;
  std::string stopped;  // a probe that crashed or timed out: its status
  std::string stopped_message;  // and its message
  // "bf16-amp, block checkpointing, adamw" and the technique's name parts: ", lora",
  // ", offload optimizer" (reports/results/technique.h name_tail)
  std::string label() const;
};

// Exit code; UserError for bad input (the CLI prints it, exit 2). With `answer`, the answer
// `--json` prints is returned there instead of printed (`sweep tables` reads it).
int run_fit(const FitOptions& opt, nlohmann::json* answer = nullptr);

}  // namespace sweep
