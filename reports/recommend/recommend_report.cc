// Printing recommendations: every output line is a Choice in a role (fastest, max-batch,
// ...); one field list turns those into CSV and Markdown. Plus the `recommend` command.
#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reports/common/device_parts.h"
#include "reports/common/markup.h"
#include "reports/recommend/recommend.h"
#include "reports/results/files.h"

namespace sweep::reports {
namespace {

constexpr const char* kNotMeasured =
    "not measured: every measured configuration fits this card, so its limit was never reached";

// A Choice in a role, for one target budget.
struct Line {
  std::string kind;  // fastest (timed) | recommended (ranked by memory) | nothing-fits |
                     // no-answer | closest-step | max-batch | effective-batch |
                     // eval-max-batch | eval-counterpart | cross-gpu
  std::string target;
  const FitRule* rule = nullptr;  // the card's cap and recommended ceiling
  const GroupRecommendation* group = nullptr;
  std::optional<Choice> choice;
  std::string note;
};

std::string rate(double v) { return fixed(v, v >= 100 ? 0 : 1); }

template <typename F>
std::string with_choice(const Line& l, F f) {
  return l.choice ? f(*l.choice) : std::string();
}

struct OutField {
  std::string_view name;   // CSV header
  std::string_view title;  // Markdown header
  std::function<std::string(const Line&)> get;
  std::function<std::string(const Line&)> shown = {};  // Markdown text, when not get's number
};

// A size for people: MiB under 1 GiB, with its unit (the CSV keeps GiB numbers).
std::string size_text(int64_t bytes) { return format_bytes(static_cast<double>(bytes)); }

// What a line's headroom is measured to: the recommended ceiling for a recommendation, the cap
// for a largest batch that fits (fit_rule.h).
bool recommendation_kind(const Line& l) {
  return l.kind == "fastest" || l.kind == "recommended" || l.kind == "effective-batch" ||
         l.kind == "cross-gpu";
}
int64_t limit_of(const Line& l) {
  return recommendation_kind(l) ? l.rule->ceiling_bytes() : l.rule->cap_bytes();
}

// clang-format off
const std::vector<OutField> kFields = {
  {"target", "target", [](const Line& l) { return l.target; }},
  {"cap_gib", "cap", [](const Line& l) { return gib(static_cast<double>(l.rule->cap_bytes())); }, [](const Line& l) { return size_text(l.rule->cap_bytes()); }},
  {"ceiling_gib", "recommended ceiling", [](const Line& l) { return gib(static_cast<double>(l.rule->ceiling_bytes())); }, [](const Line& l) { return size_text(l.rule->ceiling_bytes()); }},
  {"kind", "kind", [](const Line& l) { return l.kind; }},
  {"model", "model", [](const Line& l) { return l.group->model; }},
  {"seq", "seq", [](const Line& l) { return l.group->seq; }},
  {"target_seq", "target_seq", [](const Line& l) { return l.group->target_seq; }},
  {"audio_s", "audio s", [](const Line& l) { return l.group->audio_s; }},
  {"configuration", "configuration", [](const Line& l) { return with_choice(l, [](auto& c) { return c.label(); }); }},
  {"mode", "mode", [](const Line& l) { return with_choice(l, [](auto& c) { return to_string(c.mode); }); }},
  {"precision", "precision", [](const Line& l) { return with_choice(l, [](auto& c) { return to_string(c.precision); }); }},
  {"checkpointing", "checkpointing", [](const Line& l) { return with_choice(l, [](auto& c) { return to_string(c.checkpointing); }); }},
  {"batch", "batch", [](const Line& l) { return with_choice(l, [](auto& c) { return std::to_string(c.batch); }); }},
  {"accumulation", "accumulation", [](const Line& l) { return with_choice(l, [](auto& c) { return std::to_string(c.accumulation); }); }},
  {"effective_batch", "effective batch", [](const Line& l) { return with_choice(l, [](auto& c) { return std::to_string(c.batch * c.accumulation); }); }},
  {"optimizer", "optimizer", [](const Line& l) { return with_choice(l, [](auto& c) { return to_string(c.optimizer); }); }},
  {"alloc_conf", "alloc_conf", [](const Line& l) { return with_choice(l, [](auto& c) { return c.alloc_conf; }); }},
  {"tokens_per_s", "tokens/s", [](const Line& l) { return with_choice(l, [](auto& c) { return c.tokens_per_s > 0 ? rate(c.tokens_per_s) : std::string(); }); },
   [](const Line& l) { return with_choice(l, [](auto& c) { return c.tokens_per_s > 0 ? rate(c.tokens_per_s) : c.predicted ? std::string("not measured") : std::string(); }); }},
  {"peak_reserved_gib", "peak reserved", [](const Line& l) { return with_choice(l, [](auto& c) { return c.status == Status::kOk ? gib(static_cast<double>(c.peak_reserved_bytes)) : std::string(); }); },
   [](const Line& l) { return with_choice(l, [](auto& c) { return c.status == Status::kOk ? size_text(c.peak_reserved_bytes) : std::string(); }); }},
  // Headroom is memory left, not batches: where no larger batch was measured not to fit, a note says so.
  {"headroom_gib", "headroom", [](const Line& l) { return with_choice(l, [&](auto& c) { return c.status == Status::kOk ? gib(static_cast<double>(limit_of(l) - c.peak_reserved_bytes)) : std::string(); }); },
   [](const Line& l) { return with_choice(l, [&](auto& c) { return c.status == Status::kOk ? size_text(limit_of(l) - c.peak_reserved_bytes) + (c.bounded ? "" : c.predicted ? " (larger batches not predicted)" : " (larger batches not measured)") : std::string(); }); }},
  {"status", "status", [](const Line& l) { return with_choice(l, [](auto& c) { return to_string(c.status); }); }},
  {"step_ms_cv", "step CV", [](const Line& l) { return with_choice(l, [](auto& c) { return c.step_ms_cv > 0 ? fixed(c.step_ms_cv, 3) : std::string(); }); }},
  {"inferred", "inferred", [](const Line& l) { return with_choice(l, [](auto& c) { return std::string(c.inferred ? "1" : "0"); }); }},
  {"predicted", "predicted", [](const Line& l) { return with_choice(l, [](auto& c) { return std::string(c.predicted ? "1" : "0"); }); }},
  {"predicted_batch", "predicted batch", [](const Line& l) { return with_choice(l, [](auto& c) { return c.predicted_batch ? std::to_string(*c.predicted_batch) : std::string(); }); }},
  {"measured_on", "measured on", [](const Line& l) { return with_choice(l, [](auto& c) { return c.measured_on; }); }},
  {"source", "source", [](const Line& l) { return with_choice(l, [](auto& c) { return c.where; }); }},
  {"note", "note", [](const Line& l) { return l.note; }},
};
// clang-format on

const OutField& field(std::string_view name) {
  for (const auto& f : kFields)
    if (f.name == name) return f;
  throw std::logic_error("recommend: no field " + std::string(name));
}

std::vector<Line> lines(const Recommendation& r) {
  std::vector<Line> out;
  const Target& t = r.target;
  for (std::size_t i = 0; i < r.groups.size(); ++i) {
    const auto& g = r.groups[i];
    auto add = [&](std::string kind, std::optional<Choice> c, std::string note = "") {
      out.push_back({std::move(kind), t.name, &t, &g, std::move(c), std::move(note)});
    };
    // A largest batch no OOM bounded is only the largest measured (or predicted).
    auto largest = [&](const std::optional<Choice>& c) -> std::string {
      if (!c || c->bounded) return "";
      const std::string how = c->predicted ? "predicted" : "measured";
      return "largest " + how + ", limit not reached" +
             (c->predicted_batch ? (c->predicted ? "; extrapolated" : "; predicted") +
                                       std::string(" to fit up to batch ") +
                                       std::to_string(*c->predicted_batch) + " (from the " + how +
                                       " peaks)"
                                 : std::string()) +
             "; " + (c->predicted ? "predict" : "measure") + " it: " + g.measure_command;
    };
    if (g.fastest) {
      std::string note =
          g.above_ceiling
              ? "above the recommended ceiling: nothing measured stays under it; this fits the "
                "cap, with less than the margin kept free"
              : "";
      if (!g.headline_note.empty())
        note += std::string(note.empty() ? "" : "; ") + g.headline_note;
      note +=
          g.limit_reached ? ""
                          : std::string(note.empty() ? "" : "; ") + "limit not reached: every measured configuration fits, a larger "
                            "batch may fit and be faster; measure it: " +
                                g.measure_command;
      if (g.fastest->predicted)
        note += std::string(note.empty() ? "" : "; ") +
                "predicted by emulation, not measured: ranked by predicted speed where one leads "
                "by more than the step-time model's measured error, otherwise ranked by memory "
                "(fewest changes from plain training, then the largest batch)";
      if (g.fastest->noisy() && r.target.cuda)
        note += std::string(note.empty() ? "" : "; ") + "noisy: its step time varied " +
                fixed(100 * g.fastest->step_ms_cv, 0) +
                "% between repetitions, so its rank by throughput is not reliable (measure again "
                "on an idle machine, or with more repetitions)";
      add(g.fastest->tokens_per_s > 0 ? "fastest" : "recommended", g.fastest, note);
    } else if (g.train_failed > 0) {
      add("no-answer", std::nullopt, g.no_pick());
    } else if (g.closest_step >= 0) {
      const auto& s = g.steps[static_cast<std::size_t>(g.closest_step)];
      add("nothing-fits", s.best, "nothing fits; closest measured (" + s.change + ")");
      for (const auto& step : g.steps) add("closest-step", step.best, step.change);
    } else {
      add("nothing-fits", std::nullopt,
          "no train row ran ok (" + std::to_string(g.train_rows) + " measured)");
    }
    for (const auto& c : g.max_batch) add("max-batch", c, largest(c));
    if (r.effective_batch)
      add("effective-batch", g.effective,
          !g.effective ? "no measured micro-batch reaches it and fits"
          : g.effective->predicted
              ? std::string(g.effective->inferred ? "inferred from the accumulation-1 row; " : "") +
                    "predicted by emulation, not measured"
          : g.effective->inferred ? "inferred: accumulation-1 row's memory and throughput"
                                  : "measured");
    if (r.has_eval) {
      add("eval-max-batch", g.eval_max_batch,
          g.eval_max_batch ? largest(g.eval_max_batch) : "no eval row fits");
      if (!g.eval_check.empty())
        add("eval-counterpart", g.eval_counterpart,
            "recommended train config in eval: " + g.eval_check);
    }
    for (std::size_t c = 0; c < r.columns.size(); ++c)
      out.push_back({"cross-gpu", r.columns[c].name, &r.columns[c].rule, &g, r.cells[i][c],
                     !r.covered[i][c] ? kNotMeasured : r.cells[i][c] ? "" : "nothing fits"});
  }
  return out;
}

// Columns shown even when every row agrees: what a reader looks for first.
bool key_column(std::string_view name) {
  return name == "model" || name == "configuration" || name == "tokens_per_s" ||
         name == "peak_reserved_gib" || name == "headroom_gib" || name == "note";
}

bool numeric(std::string_view name) {
  return name == "tokens_per_s" || name == "peak_reserved_gib" || name == "headroom_gib";
}

// A Markdown table of the named fields over the lines of `kinds`, through the shared
// table builder (columns that do not vary are said once under it).
std::string md_table(const std::vector<Line>& all, const std::vector<std::string_view>& kinds,
                     const std::vector<std::string_view>& names) {
  std::vector<std::string> headers;
  std::vector<Align> align;
  std::vector<bool> keep;
  for (auto n : names) {
    headers.emplace_back(field(n).title);
    align.push_back(numeric(n) ? Align::kRight : Align::kLeft);
    keep.push_back(key_column(n));
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : all) {
    if (std::find(kinds.begin(), kinds.end(), l.kind) == kinds.end()) continue;
    auto& row = rows.emplace_back();
    for (auto n : names) {
      const OutField& f = field(n);
      row.push_back(f.shown ? f.shown(l) : f.get(l));
    }
  }
  if (rows.empty()) return "Nothing fits.\n\n";
  return markdown_table(make_table(headers, align, keep, std::move(rows))) + "\n";
}


// The columns of the cross-GPU table some group's rows reach (cover): the others, where every
// measured row fits, say nothing about what is fastest there.
std::vector<std::size_t> measured_columns(const Recommendation& r) {
  std::vector<std::size_t> shown;
  for (std::size_t c = 0; c < r.columns.size(); ++c)
    for (std::size_t i = 0; i < r.groups.size(); ++i)
      if (r.covered[i][c]) {
        shown.push_back(c);
        break;
      }
  return shown;
}

std::string cross_gpu_table(const Recommendation& r) {
  const auto shown = measured_columns(r);
  if (shown.empty()) return "";
  std::vector<std::string> headers = {"model"};
  for (const std::size_t c : shown)
    headers.push_back(r.columns[c].name + " (" + size_text(r.columns[c].rule.memory_bytes) + ")");
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < r.groups.size(); ++i) {
    auto& row = rows.emplace_back(1, r.groups[i].label());
    for (const std::size_t c : shown) {
      const auto& cell = r.cells[i][c];
      row.push_back(!r.covered[i][c] ? "not measured"
                    : cell           ? cell->label() + " · " +
                                 (cell->predicted ? std::string("predicted")
                                                  : rate(cell->tokens_per_s) + " tokens/s")
                           : "nothing fits");
    }
  }
  std::vector<bool> keep(headers.size(), true);
  std::vector<Align> align(headers.size(), Align::kLeft);
  return markdown_table(make_table(headers, align, keep, std::move(rows))) + "\n";
}

}  // namespace

