// The per-card tables of docs/tables/: what trains on a card, for each model of the zoo at the
// lengths people train it and each technique combination `sweep fit` tries. `sweep tables`
// (sweeps/cli/tables.cc) runs the fits and collects one card's data (docs/tables/<card>.json,
// the shape below); this file turns that data into the Markdown (<card>.md) and, for every
// card together, the one offline page (index.html). Both print the same cells, built once by
// table_view(), so the page's numbers are the Markdown's. Runs nothing; no LibTorch.
//
// A card's data (tables_json_version 1):
//   {card: {key, name, memory_bytes, memory_source, context_bytes, context_measured, context_source,
//           compute_capability, sms, margin, cap_bytes, ceiling_bytes},
//    command, commit, suite_version, effective_batch, precision_note,
//    entries: [{model, input, fit: <`sweep fit --json`'s techniques and recommendation, each
//               technique with a "label">,
//               measured?: {where, rows: [see measured_beside_predicted]}}]}
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results/rows.h"

namespace sweep::reports {

// Bumped when a key of a card's data changes meaning or goes away.
inline constexpr int kTablesJsonVersion = 3;  // 2: card.cap_bytes and ceiling_bytes (the one rule) for usable_bytes; 3: card.memory_source and context_source for memory_reported

// What the page and the Markdown show: per card, per entry (model and input), the
// recommendation line, the technique table's headers and cells, the chart's bars, and the
// measured table where there is one. Every cell a string, formatted once here. For the page's
// comparison of cards, also the card's memory and cap (text and bytes) and its caveat (the
// precision note's first sentence), and per entry every technique's largest batch in fit's
// order (`techniques`: label, number or null, the table's cell and a short cell), the
// recommendation's parts (`pick`, null when nothing fits) and how sure, in a few words (`sure`).
nlohmann::json table_view(const nlohmann::json& card_data);

// docs/tables/<card>.md.
std::string card_markdown(const nlohmann::json& card_data);

// docs/tables/index.html: every card's view embedded as JSON, vanilla JS, no network. The
// selection can be given in the URL: index.html#card=t4&model=gpt2&input=seq%20512 (one card),
// index.html#compare&model=gpt2&input=seq%20512 (every card side by side, sortable).
std::string tables_page(const std::vector<nlohmann::json>& cards_data);

// JSON text made safe as the content of a <script> element: "<", ">", "&", U+2028 and U+2029
// as \u escapes, which JSON.parse reads back as the same characters.
std::string json_for_script(const std::string& json_text);

// The measured max-batch searches of `measured` beside the emulation's of `predicted` (run
// under the same budget), one row per combination the measured file searched: technique,
// measured largest batch, first OOM, peak reserved, tokens/s and probes, the predicted largest
// batch and first OOM, and `agree`, with `why` where they do not (docs/fidelity.md's words),
// ranked by measured tokens/s. Keyed by model and input ("seq 512"): {"gpt2|seq 512": [...]}.
nlohmann::json measured_beside_predicted(const Results& measured, const Results& predicted);

}  // namespace sweep::reports
