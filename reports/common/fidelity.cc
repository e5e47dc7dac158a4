// The emulated device's measured error; see fidelity.h.
#include "reports/common/fidelity.h"

#include <vector>

#include "reports/results/rows.h"

namespace sweep::reports {
namespace {

// From docs/fidelity.md, "The emulated device" (2026-11-25, torch 2.11.0+cu130, an H100 80GB
// HBM3; the whole Whisper and the decoders 2026-11-27, an H200): the 8 public transformers
// points (tests/fixtures/h100-public.jsonl) and
// scripts/emulate_rows.py over bench/baselines/ci-gpu/results.csv (17 rows) and
// docs/tables/rtx3060-results.csv (103 rows). The bounds are the extremes that page states:
// the rows it names as off, and +-3% (its bar) for the rest of a family's rows. Re-run
// 2026-11-28 since the engine's gradient sums are in place on the emulated device
// (sweeps/worker/emulate/grad_accumulation.h): GPT-2's and T5's rows all within the bar.
const std::vector<MeasuredError>& table() {
  static const std::vector<MeasuredError> t = {
      {"gpt2", -0.03, 0.03, 6 + 13 + 51,
       "an H100 (transformers, and sweep's CUDA device under the RTX 3060's cap)", ""},
      // T5 since its forward follows transformers 5.23: on the H200 sweep's 4 rows and
      // transformers' 6 points too.
      {"t5", -0.03, 0.03, 1 + 2 + 27 + 4 + 6,
       "an H100 and an H200 (transformers, and sweep's CUDA device)", ""},
      {"whisper-cls", -0.0714, 0.03, 1 + 2 + 25,
       "an H100 (transformers, and sweep's CUDA device under the RTX 3060's cap)",
       "cuDNN's convolution workspaces are not modelled: predicted low"},
      // "Against our own H200 rows" (2026-11-27): bench/baselines/h200-fidelity/results.csv.
      // The low bound is the encoder-classifier's on the H100: the same convolutions, whose
      // cuDNN workspaces read up to 7.1% low there (whisper-tiny). With transformers' 9
      // whisper-small points on the H200 of 2026-11-28: every H200 row within the bar.
      {"whisper", -0.0714, 0.03, 8 + 28 + 9,
       "an H200 (transformers and sweep's CUDA device, the whole whisper-small) and, for its "
       "encoder, an H100",
       "cuDNN's convolution workspaces are not modelled and differ per card"},
      // With transformers' 21 decoder points on the H200 of 2026-11-28: TinyLlama's fp32 QLoRA
      // with checkpointing reserved 12.6% more than predicted; the rest within the bar.
      {"llama", -0.1262, 0.03, 17 + 21,
       "an H200 (transformers and sweep's CUDA device: Qwen2.5-0.5B, Llama-3.2-1B with LoRA, "
       "TinyLlama QLoRA)",
       "fp32 QLoRA with checkpointing predicted up to 13% low"},
  };
  return t;
}

std::string percent_signed(double v) {
  return (v > 0 ? "+" : v < 0 ? "-" : "") + fixed(100 * (v < 0 ? -v : v), 1) + "%";
}

}  // namespace

std::string MeasuredError::text() const {
  return "within " + percent_signed(low) + " to " + percent_signed(high) +
         " of peak reserved memory on " + std::to_string(rows) + " rows measured on " + where +
         " (docs/fidelity.md)" + (caveat.empty() ? "" : "; " + caveat);
}

std::optional<MeasuredError> measured_error(const std::string& family) {
  for (const auto& e : table())
    if (e.family == family) return e;
  return std::nullopt;
}

std::string measured_error_line(const std::string& family) {
  const auto e = measured_error(family);
  if (!e)
    return "How sure: the emulation of " + family +
           " has not been compared with a GPU measurement yet; its error is unknown.";
  return "How sure: the emulation of " + family + " predicted " + e->text() +
         ". Other cards are predicted by the same rules, unchecked until measured on them. A "
         "largest batch marked borderline peaks within that error of the cap: it may not fit on "
         "the real card.";
}

}  // namespace sweep::reports