std::string recommendations_csv(const Recommendation& r) {
  std::string s;
  for (const auto& f : kFields) s += (s.empty() ? "" : ",") + std::string(f.name);
  s += "\n";
  for (const auto& l : lines(r)) {
    std::string row;
    for (const auto& f : kFields) row += (row.empty() ? "" : ",") + spreadsheet_field(f.get(l));
    s += row + "\n";
  }
  return s;
}

// Each pick as the user's training script sets it: Python to paste, under the model and length
// it answers for (what is no Trainer flag said in the code's comments).
std::string trainer_args_section(const Recommendation& r) {
  std::string s;
  bool sft = false;  // a pick ran TRL's SFTTrainer: its SFTConfig
  for (const auto& g : r.groups) {
    if (!g.fastest || g.fastest->mode != Mode::kTrain) continue;
    const TrainerArgs args = g.fastest->trainer_args();
    sft = sft || !args.trainer_code.empty();
    s += "**" + g.label() + "**: " + g.fastest->label() + " (" + precision_words(g.fastest->precision) +
         ")\n\n```python\n" + trainer_args_text(args) + "```\n\n";
  }
  return s.empty() ? s
                   : "## In your training script\n\nThe recommended configurations as Hugging Face "
                     "`TrainingArguments` (transformers 5.x)" +
                         std::string(sft ? ", or TRL's `SFTConfig` and `SFTTrainer` where the row ran SFTTrainer" : "") +
                         ", with what is no Trainer flag said in comments.\n\n" + s;
}

