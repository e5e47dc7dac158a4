// One rule, one answer (issue 25): on the measured RTX 3060 rows (docs/tables/rtx3060-results.csv)
// fit's analysis, `sweep report` and `sweep recommend` give the same largest batch per technique,
// by the rule of reports/common/fit_rule.h (fits: no OOM, peak reserved at most the 11.00 GiB cap).
// To add a reader (the per-card tables), write a function returning its Answers and add it to
// readers() below; every reader is compared with fit's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reports/recommend/recommend.h"
#include "reports/tables/tables.h"
#include "reports/report/report.h"
#include "reports/results/rows.h"
#include "sweeps/cli/fit_analysis.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

const std::string kRows = std::string(SWEEP_SOURCE_DIR) + "/docs/tables/rtx3060-results.csv";
constexpr int64_t kCap = 11807293440;  // 11.75 GiB - 0.75 GiB: the budget the rows ran under

// "gpt2|bf16-amp|block|adamw" -> largest batch that fits.
using Answers = std::map<std::string, int64_t>;

std::string key(const std::string& model, const std::string& precision,
                const std::string& checkpointing, const std::string& optimizer) {
  return model + "|" + precision + "|" + checkpointing + "|" + optimizer;
}

// fit's analysis: the table's config expanded into its max-batch searches (as `sweep run
// configs/rtx3060-table.yaml --search max-batch` did), one technique each.
Answers from_fit(const reports::Results& results) {
  const Config cfg = load_config(std::string(SWEEP_SOURCE_DIR) + "/configs/rtx3060-table.yaml");
  RunSettings run{.device = Device::kCuda, .budget_bytes = kCap, .budget_emulated = true};
  Answers out;
  for (const Point& p : expand_grid(cfg, run)) {
    const FitTechnique t{p.precision, p.checkpointing, p.optimizer, true, p.adapter, p.offload,
                         p.weights};
    const Analysis a = analyse(results, {p}, {t});
    if (a.techniques.front().largest)
      out[key(p.model, to_string(p.precision), to_string(p.checkpointing),
              to_string(p.optimizer))] = *a.techniques.front().largest;
  }
  return out;
}

Answers from_recommendation(const reports::Recommendation& r) {
  Answers out;
  for (const auto& g : r.groups)
    for (const auto& c : g.max_batch)
      out[key(g.model, to_string(c.precision), to_string(c.checkpointing),
              to_string(c.optimizer))] = c.batch;
  return out;
}

Answers from_recommend(const reports::Results& results) {
  reports::RecommendOptions o;
  o.gpu = "rtx3060";
  return from_recommendation(reports::recommend({results}, o));
}

// `sweep report --gpu rtx3060`: the summary's table in report.md, read back.
Answers from_report(const reports::Results&) {
  const fs::path dir = testing::temp_dir("one_rule_report");
  reports::ReportOptions o;
  o.card.gpu = "rtx3060";
  EXPECT_EQ(reports::write_report(kRows, dir.string(), o), 0);
  std::ifstream in(dir / "report.md");
  Answers out;
  bool in_summary = true;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## About these results", 0) == 0) in_summary = false;
    // | gpt2 (seq 512) | bf16-amp, block checkpointing, adamw | 27 | 28 | ...
    if (!in_summary || line.rfind("| ", 0) != 0 || line.find(" checkpointing, ") == std::string::npos)
      continue;
    std::vector<std::string> cells;
    std::stringstream s(line.substr(2));
    for (std::string c; std::getline(s, c, '|');) cells.push_back(c.substr(0, c.find_last_not_of(' ') + 1).substr(c.find_first_not_of(' ')));
    const std::string model = cells[0].substr(0, cells[0].find(' '));
    const std::string& t = cells[1];  // "bf16-amp, no checkpointing, adamw"
    const auto a = t.find(", "), b = t.find(" checkpointing, ");
    const std::string ckpt = t.substr(a + 2, b - a - 2);
    out[key(model, t.substr(0, a), ckpt == "no" ? "none" : ckpt, t.substr(b + 16))] =
        std::stoll(cells[2]);
  }
  return out;
}

const std::vector<std::pair<std::string, std::function<Answers(const reports::Results&)>>>&
readers() {
  static const std::vector<std::pair<std::string, std::function<Answers(const reports::Results&)>>>
      r = {{"recommend --gpu rtx3060", from_recommend}, {"report --gpu rtx3060", from_report}};
  return r;
}

