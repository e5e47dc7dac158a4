// fit's first stage, the question: which model at which input lengths, on which card, measured
// or predicted on which device, and the one rule's two figures for that card (the cap the
// probes run under, the ceiling the pick stays under). Checks every flag before anything runs
// or is written; prints, when the answer will be a prediction, that it will be.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "reports/common/fit_rule.h"
#include "reports/results/cards.h"
#include "sweeps/cli/fit.h"
#include "sweeps/runner/budget.h"

namespace sweep {

namespace models {
struct ModelSpec;
}

// The card fit answers for: one of the table's (--gpu) or a memory alone (--memory-gib).
struct FitCard {
  std::string name, key;  // "RTX 3060" / "rtx3060"; "0.05 GiB" / "0.05gib"
  int64_t memory_bytes = 0;
  const CardSpec* spec = nullptr;  // a card of the table (--gpu)
};

struct FitQuestion {
  FitOptions o;  // as given, the model named by its zoo name (a Hub id resolved)
  const models::ModelSpec* spec = nullptr;
  FitCard card;
  std::string card_flag;  // "--gpu" or "--memory-gib": what an error about the card names
  Device device = Device::kCpu;
  std::string predicted;  // "predicted by emulation of RTX 3060", "" when measured
  reports::FitRule rule;  // memory, context (and how it was chosen), margin
  std::optional<HostGpu> here;  // on CUDA: the GPU that runs the probes

  bool emulated() const { return device == Device::kEmulated; }
  bool cpu() const { return device == Device::kCpu; }
  int64_t cap() const { return rule.cap_bytes(); }  // the budget the probes run under
  // The search fit.yaml runs: "max_batch", or "max_seq" with --seq max.
  std::string_view search() const { return o.seq_max ? "max_seq" : "max_batch"; }
  bool has_cache() const;                           // the model keeps a KV cache (fit tries it off)
  // False on a card of the table without bf16 tensor cores (T4, V100): bf16 and bf16-amp are
  // searched only when asked, and never picked.
  bool bf16_tensor_cores() const { return !card.spec || has_bf16_tensor_cores(*card.spec); }
};

// fit's default input lengths, where the flags leave them out: what people train each model at,
// the tables' first length. GPT-2 512 tokens; T5 512 -> 128 (encoder -> decoder tokens);
// Whisper 30 s of audio (its window); a decoder read from a config.json 1024 tokens (TRL's
// SFTConfig max_length default), never past the model's longest input. The test models keep
// the grid's defaults (128 tokens, 30 s): they stand in for nobody's training.
void default_lengths(const models::ModelSpec& spec, FitOptions& o);

// The question's input lengths as every answer's headline names them: "seq 512", "seq 512 ->
// 128" (T5), "30 s audio" (Whisper); only the axes the model takes.
std::string length_words(const models::ModelSpec& spec, const FitOptions& o);

// Stage 1. UserError for bad input: an unknown model or card, a device not here, a card that
// leaves nothing usable.
FitQuestion ask(const FitOptions& given);

}  // namespace sweep