std::string recommendations_markdown(const Recommendation& r) {
  const Target& t = r.target;
  const auto all = lines(r);
  std::ostringstream s;
  s << "# Recommendations for " << t.name << " (" << size_text(t.memory_bytes)
    << (t.cuda ? "" : " of CPU memory") << ")"
    << (!r.predicted_cards.empty() ? ": " + r.predicted_line()
        : !r.part_label.empty()      ? ": " + r.part_label
                                     : std::string())
    << "\n\n"
    << "The rule, " << t.derivation(t.name) << "."
    << "\n\n";
  for (std::size_t i = 0; i < r.notes.size(); ++i)
    s << (i ? ">\n> " : "> ") << r.notes[i] << (i + 1 == r.notes.size() ? "\n\n" : "\n");
  std::vector<std::string_view> who = {"model", "seq", "target_seq", "audio_s", "configuration"};
  std::vector<std::string_view> numbers = {"tokens_per_s", "peak_reserved_gib", "headroom_gib"};
  auto cols = [&](std::vector<std::string_view> extra) {
    auto v = who;
    v.insert(v.end(), numbers.begin(), numbers.end());
    if (r.measured_on.size() > 1) v.push_back("measured_on");
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  s << (!r.predicted_cards.empty()
            ? "## Recommended configuration (predicted by emulation, not measured)\n\n"
        : !t.cuda ? "## Recommended configuration (CPU rows: ranked by memory)\n\n"
                  : "## Recommended configuration: the fastest under the recommended ceiling\n\n")
    << md_table(all, {"fastest", "recommended", "nothing-fits", "no-answer"}, cols({"note"}))
    << trainer_args_section(r);
  s << "## Largest batch that fits, per technique\n\n"
    << "Headroom here is what is left under the cap (" << size_text(t.cap_bytes()) << ").\n\n"
    << md_table(all, {"max-batch"}, cols({"note"}));
  if (r.effective_batch)
    s << "## Effective batch " << *r.effective_batch << "\n\n"
      << "Micro-batch x accumulation (x 1 GPU). Inferred rows take the accumulation-1 row's "
         "peak and throughput: accumulation barely changes either.\n\n"
      << md_table(all, {"effective-batch"}, cols({"note"}));
  if (r.has_eval)
    s << "## Evaluation\n\n"
      << md_table(all, {"eval-max-batch", "eval-counterpart"}, cols({"kind", "status", "note"}));
  for (const auto& g : r.groups) {
    if (g.fastest || g.closest_step < 0) continue;
    const auto& c = g.steps[static_cast<std::size_t>(g.closest_step)];
    std::vector<Line> steps;
    for (const auto& st : g.steps)
      steps.push_back({"closest-step", t.name, &t, &g, st.best, st.change});
    s << "## Nothing fits: " << g.label() << "\n\n"
      << "Nothing measured fits the cap of " << size_text(t.cap_bytes())
      << ". Closest: " << c.best->label() << " (" << c.change << "), "
      << size_text(c.best->peak_reserved_bytes - t.cap_bytes()) << " over. The lowest measured peak using the changes in the order the guides "
         "recommend, each on top of the ones before:\n\n"
      << md_table(steps, {"closest-step"},
                  {"note", "configuration", "tokens_per_s", "peak_reserved_gib", "headroom_gib"});
  }
  const auto shown = measured_columns(r);
  if (!shown.empty()) {
    std::string devices;
    for (const auto& d : r.measured_on) devices += (devices.empty() ? "" : ", ") + d;
    s << "## Across GPUs\n\n"
      << "The recommendation per card of the GPU table, by the same rule with a "
      << size_text(r.column_context_bytes)
      << " context allowance. Memory transfers between cards; the throughput is as measured"
      << (devices.empty() ? std::string() : " on " + devices)
      << (r.predicted_cards.empty() ? "" : " (predicted rows have none: \"predicted\" marks them)")
      << ". \"not measured\": every measured configuration fits that card, so the rows cannot "
         "say what is fastest on it (a larger batch, never run, may be); measure it with `sweep "
         "fit MODEL --gpu NAME`.\n\n"
      << cross_gpu_table(r);
    if (shown.size() < r.columns.size()) {
      std::string left;
      for (std::size_t c = 0; c < r.columns.size(); ++c)
        if (std::find(shown.begin(), shown.end(), c) == shown.end())
          left += (left.empty() ? "" : ", ") + r.columns[c].name;
      s << "Left out, nothing measured there (every measured configuration fits them): " << left
        << ".\n\n";
    }
  } else if (!r.columns.empty()) {
    s << "## Across GPUs\n\nNot measured: every measured configuration fits every larger card "
         "of the GPU table, so the rows cannot say what is fastest on one; measure it with `sweep "
         "fit MODEL --gpu NAME`.\n\n";
  }
  return s.str();
}

std::string default_out_dir(const std::string& results_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(fs::absolute(results_path, ec), ec);
  const fs::path dir = file.parent_path();
  for (fs::path at = dir; !at.empty(); at = at.parent_path()) {
    if (fs::exists(at / ".git", ec)) {
      const fs::path rel = fs::relative(dir, at, ec);
      if (!rel.empty() && *rel.begin() == "results") break;  // already under results/
      const std::string name = file.filename() == "results.csv" ? dir.filename().string()
                                                                 : file.stem().string();
      return (at / "results" / (name.empty() ? "report" : name)).string();
    }
    if (at == at.parent_path()) break;
  }
  const std::string beside = fs::path(results_path).parent_path().string();
  return beside.empty() ? "." : beside;
}

namespace {

// Markdown one heading level down, outside code blocks: a part's page as a section.
std::string nested(const std::string& md) {
  std::istringstream in(md);
  std::string line, out;
  bool code = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) code = !code;
    else if (!code && line.rfind('#', 0) == 0) line.insert(0, "#");
    out += line + "\n";
  }
  return out;
}

