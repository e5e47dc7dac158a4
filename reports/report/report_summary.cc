// The report's first screen: the answer. Who measured (or predicted), the rule with its two
// figures, the recommendation and the largest batch per technique, all from recommend() so
// that the report and `sweep recommend` cannot disagree.
#include "reports/report/report_sections.h"

#include <algorithm>

namespace sweep::reports::report {
namespace {

// "measured on NVIDIA H100 80GB HBM3", "predicted by emulation of RTX 3060, not measured",
// "measured on the CPU": the devices of the points, said once.
std::string devices_line(const std::vector<Point>& pts) {
  std::vector<std::string> seen;
  for (const Point& p : pts) {
    const std::string d = p.predicted ? (p.card.empty() ? std::string() : predicted_by(p.card))
                          : p.device_name.empty() ? std::string()
                          : p.device_name.rfind("cpu", 0) == 0 ? std::string("measured on the CPU")
                                                               : "measured on " + p.device_name;
    if (!d.empty() && std::find(seen.begin(), seen.end(), d) == seen.end()) seen.push_back(d);
  }
  std::string s;
  for (const auto& d : seen) s += (s.empty() ? "" : "; ") + d;
  return s.empty() ? "device unknown" : s;
}

std::string rate(double v) { return fixed(v, v >= 100 ? 0 : 1); }

}  // namespace

void summary_section(Document& doc, const std::vector<Point>& pts, const Recommendation* r,
                     const std::string& no_recommendation, const std::string& part,
                     std::size_t index) {
  doc.begin_section(index == 0 ? std::string("summary") : "summary-" + std::to_string(index + 1));
  doc.heading(2, part.empty() ? std::string("Summary") : "Summary: " + part);
  std::vector<std::string> facts = {"Device: " + devices_line(pts) + "."};
  if (std::any_of(pts.begin(), pts.end(), [](const Point& p) { return p.budget_emulated; }))
    facts.back() += " Memory was capped to the card's (budget emulation): what fits is the "
                    "card's, the throughput the measuring device's.";
  if (r) {
    const Target& t = r->target;
    facts.push_back("For " + t.name + (t.cuda ? "" : " (CPU memory)") + ". The rule, " +
                    t.derivation(t.name) + ".");
    // How sure a prediction is (the emulator's measured error per family, common/fidelity.h).
    for (const auto& n : r->notes)
      if (n.rfind("How sure:", 0) == 0) facts.push_back(n);
  } else {
    facts.push_back("No recommendation: " + no_recommendation);
  }
  doc.list(facts);
  if (!r) {
    doc.end();
    return;
  }
  std::vector<std::string> picks;
  for (const auto& g : r->groups) {
    if (!g.fastest) {
      picks.push_back(g.label() + ": " + g.no_pick() + ".");
      continue;
    }
    const Choice& c = *g.fastest;
    std::string line = g.label() + ": " + c.label() + ", peak " +
                       format_bytes(static_cast<double>(c.peak_reserved_bytes)) +
                       (c.tokens_per_s > 0 ? ", " + rate(c.tokens_per_s) + " tokens/s" : "");
    if (g.above_ceiling) line += " (above the recommended ceiling: nothing measured is under it)";
    if (!g.headline_note.empty()) line += ". " + g.headline_note;
    picks.push_back(line + ".");
  }
  doc.paragraph(r->target.cuda ? "Recommended (the fastest under the recommended ceiling):"
                               : "Recommended (CPU rows: ranked by memory, not by the CPU's "
                                 "throughput):");
  doc.list(picks);
  // Each pick in the words of the user's training script.
  for (const auto& g : r->groups) {
    if (!g.fastest || g.fastest->mode != Mode::kTrain) continue;
    doc.paragraph("In your training script, " + g.label() + " (" + precision_words(g.fastest->precision) + "):");
    doc.code("python", trainer_args_text(g.fastest->trainer_args()));
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : r->groups)
    for (const Choice& c : g.max_batch)
      rows.push_back({g.label(), c.technique(), std::to_string(c.batch),
                      c.first_over ? std::to_string(*c.first_over) : "not reached",
                      format_bytes(static_cast<double>(c.peak_reserved_bytes)),
                      c.tokens_per_s > 0 ? rate(c.tokens_per_s) : "",
                      c.bounded ? "" : "largest measured; larger batches not measured"});
  if (rows.empty()) {
    doc.end();
    return;
  }
  doc.paragraph("Largest batch that fits the cap (" +
                format_bytes(static_cast<double>(r->target.cap_bytes())) + "), per technique:");
  const std::vector<std::string> headers = {"model",        "technique", "largest batch",
                                            "first batch over", "peak reserved", "tokens/s",
                                            "note"};
  const std::vector<Align> align = {Align::kLeft,  Align::kLeft,  Align::kRight, Align::kRight,
                                    Align::kRight, Align::kRight, Align::kLeft};
  doc.table(make_table(headers, align, {true, true, true, true, true, false, false},
                       std::move(rows)));
  doc.end();
}

}  // namespace sweep::reports::report
