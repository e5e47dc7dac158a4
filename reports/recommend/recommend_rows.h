// A results row as recommend.cc and recommend_card.cc read it; internal to reports/.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reports/recommend/recommend.h"
#include "reports/results/rows.h"

namespace sweep::reports::recommend_internal {

// A row read once.
struct Measured {
  std::string group;  // model, seq, target_seq, audio_s
  Choice choice;
  bool ok = false;  // status ok with a peak
  bool cuda = false;
  std::optional<double> device_memory, context;
  // Device emulated: the card predicted (its name and the allowance the prediction used).
  std::string card;
  std::optional<double> card_context;
  bool emulated = false;
  int64_t budget = 0;
  std::optional<double> limit;  // what an OOM ran into: the budget, else the device's memory
  const Row* row = nullptr;
  bool train() const { return choice.mode == Mode::kTrain; }
  bool oom() const { return choice.status == Status::kOom; }
  // Measured not to fit `usable`: it peaked above it, or it ran out of memory under a limit
  // at least as large (an OOM under a smaller limit says nothing about a larger card).
  bool exceeds(int64_t usable) const {
    if (ok) return choice.peak_reserved_bytes > usable;
    return oom() && (!limit || *limit >= static_cast<double>(usable));
  }
};

using OnTarget = std::function<bool(const Measured&)>;

// Every file's rows that count, each read once (recommend.cc).
std::vector<Measured> measure_all(const std::vector<Results>& results);

// The card for `options` with its usable memory by the one rule (recommend_card.cc); sets
// on_target to what tells a row measured on that card. Throws UserError as card_target does.
Target target_of(const std::vector<Measured>& rows, const RecommendOptions& options,
                 OnTarget& on_target);

}  // namespace sweep::reports::recommend_internal