struct Outputs {
  std::string markdown, csv;
  nlohmann::json json;
};

// One device's rows (device_parts.h): the page as it always was.
Outputs one_part(const std::vector<Results>& results, const RecommendOptions& options) {
  const Recommendation r = recommend(results, options);
  return {recommendations_markdown(r), recommendations_csv(r), recommendations_json(r)};
}

// Rows of several devices: one section each, from its own rows; a part that cannot answer
// says why in its section (the others still answer).
Outputs several_parts(const std::vector<DevicePart>& parts, const RecommendOptions& options) {
  Outputs out;
  std::string labels;
  for (const auto& p : parts) labels += (labels.empty() ? "" : "; ") + p.label;
  out.markdown = "# Recommendations from " + std::to_string(parts.size()) +
                 " devices, one section each\n\nThese rows come from " +
                 std::to_string(parts.size()) + " devices (" + labels +
                 "). Each section answers from its own rows only: memory measured on a device "
                 "and memory predicted for a card by emulation are not pooled.\n\n";
  out.json = {{"sections", nlohmann::json::array()}};
  for (const auto& part : parts) {
    try {
      Recommendation r = recommend(part.results, options);
      r.part_label = part.label;
      out.markdown += nested(recommendations_markdown(r));
      const std::string csv = recommendations_csv(r);
      out.csv += out.csv.empty() ? csv : csv.substr(csv.find('\n') + 1);
      nlohmann::json j = recommendations_json(r);
      j["device"] = part.label;
      out.json["sections"].push_back(std::move(j));
    } catch (const UserError& e) {
      out.markdown += "## " + part.label + "\n\nNo recommendation from these rows: " +
                      e.what() + " (" + e.hint() + ").\n\n";
      out.json["sections"].push_back(
          {{"device", part.label}, {"error", e.what()}, {"hint", e.hint()}});
    }
  }
  return out;
}

