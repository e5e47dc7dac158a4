// The one typed reader: every value is checked once, for every command (finite,
// non-negative, known status and schema version); a torn last line is named as such with
// the command that drops it; and report, recommend and compare agree on which row of a
// point counts after a `--force` re-run.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "reports/compare/compare.h"
#include "reports/recommend/recommend.h"
#include "reports/report/report.h"
#include "reports/report/report_sections.h"
#include "reports/results/rows.h"
#include "temp_tree.h"

namespace sweep::reports {
namespace {

namespace fs = std::filesystem;
using schema::column;

std::string data(const std::string& name) { return std::string(SWEEP_TEST_DATA) + "/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A copy of a fixture with `edit` applied to its text, in a fresh directory.
fs::path edited(const std::string& test, const std::string& fixture,
                const std::function<void(std::string&)>& edit) {
  const fs::path dir = fs::temp_directory_path() / ("sweep_reader_test_" + test);
  sweep::remove_tree(dir);
  fs::create_directories(dir);
  std::string text = slurp(data(fixture));
  edit(text);
  std::ofstream(dir / "results.csv") << text;
  return dir / "results.csv";
}

// The message every command prints for `path`, and its exit code.
struct Cli {
  int code = -1;
  std::string err;
};
Cli run(const std::string& args) {
  CLI::App app;
  int code = -1;
  register_report_command(app, code);
  register_recommend_command(app, code);
  register_compare_command(app, code);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  app.parse(args, false);
  testing::internal::GetCapturedStdout();
  return {code, testing::internal::GetCapturedStderr()};
}

// Replaces the value of `col` in the first data row (line 2) of CSV text.
void set_first_row(std::string& text, std::string_view col, const std::string& value) {
  const std::size_t row_start = text.find('\n') + 1;
  const std::string header = "," + text.substr(0, row_start - 1) + ",";
  const auto index = std::count(header.begin(), header.begin() + header.find("," + std::string(col) + ","), ',');
  std::size_t at = row_start;
  for (long i = 0; i < index; ++i) at = text.find(',', at) + 1;
  const std::size_t end = text.find_first_of(",\n", at);
  text.replace(at, end - at, value);
}

void expect_every_command_refuses(const fs::path& file, const std::string& message) {
  const std::string dir = file.parent_path().string();
  for (const std::string& args :
       {"report " + dir + " --out " + dir + "/report", "recommend " + dir + " --memory-gib 24",
        "compare " + data("recommend_ties.csv") + " " + dir}) {
    const Cli c = run(args);
    EXPECT_EQ(c.code, 2) << args << "\n" << c.err;
    EXPECT_NE(c.err.find(file.string() + ":2: " + message), std::string::npos) << args << "\n" << c.err;
    EXPECT_NE(c.err.find("\nhint: "), std::string::npos) << c.err;
  }
  EXPECT_FALSE(fs::exists(file.parent_path() / "report" / "report.md"));
}

TEST(TypedReader, NanPeakIsRefusedByEveryCommand) {
  auto f = edited("nan", "recommend_ties.csv",
                  [](std::string& t) { set_first_row(t, "peak_reserved_bytes", "nan"); });
  expect_every_command_refuses(f, "column 'peak_reserved_bytes': 'nan' is not a finite number");
}

TEST(TypedReader, NegativePeakIsRefusedByEveryCommand) {
  auto f = edited("negative", "recommend_ties.csv",
                  [](std::string& t) { set_first_row(t, "peak_allocated_bytes", "-5"); });
  expect_every_command_refuses(f, "column 'peak_allocated_bytes': '-5' is negative");
}

// An emulated row's card cell with a negative memory was read as a card.
TEST(TypedReader, ACardCellOfNegativeMemoryIsRefusedByEveryCommand) {
  auto f = edited("card", "predicted_rtx3060.csv", [](std::string& t) {
    const std::string cell = "memory 12616466432 B";
    t.replace(t.find(cell), cell.size(), "memory -12616466432 B");
  });
  expect_every_command_refuses(f, "column 'card': 'RTX 3060 (sm_86, 28 SMs, memory -12616466432 B");
}

TEST(TypedReader, UnknownSchemaVersionIsRefusedByEveryCommand) {
  auto f = edited("schema99", "recommend_ties.csv",
                  [](std::string& t) { set_first_row(t, "schema_version", "99"); });
  expect_every_command_refuses(f, "schema_version 99: this sweep reads versions 1 to 3");
}

TEST(TypedReader, UnknownStatusAndBadSampleAreRefused) {
  auto status = edited("status", "recommend_ties.csv",
                       [](std::string& t) { set_first_row(t, "status", "fine"); });
  expect_every_command_refuses(status, "column 'status': 'fine' is not one of ok, oom");
  auto sample = edited("sample", "recommend_ties.csv",
                       [](std::string& t) { set_first_row(t, "step_ms_samples", "289.6;inf"); });
  expect_every_command_refuses(sample, "column 'step_ms_samples': 'inf' is not a finite number");
}

TEST(TypedReader, UnknownAxisValueIsRefusedWithTheKnownOnes) {
  auto precision = edited("fp8", "recommend_ties.csv",
                          [](std::string& t) { set_first_row(t, "precision", "fp8"); });
  expect_every_command_refuses(
      precision, "column 'precision': 'fp8' is not one of fp32, fp16-amp, bf16-amp, bf16\n");
  // Names are exact: a config's spelling of another value is not guessed at.
  auto optimizer = edited("adam", "recommend_ties.csv",
                          [](std::string& t) { set_first_row(t, "optimizer", "AdamW"); });
  expect_every_command_refuses(optimizer, "column 'optimizer': 'AdamW' is not one of " +
                                              choices<OptimizerKind>() + "\n");
}

// Issue 23: 1e19, 1e308 and 2^64 passed as finite numbers; `recommend` cast them to INT64_MIN
// and recommended the row, `compare` counted it not comparable and exited 0. Every command
// now refuses them, in any numeric column, naming the file, the line and the column.
TEST(TypedReader, NumbersBeyondInt64AreRefusedByEveryCommand) {
  const std::vector<std::pair<std::string, std::string>> cells = {
      {"batch", "1e19"},
      {"peak_reserved_bytes", "1e308"},
      {"peak_allocated_bytes", "18446744073709551616"},  // 2^64
      {"budget_bytes", "9223372036854775808"},          // INT64_MAX + 1
      {"device_memory_bytes", "-1e19"},
      {"tokens_per_s", "1e19"},
      {"step_ms_samples", "289.6;1e300"},
  };
  for (const auto& [col, value] : cells) {
    SCOPED_TRACE(col + " = " + value);
    auto f = edited("int64_" + col, "recommend_ties.csv",
                    [&](std::string& t) { set_first_row(t, col, value); });
    const std::string shown = col == "step_ms_samples" ? "1e300" : value;
    expect_every_command_refuses(f, "column '" + col + "': '" + shown + "' is out of range");
  }
  // The largest count there is still reads.
  auto most = edited("int64_max", "recommend_ties.csv",
                     [](std::string& t) { set_first_row(t, "budget_bytes", "9223372036854775807"); });
  EXPECT_NO_THROW(read_results(most.string()));
}

// Issue 23: `batch 0`, a batch with a fraction and empty required cells were refused by
// `report` only.
TEST(TypedReader, BatchBelowOneAndEmptyRequiredCellsAreRefusedByEveryCommand) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cells = {
      {"batch", "0", "column 'batch': '0' is less than 1"},
      {"batch", "2.5", "column 'batch': '2.5' is not a whole number"},
      {"accumulation", "0", "column 'accumulation': '0' is less than 1"},
      {"batch", "", "column 'batch': is empty"},
      {"model", "", "column 'model': is empty"},
      {"peak_reserved_bytes", "", "column 'peak_reserved_bytes': is empty in a row with status ok"},
      {"peak_allocated_bytes", "", "column 'peak_allocated_bytes': is empty in a row with status ok"},
  };
  for (const auto& [col, value, message] : cells) {
    SCOPED_TRACE(col + " = '" + value + "'");
    auto f = edited("required_" + col + value, "recommend_ties.csv",
                    [&](std::string& t) { set_first_row(t, col, value); });
    expect_every_command_refuses(f, message);
  }
  // A required column missing from the header: line 1.
  auto f = edited("no_batch_column", "recommend_ties.csv",
                  [](std::string& t) { t.replace(t.find(",batch,"), 7, ",size,"); });
  try {
    read_results(f.string());
    FAIL() << "a file without a batch column was read";
  } catch (const UserError& e) {
    EXPECT_EQ(e.located(), f.string() + ":1: header has no 'batch' column");
  }
}

TEST(TypedReader, EmptyAxisCellOfAnOlderFileReadsAsItsFallback) {
  // recommend_ties.csv predates the adapter, offload and weights columns; here two of them
  // are added, empty in the first row (what a file written before an axis had values looks
  // like) and set in the second.
  auto f = edited("fallback", "recommend_ties.csv", [](std::string& t) {
    std::string out;
    std::istringstream lines(t);
    int n = 0;
    for (std::string line; std::getline(lines, line); ++n)
      out += line + (n == 0 ? ",adapter,weights" : n == 1 ? ",," : ",lora,int8") + "\n";
    t = out;
    set_first_row(t, "precision", "");
  });
  const Results r = read_results(f.string());
  ASSERT_GE(r.rows.size(), 2u);
  const Row& older = r.rows[0];
  EXPECT_EQ(older.value<Adapter>(), Adapter::kNone);
  EXPECT_EQ(older.value<Weights>(), Weights::kFull);
  EXPECT_EQ(older.value<Offload>(), Offload::kNone);  // no column at all
  EXPECT_EQ(older.value<Precision>(), std::nullopt);  // empty, and no fallback to give
  EXPECT_EQ(older.value<Checkpointing>(), Checkpointing::kNone);  // as written
  EXPECT_EQ(r.rows[1].value<Adapter>(), Adapter::kLora);
  EXPECT_EQ(r.rows[1].value<Weights>(), Weights::kInt8);
  EXPECT_EQ(r.rows[1].value<Precision>(), Precision::kFp32);
  // An eval row trains nothing: its optimizer is "none", a value of the vocabulary.
  const Results accum = read_results(data("recommend_accum.csv"));
  int eval_rows = 0;
  for (const Row& row : accum.rows)
    if (row.value<Mode>() == Mode::kEval) {
      ++eval_rows;
      EXPECT_EQ(row.value<OptimizerKind>(), OptimizerKind::kNone) << row.where();
    }
  EXPECT_GT(eval_rows, 0);
}

// Before the whole Whisper, whisper-* was the encoder-classifier; such a row (no labels: an
// empty target_seq) reads as whisper-*-cls, a row of the whole model keeps its name.
TEST(TypedReader, AWhisperRowWithoutLabelsIsTheEncoderClassifierItMeasured) {
  auto whisper_row = [](const std::string& target) {
    return edited("whisper" + target, "recommend_ties.csv", [&](std::string& t) {
      set_first_row(t, "model", "whisper-small");
      set_first_row(t, "family", "whisper");
      set_first_row(t, "seq", "");
      set_first_row(t, "target_seq", target);
      set_first_row(t, "audio_s", "30");
    });
  };
  const Results older = read_results(whisper_row("").string());
  EXPECT_EQ(older.rows[0].at(column("model")), "whisper-small-cls");
  EXPECT_EQ(older.rows[0].at(column("family")), "whisper-cls");
  const Results whole = read_results(whisper_row("448").string());
  EXPECT_EQ(whole.rows[0].at(column("model")), "whisper-small");
  EXPECT_EQ(whole.rows[0].at(column("family")), "whisper");
}

TEST(TypedReader, ParsesSamplesAndStatusOnce) {
  const Results r = read_results(data("recommend_ties.csv"));
  ASSERT_FALSE(r.rows.empty());
  EXPECT_EQ(r.rows[0].status, Status::kOk);
  EXPECT_EQ(r.rows[0].step_ms_samples, (std::vector<double>{289.646, 292.571, 295.497}));
  EXPECT_EQ(name_of(Status::kTimeout), "timeout");
  EXPECT_EQ(parse_as<Status>("oom"), Status::kOom);
  EXPECT_FALSE(parse_as<Status>("OOM"));
}

TEST(TypedReader, TornLastLineSaysSoAndHowToDropIt) {
  // What a full disk or a kill mid-write used to leave: a row cut short, no newline.
  auto f = edited("torn", "recommend_ties.csv", [](std::string& t) {
    t.pop_back();  // the final newline
    t.erase(t.rfind('\n') + 200);
  });
  const std::string text = slurp(f.string());
  const std::size_t lines = std::count(text.begin(), text.end(), '\n') + 1;
  try {
    read_results(f.string());
    FAIL() << "a torn row was read";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), static_cast<int>(lines));
    EXPECT_NE(std::string(e.what()).find("the last row is cut short"), std::string::npos) << e.what();
    const std::string drop = "sed -i '" + std::to_string(lines) + "d' " + f.string();
    ASSERT_NE(e.hint().find(drop), std::string::npos) << e.hint();
    // The offered command works: the file reads again, one row shorter.
    ASSERT_EQ(std::system(drop.c_str()), 0);
    EXPECT_EQ(read_results(f.string()).rows.size(), lines - 2);
  }
}

