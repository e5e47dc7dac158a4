// The CUDA cards the suite knows, in one table both sides read: the runner fills an emulated
// point's card from it (device emulated, `gpu: rtx3060`), the reports turn `--gpu NAME` into a
// budget and a row's device name into datasheet peaks (reports/common/gpus.h). Plain data with its
// sources in cards.cc; free of LibTorch like the rest of the results contract.
//
// An emulated row names its card in the `card` column (card_cell below): the facts the
// prediction used, so that a later correction of the table does not silently change what an
// old row meant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sweep {

// The CUDA context allowance where none was measured for a card: what the CUDA context and
// the kernels it loads take outside the caching allocator. The one measurement there is, the
// H100's with torch 2.11.0+cu130 (767 MiB, cards.cc), rounded to 0.75 GiB: what the RTX 3060
// table was measured under (docs/tables/rtx3060.md), so a predicted RTX 3060 and the measured
// rows share one cap (11.00 GiB). Not measured on the card itself, and said so wherever used.
inline constexpr int64_t kDefaultCudaContextBytes = int64_t{768} << 20;

struct CardSpec {
  std::string_view key;     // "rtx3060": what configs and `--gpu` use
  std::string_view name;    // "RTX 3060": what tables print
  std::string_view tokens;  // "rtx 3060": words that identify it in a CUDA device name
  double memory_gib = 0;    // as sold (the device reports a little less)
  // Peak dense (no 2:4 sparsity) TFLOP/s, FP32 accumulation for the tensor-core rows;
  // 0 = no such path (T4 and V100 have no TF32 or BF16 tensor cores) or not published.
  double fp32_tflops = 0;  // CUDA cores, no tensor cores
  double tf32_tflops = 0;
  double fp16_tflops = 0;
  double bf16_tflops = 0;
  // Total memory as CUDA reports it (cudaMemGetInfo), where known: measured by this project,
  // or from a PyTorch OOM message quoted in a public issue (sources in cards.cc); 0 = unknown.
  int64_t reported_bytes = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability: 8, 6 for sm_86
  int sms = 0;                     // streaming multiprocessors
  // The CUDA context allowance measured on this card (device memory in use less the
  // allocator's reserved memory); 0 = not measured, kDefaultCudaContextBytes applies.
  int64_t context_bytes = 0;
};

// Whether the card has bf16 tensor cores (compute capability 8.0 and up): below it (T4, V100)
// bf16 runs without them, at a fraction of fp16's speed, and is never recommended there.
inline bool has_bf16_tensor_cores(const CardSpec& c) { return c.cc_major >= 8; }

// The table, in ascending memory.
const std::vector<CardSpec>& cards();

// A card by `key`, by `name` (case, spaces and dashes ignored: "RTX 3060", "rtx-3060"), or
// by a CUDA device name ("NVIDIA GeForce RTX 3060"; the entry whose `tokens` all occur in
// it, the most specific one winning). An emulated row's device name ("RTX 3060 (emulated)")
// finds its card too. nullptr when none matches.
const CardSpec* find_card(std::string_view name);

// The memory the rule for "fits" reads for a card: as CUDA reports it where known, else as
// sold (a little more than CUDA will report: ECC and the driver's reservation).
int64_t card_memory_bytes(const CardSpec& card);
// Its CUDA context allowance: measured where it was, else kDefaultCudaContextBytes.
int64_t card_context_bytes(const CardSpec& card);

// Every card's key, for a hint: "rtx3060, t4, ...".
std::string card_keys();
// The keys nearest to a misspelt name, for "did you mean" (results/spelling.h): "rtx3600"
// -> "rtx3060", "a100" -> "a100-40gb or a100-80gb"; "" when none is close.
std::string nearest_card_key(std::string_view name);

// What an emulated device predicts: the card's facts as the worker reads them (the runner
// copies them into the point's EmulatedCard) and as a row's `card` cell spells them.
struct CardFacts {
  std::string name;
  int64_t memory_bytes = 0;   // the total CUDA reports
  int64_t context_bytes = 0;  // held outside the allocator
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  // Test only: the CPU's choices instead of CUDA's (for-loop optimizers, the CPU's SDPA choice
  // and autocast lists, no allocator rounding, no workspaces), the emulated device's
  // differential check against the CPU tracking allocator; never a user's card.
  bool cpu = false;

  int sm() const { return cc_major * 10 + cc_minor; }  // 90 for sm_90
};
// A table card's facts.
CardFacts facts_of(const CardSpec& card);
// The `card` cell of an emulated row:
// "RTX 3060 (sm_86, 28 SMs, memory 12616466432 B, context 536870912 B)", ", cpu" before the
// ')' for the test-only CPU card.
std::string card_cell(const CardFacts& card);
// Reads a cell back; nullopt for text card_cell did not write.
std::optional<CardFacts> parse_card_cell(std::string_view cell);
// The device name an emulated row carries: "RTX 3060 (emulated)".
std::string emulated_device_name(std::string_view card_name);
// The card an emulated device name predicts ("RTX 3060" of "RTX 3060 (emulated)"); nullopt
// for another device name.
std::optional<std::string> emulated_card_name(std::string_view device_name);
// The line every predicted answer carries: "predicted by emulation of RTX 3060, not measured".
std::string predicted_by(std::string_view card_name);

}  // namespace sweep