int run_recommend(const std::vector<std::string>& inputs, const RecommendOptions& options,
                  std::string out_dir, bool json) {
  namespace fs = std::filesystem;
  std::vector<Results> results;
  for (const auto& in : inputs) results.push_back(read_results(in));
  const std::vector<DevicePart> parts = device_parts(results);
  const Outputs o = parts.size() == 1 ? one_part(results, options) : several_parts(parts, options);
  if (json) std::cout << o.json.dump(2) << "\n";
  else std::cout << o.markdown;
  if (out_dir.empty()) out_dir = default_out_dir(results.front().path);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  for (const auto& [name, text] : {std::pair{"recommendations.md", o.markdown},
                                   std::pair{"recommendations.csv", o.csv}}) {
    // The one install_file (files.h): a link planted at the name is replaced, not followed.
    install_file(fs::path(out_dir) / name, text, name, "", "check that --out names a writable directory");
  }
  std::cerr << "sweep recommend: wrote " << (fs::path(out_dir) / "recommendations.md").string()
            << " and recommendations.csv" << (json ? "" : " (printed above)") << "\n";
  return 0;
}

}  // namespace

CLI::Validator finite_number(double min, double max, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || p != text.data() + text.size() ||
            !(v >= min && v <= max))
          return "'" + text + "' is not " + what + " from " + number_text(min) + " to " +
                 number_text(max);
        return "";
      },
      number_text(min) + ".." + number_text(max), what);
}

