// The per-card tables (tables.h): one view of a card's data, printed as Markdown and embedded in
// the offline page (tables_page.cc).
#include "reports/tables/tables.h"

#include <algorithm>
#include <map>

#include "reports/common/markup.h"
#include "reports/report/report_sections.h"

namespace sweep::reports {
namespace {

using nlohmann::json;

std::string bytes_cell(const json& v) {
  return v.is_number() ? format_bytes(v.get<double>()) : "";
}
std::string int_cell(const json& v, const std::string& none = "") {
  return v.is_number() ? std::to_string(v.get<int64_t>()) : none;
}

// "audio 30.0 s" and "audio 30 s" are one input.
std::string canonical_shape(std::string shape) {
  if (const auto at = shape.find(".0 s"); at != std::string::npos && at + 4 == shape.size())
    shape.replace(at, 4, " s");
  return shape;
}

// Why an emulated answer can part from a measured one, in docs/fidelity.md's words.
std::string why_differs(const std::string& model) {
  if (model.starts_with("whisper"))
    return "Whisper's convolutions run through cuDNN, whose workspaces (sized by cuDNN's "
           "heuristics at run time) are not modelled: the emulation reads Whisper about 1% low "
           "allocated and 3% low reserved (docs/fidelity.md)";
  return "at the cap's edge: where both ran, the emulated peaks agree with these rows to a few "
         "tenths of a percent (docs/fidelity.md), and a largest batch that close to the cap can "
         "land on either side";
}

// A technique's largest batch as the tables print it: the number and what qualifies it.
std::string largest_cell(const json& t) {
  std::string largest = int_cell(t.at("largest_batch"), "none");
  if (t.value("borderline", false)) largest += " (borderline)";
  if (t.at("largest_batch").is_number() && !t.at("first_oom").is_number())
    largest += " (limit not reached)";
  if (t.contains("stopped")) largest += " (" + t.at("stopped").get<std::string>() + ")";
  return largest;
}

// The comparison of cards puts some 30 techniques side by side, so its cells are short: "14+"
// (the search stopped at 14 without running out of memory), "9?" (borderline); the long form
// goes in the cell's tooltip.
std::string largest_short(const json& t) {
  std::string s = int_cell(t.at("largest_batch"), "none");
  if (t.at("largest_batch").is_number() && !t.at("first_oom").is_number()) s += "+";
  if (t.value("borderline", false)) s += "?";
  return s;
}

// The first sentence of the precision note, without its period ("T4 (sm_75) has no bf16 tensor
// cores"): the caveat a row of the comparison has room for, joined to others by "; ".
std::string first_sentence(const std::string& text) {
  std::string s = text.substr(0, text.find(". "));
  if (s.ends_with('.')) s.pop_back();
  return s;
}

std::string percent(double v) { return (v > 0 ? "+" : "") + fixed(100 * v, 1) + "%"; }

// How sure, in a few words: every cell is predicted, with the family's measured error where
// fidelity.h has one (the entry's how_sure says it in full).
std::string sure_short(const json& fit) {
  if (!fit.contains("measured_error")) return "predicted";
  const json& e = fit.at("measured_error");
  if (!e.contains("low")) return "predicted; error unknown (never measured)";
  return "predicted; measured error " + percent(e.at("low").get<double>()) + " to " +
         percent(e.at("high").get<double>()) + " of peak (" +
         std::to_string(e.at("rows").get<int>()) + " rows)";
}

// The comparison's columns for one entry: every technique in fit's order (the same on every
// card), and the recommendation's parts.
void comparison_fields(const json& fit, json& v) {
  v["techniques"] = json::array();
  for (const json& t : fit.at("techniques"))
    v["techniques"].push_back({{"label", t.at("label")},
                               {"largest_batch", t.at("largest_batch")},
                               {"largest", largest_cell(t)},
                               {"short", largest_short(t)}});
  const json& r = fit.at("recommendation");
  v["pick"] = r.is_null() ? json(nullptr)
                          : json{{"label", r.at("label")},
                                 {"batch", r.at("batch")},
                                 {"accumulation", r.at("accumulation")},
                                 {"steps", std::to_string(r.at("batch").get<int64_t>()) + " x " +
                                               std::to_string(r.at("accumulation").get<int64_t>())},
                                 {"peak", bytes_cell(r.at("peak_reserved_bytes"))},
                                 {"peak_bytes", r.at("peak_reserved_bytes")}};
  v["sure"] = sure_short(fit);
}

// A catalogue cell: the largest batch, or why there is none.
std::string catalogue_cell(const json& c) {
  if (c.contains("beyond_context"))
    return "beyond its " + std::to_string(c.at("beyond_context").get<int64_t>()) + "-token context";
  if (c.value("largest_batch", json()).is_number()) {
    std::string s = std::to_string(c.at("largest_batch").get<int64_t>());
    if (!c.value("first_oom", json()).is_number()) s += " (limit not reached)";
    return s;
  }
  if (c.contains("over_bytes"))
    return "does not fit at batch 1: " + format_bytes(c.at("over_bytes").get<double>()) + " over";
  return "does not fit at batch 1";
}

// The catalogue as both outputs show it (the Markdown's section, the page's tables): its title,
// what a cell is, the headers, and per length the rows of cell text, a row per model and a
// column per way.
json catalogue_view(const json& d) {
  const json& c = d.at("catalogue");
  const std::string key = d.at("card").at("key");
  std::string ways;
  for (const json& w : c.at("ways"))
    ways += std::string(ways.empty() ? "" : "; ") + w.at("label").get<std::string>() + ": sweep fit MODEL --gpu " +
            key + " --device emulated --seq N " + w.at("flags").get<std::string>();
  json view = {
      {"title", "The Llama-family catalogue at " + std::to_string(c.at("lengths").front().get<int64_t>()) +
                    " and " + std::to_string(c.at("lengths").back().get<int64_t>()) + " tokens (predicted)"},
      {"note", "The decoders of sweep models read from their config.json, fine-tuned three ways, "
               "each with gradient checkpointing and AdamW (" + ways + "). A cell is the largest "
               "micro-batch that fits under the cap; where batch 1 does not, how far over the cap "
               "batch 1's peak reserved memory is (that batch predicted on this card without its "
               "memory limit)."},
      {"headers", {"model", "parameters"}},
      {"tables", json::array()}};
  for (const json& w : c.at("ways")) view["headers"].push_back(w.at("label"));
  for (const json& len : c.at("lengths")) {
    const int64_t seq = len.get<int64_t>();
    json rows = json::array();
    for (const json& r : c.at("rows")) {
      std::vector<std::string> row = {r.at("model"), fixed(r.at("parameters").get<double>() / 1e9, 2) + "B"};
      for (const json& w : c.at("ways"))
        for (const json& cell : r.at("cells"))
          if (cell.at("seq") == seq && cell.at("way") == w.at("key")) row.push_back(catalogue_cell(cell));
      row.resize(view["headers"].size());
      rows.push_back(row);
    }
    view["tables"].push_back({{"seq", seq}, {"rows", rows}});
  }
  return view;
}

void catalogue_section(Document& doc, const json& d) {
  const json v = catalogue_view(d);
  doc.heading(2, v.at("title"));
  doc.paragraph(v.at("note"));
  const auto headers = v.at("headers").get<std::vector<std::string>>();
  std::vector<Align> align(headers.size(), Align::kRight);
  align.front() = Align::kLeft;
  for (const json& t : v.at("tables")) {
    doc.paragraph("Sequence length " + std::to_string(t.at("seq").get<int64_t>()) + ":");
    doc.table(make_table(headers, align, std::vector<bool>(headers.size(), true),
                         t.at("rows").get<std::vector<std::vector<std::string>>>()));
  }
}

// The table's header, written as Markdown (its emphasis and code spans): what the cells are,
// the card's facts and the rule, how the data was made.
std::string card_header(const json& d) {
  const json& card = d.at("card");
  const std::string name = card.at("name");
  std::string head = "# " + name + ": what trains, predicted by emulation\n\n" + (
      "The largest batch that trains on " + name + ", for each model of the zoo at the lengths "
      "people train it and each technique combination `sweep fit` tries on a CUDA card. Every "
      "cell is predicted by emulation of " + name + " (PyTorch's Meta device replaying CUDA's "
      "caching allocator: docs/fidelity.md), not measured, unless a table says measured. "
      "Other cards: [index.html](index.html) (open it in a browser; it works offline).") + "\n\n";
  std::vector<std::string> facts;
  const double sold = card.at("memory_gib_sold");
  facts.push_back(
      "**Card:** " + name + ", compute capability " + card.at("compute_capability").get<std::string>() + ", " +
      std::to_string(card.at("sms").get<int>()) + " SMs; memory " +
      format_bytes(card.at("memory_bytes").get<double>()) +
      " as CUDA reports it, not the " + number_text(sold) + " GB sold (the lowest total seen: " +
      card.at("memory_source").get<std::string>() + ")" +
      "; CUDA context allowance " + format_bytes(card.at("context_bytes").get<double>()) + " (" +
      card.at("context_source").get<std::string>() + ")" +
      ". The rule (reports/common/fit_rule.h): a batch **fits** when it trains with no out-of-memory "
      "error and peak reserved memory at most the cap, " + format_bytes(card.at("cap_bytes").get<double>()) +
      " = memory - context; it is **recommended** only under the recommended ceiling, " +
      format_bytes(card.at("ceiling_bytes").get<double>()) + " = memory x (1 - " +
      number_text(card.at("margin").get<double>()) + ") - context.");
  facts.push_back("**How generated:** `" + d.at("command").get<std::string>() +
                  "`: for each model and input, `sweep fit MODEL --gpu " +
                  card.at("key").get<std::string>() +
                  " --device emulated --effective-batch " +
                  std::to_string(d.value("effective_batch", 32)) +
                  d.at("fit_flags").get<std::string>() +
                  "` (a max-batch search per combination, each probe its own worker; the rows "
                  "under results/tables/" + card.at("key").get<std::string>() + "/).");
  facts.push_back("**Commit:** " + d.at("commit").get<std::string>() + " (sweep " +
                  d.at("suite_version").get<std::string>() + ").");
  int probes = 0, combinations = 0, most = 0;
  for (const json& e : d.at("entries"))
    for (const json& t : e.at("fit").at("techniques")) {
      probes += t.at("probes").get<int>();
      most = std::max(most, t.at("probes").get<int>());
      ++combinations;
    }
  facts.push_back("**Probes:** " + std::to_string(probes) + " over " +
                  std::to_string(combinations) + " combinations, " +
                  (combinations ? fixed(static_cast<double>(probes) / combinations, 1) : "0") +
                  " per combination on average, at most " + std::to_string(most) + ".");
  facts.push_back(
      "**Ranking:** rows by the largest batch first. The recommendation is `fit`'s: by the "
      "tokens/s the step-time model predicts from the card's datasheet (docs/fidelity.md, "
      "\"Step time\") where one configuration leads by more than that model's measured error, "
      "otherwise by memory (the fewest changes from plain training that reach the effective "
      "batch, at its largest micro-batch)." +
      std::string(d.contains("measured_note") ? " " + d.at("measured_note").get<std::string>() : ""));
  facts.push_back("**Columns:** largest batch: the largest that fits; peak reserved: the caching "
                  "allocator's peak at it; headroom: what is left under the cap at that peak; first OOM: "
                  "the smallest batch that did not fit (empty: none up to the search's limit).");
  if (d.contains("precision_note")) facts.push_back("**Precision:** " + d.at("precision_note").get<std::string>());
  for (const auto& f : facts) head += "- " + f + "\n";
  return head;
}

// The summary: one line per model and input, its recommendation.
void summary_section(Document& doc, const json& d, const json& view) {
  std::vector<std::vector<std::string>> summary;
  for (const json& v : view.at("entries")) {
    const json& fit = [&]() -> const json& {
      for (const json& e : d.at("entries"))
        if (e.at("model") == v.at("model") && e.at("input") == v.at("input")) return e.at("fit");
      return d;  // unreachable: the view is built from these entries
    }();
    const json& r = fit.at("recommendation");
    summary.push_back({v.at("model"), v.at("input"), r.is_null() ? "nothing fits" : r.at("label").get<std::string>(),
                       r.is_null() ? "" : std::to_string(r.at("batch").get<int64_t>()) + " x " +
                                              std::to_string(r.at("accumulation").get<int64_t>()),
                       r.is_null() ? "" : bytes_cell(r.at("peak_reserved_bytes"))});
  }
  doc.heading(2, "Summary: the recommendation for an effective batch of " +
                     std::to_string(d.value("effective_batch", 32)) + " (predicted)");
  const std::vector<std::string> sh = {"model", "input", "recommended technique",
                                       "micro-batch x accumulation", "peak reserved"};
  doc.table(make_table(sh, {Align::kLeft, Align::kLeft, Align::kLeft, Align::kRight, Align::kRight},
                       std::vector<bool>(sh.size(), true), summary));

}

// A section per model and input: the recommendation, its Trainer arguments, every technique
// and, where there are some, the measured rows beside the prediction.
void entry_sections(Document& doc, const json& view) {
  for (const json& v : view.at("entries")) {
    doc.heading(2, v.at("model").get<std::string>() + ", " + v.at("input").get<std::string>());
    doc.paragraph(v.at("recommendation"));
    if (v.contains("trainer_args")) {
      doc.paragraph("In your training script (Hugging Face transformers):");
      doc.code("python", v.at("trainer_args"));
    }
    if (v.contains("how_sure")) doc.paragraph(v.at("how_sure"));
    std::vector<std::vector<std::string>> rows(v.at("rows").begin(), v.at("rows").end());
    const std::vector<std::string> headers = v.at("headers");
    doc.table(make_table(headers,
                         {Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kRight,
                          Align::kRight, Align::kLeft},
                         std::vector<bool>(headers.size(), true), rows));
    if (v.contains("measured")) {
      const json& m = v.at("measured");
      doc.paragraph(m.at("title"));
      std::vector<std::vector<std::string>> mrows(m.at("rows").begin(), m.at("rows").end());
      const std::vector<std::string> mh = m.at("headers");
      std::vector<Align> align(mh.size(), Align::kRight);
      align.front() = align.back() = Align::kLeft;
      doc.table(make_table(mh, align, std::vector<bool>(mh.size(), true), mrows));
    }
  }
}

}  // namespace

json measured_beside_predicted(const Results& measured, const Results& predicted) {
  using report::Point;
  const auto measured_points = report::parse_points(measured);
  const auto predicted_points = report::parse_points(predicted);
  const auto m = report::search_answers(measured_points);
  const auto p = report::search_answers(predicted_points);
  auto key = [](const Point& x) {
    return x.model + "|" + canonical_shape(x.shape) + "|" + x.technique();
  };
  std::map<std::string, const report::SearchAnswer*> by_key;
  for (const auto& a : p) by_key[key(*a.first)] = &a;
  json out = json::object();
  for (const auto& a : m) {
    const Point& any = *a.first;
    const auto it = by_key.find(key(any));
    const report::SearchAnswer* q = it == by_key.end() ? nullptr : it->second;
    auto largest = [](const report::SearchAnswer* s) {
      return s && s->largest ? json(s->largest->batch) : json(nullptr);
    };
    auto first_oom = [](const report::SearchAnswer* s) {
      return s && s->first_oom ? json(*s->first_oom) : json(nullptr);
    };
    json row = {{"technique", any.technique()},
                {"measured_largest", largest(&a)},
                {"measured_first_oom", first_oom(&a)},
                {"measured_peak_reserved_bytes",
                 a.largest && a.largest->peak_reserved ? json(*a.largest->peak_reserved)
                                                       : json(nullptr)},
                {"tokens_per_s", a.largest && a.largest->tokens_per_s
                                     ? json(*a.largest->tokens_per_s)
                                     : json(nullptr)},
                {"probes", a.probes},
                {"measured_on", any.device_name},
                {"budget_bytes", any.budget_bytes},
                {"predicted_largest", largest(q)},
                {"predicted_first_oom", first_oom(q)}};
    const bool agree = q && row["measured_largest"] == row["predicted_largest"] &&
                       row["measured_first_oom"] == row["predicted_first_oom"];
    row["agree"] = agree;
    if (!q)
      row["why"] = "not predicted: the emulated search did not try this combination";
    else if (!agree)
      row["why"] = why_differs(any.model);
    out[any.model + "|" + canonical_shape(any.shape)].push_back(row);
  }
  for (auto& [k, rows] : out.items())
    std::stable_sort(rows.begin(), rows.end(), [](const json& x, const json& y) {
      return x.value("tokens_per_s", json(0)).is_number() &&
             (!y["tokens_per_s"].is_number() ||
              x["tokens_per_s"].get<double>() > y["tokens_per_s"].get<double>());
    });
  return out;
}

json table_view(const json& d) {
  const json& card = d.at("card");
  const std::string name = card.at("name");
  json view = {{"key", card.at("key")},
               {"name", name},
               {"memory", bytes_cell(card.at("memory_bytes"))},
               {"memory_bytes", card.at("memory_bytes")},
               {"cap", bytes_cell(card.at("cap_bytes"))},
               {"cap_bytes", card.at("cap_bytes")},
               {"entries", json::array()}};
  if (d.contains("precision_note")) {
    view["precision_note"] = d.at("precision_note");
    view["caveat"] = first_sentence(d.at("precision_note"));
  }
  const int64_t effective = d.value("effective_batch", 32);
  for (const json& e : d.at("entries")) {
    const json& fit = e.at("fit");
    const double cap = fit.at("card").at("cap_bytes").get<double>();
    const double ceiling = fit.at("card").at("ceiling_bytes").get<double>();
    json v = {{"model", e.at("model")},
              {"input", e.at("input")},
              {"cap", format_bytes(cap)},
              {"cap_bytes", cap},
              {"headers",
               {"technique", "largest batch", "peak reserved", "headroom", "first OOM", "probes",
                "source"}},
              {"rows", json::array()},
              {"bars", json::array()}};
    // The largest batch first (the rows show no predicted speed); ties keep fit's order (fewer
    // changes from plain training first).
    std::vector<json> techniques(fit.at("techniques").begin(), fit.at("techniques").end());
    std::stable_sort(techniques.begin(), techniques.end(), [](const json& a, const json& b) {
      return a.value("largest_batch", json(0)).is_number() &&
             (!b["largest_batch"].is_number() ||
              a["largest_batch"].get<int64_t>() > b["largest_batch"].get<int64_t>());
    });
    const std::string source = "predicted (emulated " + name + ")";
    for (const json& t : techniques) {
      v["rows"].push_back({t.at("label"), largest_cell(t), bytes_cell(t.value("peak_reserved_bytes", json())),
                           bytes_cell(t.value("headroom_bytes", json())), int_cell(t.at("first_oom")),
                           int_cell(t.at("probes")), source});
      if (t.at("largest_batch").is_number())
        v["bars"].push_back({{"label", t.at("label")},
                             {"batch", t.at("largest_batch")},
                             {"peak_bytes", t.at("peak_reserved_bytes")}});
    }
    comparison_fields(fit, v);
    if (fit.contains("measured_error")) v["how_sure"] = fit.at("measured_error").at("text");
    const json& r = fit.at("recommendation");
    if (r.is_null()) {
      const bool some_fit = std::any_of(techniques.begin(), techniques.end(), [](const json& t) {
        return t.at("largest_batch").is_number();
      });
      v["recommendation"] = some_fit ? "Nothing reaches an effective batch of " + std::to_string(effective) +
                                           ": every micro-batch that divides it ran out of memory once "
                                           "gradients accumulated (predicted)."
                                     : "Nothing fits: not even batch 1 of any technique (predicted).";
    } else {
      const int64_t batch = r.at("batch"), acc = r.at("accumulation");
      if (r.contains("trainer_args")) v["trainer_args"] = r.at("trainer_args").at("text");
      v["recommendation"] = "Recommended for an effective batch of " + std::to_string(effective) +
                            " (predicted by emulation of " + name + ", ranked by memory): " +
                            r.at("label").get<std::string>() + ", micro-batch " +
                            std::to_string(batch) + " x accumulation " + std::to_string(acc) +
                            ", peak reserved " + bytes_cell(r.at("peak_reserved_bytes")) +
                            (r.value("above_ceiling", false)
                                 ? ", above the recommended ceiling of " + format_bytes(ceiling) +
                                       " (nothing stayed under it: it fits the cap with less "
                                       "than the margin kept free)."
                                 : ", under the recommended ceiling of " + format_bytes(ceiling) + ".");
    }
    if (e.contains("measured")) {
      const json& m = e.at("measured");
      json mv = {{"title", m.at("where")},
                 {"headers",
                  {"technique", "largest batch (measured)", "first OOM (measured)",
                   "largest batch (predicted, same cap)", "first OOM (predicted, same cap)",
                   "peak reserved (measured)", "tokens/s (measured)", "probes", "agreement"}},
                 {"rows", json::array()}};
      for (const json& row : m.at("rows"))
        mv["rows"].push_back(
            {row.at("technique"), int_cell(row.at("measured_largest"), "none"),
             int_cell(row.at("measured_first_oom")), int_cell(row.at("predicted_largest"), "none"),
             int_cell(row.at("predicted_first_oom")), bytes_cell(row.at("measured_peak_reserved_bytes")),
             row.at("tokens_per_s").is_number() ? fixed(row.at("tokens_per_s").get<double>(), 0) : "",
             int_cell(row.at("probes")),
             row.at("agree").get<bool>() ? "agree" : "differ: " + row.at("why").get<std::string>()});
      v["measured"] = mv;
    }
    view["entries"].push_back(v);
  }
  if (d.contains("catalogue")) view["catalogue"] = catalogue_view(d);
  return view;
}

std::string card_markdown(const json& d) {
  const json view = table_view(d);
  // The tables go through the one table builder, which escapes their cells.
  Document doc;
  summary_section(doc, d, view);
  entry_sections(doc, view);
  if (d.contains("catalogue")) catalogue_section(doc, d);
  return card_header(d) + "\n" + doc.markdown();
}

}  // namespace sweep::reports
