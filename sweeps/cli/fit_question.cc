// fit's question; see fit_question.h.
#include "sweeps/cli/fit_question.h"

#include <algorithm>
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
      throw UserError("", 0, "--gpu", unknown_card_message(o.gpu),
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
  // A GPU CUDA cannot use (a driver too old for CUDA 13) is named, not taken for no GPU.
  const std::string unusable = gpu_here ? "" : cuda_unusable_reason();
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
        "", 0, "--device",
        "device cuda requested but " + (unusable.empty() ? "no GPU is visible" : unusable),
        (unusable.empty() ? "" : "update the NVIDIA driver (nvidia-smi shows its version), or ") +
            std::string("use --device emulated with --gpu NAME to predict the card, or --device "
                        "cpu: the tracking allocator then enforces the card's memory"));
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
                                          : "the card table's, " + context_allowance_source(*q.card.spec);
  } else if (q.device == Device::kCuda) {
    Zygote zygote(self_exe());  // the probe forked as the probes' points will be
    // With --context-gib the allowance is given: the probe reads the GPU's name and memory only
    // (--no-context), not the minutes of representative bursts that measure it.
    q.here = probe_gpus(self_exe(), {visible_device(std::getenv("CUDA_VISIBLE_DEVICES"), 0)},
                        !o.context_gib, kProbeDeviceTimeoutS, o.zygote ? &zygote : nullptr)
                 .at(0);
    q.rule.context_bytes = o.context_gib ? std::llround(*o.context_gib * kGiB) : q.here->context_bytes;
    q.rule.context_source = o.context_gib ? "given with --context-gib" : "measured on " + q.here->name;
  }
}

// The one rule (reports/common/fit_rule.h): the probes run under the cap, "fits" is no OOM
// there; the pick stays under the recommended ceiling.
void check_rule(const FitQuestion& q) {
  // Blamed on the flag the user gave (--margin 0.95 was --gpu's), the hint naming only those.
  const bool margin = q.o.margin != reports::kDefaultMargin;
  if (q.rule.ceiling_bytes() <= 0)
    throw UserError("", 0, margin ? "--margin" : q.o.context_gib ? "--context-gib" : q.card_flag,
                    q.card.name + " leaves nothing usable after the margin and the context allowance",
                    std::string("give a larger card") + (margin ? ", or a smaller --margin" : "") +
                        (q.o.context_gib ? ", or a smaller --context-gib" : ""));
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

bool FitQuestion::has_cache() const { return spec->family != "whisper-cls"; }

void default_lengths(const models::ModelSpec& spec, FitOptions& o) {
  auto takes = [&](const char* axis) {
    return std::find(spec.axes.begin(), spec.axes.end(), axis) != spec.axes.end();
  };
  if (spec.test_only) return;
  int64_t seq = 0, target = 0;
  if (spec.family == "gpt2") seq = 512;
  else if (spec.family == "t5") seq = 512, target = 128;
  else if (spec.family == "whisper") target = spec.max_target_seq;  // the longest labels it takes
  else if (takes("seq")) seq = 1024;
  if (spec.max_seq > 0) seq = std::min(seq, spec.max_seq);
  if (takes("seq") && !o.seq && !o.seq_max && seq > 0) o.seq = seq;
  if (takes("target_seq") && !o.target_seq && target > 0) o.target_seq = target;
  if (takes("audio_s") && !o.audio_s) o.audio_s = spec.max_audio_s > 0 ? std::min(30.0, spec.max_audio_s) : 30.0;
}

std::string length_words(const models::ModelSpec& spec, const FitOptions& o) {
  auto takes = [&](const char* axis) {
    return std::find(spec.axes.begin(), spec.axes.end(), axis) != spec.axes.end();
  };
  // The grid's defaults where a flag is absent (sweeps/runner/grid.cc).
  const int64_t seq = o.seq.value_or(128), target = o.target_seq.value_or(128);
  std::string words;
  if (takes("seq")) words = o.seq_max ? "longest seq" : "seq " + std::to_string(seq);
  if (takes("audio_s")) words = shown(o.audio_s.value_or(30.0)) + " s audio";
  if (takes("target_seq")) words += " -> " + std::to_string(target);
  return words;
}

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
  default_lengths(*q.spec, q.o);
  q.device = resolve_device(q.o, q.card);
  q.predicted = q.emulated() ? predicted_by(q.card.name) : "";
  if (q.emulated() && !q.o.quiet) {  // before anything runs: the answer will not be a measurement
    // Where a driver is installed but CUDA cannot use the GPU (too old for CUDA 13), why.
    const std::string unusable = q.o.device == "auto" ? cuda_unusable_reason() : "";
    const std::string why = q.o.device != "auto" ? std::string("--device emulated")
                            : (unusable.empty() ? std::string("no CUDA device here") : unusable) +
                                  "; --device cpu measures on the CPU instead";
    std::fprintf(stderr, "fit %s (%s) on %s: %s (%s)\n", q.o.model.c_str(),
                 length_words(*q.spec, q.o).c_str(), q.card.name.c_str(),
                 q.predicted.c_str(), why.c_str());
  }
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
