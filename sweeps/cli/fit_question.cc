// fit's question; see fit_question.h.
#include "sweeps/cli/fit_question.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "models/zoo.h"
#include "reports/common/gpus.h"
#include "reports/recommend/recommend.h"
#include "reports/results/error.h"
#include "reports/results/spelling.h"
#include "sweeps/cli/fit_config.h"
#include "sweeps/measure/env.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/isolate.h"
#include "sweeps/runner/zygote.h"

namespace sweep {
namespace {

using reports::kGiB;

FitCard resolve_card(const FitOptions& o) {
  if (o.gpu.empty() == !o.memory_gib)
    throw UserError("", 0, "--gpu", "give the card with exactly one of --gpu NAME or --memory-gib N",
                    "e.g. sweep fit gpt2 --gpu rtx3060, or --memory-gib 11.75 (what CUDA reports)");
  if (!o.gpu.empty()) {
    const auto* g = reports::find_gpu(o.gpu);
    if (!g) {
      const std::string near = nearest_card_key(o.gpu);
      throw UserError("", 0, "--gpu", "unknown GPU '" + o.gpu + "'",
                      (near.empty() ? "" : "did you mean " + near + "? ") + "one of " +
                          card_keys() + " (`sweep gpus` lists them), or give --memory-gib N");
    }
    return {std::string(g->name), std::string(g->key), reports::memory_bytes(*g), g};
  }
  const double gib = *o.memory_gib;
  if (!(gib * kGiB >= 1 && gib <= reports::kMaxMemoryGib))
    throw UserError("", 0, "--memory-gib", "must be a number of GiB above 0 and at most " +
                    number_text(reports::kMaxMemoryGib) + ", got " + shown(gib),
                    "the card's memory as CUDA reports it, e.g. --memory-gib 11.75");
  return {number_text(gib) + " GiB", number_text(gib) + "gib", std::llround(gib * kGiB)};
}

// Without a GPU a named card is predicted by emulation; the CPU trains the real model (hours
// for a real one), so it measures only when asked (--device cpu). A card by memory alone
// cannot be emulated (no compute capability or SMs).
Device resolve_device(const FitOptions& o, const FitCard& card) {
  const bool gpu_here = cuda_device_count() > 0;
  if (o.device == "auto" && !gpu_here && !card.spec)
    throw UserError("", 0, "--memory-gib",
                    "no GPU here, and a card given by its memory alone cannot be predicted by "
                    "emulation: it would be measured on the CPU, training the real model (hours "
                    "for a real model)",
                    "name the card with --gpu (`sweep gpus` lists them) to predict it in seconds, "
                    "or add --device cpu to measure on the CPU anyway");
  const Device device = o.device == "auto" ? (gpu_here ? Device::kCuda : Device::kEmulated)
                                           : parse_as<Device>(o.device).value_or(Device::kCpu);
  if (device == Device::kCuda && !gpu_here)
    throw UserError(
        "", 0, "--device", "device cuda requested but no GPU is visible",
        "use --device emulated with --gpu NAME to predict the card, or --device cpu: the "
        "tracking allocator then enforces the card's memory");
  if (device == Device::kEmulated && !card.spec)
    throw UserError(
        "", 0, "--device",
        "device emulated predicts a card of the table, and --memory-gib names none",
        "give the card with --gpu NAME (`sweep gpus` lists them), or measure on the CPU with "
        "--device cpu");
  return device;
}

// The context allowance: none on the CPU; on CUDA given, or measured by a fresh worker on the
// GPU that will run the probes (as `sweep run` measures it for a target card); on an emulated
// card given, or the card table's.
void resolve_context(FitQuestion& q) {
  const FitOptions& o = q.o;
  q.rule.context_source = "none on the CPU";
  if (q.emulated()) {
    q.rule.context_bytes =
        o.context_gib ? std::llround(*o.context_gib * kGiB) : card_context_bytes(*q.card.spec);
    q.rule.context_source = o.context_gib ? "given with --context-gib"
                            : q.card.spec->context_bytes > 0
                                ? "the card table's, measured on this card"
                                : "the card table's default, not measured for this card";
  } else if (q.device == Device::kCuda) {
    Zygote zygote(self_exe());  // the probe forked as the probes' points will be
    q.here = probe_gpus(self_exe(), {visible_device(std::getenv("CUDA_VISIBLE_DEVICES"), 0)}, true,
                        kProbeDeviceTimeoutS, o.zygote ? &zygote : nullptr)
                 .at(0);
    q.rule.context_bytes = o.context_gib ? std::llround(*o.context_gib * kGiB) : q.here->context_bytes;
    q.rule.context_source = o.context_gib ? "given with --context-gib" : "measured on " + q.here->name;
  }
}

// The one rule (reports/common/fit_rule.h): the probes run under the cap, "fits" is no OOM
// there; the pick stays under the recommended ceiling.
void check_rule(const FitQuestion& q) {
  if (q.rule.ceiling_bytes() <= 0)
    throw UserError("", 0, q.card_flag, q.card.name + " leaves nothing usable after the margin and "
                    "the context allowance", "give a larger card, or a smaller --margin");
  // The run would refuse this budget in fit.yaml (budget_gib): said here, of the flag.
  if (q.here && q.cap() > q.here->total_bytes)
    throw UserError("", 0, q.card_flag,
                    q.card.name + " leaves " + reports::format_bytes(static_cast<double>(q.cap())) +
                        " to fit in (its cap), more than this GPU (" + q.here->name + ", " +
                        reports::format_bytes(static_cast<double>(q.here->total_bytes)) +
                        ") has: a budget cannot add memory",
                    "measure a card at most this GPU's size, or predict it with --device emulated "
                    "--gpu NAME");
}

}  // namespace

bool FitQuestion::has_cache() const { return spec->family == "gpt2" || spec->family == "t5"; }

FitQuestion ask(const FitOptions& given) {
  FitQuestion q;
  q.spec = models::find_model(given.model);
  if (!q.spec)
    throw UserError("", 0, "MODEL", "unknown model '" + given.model + "'", unknown_model_hint(given.model));
  q.o = given;
  q.o.model = q.spec->name;  // a Hugging Face id names its model (results/fit-gpt2-medium-...)
  q.card = resolve_card(q.o);
  q.card_flag = q.o.gpu.empty() ? "--memory-gib" : "--gpu";
  check_flags(q.o, *q.spec);
  q.device = resolve_device(q.o, q.card);
  q.predicted = q.emulated() ? predicted_by(q.card.name) : "";
  if (q.emulated() && !q.o.quiet)  // before anything runs: the answer will not be a measurement
    std::fprintf(stderr, "fit %s on %s: %s (%s)\n", q.o.model.c_str(), q.card.name.c_str(),
                 q.predicted.c_str(),
                 q.o.device == "auto" ? "no CUDA device here; --device cpu measures on the CPU instead"
                                      : "--device emulated");
  if (!q.bf16_tensor_cores() && !q.o.quiet)
    std::fprintf(stderr,
                 "note: %s (sm_%d%d) has no bf16 tensor cores: fit tries fp16-amp (fp16 autocast "
                 "with a GradScaler, Trainer fp16=True) in place of bf16-amp, and recommends "
                 "neither bf16 nor bf16-amp there (they run, at a fraction of fp16's speed)\n",
                 q.card.name.c_str(), q.card.spec->cc_major, q.card.spec->cc_minor);
  q.rule.memory_bytes = q.card.memory_bytes;
  q.rule.margin = q.o.margin;
  q.rule.cuda = !q.cpu();
  resolve_context(q);
  check_rule(q);
  return q;
}

}  // namespace sweep
