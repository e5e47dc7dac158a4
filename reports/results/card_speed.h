// The card table's speed facts (issue 35): what the step-time prediction reads besides the
// dense peaks per dtype and the SM count that cards.h already holds. A table of its own,
// keyed by the card table's keys, so that the memory facts and these can be corrected apart;
// sources in card_speed.cc. Free of LibTorch like the rest of the results contract.
#pragma once

#include <string_view>

#include "reports/results/cards.h"

namespace sweep {

struct CardSpeed {
  std::string_view key;        // cards.h's key
  double bandwidth_gbs = 0;    // device memory bandwidth, GB/s (10^9 B/s), as the datasheet gives it
  int boost_mhz = 0;           // boost clock
  double l2_mib = 0;           // L2 cache
  int pcie_gen = 0;            // host link generation, x16
};

// Every card of cards() has an entry (a test pins it); nullptr for a key that is not a card.
const CardSpeed* card_speed(std::string_view key);

// The host link's bandwidth per direction, GB/s: x16 lanes at the PCI-SIG per-lane rate
// of the generation after its line coding (gen3 0.985, gen4 1.969, gen5 3.938 GB/s a lane).
double pcie_gbs(int gen);

}  // namespace sweep