CLI::Validator positive_number(double max, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || p != text.data() + text.size() || !(v > 0 && v <= max))
          return "'" + text + "' is not " + what + " above 0, up to " + number_text(max);
        return "";
      },
      "(0.." + number_text(max) + "]", what);
}

CLI::Validator whole_number(int64_t min, int64_t max, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < min || v > max)
          return "'" + text + "' is not " + what + " from " + std::to_string(min) + " to " + std::to_string(max);
        return "";
      },
      std::to_string(min) + ".." + std::to_string(max), what);
}

const CLI::Validator kMemoryGib = finite_number(0, kMaxMemoryGib, "a number of GiB");
const CLI::Validator kMargin = finite_number(0, 0.95, "a fraction");

std::function<void()> add_card_options(CLI::App* cmd, RecommendOptions& options) {
  struct Given {
    double memory_gib = 0, context_gib = 0;
  };
  auto given = std::make_shared<Given>();
  auto* gpu = cmd->add_option("--gpu", options.gpu,
                              "The card, from the GPU table (e.g. rtx3060, a100-80gb)");
  auto* mem = cmd->add_option("--memory-gib", given->memory_gib, "A card of this memory, as CUDA reports it")
                  ->check(kMemoryGib);
  gpu->excludes(mem);
  cmd->add_option("--margin", options.margin, "Fraction of the card's memory kept free")
      ->capture_default_str()
      ->check(kMargin);
  auto* ctx = cmd->add_option("--context-gib", given->context_gib,
                              "Memory outside the allocator (default: measured, else 0.5 on CUDA)")
                  ->check(kMemoryGib);
  return [given, mem, ctx, &options] {
    if (mem->count()) options.memory_gib = given->memory_gib;
    if (ctx->count()) options.context_gib = given->context_gib;
  };
}

