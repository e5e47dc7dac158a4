// Rows predicted by emulation (device emulated: memory only, no throughput) in every reader:
// recommend ranks them by memory and says they are predicted, the report says so in its title
// and shows no throughput rather than an empty or NaN one, and compare refuses to gate a
// measurement against a prediction unless --allow-predicted. Fixtures:
// tests/data/predicted_rtx3060.csv and measured_rtx3060.csv (invented numbers, the same
// configurations; tests/fixtures/make_predicted_rows.py writes them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reports/compare/compare.h"
#include "reports/recommend/recommend.h"
#include "reports/report/report.h"
#include "temp_tree.h"

namespace sweep::reports {
namespace {

std::string data(const std::string& name) { return std::string(SWEEP_TEST_DATA) + "/" + name; }
constexpr const char* kPredicted = "predicted by emulation of RTX 3060, not measured";

Recommendation recommend_for(const std::string& file, RecommendOptions o = {}) {
  std::vector<Results> results;
  results.push_back(read_results(data(file)));
  return recommend(results, o);
}

TEST(Predicted, RecommendRanksByMemoryAndSaysItIsPredicted) {
  RecommendOptions o;
  o.gpu = "rtx3060";
  const Recommendation r = recommend_for("predicted_rtx3060.csv", o);
  // The allowance the prediction used (its card cell), not CUDA's default by chance.
  EXPECT_EQ(r.target.context_bytes, 536870912);
  EXPECT_NE(r.target.context_source.find("predicted card"), std::string::npos)
      << r.target.context_source;
  EXPECT_FALSE(r.other_card);  // rows predicted for RTX 3060 are rows for RTX 3060
  EXPECT_EQ(r.predicted_cards, std::vector<std::string>{"RTX 3060"});
  ASSERT_EQ(r.groups.size(), 1u);
  const auto& g = r.groups.front();
  // No throughput: the fewest changes that fit (fp32, no checkpointing), at its largest batch.
  ASSERT_TRUE(g.fastest);
  EXPECT_TRUE(g.fastest->predicted);
  EXPECT_EQ(g.fastest->precision, Precision::kFp32);
  EXPECT_EQ(g.fastest->checkpointing, Checkpointing::kNone);
  EXPECT_EQ(g.fastest->batch, 4);
  EXPECT_TRUE(g.limit_reached);

  const std::string md = recommendations_markdown(r);
  EXPECT_NE(md.find(std::string("# Recommendations for RTX 3060 (11.75 GiB): ") + kPredicted),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("not measured"), std::string::npos);
  EXPECT_NE(md.find("ranked by memory"), std::string::npos);
  EXPECT_EQ(md.find("nan"), std::string::npos);
  const auto j = recommendations_json(r);
  EXPECT_EQ(j.at("predicted_by"), kPredicted);
  const auto& fastest = j.at("groups").at(0).at("fastest");
  EXPECT_TRUE(fastest.at("predicted"));
  EXPECT_TRUE(fastest.at("tokens_per_s").is_null());
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);  // no NaN or infinity
}

TEST(Predicted, AnEffectiveBatchIsReachedByMemoryToo) {
  RecommendOptions o;
  o.effective_batch = 32;
  const Recommendation r =
      recommend_for("predicted_rtx3060.csv", o);  // the default target: the card
  EXPECT_EQ(r.target.name, "RTX 3060 (emulated)");
  ASSERT_NE(r.target.gpu, nullptr);
  EXPECT_EQ(r.target.gpu->key, "rtx3060");
  const auto& g = r.groups.front();
  ASSERT_TRUE(g.effective);
  EXPECT_TRUE(g.effective->inferred);
  EXPECT_EQ(g.effective->batch, 4);  // fp32 without checkpointing, batch 4 x 8
  EXPECT_EQ(g.effective->accumulation, 8);
}

TEST(Predicted, MeasuredRowsStillRankByThroughput) {
  RecommendOptions o;
  o.gpu = "rtx3060";
  const Recommendation r = recommend_for("measured_rtx3060.csv", o);
  ASSERT_TRUE(r.groups.front().fastest);
  EXPECT_FALSE(r.groups.front().fastest->predicted);
  EXPECT_GT(r.groups.front().fastest->tokens_per_s, 0);
  EXPECT_TRUE(r.predicted_cards.empty());
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("sweep_predicted_" + name + "_" + std::to_string(::getpid()))) {
    sweep::remove_tree(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { sweep::remove_tree(path); }
};

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Predicted, TheReportSaysSoAndShowsNoThroughput) {
  TempDir dir("report");
  ReportOptions o;
  o.card.gpu = "rtx3060";
  ASSERT_EQ(write_report(data("predicted_rtx3060.csv"), dir.path.string(), o), 0);
  const std::string md = read(dir.path / "report.md");
  EXPECT_EQ(md.rfind(std::string("# Sweep report: ") + kPredicted, 0), 0u) << md.substr(0, 200);
  EXPECT_NE(md.find(std::string("Every point is ") + kPredicted), std::string::npos);
  EXPECT_NE(md.find(std::string("## gpt2, seq 512: ") + kPredicted), std::string::npos);
  EXPECT_NE(md.find("Throughput: not measured"), std::string::npos);
  EXPECT_NE(md.find("| not measured |"), std::string::npos);  // tokens/s in the technique tables
  for (const char* bad : {"nan", "NaN", "inf"}) EXPECT_EQ(md.find(bad), std::string::npos) << bad;
  EXPECT_EQ(read(dir.path / "report.html").find("NaN"), std::string::npos);
}

// Issue 38: a file mixing rows measured on the CPU with rows predicted for an RTX 3060
// (tests/data/mixed_cpu_emulated.csv, two real runs of gpt2-test at seq 32, batch 1 and 2:
// `device: cpu` under the card's budget, then `--device emulated`) is reported one device per
// section, each labelled: its title names both, each part has its own summary and sections,
// and neither hides the other ("not shown") nor is titled by it.
TEST(Predicted, RowsMeasuredAndPredictedAreReportedOneDevicePerSection) {
  TempDir dir("mixed");
  ASSERT_EQ(write_report(data("mixed_cpu_emulated.csv"), dir.path.string()), 0);
  const std::string md = read(dir.path / "report.md");
  EXPECT_EQ(md.rfind(std::string("# Sweep report: measured on AMD EPYC; ") + kPredicted, 0), 0u)
      << md.substr(0, 200);
  const auto at = [&](const std::string& s) { return md.find(s); };
  const auto measured = at("## Summary: measured on AMD EPYC\n");
  const auto predicted = at(std::string("## Summary: ") + kPredicted + "\n");
  ASSERT_NE(measured, std::string::npos) << md;
  ASSERT_NE(predicted, std::string::npos) << md;
  // Each summary answers for its own device: the CPU rows for the budget they ran under (the
  // card's, in CPU memory), the predicted ones for the card.
  const std::string cpu = "For the emulated budget of 11.75 GiB (CPU memory).";
  EXPECT_NE(md.find(cpu, measured), std::string::npos) << md;
  EXPECT_LT(md.find(cpu, measured), predicted);
  EXPECT_NE(md.find("For RTX 3060 (emulated).", predicted), std::string::npos);
  EXPECT_NE(at("## gpt2-test, seq 32: measured on AMD EPYC\n"), std::string::npos) << md;
  EXPECT_NE(at(std::string("## gpt2-test, seq 32: ") + kPredicted + "\n"), std::string::npos);
  EXPECT_EQ(at("not shown"), std::string::npos) << md;
  EXPECT_EQ(at("No recommendation"), std::string::npos) << md;
  // The two sections' charts are files of their own.
  EXPECT_TRUE(std::filesystem::exists(dir.path / "gpt2-test-seq-32-measured-memory.dat"));
  EXPECT_TRUE(std::filesystem::exists(dir.path / "gpt2-test-seq-32-rtx-3060-memory.dat"));
}

// Issue 38 cause 2: every output of a predicted row says predicted (a column in the CSV), and
// "fastest" names only what was timed; a largest batch is the largest *predicted*.
TEST(Predicted, EveryOutputSaysPredictedAndNothingUntimedIsCalledFastest) {
  RecommendOptions o;
  o.gpu = "rtx3060";
  const Recommendation r = recommend_for("predicted_rtx3060.csv", o);
  const std::string csv = recommendations_csv(r);
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find(",predicted,"), std::string::npos) << header;
  EXPECT_EQ(csv.find(",fastest,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",recommended,"), std::string::npos) << csv;
  const std::string md = recommendations_markdown(r);
  EXPECT_EQ(md.find("largest measured"), std::string::npos) << md;
  EXPECT_EQ(md.find("larger batches not measured"), std::string::npos) << md;
}

// Issue 38 cause 1: a group whose train rows all crashed has no answer; it is never "nothing
// fits", in the report's summary or in recommend's table.
TEST(Predicted, CrashedRowsAreNoAnswerNeverNothingFits) {
  TempDir dir("crashed");
  std::string rows = read(data("predicted_rtx3060.csv"));
  for (std::size_t at; (at = rows.find(",ok,,,")) != std::string::npos;)
    rows.replace(at, 6, ",crash,,whisper needs audio_s > 0,");
  const auto csv = dir.path / "results.csv";
  std::ofstream(csv) << rows;
  RecommendOptions o;
  o.gpu = "rtx3060";
  std::vector<Results> results;
  results.push_back(read_results(csv.string()));
  const Recommendation r = recommend(results, o);
  ASSERT_EQ(r.groups.size(), 1u);
  EXPECT_FALSE(r.groups.front().fastest);
  EXPECT_EQ(r.groups.front().no_pick().rfind("no answer: 12 of 15 train rows did not run (crash: "
                                             "whisper needs audio_s > 0",
                                             0),
            0u)
      << r.groups.front().no_pick();
  const std::string md = recommendations_markdown(r);
  EXPECT_NE(md.find("no answer"), std::string::npos) << md;
  EXPECT_EQ(md.find("nothing fits"), std::string::npos) << md;
  ReportOptions ro;
  ro.card.gpu = "rtx3060";
  ASSERT_EQ(write_report(csv.string(), (dir.path / "report").string(), ro), 0);
  const std::string report = read(dir.path / "report" / "report.md");
  EXPECT_NE(report.find("no answer: 12 of 15 train rows did not run"), std::string::npos) << report;
  EXPECT_EQ(report.find("nothing fits the cap"), std::string::npos);
}

TEST(Predicted, CompareRefusesToGateAMeasurementAgainstAPrediction) {
  const Results measured = read_results(data("measured_rtx3060.csv"));
  const Results predicted = read_results(data("predicted_rtx3060.csv"));
  try {
    compare_results(measured, predicted);
    ADD_FAILURE() << "compared a prediction with a measurement without --allow-predicted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.key(), "device");
    EXPECT_NE(std::string(e.what()).find(kPredicted), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("measured on NVIDIA GeForce RTX 3060"), std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("--allow-predicted"), std::string::npos);
  }
  EXPECT_THROW(compare_results(predicted, measured), UserError);  // either way round

  CompareOptions allow;
  allow.allow_predicted = true;
  const CompareResult r = compare_results(measured, predicted, allow);
  EXPECT_EQ(r.points.size(), 15u);  // joined on the configuration: the card is the device's
  EXPECT_EQ(r.count(Verdict::kRegression), 0u);  // the prediction is 1% under the measurement
  bool said = false;
  for (const auto& n : r.notes)
    said |= n.find("compare a prediction with a measurement") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_EQ(compare_json(r).at("options").at("allow_predicted"), true);

  // Predictions against predictions are compared as usual, and said to be predictions.
  const CompareResult same = compare_results(predicted, predicted);
  EXPECT_FALSE(same.regressed());
  bool both = false;
  for (const auto& n : same.notes)
    both |= n.find("predicted by emulation on both sides") != std::string::npos;
  EXPECT_TRUE(both);
}

}  // namespace
}  // namespace sweep::reports
