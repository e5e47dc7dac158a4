// The recommendation analysis: rows -> per-model choices under one memory budget.
// A row fits when it ran with no OOM and its peak *reserved* bytes (not allocated:
// fragmentation is real) are at most the cap; it is recommended only under the recommended
// ceiling (the one rule, fit_rule.h). When nothing fits, the walk over changes follows the order the
// Hugging Face single-GPU training guide and PyTorch's memory notes give: mixed precision,
// activation checkpointing, smaller micro-batch with more accumulation, lighter optimizer.
#include "reports/recommend/recommend.h"

#include "reports/common/device_parts.h"
#include "reports/common/fidelity.h"
#include "reports/common/pick.h"
#include "reports/recommend/recommend_rows.h"
#include "reports/results/stats.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

namespace sweep::reports {
namespace {

using recommend_internal::measure_all;
using recommend_internal::Measured;
using recommend_internal::OnTarget;
using recommend_internal::target_of;
using schema::column;

int64_t as_int(const Row& r, std::size_t col, int64_t fallback) {
  auto v = r.number(col);
  return v ? std::llround(*v) : fallback;
}

Measured measure(const Row& r) {
  Measured m;
  m.row = &r;
  Choice& c = m.choice;
  c.mode = r.value<Mode>().value_or(c.mode);
  c.precision = r.value<Precision>().value_or(c.precision);
  c.checkpointing = r.value<Checkpointing>().value_or(c.checkpointing);
  c.optimizer = r.value<OptimizerKind>();
  c.alloc_conf = r.at(column("alloc_conf"));
  if (const auto a = r.value<Adapter>(); a != Adapter::kNone)
    c.adapter =
        to_string(a) + (r.at(column("lora_r")).empty() ? "" : " r" + r.at(column("lora_r")));
  // 8-bit base weights go with the adapter (the config trains them only under LoRA): "lora r8
  // on int8 weights" is a technique and a configuration of its own.
  if (const auto w = r.value<Weights>(); w != Weights::kFull)
    c.adapter += (c.adapter.empty() ? "" : " on ") + to_string(w) + " weights";
  read_flags(r, c);
  c.offload = r.value<Offload>().value_or(c.offload);
  c.batch = as_int(r, column("batch"), 0);
  c.accumulation = as_int(r, column("accumulation"), 1);
  c.tokens_per_s = r.number(column("tokens_per_s")).value_or(0);
  c.step_ms_cv = r.number(column("step_ms_cv")).value_or(0);
  c.status = r.status;
  c.measured_on = r.at(column("device_name"));
  c.where = r.source + ":" + std::to_string(r.line);
  c.setup = setup_of(r);
  c.cells = technique_cells(r);
  c.configuration = to_string(c.mode) + '\x1f' + configuration_key(cells_of(c.cells), {"accumulation"});
  auto peak = r.number(column("peak_reserved_bytes"));
  c.peak_reserved_bytes = peak ? std::llround(*peak) : 0;
  m.ok = c.status == Status::kOk && peak.has_value();
  // An emulated row predicts a CUDA card: it counts as one, but measured nothing.
  c.predicted = r.value<Device>() == Device::kEmulated;
  m.cuda = r.value<Device>() == Device::kCuda || c.predicted;
  m.device_memory = r.number(column("device_memory_bytes"));
  auto used = r.number(column("device_used_bytes"));
  if (c.predicted) {
    const auto card = parse_card_cell(r.at(column("card")));
    m.card = predicted_card(r).value_or("");
    if (card) m.card_context = static_cast<double>(card->context_bytes);
    if (!m.device_memory && card) m.device_memory = static_cast<double>(card->memory_bytes);
  } else if (m.cuda && m.ok && used) {
    m.context = std::max(0.0, *used - *peak);
  }
  m.emulated = r.number(column("budget_emulated")).value_or(0) == 1;
  m.budget = as_int(r, column("budget_bytes"), 0);
  m.limit = m.budget > 0 ? std::optional<double>(static_cast<double>(m.budget)) : m.device_memory;
  for (auto col : {column("model"), column("seq"), column("target_seq"), column("audio_s")})
    m.group += r.at(col) + '\x1f';
  return m;
}


// Every axis but the batch and accumulation (which barely moves the peak): the mode and each
// technique axis and LoRA setting (schema::kAxes).
bool same_configuration(const Choice& x, const Choice& y) {
  return x.configuration == y.configuration;
}

// A choice as the one pick (common/pick.h) sees it. Accumulation is not counted as a change
// there: the pick prefers the largest micro-batch (the fewest accumulation steps) itself.
Candidate candidate_of(const Choice& c) {
  return {c.technique(), c.techniques() - (c.accumulation > 1), c.batch, c.accumulation,
          c.tokens_per_s, c.step_ms_cv, static_cast<double>(c.peak_reserved_bytes), c.predicted,
          c.inferred, c.on_target, c.where};
}

// The pick's order by speed (on the target, throughput, measured before inferred, lower peak,
// fewer techniques, a stable order), for the orders this file lists choices in.
bool ranks_before(const Choice& a, const Choice& b) {
  return ranks_by_speed(candidate_of(a), candidate_of(b));
}

// The largest batch; among equal batches the one that ranks first.
std::optional<Choice> largest_batch(const std::vector<Choice>& v) {
  if (v.empty()) return std::nullopt;
  return *std::min_element(v.begin(), v.end(), [](const Choice& x, const Choice& y) {
    return x.batch != y.batch ? x.batch > y.batch : ranks_before(x, y);
  });
}

// The recommendation among candidates that fit the cap, by the one pick (common/pick.h); why
// it is not simply the fastest, and whether nothing was under the ceiling. Only timed
// candidates are ranked by speed; where none is, predicted ones by memory; on the CPU every
// one by memory. On a card without bf16 tensor cores (bf16 false) no bf16 or bf16-amp.
std::optional<Choice> recommended(const std::vector<Choice>& v, const FitRule& rule, bool bf16,
                                  std::string* why, bool* above_ceiling) {
  std::vector<Choice> kept;
  for (const auto& c : v)
    if ((!rule.cuda || c.tokens_per_s > 0 || c.predicted) &&
        (bf16 || (c.precision != Precision::kBf16 && c.precision != Precision::kBf16Amp)))
      kept.push_back(c);
  std::vector<Candidate> candidates;
  for (const auto& c : kept) candidates.push_back(candidate_of(c));
  const auto p = pick(candidates, {rule});
  if (!p) return std::nullopt;
  if (above_ceiling) *above_ceiling = p->above_ceiling;
  if (why && !rule.cuda)
    *why = "ranked by memory, not throughput: on the CPU step times say nothing about a GPU "
           "and vary with the host's load, so the configuration with the fewest changes from "
           "plain training that fits, at its largest batch, is recommended";
  else if (why)
    *why = p->note;
  return kept[p->index];
}

// What rows of one group look like under one card's rule.
struct Budgeted {
  std::vector<Measured> rows;  // the group's rows, on_target set
  FitRule rule;
  bool bf16 = true;  // false: the card has no bf16 tensor cores (T4, V100)
  bool fits(const Measured& m) const {
    return rule.fits(m.ok, static_cast<double>(m.choice.peak_reserved_bytes));
  }
  bool recommendable(const Measured& m) const {
    return rule.recommendable(m.ok, static_cast<double>(m.choice.peak_reserved_bytes));
  }
  std::vector<Choice> fitting(const std::function<bool(const Measured&)>& keep,
                              bool under_ceiling = false) const {
    std::vector<Choice> out;
    for (const auto& m : rows)
      if ((under_ceiling ? recommendable(m) : fits(m)) && keep(m)) out.push_back(m.choice);
    return out;
  }
  // The recommendation: under the ceiling; else (above_ceiling set) what fits the cap.
  std::optional<Choice> fastest(bool* above_ceiling = nullptr, std::string* why = nullptr) const {
    auto train = [](const Measured& m) { return m.train(); };
    return recommended(fitting(train), rule, bf16, why, above_ceiling);
  }
};

Budgeted budgeted(const std::vector<const Measured*>& rows, const FitRule& rule,
                  const OnTarget& on, bool bf16 = true) {
  Budgeted b;
  b.rule = rule;
  b.bf16 = bf16;
  for (const auto* m : rows) {
    b.rows.push_back(*m);
    b.rows.back().choice.on_target = on(*m);
  }
  return b;
}

// The "nothing fits" walk: step k may use the first k changes; accumulation is free
// throughout (it barely moves the peak).
struct Change {
  const char* name;
  std::function<bool(const Choice&, int64_t ref_batch)> uses;
};

const std::vector<Change>& changes() {
  static const std::vector<Change> c = {
      {"+ mixed precision",
       [](const Choice& x, int64_t) { return x.precision != Precision::kFp32; }},
      {"+ activation checkpointing",
       [](const Choice& x, int64_t) { return x.checkpointing != Checkpointing::kNone; }},
      {"+ smaller micro-batch, more accumulation",
       [](const Choice& x, int64_t ref) { return x.batch < ref; }},
      {"+ lighter optimizer",
       [](const Choice& x, int64_t) {
         return x.optimizer == OptimizerKind::kSgd || x.optimizer == OptimizerKind::kAdafactor;
       }},
      {"+ allocator setting", [](const Choice& x, int64_t) { return !x.alloc_conf.empty(); }},
  };
  return c;
}

void walk_closest(const Budgeted& b, GroupRecommendation& g) {
  int64_t ref = 0;
  bool any_alloc = false;
  for (const auto& m : b.rows)
    if (m.ok && m.train()) {
      ref = std::max(ref, m.choice.batch);
      any_alloc |= !m.choice.alloc_conf.empty();
    }
  if (ref == 0) return;
  const auto& ch = changes();
  const std::size_t steps = ch.size() - (any_alloc ? 0 : 1);
  int64_t closest = 0;
  for (std::size_t k = 0; k <= steps; ++k) {
    ClosestStep s{k == 0 ? "as measured" : ch[k - 1].name, std::nullopt};
    for (const auto& m : b.rows) {
      if (!m.ok || !m.train()) continue;
      bool allowed = true;
      for (std::size_t j = k; j < ch.size(); ++j) allowed &= !ch[j].uses(m.choice, ref);
      if (!allowed) continue;
      const Choice& c = m.choice;
      if (!s.best || c.peak_reserved_bytes < s.best->peak_reserved_bytes ||
          (c.peak_reserved_bytes == s.best->peak_reserved_bytes && ranks_before(c, *s.best)))
        s.best = c;
    }
    if (s.best && (g.closest_step < 0 || s.best->peak_reserved_bytes < closest)) {
      g.closest_step = static_cast<int>(g.steps.size());
      closest = s.best->peak_reserved_bytes;
    }
    g.steps.push_back(s);
  }
}

// The way to an effective batch of n (micro-batch x accumulation), into g.effective; `why` as
// for the headline (recommended()).
void effective_batch(const Budgeted& b, int64_t n, GroupRecommendation& g, std::string* why) {
  std::vector<Choice> cand;
  auto same_axes = [](const Choice& x, const Choice& y) {
    return same_configuration(x, y) && x.batch == y.batch;
  };
  for (const auto& m : b.rows) {
    if (!b.recommendable(m) || !m.train() || (m.choice.tokens_per_s <= 0 && !m.choice.predicted &&
                                               b.rule.cuda))
      continue;
    const Choice& c = m.choice;
    if (c.batch * c.accumulation == n) cand.push_back(c);
    if (c.accumulation != 1 || c.batch <= 0 || n % c.batch != 0 || n == c.batch) continue;
    // A measured row at that accumulation (whatever its status) beats inferring it.
    bool measured = std::any_of(b.rows.begin(), b.rows.end(), [&](const Measured& o) {
      return same_axes(o.choice, c) && o.choice.accumulation == n / c.batch;
    });
    if (measured) continue;
    Choice inferred = c;
    inferred.accumulation = n / c.batch;
    inferred.inferred = true;
    cand.push_back(inferred);
  }
  g.effective = recommended(cand, b.rule, b.bf16, why, nullptr);
}

void eval_checks(const Budgeted& b, GroupRecommendation& g) {
  auto is_eval = [](const Measured& m) { return m.choice.mode == Mode::kEval; };
  g.eval_max_batch = largest_batch(b.fitting(is_eval));
  if (!g.fastest) return;
  const Choice& f = *g.fastest;
  const Measured* found = nullptr;
  for (const auto& m : b.rows) {
    const Choice& c = m.choice;
    if (!is_eval(m) || c.precision != f.precision || c.batch != f.batch ||
        c.alloc_conf != f.alloc_conf)
      continue;
    // Prefer the target's own row, then one that ran.
    auto score = [](const Measured& x) { return x.choice.on_target * 2 + x.ok; };
    if (!found || score(m) > score(*found)) found = &m;
  }
  if (!found) {
    g.eval_check = "not measured";
    return;
  }
  g.eval_counterpart = found->choice;
  if (found->ok)
    g.eval_check = b.fits(*found) ? "fits" : "does not fit";
  else
    g.eval_check = to_string(found->choice.status);
}

// Where the configuration's measured peaks (peak reserved vs batch; the higher one where a
// batch was measured at several accumulations) meet the cap, by the max-batch search's own
// extrapolation (reports::batch_at_budget); only a batch beyond the largest measured one is
// a prediction.
std::optional<int64_t> predicted_batch(const Budgeted& b, const Choice& c) {
  std::map<int64_t, double> peaks;
  for (const auto& m : b.rows)
    if (m.ok && same_configuration(m.choice, c) && m.choice.peak_reserved_bytes > 0)
      peaks[m.choice.batch] = std::max(peaks[m.choice.batch], static_cast<double>(m.choice.peak_reserved_bytes));
  const auto at = batch_at_budget(peaks, static_cast<double>(b.rule.cap_bytes()));
  if (!at || *at <= c.batch || *at > 1'000'000'000) return std::nullopt;
  return at;
}

// Marks a largest batch bounded when a larger batch of its configuration was measured not to
// fit; otherwise predicts where the limit is.
void bound(const Budgeted& b, Choice& c) {
  for (const Measured& m : b.rows)
    if (same_configuration(m.choice, c) && m.choice.batch > c.batch &&
        m.exceeds(b.rule.cap_bytes()) && (!c.first_over || m.choice.batch < *c.first_over))
      c.first_over = m.choice.batch;
  c.bounded = c.first_over.has_value();
  if (!c.bounded) c.predicted_batch = predicted_batch(b, c);
}

// The flags' order: each at its plain value first ("0"), then off it ("1").
std::string flags_order(const TechniqueFlags& f) {
  std::string order;
  for (const auto& a : schema::kAxes)
    if (const std::string cell = f.cell(a.column); !cell.empty()) order += is_plain(a, cell) ? '0' : '1';
  return order;
}

// The report's technique order: precision, checkpointing (none first), optimizer, then the
// rest of the label.
bool technique_order(const Choice& x, const Choice& y) {
  auto key = [](const Choice& c) {
    return std::make_tuple(static_cast<int>(c.precision), static_cast<int>(c.checkpointing),
                           c.optimizer ? static_cast<int>(*c.optimizer) : -1, c.adapter,
                           c.offload, flags_order(c), c.alloc_conf);
  };
  return key(x) < key(y);
}

// The largest batch that fits the cap, per technique.
void max_batch_per_technique(const Budgeted& b, GroupRecommendation& g) {
  std::vector<Choice> seen;
  for (const auto& m : b.rows)
    if (m.train() && std::none_of(seen.begin(), seen.end(), [&](const Choice& c) {
          return same_configuration(c, m.choice);
        }))
      seen.push_back(m.choice);
  std::stable_sort(seen.begin(), seen.end(), technique_order);
  for (const Choice& t : seen) {
    auto c = largest_batch(
        b.fitting([&](const Measured& m) { return m.train() && same_configuration(m.choice, t); }));
    if (!c) continue;
    bound(b, *c);
    g.max_batch.push_back(*c);
  }
  if (g.eval_max_batch) bound(b, *g.eval_max_batch);
}

// The `sweep fit` command that measures a group's limit on the target.
std::string measure_command(const GroupRecommendation& g, const Target& t) {
  std::ostringstream s;
  s << "sweep fit " << g.model;
  if (t.gpu)
    s << " --gpu " << t.gpu->key;
  else
    s << " --memory-gib " << std::setprecision(4) << static_cast<double>(t.memory_bytes) / kGiB;
  if (!g.seq.empty()) s << " --seq " << g.seq;
  if (!g.target_seq.empty()) s << " --target-seq " << g.target_seq;
  if (!g.audio_s.empty()) s << " --audio-s " << g.audio_s;
  if (t.margin != kDefaultMargin) s << " --margin " << t.margin;
  if (!t.cuda) s << " --device cpu";
  return s.str();
}

std::string join(const std::set<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> notes_for(const Recommendation& r, const std::vector<Measured>& rows,
                                   const OnTarget& on_target, bool default_target) {
  std::vector<std::string> notes;
  const std::string devices = join({r.measured_on.begin(), r.measured_on.end()});
  std::set<std::string> elsewhere;
  for (const auto& m : rows)
    if (m.ok && m.train() && !on_target(m)) elsewhere.insert(m.choice.measured_on);
  if (r.other_card && !r.target.cuda)
    notes.push_back("Recommending for " + r.target.name + " of CPU memory from rows measured on " +
                    join(elsewhere) +
                    " with another memory size: a configuration's peak on the CPU is what "
                    "PyTorch allocates for it, whatever the host's RAM, so the peaks hold; the "
                    "throughput is the measuring host's.");
  else if (r.other_card)
    notes.push_back("Recommending for " + r.target.name + " from rows measured on " +
                    join(elsewhere) +
                    ": memory transfers between GPUs, throughput does not. Configurations are "
                    "ranked by the throughput measured there; run the sweep on " +
                    r.target.name + " for its own numbers.");
  if (r.measured_on.size() > 1)
    notes.push_back("Rows from " + std::to_string(r.measured_on.size()) + " devices are pooled (" +
                    devices + "); rows measured on the target rank first.");
  int emulated = 0;
  int64_t budget = 0;
  for (const auto& m : rows) {
    if (!m.emulated) continue;
    ++emulated;
    budget = m.budget;
  }
  if (emulated > 0)
    notes.push_back(std::to_string(emulated) + " rows were measured under an emulated budget (" +
                    format_bytes(static_cast<double>(budget)) +
                    "): their peaks are used as measured, their throughput is the measuring "
                    "card's." +
                    (default_target ? " To recommend for the emulated card, pass --gpu NAME or "
                                      "--memory-gib N."
                                    : ""));
  const auto on_cpu = std::count_if(rows.begin(), rows.end(), [](auto& m) { return m.ok && !m.cuda; });
  if (on_cpu > 0 && (r.target.gpu || r.target.cuda))
    notes.push_back(std::to_string(on_cpu) + " rows were measured on the CPU: their memory is what "
                    "PyTorch allocates for that configuration (the CUDA context and the caching "
                    "allocator's rounding are not in it), their throughput is the CPU's and says "
                    "nothing about a GPU's. Run the sweep on a GPU for GPU answers.");
  if (!r.predicted_cards.empty())
    notes.push_back(
        "Rows " + r.predicted_line() +
        ": the memory CUDA's caching allocator would hold on that card, worked out without it, "
        "and, where a row has one, tokens/s predicted from the card's datasheet by the step-time "
        "model (docs/fidelity.md, \"Step time\"). Configurations are ranked by predicted speed "
        "where one leads by more than that model's measured error, otherwise ranked by memory "
        "(the fewest changes from plain training that fit, then the largest batch). Measure on "
        "the card itself for its throughput.");
  if (!r.predicted_cards.empty()) {
    std::set<std::string> families;
    for (const auto& m : rows)
      if (m.choice.predicted) families.insert(m.row->at(column("family")));
    for (const auto& f : families) notes.push_back(measured_error_line(f));
  }
  if (std::none_of(rows.begin(), rows.end(), [](auto& m) { return m.ok && m.train(); }))
    notes.push_back(
        "No train row ran ok: nothing to recommend. Check the results' status and "
        "message columns.");
  return notes;
}

}  // namespace

std::string Recommendation::predicted_line() const {
  std::string cards;
  for (const auto& c : predicted_cards) cards += (cards.empty() ? "" : ", ") + c;
  return cards.empty() ? "" : predicted_by(cards);
}

TrainerArgs Choice::trainer_args() const {
  TrainingSetup s = setup;
  s.batch = batch;
  s.accumulation = accumulation;
  return reports::trainer_args(s);
}

int Choice::techniques() const {
  // Each technique axis off its plain value (8-bit or 4-bit base weights a change of their
  // own, as fit counts them); the accumulation this choice's own.
  return changes_but(cells_of(cells), {"accumulation"}) + (accumulation > 1);
}

bool Choice::noisy() const { return step_ms_cv > kNoisyStepCv; }

namespace {
// The parts of a configuration's label before and after its batch.
std::string label_head(const Choice& c) {
  std::string s = to_string(c.precision) + ", ";
  if (c.mode == Mode::kEval) return s;
  return s + (c.checkpointing == Checkpointing::kNone ? "no checkpointing"
                                                      : to_string(c.checkpointing) + " checkpointing");
}
std::string label_tail(const Choice& c) {
  if (c.mode == Mode::kEval) return " (eval)";
  std::string s = ", " + to_string(c.optimizer);
  if (!c.alloc_conf.empty()) s += ", alloc_conf " + c.alloc_conf;
  // The technique's named axes this label does not say its own way, as reports name them.
  s += name_tail(cells_of(c.cells), ", ", false, {"alloc_conf", "adapter", "weights", "offload"});
  if (!c.adapter.empty()) s += ", " + c.adapter;
  if (c.offload != Offload::kNone) s += ", offload " + to_string(c.offload);
  return s;
}
}  // namespace

std::string Choice::label() const {
  std::string batch_text = (mode == Mode::kEval ? "" : ", ") + std::string("batch ") + std::to_string(batch);
  if (accumulation > 1 && mode != Mode::kEval) batch_text += " x " + std::to_string(accumulation);
  return label_head(*this) + batch_text + label_tail(*this);
}

std::string Choice::technique() const {
  return mode == Mode::kEval ? to_string(precision) + " (eval)" : label_head(*this) + label_tail(*this);
}

std::string GroupRecommendation::no_pick() const {
  if (fastest) return "";
  if (train_failed > 0)
    return "no answer: " + std::to_string(train_failed) + " of " + std::to_string(train_rows) +
           " train rows did not run (" + failure +
           "), and a search stopped that way says nothing about what fits";
  return "nothing fits the cap";
}

std::string GroupRecommendation::label() const {
  std::string axes;
  auto add = [&](const std::string& name, const std::string& v, const char* unit) {
    if (!v.empty()) axes += (axes.empty() ? "" : ", ") + name + " " + v + unit;
  };
  add("seq", seq, "");
  add("target_seq", target_seq, "");
  add("audio", audio_s, " s");
  return axes.empty() ? model : model + " (" + axes + ")";
}

namespace recommend_internal {

std::vector<Measured> measure_all(const std::vector<Results>& results) {
  std::vector<Measured> rows;
  // The row that counts for each point (after a --force re-run, the new one), as in
  // `sweep report` and `sweep compare`.
  for (const auto& res : results)
    for (const Row* row : latest_per_point(res).rows) rows.push_back(measure(*row));
  return rows;
}

}  // namespace recommend_internal

namespace {

// Cross-GPU columns: the table's cards that could hold the smallest measured peak, one
// column per memory size; their context is the target's (or CUDA's default).
void add_columns(Recommendation& r, int64_t smallest_peak) {
  r.column_context_bytes = r.target.cuda ? r.target.context_bytes : kDefaultCudaContextBytes;
  // None for the CPU: its rows' peaks leave out what CUDA adds (context, allocator rounding).
  for (const auto& spec : gpus()) {
    auto mem = memory_bytes(spec);
    if (smallest_peak < 0 || mem < smallest_peak || !r.target.cuda) continue;
    if (r.columns.empty() || r.columns.back().rule.memory_bytes != mem)
      r.columns.push_back(
          {"", {}, FitRule{mem, r.column_context_bytes, r.target.margin, true, ""}});
    auto& c = r.columns.back();
    c.name += (c.name.empty() ? "" : " / ") + std::string(spec.name);
    c.gpus.push_back(&spec);
  }
}

// One group's recommendation on the target (and for an effective batch), and its cells of the
// cross-GPU columns.
void add_group(Recommendation& r, const std::vector<const Measured*>& members,
               const RecommendOptions& options, const OnTarget& on_target) {
  const Row& first = *members.front()->row;
  GroupRecommendation g;
  g.model = first.at(column("model"));
  g.seq = first.at(column("seq"));
  g.target_seq = first.at(column("target_seq"));
  g.audio_s = first.at(column("audio_s"));
  for (const auto* m : members) {
    g.train_rows += m->train();
    g.train_ok += m->train() && m->ok;
    if (m->train() && !m->ok && !m->oom() && m->choice.status != Status::kOk) {
      if (g.train_failed++ == 0)
        g.failure = to_string(m->choice.status) + ": " + m->row->at(column("message")) + " (" +
                    m->choice.where + ")";
    }
  }
  Budgeted b = budgeted(members, r.target, on_target,
                        !r.target.gpu || has_bf16_tensor_cores(*r.target.gpu));
  g.fastest = b.fastest(&g.above_ceiling, &g.headline_note);
  if (options.effective_batch) {
    std::string why;
    effective_batch(b, *options.effective_batch, g, &why);
    // One question, one answer: asked for an effective batch, the headline (and the Trainer
    // arguments printed for it) is the way to it, as fit's is; its candidates all stay
    // under the recommended ceiling.
    if (g.effective) {
      g.fastest = g.effective;
      g.above_ceiling = false;
      g.headline_note = why;
    }
  }
  if (r.has_eval) eval_checks(b, g);
  max_batch_per_technique(b, g);
  g.limit_reached = std::any_of(members.begin(), members.end(), [&](const Measured* m) {
    return m->train() && m->exceeds(r.target.cap_bytes());
  });
  g.measure_command = measure_command(g, r.target);
  if (!g.fastest) walk_closest(b, g);
  r.groups.push_back(std::move(g));

  auto& cells = r.cells.emplace_back();
  auto& covered = r.covered.emplace_back();
  for (const auto& col : r.columns) {
    auto on_column = [&col](const Measured& m) {
      const GpuSpec* s = find_gpu(m.choice.measured_on);
      return std::find(col.gpus.begin(), col.gpus.end(), s) != col.gpus.end();
    };
    covered.push_back(std::any_of(members.begin(), members.end(), [&](const Measured* m) {
      return m->train() && m->exceeds(col.rule.cap_bytes());
    }));
    cells.push_back(covered.back() ? budgeted(members, col.rule, on_column).fastest()
                                   : std::nullopt);
  }
}

}  // namespace

Recommendation recommend(const std::vector<Results>& results, const RecommendOptions& options) {
  const std::vector<Measured> rows = measure_all(results);
  Recommendation r;
  OnTarget on_target;
  r.target = target_of(rows, options, on_target);
  r.effective_batch = options.effective_batch;

  std::set<std::string> devices;
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Measured*>> groups;
  int64_t smallest_peak = -1;
  for (const auto& m : rows) {
    if (!m.choice.measured_on.empty()) devices.insert(m.choice.measured_on);
    if (m.ok && m.train()) {
      r.other_card |= !on_target(m);
      if (smallest_peak < 0 || m.choice.peak_reserved_bytes < smallest_peak)
        smallest_peak = m.choice.peak_reserved_bytes;
    }
    r.has_eval |= m.choice.mode == Mode::kEval;
    auto& g = groups[m.group];
    if (g.empty()) order.push_back(m.group);
    g.push_back(&m);
  }
  r.measured_on.assign(devices.begin(), devices.end());
  for (const auto& m : rows)
    if (m.choice.predicted && !m.card.empty() &&
        std::find(r.predicted_cards.begin(), r.predicted_cards.end(), m.card) ==
            r.predicted_cards.end())
      r.predicted_cards.push_back(m.card);

  add_columns(r, smallest_peak);
  for (const auto& key : order) add_group(r, groups[key], options, on_target);
  r.notes = notes_for(r, rows, on_target, options.gpu.empty() && !options.memory_gib);
  return r;
}

}  // namespace sweep::reports
