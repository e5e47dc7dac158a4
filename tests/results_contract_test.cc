// The results contract end to end: every column survives the writer and the reader, a point's
// axes (generated from schema::kAxes) are written and read back to the same point, and point
// ids are those the first release computed, so that old results files still resume.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "sweeps/runner/results_store.h"
#include "sweeps/worker/point.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using schema::column;

// An enumerated column holds one of its vocabulary's names (the reader refuses others): the
// last of the table, so that none is a default.
template <Vocabulary... E>
void set_names(nlohmann::json& row) {
  ((row[std::string(VocabTable<E>::key)] = to_string(all_of<E>().back())), ...);
}

// A value for every column, of the column's kind; text with a comma and a quote, so that
// quoting is exercised.
nlohmann::json every_column() {
  nlohmann::json row;
  double n = 1;
  for (auto c : schema::kColumns) {
    const std::string name(c);
    if (schema::is_number_column(c)) row[name] = n++;
    else row[name] = "text, \"" + name + "\"";
  }
  row["schema_version"] = schema::kSchemaVersion;
  set_names<Mode, Precision, Checkpointing, OptimizerKind, Adapter, Offload, Weights, Device, Status>(row);
  row["step_ms_samples"] = "1.5;2.5";
  // The reader checks a card cell's facts (memory above 0, its context a part of it).
  row["card"] = "RTX 3060 (sm_86, 28 SMs, memory 12616466432 B, context 805306368 B)";
  return row;
}

TEST(ResultsContract, EveryColumnRoundTripsThroughTheWriterAndTheReader) {
  const auto dir = testing::temp_dir("contract_columns");
  const nlohmann::json row = every_column();
  {
    ResultsStore store(dir.string());
    store.append(row);
  }
  const auto results = reports::read_results(dir.string());
  ASSERT_EQ(results.rows.size(), 1u);
  const auto& r = results.rows.front();
  for (std::size_t i = 0; i < schema::kColumnCount; ++i) {
    SCOPED_TRACE(std::string(schema::kColumns[i]));
    EXPECT_TRUE(results.has_column(i));
    const auto& v = row[std::string(schema::kColumns[i])];
    if (v.is_string()) EXPECT_EQ(r.at(i), v.get<std::string>());
    else EXPECT_EQ(r.number(i), v.get<double>());
  }
  EXPECT_EQ(r.step_ms_samples, (std::vector<double>{1.5, 2.5}));
}

// A point with every axis away from its default.
Point unusual_point() {
  Point p;
  p.model = "t5-test";
  p.family = "t5";
  p.mode = Mode::kTrain;
  p.batch = 7;
  p.seq = 24;
  p.target_seq = 12;
  p.precision = Precision::kBf16Amp;
  p.checkpointing = Checkpointing::kBlock;
  p.accumulation = 3;
  p.optimizer = OptimizerKind::kAdafactor;
  p.use_cache = false;
  p.adapter = Adapter::kLora;
  p.lora_r = 4;
  p.lora_alpha = 16.5;
  p.lora_dropout = 0.05;
  p.lora_targets = {"q", "k", "v"};
  p.offload = Offload::kOptimizer;
  p.completion_share = 0.75;  // the cells' round trip (a T5 point takes neither)
  p.padding_free = true;
  p.alloc_conf = "expandable_segments:True";
  p.steps = 5;
  p.warmup_steps = 2;
  p.repetitions = 4;
  p.budget_bytes = 123456789;
  p.budget_emulated = true;
  p.device = Device::kCpu;
  return p;
}

TEST(ResultsContract, APointsAxesAreWrittenAndReadBackToTheSamePoint) {
  const Point p = unusual_point();
  nlohmann::json row = axis_cells(p);
  // Every axis of the table has its cell (this point uses them all but audio, and the card of
  // device emulated: tests/emulated_test.cc).
  for (const auto& a : schema::kAxes)
    EXPECT_EQ(row.contains(std::string(a.column)), a.column != "audio_s" && a.column != "card")
        << a.column;
  row["schema_version"] = schema::kSchemaVersion;
  row["point_id"] = p.id();
  row["status"] = "ok";
  row["peak_allocated_bytes"] = row["peak_reserved_bytes"] = 1 << 20;  // an ok row's (rows.h)
  const auto dir = testing::temp_dir("contract_axes");
  {
    ResultsStore store(dir.string());
    store.append(row);
  }
  const auto results = reports::read_results(dir.string());
  ASSERT_EQ(results.rows.size(), 1u);
  const Point q = point_of(results.rows.front());
  EXPECT_EQ(nlohmann::json(q), nlohmann::json(p));
  EXPECT_EQ(q.id(), p.id());
  EXPECT_EQ(results.rows.front().at(column("lora_targets")), "q;k;v");
  EXPECT_EQ(results.rows.front().at(column("use_cache")), "0");

  // Axes a model does not take, and LoRA's settings without LoRA, leave their cells empty;
  // an empty cell reads as the axis's fallback.
  Point plain;
  plain.model = "whisper-test";
  plain.family = "whisper-cls";
  plain.audio_s = 2;
  const auto cells = axis_cells(plain);
  for (auto name : {"seq", "target_seq", "lora_r", "lora_alpha", "lora_dropout", "lora_targets"})
    EXPECT_FALSE(cells.contains(name)) << name;
  EXPECT_EQ(cells["audio_s"], 2.0);
  EXPECT_EQ(cells["adapter"], "none");
  reports::Row old;  // a row of a file older than the adapter column
  EXPECT_EQ(old.axis(column("adapter")), "none");
  EXPECT_EQ(old.axis(column("use_cache")), "1");
  EXPECT_EQ(old.axis(column("offload")), "none");
  EXPECT_EQ(old.axis(column("seq")), "");
}

TEST(ResultsContract, AxisTextIsTheConfigsSpellingAndSetsTheSameValue) {
  const Point p = unusual_point();
  Point q;
  for (const auto& a : schema::kAxes) {
    const std::string text = axis_text(p, a.column);
    EXPECT_TRUE(set_axis_text(q, a.column, text)) << a.column;
  }
  EXPECT_EQ(axis_text(p, "use_cache"), "false");
  EXPECT_EQ(axis_text(p, "lora_alpha"), "16.5");
  EXPECT_EQ(nlohmann::json(q), nlohmann::json(p));
  EXPECT_FALSE(set_axis_text(q, "timeout_s", "5"));  // a worker setting, no axis
}

// tests/data/point_ids_v1.txt: the ids and labels `sweep run tests/data/point_ids_v1.yaml
// --dry-run` printed before the axes became one table (192 points: three families, LoRA with
// a changed alpha and dropout, use_cache=False, offload, checkpointing, bf16-amp, Whisper's
// audio). The ids carry the suite version, so a version bump regenerates this file.
TEST(ResultsContract, PointIdsAreThoseBeforeTheFieldTable) {
  const auto dir = testing::temp_dir("contract_ids");
  const std::string cfg = std::string(SWEEP_TEST_DATA) + "/point_ids_v1.yaml";
  const auto r = testing::run_sweep_cli_split("run " + cfg + " --dry-run --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream golden(std::string(SWEEP_TEST_DATA) + "/point_ids_v1.txt");
  std::vector<std::string> want, got;
  for (std::string line; std::getline(golden, line);) want.push_back(line);
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);)
    if (line.size() > 18 && line[16] == ' ' && line[17] == ' ') got.push_back(line);
  ASSERT_EQ(want.size(), 192u);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace sweep