TEST(OneRule, FitReportAndRecommendAgreeOnTheRtx3060Rows) {
  const auto results = reports::read_results(kRows);
  const Answers fit = from_fit(results);
  ASSERT_EQ(fit.size(), 15u) << "the table has 15 techniques";
  // The table's two headline cells (docs/tables/rtx3060.md): the cap, not the margin, decides.
  EXPECT_EQ(fit.at("gpt2-medium|bf16-amp|block|adamw"), 14);
  EXPECT_EQ(fit.at("gpt2|fp32|none|adamw"), 11);
  for (const auto& [name, read] : readers()) {
    const Answers got = read(results);
    EXPECT_EQ(got, fit) << name << " disagrees with fit's analysis";
  }
}

TEST(OneRule, TheRowsBudgetIsTheRtx3060sCapAndTheCeilingKeepsTheMargin) {
  // No --gpu: every row ran under one emulated budget, read as the cap of the card it emulated.
  const auto r = reports::recommend({reports::read_results(kRows)}, {});
  EXPECT_EQ(r.target.name, "RTX 3060");
  EXPECT_EQ(r.target.cap_bytes(), kCap);
  EXPECT_EQ(from_recommendation(r), from_recommend(reports::read_results(kRows)));
  // The recommended ceiling: 11.75 GiB x 0.9 - the 0.75 GiB context, the same as --gpu's.
  reports::RecommendOptions o;
  o.gpu = "rtx3060";
  const auto with_gpu = reports::recommend({reports::read_results(kRows)}, o);
  EXPECT_EQ(r.target.ceiling_bytes(), with_gpu.target.ceiling_bytes());
  EXPECT_EQ(r.target.cap_bytes(), with_gpu.target.cap_bytes());
  EXPECT_EQ(r.target.ceiling_bytes(),
            static_cast<int64_t>(std::floor(11.75 * reports::kGiB * 0.9)) - (12616466432 - kCap));
  EXPECT_EQ(reports::format_bytes(static_cast<double>(r.target.cap_bytes())), "11.00 GiB");
  for (const auto& g : r.groups)
    if (g.fastest && !g.above_ceiling)
      EXPECT_LE(g.fastest->peak_reserved_bytes, r.target.ceiling_bytes()) << g.label();
}

// One pick (issue 33): what fit, recommend, report's summary and the per-card tables recommend
// comes from one function (reports/common/pick.h). "precision|checkpointing|optimizer|batch|acc".
using Picks = std::map<std::string, std::string>;  // model -> the pick

std::string pick_text(Precision p, Checkpointing c, std::optional<OptimizerKind> o, int64_t batch,
                      int64_t accumulation) {
  return to_string(p) + "|" + to_string(c) + "|" + (o ? to_string(*o) : "") + "|" +
         std::to_string(batch) + "|" + std::to_string(accumulation);
}

reports::FitRule rtx3060_rule() {
  return {12616466432, 12616466432 - kCap, reports::kDefaultMargin, true, "measured"};
}

// fit's pick over each model's question: the table config's points of that model.
Picks picks_of_fit(const reports::Results& results) {
  const Config cfg = load_config(std::string(SWEEP_SOURCE_DIR) + "/configs/rtx3060-table.yaml");
  RunSettings run{.device = Device::kCuda, .budget_bytes = kCap, .budget_emulated = true};
  std::map<std::string, std::vector<Point>> questions;
  for (const Point& p : expand_grid(cfg, run)) questions[p.model].push_back(p);
  Picks out;
  for (const auto& [model, points] : questions) {
    std::vector<FitTechnique> wanted;
    for (const Point& p : points)
      wanted.push_back({p.precision, p.checkpointing, p.optimizer, true, p.adapter, p.offload, p.weights});
    const Analysis a = analyse(results, points, wanted);
    const auto p = pick(a, PickQuestion{.rule = rtx3060_rule()});
    if (p)
      out[model] = pick_text(p->technique->precision, p->technique->checkpointing,
                             p->technique->optimizer, p->batch, p->accumulation);
  }
  return out;
}

Picks picks_of(const reports::Recommendation& r) {
  Picks out;
  for (const auto& g : r.groups)
    if (g.fastest)
      out[g.model] = pick_text(g.fastest->precision, g.fastest->checkpointing, g.fastest->optimizer,
                               g.fastest->batch, g.fastest->accumulation);
  return out;
}

