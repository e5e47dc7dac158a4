// `sweep tables [--card NAME ...] [--out docs/tables]`: the per-card tables of docs/tables/, all
// from one command. For each card, an emulated `sweep fit` (sweeps/cli/fit.h) of every model of
// the zoo at the lengths people train it (GPT-2 at 512 and 1024 tokens, T5 512 -> 128, Whisper's
// 30 s window), each with every technique combination fit tries on a CUDA card; its answers are
// written as OUT/<card>.json (the data), OUT/<card>.md and, from every OUT/*.json, the one page
// OUT/index.html (reports/tables/tables.h prints both). The RTX 3060's measured rows
// (OUT/rtx3060-results.csv) sit beside its prediction, emulated once more under their cap.
// The Llama-family decoders of models/catalogue/ get one section of their own: each at 2048
// and 4096 tokens, as a bf16 full fine-tune, LoRA and QLoRA (AdamW, gradient checkpointing),
// the largest batch, or how far batch 1 is over the cap.
#pragma once

#include <string>
#include <vector>

namespace sweep {

struct TablesOptions {
  std::vector<std::string> cards;   // empty: every card of the table
  std::vector<std::string> models;  // empty: every model of the zoo (not the -test ones), the
                                    // catalogue's in its own section
  std::string out = "docs/tables";
  std::string results = "results/tables";  // the fits' results directories, per card
  bool quiet = false;
};

// Exit code; UserError for bad input (the CLI prints it, exit 2).
int run_tables(const TablesOptions& opt);

}  // namespace sweep
