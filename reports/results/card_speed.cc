// The speed facts of each card (card_speed.h). Bandwidth, boost clock, L2 and PCIe generation
// from NVIDIA's datasheets and architecture whitepapers, per row below.
#include "reports/results/card_speed.h"

#include <vector>

namespace sweep {
namespace {

// clang-format off
const std::vector<CardSpeed> kSpeed = {
  //  key          GB/s   boost MHz  L2 MiB  PCIe
  // GeForce RTX 3060 specifications (192-bit GDDR6 at 15 Gbps), GA106: 3 MiB L2 (NVIDIA
  // Ampere GA102 whitepaper's GA10x family table).
  {"rtx3060",      360,   1777,       3,     4},
  // NVIDIA T4 datasheet: 320 GB/s GDDR6, PCIe Gen3 x16; Turing TU104 whitepaper: 4 MiB L2,
  // boost 1590 MHz.
  {"t4",           320,   1590,       4,     3},
  // NVIDIA V100 datasheet (SXM2): 900 GB/s HBM2; Volta whitepaper: 6 MiB L2, boost 1530 MHz;
  // the host link of an SXM2 board is PCIe Gen3.
  {"v100-16gb",    900,   1530,       6,     3},
  // NVIDIA Ada Lovelace architecture whitepaper, "GeForce RTX 4090": 1008 GB/s, 2520 MHz,
  // 72 MiB L2; PCIe Gen4.
  {"rtx4090",     1008,   2520,      72,     4},
  // NVIDIA Ampere GA102 whitepaper, "GeForce RTX 3090": 936 GB/s, 1695 MHz, 6 MiB L2; Gen4.
  {"rtx3090",      936,   1695,       6,     4},
  // NVIDIA A10 datasheet: 600 GB/s GDDR6, PCIe Gen4; GA102: 6 MiB L2, boost 1695 MHz.
  {"a10",          600,   1695,       6,     4},
  // A10G (AWS EC2 G5): the A10's GA102 and memory (600 GB/s, AWS G5 documentation), 1710 MHz.
  {"a10g",         600,   1710,       6,     4},
  // NVIDIA L4 datasheet: 300 GB/s, PCIe Gen4 x16; AD104: 48 MiB L2, boost 2040 MHz.
  {"l4",           300,   2040,      48,     4},
  {"v100-32gb",    900,   1530,       6,     3},
  // NVIDIA A100 datasheet (SXM4 40GB: 1555 GB/s; 80GB: 2039 GB/s); A100 whitepaper: 40 MiB L2,
  // boost 1410 MHz; PCIe Gen4.
  {"a100-40gb",   1555,   1410,      40,     4},
  // NVIDIA L40S datasheet: 864 GB/s, PCIe Gen4 x16; AD102: 96 MiB L2, boost 2520 MHz.
  {"l40s",         864,   2520,      96,     4},
  {"a100-80gb",   2039,   1410,      40,     4},
  // NVIDIA H100 datasheet: PCIe 2.0 TB/s (boost 1755 MHz), SXM5 3.35 TB/s (boost 1980 MHz),
  // PCIe Gen5; Hopper whitepaper: 50 MiB L2.
  {"h100-pcie",   2000,   1755,      50,     5},
  {"h100-80gb",   3350,   1980,      50,     5},
  // NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, the H100 SXM's compute, clock and L2.
  {"h200",        4800,   1980,      50,     5},
};
// clang-format on

}  // namespace

const CardSpeed* card_speed(std::string_view key) {
  for (const auto& s : kSpeed)
    if (s.key == key) return &s;
  return nullptr;
}

double pcie_gbs(int gen) {
  switch (gen) {
    case 3: return 16 * 0.985;
    case 4: return 16 * 1.969;
    case 5: return 16 * 3.938;
    default: return 0;
  }
}

}  // namespace sweep