TEST(OnePick, FitRecommendAndReportPickTheSameOnTheMeasuredRtx3060Rows) {
  const auto results = reports::read_results(kRows);
  const Picks fit = picks_of_fit(results);
  ASSERT_EQ(fit.size(), 5u) << "the five models of configs/rtx3060-table.yaml";
  reports::RecommendOptions o;
  o.gpu = "rtx3060";
  const auto r = reports::recommend({results}, o);
  EXPECT_EQ(picks_of(r), fit) << "recommend disagrees with fit";
  // report.md's summary prints recommend()'s pick: each group's line names it.
  const fs::path dir = testing::temp_dir("one_pick_report");
  reports::ReportOptions ro;
  ro.card.gpu = "rtx3060";
  ASSERT_EQ(reports::write_report(kRows, dir.string(), ro), 0);
  std::ifstream in(dir / "report.md");
  const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& g : r.groups) {
    ASSERT_TRUE(g.fastest) << g.label();
    std::string line = "- " + g.label() + ": " + g.fastest->label() + ", peak";
    for (std::size_t at = 0; (at = line.find('_', at)) != std::string::npos; at += 2)
      line.insert(at, 1, '\\');  // Markdown escapes target_seq's underscore
    EXPECT_NE(md.find(line), std::string::npos) << line << " in report.md";
  }
}

// On an emulated card (nothing timed: ranked by memory), end to end: `sweep fit --json` with an
// effective batch, then `recommend` on its rows, and the per-card table's line built from fit's
// answer, all name one configuration.
TEST(OnePick, FitRecommendAndTablesPickTheSameOnAnEmulatedCard) {
  const auto out = testing::temp_dir("one_pick_emulated") / "out";
  const auto run = testing::run_sweep_cli_split(
      "fit gpt2-test --gpu rtx3060 --seq 32 --precision fp32,bf16-amp --checkpointing none,block "
      "--optimizer adamw,adafactor --offload none --max-batch 64 --effective-batch 16 --json --out " +
      out.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto answer = nlohmann::json::parse(run.out);
  const auto& rec = answer.at("recommendation");
  ASSERT_TRUE(rec.is_object()) << run.out;
  const std::string fit = pick_text(*parse_as<Precision>(rec.at("precision").get<std::string>()),
                                    *parse_as<Checkpointing>(rec.at("checkpointing").get<std::string>()),
                                    parse_as<OptimizerKind>(rec.at("optimizer").get<std::string>()),
                                    rec.at("batch"), rec.at("accumulation"));
  reports::RecommendOptions o;
  o.gpu = "rtx3060";
  o.effective_batch = 16;
  const auto r = reports::recommend({reports::read_results(out.string())}, o);
  ASSERT_EQ(r.groups.size(), 1u);
  const auto& e = r.groups.front().effective;
  ASSERT_TRUE(e) << "recommend finds no way to the effective batch";
  EXPECT_EQ(pick_text(e->precision, e->checkpointing, e->optimizer, e->batch, e->accumulation), fit);
  // Asked for an effective batch, recommend's headline is that way to it, as fit's is.
  const auto& h = r.groups.front().fastest;
  ASSERT_TRUE(h);
  EXPECT_EQ(pick_text(h->precision, h->checkpointing, h->optimizer, h->batch, h->accumulation), fit);
  // The tables print fit's answer: the card's table names the same configuration.
  nlohmann::json entry_fit = answer;
  entry_fit["recommendation"]["label"] = e->technique();
  for (auto& t : entry_fit["techniques"]) t["label"] = "a technique";
  const nlohmann::json data = {
      {"tables_json_version", reports::kTablesJsonVersion},
      {"card", {{"key", "rtx3060"}, {"name", "RTX 3060"}, {"memory_bytes", 12616466432},
                {"memory_source", "https://github.com/Kunhao-Liu/StyleGaussian/issues/12"},
                {"context_bytes", 12616466432 - kCap}, {"context_measured", false},
                {"context_source", kDefaultContextSource}, {"compute_capability", "8.6"}, {"sms", 28},
                {"margin", 0.1}, {"cap_bytes", kCap}, {"ceiling_bytes", rtx3060_rule().ceiling_bytes()}}},
      {"command", "sweep tables --card rtx3060"}, {"fit_flags", ""}, {"commit", "abc"},
      {"suite_version", "0"}, {"effective_batch", 16},
      {"entries", {{{"model", "gpt2-test"}, {"input", "seq 32"}, {"fit", entry_fit}}}}};
  const std::string line = reports::table_view(data).at("entries")[0].at("recommendation");
  EXPECT_NE(line.find(e->technique() + ", micro-batch " + std::to_string(e->batch) +
                      " x accumulation " + std::to_string(e->accumulation)),
            std::string::npos)
      << line;
}

// The pick's unprobed micro-batches (fit_analysis.cc unprobed_divisors): gpt2-medium on an A10
// (21.99 GiB, 768 MiB context) at an effective batch of 32, bf16 weights, its probes as fit's
// seeded search left them (batch, peak reserved, predicted tokens/s from a real emulated run).
// 16 divides 32 under the largest fitting batch (17), but bounded by 17's peak it is over the
// recommended ceiling; 8, under the largest probe below the ceiling (15), is bounded by 12's
// peak: it is offered and picked, where only the probed 2 x 16 was before.
TEST(OnePick, AnUnprobedMicroBatchUnderTheCeilingIsOffered) {
  FitTechnique t{Precision::kBf16, Checkpointing::kNone, OptimizerKind::kAdamW, true};
  t.largest = 17;
  t.first_oom = 18;
  struct Probe {
    int64_t batch;
    double peak, tokens;
  };
  const std::vector<Probe> probes = {{1, 4106223616, 6933.5},
                                     {2, 4527751168, 8930.6},
                                     {12, 15929966592, 11686.6},
                                     {15, 19992150016, 12002.9},
                                     {17, 22408069120, 12029.5}};
  std::vector<reports::Row> rows(probes.size());
  Analysis a;
  a.techniques = {t};
  for (std::size_t i = 0; i < probes.size(); ++i) {
    rows[i].cells[schema::column("batch")] = std::to_string(probes[i].batch);
    rows[i].cells[schema::column("peak_reserved_bytes")] = std::to_string(probes[i].peak);
    rows[i].cells[schema::column("tokens_per_s")] = std::to_string(probes[i].tokens);
    a.ok_rows[technique_key(t)].push_back(&rows[i]);
  }
  const auto memory = static_cast<int64_t>(21.99 * reports::kGiB);  // the A10, as CUDA reports it
  const reports::FitRule rule{memory, 805306368, reports::kDefaultMargin, true, "card table"};
  ASSERT_GT(probes[4].peak, static_cast<double>(rule.ceiling_bytes()));
  ASSERT_LE(probes[3].peak, static_cast<double>(rule.ceiling_bytes()));
  const auto p = pick(a, PickQuestion{.rule = rule, .effective = 32, .predicted = true});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batch, 8);
  EXPECT_EQ(p->accumulation, 4);
  EXPECT_TRUE(p->unprobed);  // to be confirmed by a run at 8 x 4
  EXPECT_EQ(p->peak_reserved, probes[2].peak);
  EXPECT_FALSE(p->above_ceiling);
}