TEST(InternalCheck, AbortsWithFileAndLine) {
  EXPECT_DEATH(SWEEP_CHECK(1 + 1 == 3, "arithmetic"),
               "reports_reader_test.cc:[0-9]+: internal check failed: 1 \\+ 1 == 3: arithmetic");
}

TEST(Formatting, OneByteFormatterAndOneCsvQuoter) {
  EXPECT_EQ(format_bytes(512.0 * 1024 * 1024), "512.0 MiB");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(format_bytes(2.0 * 1024 * 1024, true), "+2.0 MiB");
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\"\nthen"), "\"say \"\"hi\"\" then\"");
}

TEST(LatestPerPoint, ReportRecommendAndCompareAgreeAfterAForcedRerun) {
  // The fastest fitting configuration was measured again (`sweep run --force`) and ran out
  // of memory. recommend used to keep every row and still named it.
  const Results before = read_results(data("recommend_ties.csv"));
  const Recommendation r0 = recommend({before}, {});
  ASSERT_FALSE(r0.groups.empty());
  ASSERT_TRUE(r0.groups[0].fastest);
  const std::string fastest_where = r0.groups[0].fastest->where;
  const unsigned line = std::stoul(fastest_where.substr(fastest_where.rfind(':') + 1));
  const fs::path f = edited("force", "recommend_ties.csv", [&](std::string& t) {
    std::size_t at = 0;
    for (unsigned i = 1; i < line; ++i) at = t.find('\n', at) + 1;
    std::string row = t.substr(at, t.find('\n', at) - at + 1);
    row.replace(row.find(",ok,"), 4, ",oom,");
    t += row;
  });
  const Results after = read_results(f.string());
  const Row& rerun = after.rows.back();
  const std::string id = rerun.at(column("point_id"));

  const Latest latest = latest_per_point(after);
  EXPECT_EQ(latest.rows.size(), before.rows.size());
  ASSERT_EQ(latest.duplicates.size(), 1u);
  EXPECT_EQ(latest.duplicates[0],
            id + " (lines " + std::to_string(line) + ", " + std::to_string(rerun.line) + ")");

  int seen = 0;  // report: the point is shown once, as the OOM it became
  for (const auto& p : report::parse_points(after))
    if (p.line == line || p.line == rerun.line) {
      ++seen;
      EXPECT_EQ(p.status, Status::kOom);
    }
  EXPECT_EQ(seen, 1);

  const Recommendation r = recommend({after}, {});  // recommend: no longer the fastest
  for (const auto& g : r.groups)
    if (g.fastest) {
      EXPECT_NE(g.fastest->where, fastest_where) << g.label();
      EXPECT_NE(g.fastest->where, rerun.where()) << g.label();
    }

  const CompareResult c = compare_results(before, after, {});  // compare: newly failing
  bool newly_failing = false;
  for (const auto& p : c.points)
    if (p.point_id == id) newly_failing = p.next && p.next->status == Status::kOom;
  EXPECT_TRUE(newly_failing);
  EXPECT_TRUE(c.regressed());
}

}  // namespace
}  // namespace sweep::reports
