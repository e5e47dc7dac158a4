// One answer per device: a results file (or several) can hold rows measured on a device and
// rows predicted by emulation of a card, and the two say different things (memory PyTorch
// allocated there against memory CUDA's caching allocator would hold on a card never used).
// `report` and `recommend` answer each part from its own rows, under its own label, so that
// measured picks are never titled "predicted" nor predicted ones "measured".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reports/results/rows.h"

namespace sweep::reports {

// The card a row was predicted for (device emulated); nullopt for a measured row. A row that
// never ran (skipped after an OOM) has no device name: its card cell names the card.
std::optional<std::string> predicted_card(const Row& row);

struct DevicePart {
  // "measured on AMD EPYC", "measured on NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-40GB" (rows
  // measured on several devices pool, as recommend's notes say), "predicted by emulation of
  // RTX 3060, not measured".
  std::string label;
  std::optional<std::string> card;  // the predicted card; nullopt: the measured rows
  std::vector<Results> results;     // the part's rows, file by file (paths and columns kept)
};

// The measured rows first, then one part per predicted card in the order the rows name them;
// a part holds every row of its kind, whatever its status. One part when the rows are of one
// kind (and for no rows at all).
std::vector<DevicePart> device_parts(const std::vector<Results>& results);

}  // namespace sweep::reports
