// "What the guides say vs what we measured": the savings the OOM guides quote, next to the
// savings the results file measured for the same change. Only measured pairs count: two ok
// rows of one group that differ in the technique alone (every other axis and the batch
// equal, or, for the batch rule, every axis but the batch).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>

#include "reports/report/report_sections.h"
#include "reports/results/stats.h"

namespace sweep::reports::report {
namespace {

// A guide's rule: the change from a baseline row to a technique row, and the saving quoted.
struct Rule {
  std::string change;  // "mixed precision (fp16/bf16 autocast)"
  std::string quote;   // "about 50% less memory"
  double quoted = 0;   // 0.5
  std::function<bool(const Point&)> base, technique;
  // The axes that must match between the two rows (the technique's own axis left out).
  std::function<std::string(const Point&)> rest;
};

std::string axes(const Point& p, bool precision, bool checkpointing, bool optimizer, bool batch) {
  std::string k = to_string(p.mode) + "|" +
                  configuration_key(p.cell(), {"precision", "checkpointing", "optimizer"});
  if (precision) k += "|" + to_string(p.precision);
  if (checkpointing) k += "|" + to_string(p.checkpointing);
  if (optimizer) k += "|" + to_string(p.optimizer);
  if (batch) k += "|" + std::to_string(p.batch);
  return k;
}

const std::vector<Rule>& rules() {
  // The figures the guides repeat (the issue tracker's list of rules of thumb).
  static const std::vector<Rule> r = {
      {"mixed precision (fp16/bf16 autocast)", "about 50% less", 0.5,
       [](const Point& p) { return p.precision == Precision::kFp32; },
       [](const Point& p) {
         return p.precision == Precision::kFp16Amp || p.precision == Precision::kBf16Amp;
       },
       [](const Point& p) { return axes(p, false, true, true, true); }},
      {"pure bf16 weights and state", "about 50% less", 0.5,
       [](const Point& p) { return p.precision == Precision::kFp32; },
       [](const Point& p) { return p.precision == Precision::kBf16; },
       [](const Point& p) { return axes(p, false, true, true, true); }},
      {"8-bit AdamW (bitsandbytes)", "about 50% less", 0.5,
       [](const Point& p) { return p.optimizer == OptimizerKind::kAdamW; },
       [](const Point& p) { return p.optimizer == OptimizerKind::kAdamW8bit; },
       [](const Point& p) { return axes(p, true, true, false, true); }},
      {"activation checkpointing", "about 40% less", 0.4,
       [](const Point& p) { return p.checkpointing == Checkpointing::kNone; },
       [](const Point& p) { return p.checkpointing != Checkpointing::kNone; },
       [](const Point& p) { return axes(p, true, false, true, true); }},
      {"batch 8 to 2", "75% less", 0.75,
       [](const Point& p) { return p.batch == 8; },
       [](const Point& p) { return p.batch == 2; },
       [](const Point& p) { return axes(p, true, true, true, false); }},
  };
  return r;
}

}  // namespace

void guides_section(Document& doc, const Group& g) {
  if (g.mode != Mode::kTrain) return;
  std::vector<std::vector<std::string>> rows;
  for (const Rule& rule : rules()) {
    std::map<std::string, const Point*> bases;
    for (const Point& p : g.points)
      if (p.ok() && p.peak_allocated && *p.peak_allocated > 0 && rule.base(p))
        bases[rule.rest(p)] = &p;
    std::vector<double> savings;
    std::vector<int> batches;
    for (const Point& p : g.points) {
      if (!p.ok() || !p.peak_allocated || !rule.technique(p)) continue;
      auto it = bases.find(rule.rest(p));
      if (it == bases.end()) continue;
      savings.push_back(1 - *p.peak_allocated / *it->second->peak_allocated);
      batches.push_back(p.batch);
    }
    if (savings.empty()) continue;
    const auto [lo, hi] = std::minmax_element(savings.begin(), savings.end());
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    std::string at;
    for (int b : batches) at += (at.empty() ? "" : ", ") + std::to_string(b);
    const double m = median(savings);
    rows.push_back({rule.change, rule.quote,
                    signed_percent(-m) + (savings.size() > 1 ? " (" + signed_percent(-*hi) + " to " +
                                                                   signed_percent(-*lo) + ")"
                                                             : ""),
                    std::to_string(savings.size()), rule.change.rfind("batch", 0) == 0 ? "" : at,
                    std::abs(m - rule.quoted) <= 0.1 ? "about as quoted"
                    : m < rule.quoted               ? "saves less than quoted"
                                                    : "saves more than quoted"});
  }
  if (rows.empty()) return;
  doc.heading(3, "What the guides say vs what was measured");
  doc.paragraph(
      "Peak allocated memory of each measured pair of rows that differ in the change alone "
      "(the same batch and other axes), against the saving the OOM guides quote. Memory change: "
      "negative is a saving; the median over the pairs, with the range.");
  doc.table(make_table({"change", "the guides say", "measured memory change", "pairs", "at batch",
                        "verdict"},
                       {Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kLeft,
                        Align::kLeft},
                       std::vector<bool>(6, true), std::move(rows)));
}

}  // namespace sweep::reports::report