void register_recommend_command(CLI::App& app, int& exit_code) {
  struct Args {
    std::vector<std::string> inputs;
    RecommendOptions options;
    int64_t effective_batch = 0;
    std::string out;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "recommend", "What fits a GPU's memory and which configuration is fastest, from results");
  cmd->add_option("results", a->inputs, "Results directories, or results CSV files (docs/tables/rtx3060-results.csv)")->required();
  auto card = add_card_options(cmd, a->options);
  auto* eff = cmd->add_option("--effective-batch", a->effective_batch,
                              "Micro-batch x accumulation to reach")
                  ->check(whole_number(1, int64_t{1} << 30, "a number of samples"));
  cmd->add_option("--out", a->out,
                  "where to write recommendations.md and .csv (default: beside the results, or "
                  "results/<name>/ when the results sit in a source tree outside results/)");
  cmd->add_flag("--json", a->json,
                "The recommendation as JSON on stdout (recommend_json_version 3) instead of Markdown");
  cmd->callback([a, eff, card, &exit_code] {
    card();
    RecommendOptions o = a->options;
    if (eff->count()) o.effective_batch = a->effective_batch;
    exit_code = run_guarded([&] { return run_recommend(a->inputs, o, a->out, a->json); });
  });
}

}  // namespace sweep::reports