// A pick refused because it ran out of memory at its accumulation (fit_pick.cc: the
// confirmation run OOMs once gradients accumulate) gives way to the next smaller divisor, probed
// or not: whisper-test on the CPU under 30.7 MiB (an AVX-512 VM, 2026-11-28), batch 25 fits
// alone at 30.2 MiB and 25 x 4 does not; the answer is 20 x 5, where fit said "Nothing fits".
TEST(OnePick, ARefusedMicroBatchGivesWayToTheNextDivisor) {
  FitTechnique t{Precision::kFp32, Checkpointing::kNone, OptimizerKind::kAdamW, true};
  t.largest = 25;
  t.first_oom = 26;
  reports::Row probe;
  probe.cells[schema::column("batch")] = "25";
  probe.cells[schema::column("peak_reserved_bytes")] = "31666176";
  probe.cells[schema::column("tokens_per_s")] = "89379";
  Analysis a;
  a.techniques = {t};
  a.ok_rows[technique_key(t)].push_back(&probe);
  const reports::FitRule rule{32212254, 0, reports::kDefaultMargin, false, "--memory-gib"};
  PickQuestion q{.rule = rule, .effective = 100};
  auto p = pick(a, q);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batch, 25);
  EXPECT_EQ(p->accumulation, 4);
  q.refused.push_back(pick_id(*p));
  p = pick(a, q);
  ASSERT_TRUE(p) << "nothing offered after 25 x 4 was refused";
  EXPECT_EQ(p->batch, 20);
  EXPECT_EQ(p->accumulation, 5);
  EXPECT_TRUE(p->unprobed);  // to be confirmed by a run at 20 x 5
  // fit_pick.cc records the out-of-memory micro-batch per technique: every one from it up is
  // passed over once gradients accumulate (memory grows with the batch), so 25 x 4 too.
  q.refused.clear();
  q.accumulation_oom[technique_key(t)] = 20;
  p = pick(a, q);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batch, 10);  // then 10 x 10
}

}  // namespace
}  // namespace sweep
