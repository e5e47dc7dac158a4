// The one rule for "fits" and "recommended", said once and read by `fit`, `report`,
// `recommend`, the per-card tables and the charts (docs: README "What fits means").
//
//   cap                 = memory - context
//   recommended ceiling = floor(memory x (1 - margin)) - context
//
// A configuration *fits* when it trained with no out-of-memory error and its peak reserved
// memory (the caching allocator's, fragmentation included) is at most the cap; the largest
// batch that fits is reported against the cap. It is *recommended* only when it also stays
// under the recommended ceiling: the margin is kept free for what a real run adds (a longer
// batch, a data loader's pinned buffers, another process). RTX 3060: memory 11.75 GiB as CUDA
// reports it, context 0.75 GiB, so cap 11.00 GiB and, with the default 10% margin, a
// recommended ceiling of 9.83 GiB. On the CPU there is no CUDA context: the cap is the
// memory given.
#pragma once

#include <cstdint>
#include <string>

namespace sweep::reports {

// The fraction of memory `recommend`, `report` and `fit` keep free by default.
inline constexpr double kDefaultMargin = 0.1;

struct FitRule {
  int64_t memory_bytes = 0;   // what CUDA reports for the card, or the memory given
  int64_t context_bytes = 0;  // the CUDA context allowance; 0 on the CPU
  double margin = kDefaultMargin;
  bool cuda = true;            // false: the CPU's memory (no context, no card)
  std::string context_source;  // how context_bytes was chosen

  // "fits": no OOM, peak reserved at most this.
  int64_t cap_bytes() const { return memory_bytes - context_bytes; }
  // "recommended": fits, and peak reserved at most this.
  int64_t ceiling_bytes() const;
  bool fits(bool ran_ok, double peak_reserved) const {
    return ran_ok && peak_reserved <= static_cast<double>(cap_bytes());
  }
  bool recommendable(bool ran_ok, double peak_reserved) const {
    return fits(ran_ok, peak_reserved) && peak_reserved <= static_cast<double>(ceiling_bytes());
  }
  // The two figures and how they were derived, printed once by every command:
  // "fits: 11.00 GiB cap = 11.75 GiB (RTX 3060's memory) - 0.75 GiB CUDA context (measured
  // ...); recommended ceiling: 9.83 GiB = 11.75 GiB x (1 - 0.10) - 0.75 GiB".
  std::string derivation(const std::string& card) const;
  // "RTX 3060's memory" or "the CPU's memory"; "the card" / "the CPU" in sentences.
  std::string memory_owner() const { return cuda ? "the card" : "the CPU"; }
};

// The steadier of the fastest and the runner-up, so that noise never picks the headline: the
// runner-up is preferred when the fastest's step time varied (its cv) by more than the gap
// between their throughputs (as a fraction of the fastest's) and the runner-up varied less.
bool prefer_runner_up(double best_tokens_per_s, double best_cv, double next_tokens_per_s,
                      double next_cv);
// The sentence that says so: "bf16-amp, batch 8 was 3% faster but its step time varied 12%
// between repetitions, more than that gap: the steadier bf16-amp, block, batch 16 is
// recommended."
std::string runner_up_note(const std::string& best, double best_tokens_per_s, double best_cv,
                           const std::string& next, double next_tokens_per_s, double next_cv);

}  // namespace sweep::reports
