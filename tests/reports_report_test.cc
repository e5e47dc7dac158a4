// `sweep report` on tests/data/report_fixture.csv (fixture numbers, not measurements):
// the tables' numbers against the fixture, the plots and the self-contained HTML, the
// path without gnuplot, bad input, and the shared table builder.
#include "reports/common/plots.h"
#include "reports/report/report.h"

#include <gtest/gtest.h>
#include <cmath>
#include <set>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "reports/common/markup.h"
#include "reports/report/report_sections.h"
#include "reports/results/rows.h"
#include "temp_tree.h"

namespace sweep::reports {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(SWEEP_TEST_DATA) + "/report_fixture.csv";
const std::string kMalformed = std::string(SWEEP_TEST_DATA) + "/report_malformed.csv";

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("sweep_report_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    sweep::remove_tree(path_);
  }
  ~TempDir() { sweep::remove_tree(path_); }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The report of the fixture, written without gnuplot (fast, and the same on every machine).
std::string fixture_markdown(const TempDir& dir) {
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  testing::internal::CaptureStderr();
  EXPECT_EQ(write_report(kFixture, dir.str()), 0);
  testing::internal::GetCapturedStderr();
  return slurp(dir.path() / "report.md");
}

bool has_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

TEST(Markup, HidesColumnsThatDoNotVaryAndNamesThemOnce) {
  struct Item {
    int batch;
    std::string optimizer, status;
  };
  std::vector<Field<Item>> fields = {
      {.header = "batch",
       .cell = [](const Item& i) { return std::to_string(i.batch); },
       .align = Align::kRight,
       .keep = true},
      {.header = "optimizer", .cell = [](const Item& i) { return i.optimizer; }},
      {.header = "status", .cell = [](const Item& i) { return i.status; }},
      {.header = "note", .cell = [](const Item&) { return std::string(); }},
  };
  Table t = make_table(fields, std::vector<Item>{{1, "adamw", "ok"}, {2, "adamw", "oom"}});
  EXPECT_EQ(t.headers, (std::vector<std::string>{"batch", "status"}));
  EXPECT_EQ(markdown_table(t),
            "| batch | status |\n| ---: | --- |\n| 1 | ok |\n| 2 | oom |\n\n"
            "Same in every row: optimizer adamw.\n");
  EXPECT_EQ(
      html_table(t),
      "<table>\n<tr><th>batch</th><th>status</th></tr>\n"
      "<tr><td class=\"r\">1</td><td>ok</td></tr>\n<tr><td class=\"r\">2</td><td>oom</td></tr>\n"
      "</table>\n<p class=\"fixed\">Same in every row: optimizer adamw.</p>\n");
  // A kept column stays even with one row; the others all become "same in every row".
  Table one = make_table(fields, std::vector<Item>{{4, "sgd", "ok"}});
  EXPECT_EQ(one.headers, (std::vector<std::string>{"batch"}));
}

TEST(Markup, EscapesMarkdownAndHtml) {
  Document doc;
  doc.paragraph("a|b <c> d_e");
  doc.table(make_table({"x"}, {Align::kLeft}, {true}, {{"p|q"}, {"<r>"}}));
  EXPECT_EQ(doc.markdown(), "a\\|b \\<c\\> d\\_e\n\n| x |\n| --- |\n| p\\|q |\n| \\<r\\> |\n\n");
  EXPECT_NE(doc.html("t", ".").find("<p>a|b &lt;c&gt; d_e</p>"), std::string::npos);
}

TEST(Markup, Base64) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\x89PNG", 4)), "iVBORw==");
}

// The fixture's gpt2-medium rows: W = 1419292672 bytes of fp32 weights, gradients W,
// AdamW state 2W; fp32 activations 1946 MiB a sample (461 MiB with checkpointing).
TEST(Report, MemoryTableMatchesFixture) {
  TempDir dir;
  std::string md = fixture_markdown(dir);
  // Batch 1: 4W + 1946 MiB = 7717699584 B = 7.19 GiB; the earlier 7.5 GiB row of the same
  // point_id is replaced by this one.
  EXPECT_NE(md.find("| 1 | fp32 | none | ok | 7.19 | 7.47 | 1.00× |"), std::string::npos) << md;
  // Batch 4: 4W + 4 * 1946 MiB = 13839286272 B = 12.89 GiB; / 7717699584 = 1.79×.
  EXPECT_NE(md.find("| 4 | fp32 | none | ok | 12.89 | 13.40 | 1.79× |"), std::string::npos);
  // fp16-amp with checkpointing, batch 32: 4W + (676 + 32 * 256) MiB = 13.95 GiB, 2.25× batch 1.
  EXPECT_NE(md.find("| 32 | fp16-amp | block | ok | 13.95 | 14.50 | 2.25× |"), std::string::npos);
  // The OOM keeps the peak it reached; the implied OOM has none.
  EXPECT_NE(md.find("| 16 | fp32 | none | oom | 23.40 |  |  |"), std::string::npos);
  EXPECT_NE(md.find("| 32 | fp32 | none | skipped (implied-oom) |  |  |  |"), std::string::npos);
  EXPECT_NE(md.find("Held fixed: mode train, accumulation 1, optimizer adamw."), std::string::npos);
}

TEST(Report, TechniqueSavingsAgainstTheFp32Baseline) {
  TempDir dir;
  std::string md = fixture_markdown(dir);
  // Batch 4 is charted, or its table folded (one chart per model: the batch comparing most).
  const auto at = std::min(md.find("#### Batch 4"), md.find("<summary>Batch 4:"));
  ASSERT_NE(at, std::string::npos) << md;
  std::string b4 = md.substr(at);
  b4 = b4.substr(0, b4.find("Batch ", 10));
  // fp32/block: 4W + 4 * 461 MiB = 7.09 GiB, 1 - 7610744832 / 13839286272 = 45% saved;
  // 4900 / 6500 tokens/s = -25%.
  EXPECT_NE(b4.find("| fp32 | none | 1 | adamw | 12.89 | baseline | 6500 | baseline |"),
            std::string::npos)
      << b4;
  EXPECT_NE(b4.find("| fp32 | block | 1 | adamw | 7.09 | -45% | 4900 | -25% |"), std::string::npos);
  // Accumulation 4 needs the same memory, 6% more throughput (fixture: 6890 vs 6500).
  EXPECT_NE(b4.find("| fp32 | none | 4 | adamw | 12.89 | 0% | 6890 | +6% |"), std::string::npos);
  // Adafactor (6 MiB of state) at batch 2: 5701197824 B = 5.31 GiB, 1 - 5701197824 /
  // 9758228480 = 42% saved; 13485 / 5600 = +141%.
  EXPECT_NE(md.find("| fp16-amp | none | 1 | adafactor | 5.31 | -42% | 13485 | +141% |"),
            std::string::npos);
  // Where the baseline ran out of memory there is nothing to compare against.
  EXPECT_NE(md.find("has no successful measurement at batch 16, so no savings are computed"),
            std::string::npos);
}

TEST(Report, BreakdownAndAdviceWhereActivationsAreSmall) {
  TempDir dir;
  std::string md = fixture_markdown(dir);
  // t5-base fp32 with checkpointing, batch 4: W 0.83, grads 0.83, AdamW 1.66, activations
  // 4 * 82 MiB = 0.32 GiB, 64 MiB other, peak 3.70 GiB; activations 9% of it.
  EXPECT_NE(md.find("| 4 | fp32 | block | 0.83 | 0.83 | 1.66 | 0.32 | 3.70 | 9% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("other (GiB) 0.06, overhead (GiB) 0.09."), std::string::npos);
  // gpt2-medium: 8 of its 27 ok points have activations under 25% (e.g. batch 1 fp32/block:
  // 461 MiB of 5.74 GiB = 8%); AdamW state (2W) is the largest part there.
  std::regex advice(
      "Activations are under 25% of peak memory at 8 of 27 points \\(e\\.g\\. batch 1, fp32 / "
      "block / acc 1 / adamw: 8%\\), where optimizer state is the largest part \\(4[0-9]%\\), so "
      "gradient checkpointing and smaller batches will not help much there; a lighter optimizer "
      "state \\(adafactor or sgd\\)");
  EXPECT_TRUE(std::regex_search(md, advice)) << md;
}

TEST(Report, HeaderCountsAndFailures) {
  TempDir dir;
  std::string md = fixture_markdown(dir);
  EXPECT_NE(md.find("(47 rows, 46 points)"), std::string::npos) << md;
  EXPECT_NE(md.find("- Points: 41 ok, 2 oom, 1 crash, 1 timeout, 1 skipped"), std::string::npos);
  EXPECT_NE(md.find("- Device: Fixture GPU 80GB (not a measurement) (79.65 GiB)"),
            std::string::npos);
  EXPECT_NE(md.find("- Memory budget: 24.00 GiB (emulated), whole device"), std::string::npos);
  EXPECT_NE(md.find("- torch 2.11.0, CUDA 13.0"), std::string::npos);
  EXPECT_NE(md.find("- Suite 0.1.0, commit fixture00000"), std::string::npos);
  EXPECT_NE(md.find("- Measured: 2025-11-20T10:01:34Z to 2025-11-21T"), std::string::npos);
  EXPECT_NE(md.find("Budget emulation was in effect"), std::string::npos);
  EXPECT_NE(md.find("| t5-base | 32 | none | crash (SIGSEGV) | backward | signal 11 | worker "
                    "killed by signal 11 (SIGSEGV) in backward | 44 |"),
            std::string::npos);
  EXPECT_NE(md.find("| t5-base | 32 | block | timeout | forward | signal 9 |"), std::string::npos);
}

TEST(Report, ThroughputFrontierAndNoisyTimes) {
  TempDir dir;
  std::string md = fixture_markdown(dir);
  EXPECT_NE(md.find("- fp32, no checkpointing: fits up to batch 8, out of memory from batch 16\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- fp16-amp, no checkpointing: fits up to batch 16, out of memory from batch 32\n"),
            std::string::npos);
  EXPECT_NE(md.find("- bf16, no checkpointing: largest measured batch 16, no out-of-memory seen (the limit was not reached); batch 32: crash\n"),
            std::string::npos);
  // The fixture's fp16-amp batch-1 samples spread by 14% (stddev / mean of 3 samples).
  EXPECT_NE(md.find("at 1 point (up to 14%)"), std::string::npos);
  EXPECT_NE(md.find("| 8 | fp32 | none | 6900 | 6.7 | 1187.2 | 1.0% |"), std::string::npos);
}

TEST(Report, DrawsSvgPngAndASelfContainedHtml) {
  // scripts/setup.sh installs gnuplot-nox; without it this test fails rather than skips, so
  // a machine that cannot draw the plots is noticed (the no-gnuplot path has its own test).
  ASSERT_TRUE(has_gnuplot()) << "gnuplot not installed: run scripts/setup.sh (gnuplot-nox)";
  ScopedEnv use_path("SWEEP_GNUPLOT", nullptr);
  TempDir dir;
  testing::internal::CaptureStderr();
  ASSERT_EQ(write_report(kFixture, dir.str()), 0);
  std::string err = testing::internal::GetCapturedStderr();
  // Only where the report is (no plot error, no warning).
  EXPECT_EQ(err.rfind("sweep report: wrote " + (dir.path() / "report.html").string(), 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  std::string md = slurp(dir.path() / "report.md");
  std::regex image("!\\[[^\\]]*\\]\\(([^)]+)\\.svg\\)");
  int images = 0;
  for (std::sregex_iterator it(md.begin(), md.end(), image), end; it != end; ++it, ++images) {
    std::string stem = (*it)[1];
    std::string svg = slurp(dir.path() / (stem + ".svg"));
    EXPECT_TRUE(svg.starts_with("<?xml") || svg.starts_with("<svg")) << stem;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << stem;
    EXPECT_TRUE(slurp(dir.path() / (stem + ".png")).starts_with("\x89PNG\r\n\x1a\n")) << stem;
    EXPECT_TRUE(fs::exists(dir.path() / (stem + ".dat"))) << stem;
  }
  // Per model: memory, breakdown, throughput and one techniques chart (the batch comparing
  // the most); the other batches' tables fold (16 charts before: one per batch).
  EXPECT_EQ(images, 8);
  std::string html = slurp(dir.path() / "report.html");
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  std::size_t embedded = 0;
  for (std::size_t at = 0;
       (at = html.find("src=\"data:image/png;base64,iVBORw0KGgo", at)) != std::string::npos; ++at)
    ++embedded;
  EXPECT_EQ(embedded, 8u);
  EXPECT_NE(html.find("<td class=\"r\">12.89</td>"), std::string::npos);
}

TEST(Report, WhatTheGuidesSayNextToWhatWasMeasuredFromMeasuredPairsOnly) {
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  TempDir dir;
  testing::internal::CaptureStderr();
  ASSERT_EQ(write_report(kFixture, dir.str()), 0);
  testing::internal::GetCapturedStderr();
  const std::string md = slurp(dir.path() / "report.md");
  // T5: six fp32 / pure-bf16 pairs save 49.2% to 49.7% (checked by hand from the fixture).
  EXPECT_NE(md.find("| pure bf16 weights and state | about 50% less | -49% (-50% to -49%) | 6 | 4, 8, 16 | about as quoted |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| batch 8 to 2 | 75% less | -37% (-56% to -19%) | 4 |  | saves less than quoted |"),
            std::string::npos);
  // No 8-bit optimizer rows in the file: no 8-bit line.
  EXPECT_EQ(md.find("8-bit AdamW"), std::string::npos);
}

TEST(Report, ThroughputSaysWhatATokenIsForWhisperAndT5) {
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  TempDir dir;
  fs::create_directories(dir.path());  // the report makes it; the plotter writes into it
  auto said = [&](const std::string& model, const std::string& shape) {
    report::Point p;
    p.model = model;
    p.shape = shape;
    p.mode = Mode::kTrain;
    p.status = Status::kOk;
    p.batch = 1;
    p.precision = Precision::kFp32;
    p.checkpointing = Checkpointing::kNone;
    p.optimizer = OptimizerKind::kAdamW;
    p.tokens_per_s = 1500;
    Document doc;
    Plotter plotter(dir.str());
    report::throughput_section(doc, plotter, report::make_groups({p}).front());
    return doc.markdown();
  };
  EXPECT_NE(said("whisper-tiny-cls", "audio 30 s").find("a token is an encoder position: "), std::string::npos);
  EXPECT_NE(said("whisper-tiny", "audio 30 s, labels 448").find("an encoder position or a label token"),
            std::string::npos);
  EXPECT_NE(said("t5-small", "seq 512, target 128").find("seq + target per sample"), std::string::npos);
  EXPECT_EQ(said("gpt2", "seq 128").find("a token is"), std::string::npos);
}

TEST(Report, MemoryUnderOneGibIsShownInMib) {
  report::Point small, large;
  small.peak_allocated = 45.0 * 1024 * 1024;
  small.peak_reserved = 47.5 * 1024 * 1024;
  const report::MemoryUnit mib = report::unit_for({small});
  EXPECT_EQ(mib.name, "MiB");
  EXPECT_EQ(mib.text(small.peak_reserved), "47.5");
  EXPECT_EQ(mib.header("peak reserved"), "peak reserved (MiB)");
  large.peak_reserved = 1.5 * 1024 * 1024 * 1024;
  const report::MemoryUnit gib = report::unit_for({small, large});  // one unit per group
  EXPECT_EQ(gib.name, "GiB");
  EXPECT_EQ(gib.text(large.peak_reserved), "1.50");
  EXPECT_EQ(gib.text(std::nullopt), "");
}

TEST(Report, TheMemoryChartDrawsTheUsableLineOfTheOneRuleForAnyCard) {
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  {
    // The rows ran under a 24 GiB budget: that budget was what was usable.
    TempDir dir;
    testing::internal::CaptureStderr();
    ASSERT_EQ(write_report(kFixture, dir.str()), 0);
    testing::internal::GetCapturedStderr();
    const std::string gp = slurp(dir.path() / "gpt2-medium-seq-1024-memory.gp");
    EXPECT_NE(gp.find("fits: cap 24.00 GiB"), std::string::npos) << gp;
    const std::string md = slurp(dir.path() / "report.md");
    EXPECT_NE(md.find("| 8 | fp32 | none | ok | 20.49 | 21.31 | 2.85× | yes |"), std::string::npos) << md;
  }
  // A 16 GiB card: cap 16 - the 512 MiB context the rows measured (device_used - peak
  // reserved) = 15.50 GiB, recommended ceiling 16 x 0.9 - 0.5 = 13.90 GiB; batch 4 peaks at
  // 13.40 GiB reserved, batch 8 at 21.31.
  TempDir dir;
  ReportOptions o;
  o.card.memory_gib = 16;
  testing::internal::CaptureStderr();
  ASSERT_EQ(write_report(kFixture, dir.str(), o), 0);
  testing::internal::GetCapturedStderr();
  const std::string gp = slurp(dir.path() / "gpt2-medium-seq-1024-memory.gp");
  EXPECT_NE(gp.find("'fits: cap 15.50 GiB'"), std::string::npos) << gp;
  EXPECT_NE(gp.find("'recommended ceiling 13.90 GiB'"), std::string::npos) << gp;
  const std::string md = slurp(dir.path() / "report.md");
  EXPECT_NE(md.find("| 4 | fp32 | none | ok | 12.89 | 13.40 | 1.79× | yes |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 8 | fp32 | none | ok | 20.49 | 21.31 | 2.85× | no |"), std::string::npos) << md;
  o.card.memory_gib.reset();
  o.card.gpu = "rtx3060";  // as recommend says it: the same card, the same usable memory
  ASSERT_EQ(write_report(kFixture, dir.str(), o), 0);
  RecommendOptions ro;
  ro.gpu = "rtx3060";
  const Target t = card_target({read_results(kFixture)}, ro);
  EXPECT_NE(slurp(dir.path() / "gpt2-medium-seq-1024-memory.gp")
                .find("recommended ceiling " + gib(static_cast<double>(t.ceiling_bytes())) + " GiB"),
            std::string::npos);
}

TEST(Report, WithoutGnuplotWritesTablesAndDataAndSaysHowToGetIt) {
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  TempDir dir;
  testing::internal::CaptureStderr();
  EXPECT_EQ(write_report(kFixture, dir.str()), 0);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("apt-get install gnuplot-nox"), std::string::npos) << err;
  // The one note on gnuplot, and where the report is.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_NE(err.find("sweep report: wrote "), std::string::npos) << err;
  std::string md = slurp(dir.path() / "report.md");
  EXPECT_NE(md.find("apt-get install gnuplot-nox"), std::string::npos);
  EXPECT_NE(md.find("| 4 | fp32 | none | ok | 12.89 |"), std::string::npos);
  EXPECT_NE(md.find("Plot data: gpt2-medium-seq-1024-memory.dat"), std::string::npos);
  EXPECT_EQ(md.find(".svg)"), std::string::npos);
  std::string data = slurp(dir.path() / "gpt2-medium-seq-1024-memory.dat");
  // Peak reserved, the number the rule for "fits" reads.
  EXPECT_NE(data.find("# fp32, no checkpointing\n1\t7.4747772216796875\n2\t9.451339721679688\n"
                      "4\t13.402511596679688\n8\t21.308761596679688\n"),
            std::string::npos)
      << data;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_NE(entry.path().extension(), ".png") << entry.path();
    EXPECT_NE(entry.path().extension(), ".svg") << entry.path();
  }
  EXPECT_EQ(slurp(dir.path() / "report.html").find("<img"), std::string::npos);
}

TEST(Report, DefaultOutputIsTheResultsDirectory) {
  TempDir dir;
  fs::create_directories(dir.path());
  fs::copy_file(kFixture, dir.path() / "results.csv");
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  testing::internal::CaptureStderr();
  EXPECT_EQ(write_report(dir.str()), 0);
  testing::internal::GetCapturedStderr();
  EXPECT_TRUE(fs::exists(dir.path() / "report.md"));
  EXPECT_TRUE(fs::exists(dir.path() / "report.html"));
}

TEST(Report, MalformedRowThrowsWithItsLineAndWritesNothing) {
  TempDir dir;
  try {
    write_report(kMalformed, dir.str());
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 4u);
    EXPECT_NE(e.located().find("report_malformed.csv:4: column 'batch': 'four'"), std::string::npos)
        << e.located();
  }
  EXPECT_FALSE(fs::exists(dir.path()));
}

// A LoRA row (columns the fixture predates, appended here) is its own technique, labelled with
// its rank, and compared with full fine-tuning; rows without the column count as adapter none.
TEST(Report, LoraIsATechniqueOfItsOwn) {
  TempDir dir;
  fs::create_directories(dir.path());
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream s(line);
    while (std::getline(s, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    return cells;
  };
  std::istringstream in(slurp(kFixture));
  std::string header, line, csv;
  std::getline(in, header);
  const auto names = split(header);
  auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  csv = header + ",adapter,lora_r\n";
  std::vector<std::string> lora;
  while (std::getline(in, line)) {
    csv += line + ",,\n";
    const auto cells = split(line);
    if (lora.empty() && cells[col("batch")] == "4" && cells[col("precision")] == "fp32" &&
        cells[col("checkpointing")] == "none" && cells[col("accumulation")] == "1" &&
        cells[col("optimizer")] == "adamw" && cells[col("status")] == "ok")
      lora = cells;
  }
  ASSERT_FALSE(lora.empty());
  // The fp32 / none / adamw point at batch 4 again, with LoRA: 4 GiB at 7000 tokens/s.
  lora[col("point_id")] = "10a0a0a0a0a0a0a0";
  lora[col("peak_allocated_bytes")] = "4294967296";
  lora[col("tokens_per_s")] = "7000";
  lora[col("step_ms_samples")] = "";
  std::string row;
  for (const auto& c : lora) row += (row.empty() ? "" : ",") + c;
  csv += row + ",lora,8\n";
  std::ofstream(dir.path() / "results.csv") << csv;
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  testing::internal::CaptureStderr();
  EXPECT_EQ(write_report(dir.str(), (dir.path() / "out").string()), 0);
  testing::internal::GetCapturedStderr();
  const std::string md = slurp(dir.path() / "out" / "report.md");
  // Batch 4 is charted, or its table folded (one chart per model: the batch comparing most).
  const auto at = std::min(md.find("#### Batch 4"), md.find("<summary>Batch 4:"));
  ASSERT_NE(at, std::string::npos) << md;
  std::string b4 = md.substr(at);
  b4 = b4.substr(0, b4.find("Batch ", 10));
  EXPECT_NE(b4.find("| fp32 | none | 1 | adamw | none | 12.89 | baseline | 6500 | baseline |"),
            std::string::npos)
      << b4;
  // 1 - 4 / 12.89 = 69% saved; 7000 / 6500 = +8%.
  EXPECT_NE(b4.find("| fp32 | none | 1 | adamw | lora r8 | 4.00 | -69% | 7000 | +8% |"),
            std::string::npos)
      << b4;
}

TEST(Report, UnknownStatusIsAnError) {
  TempDir dir;
  fs::create_directories(dir.path());
  std::string csv = slurp(kFixture);
  // Line 3 is the second row; its status "ok" becomes "exploded".
  std::size_t line3 = csv.find('\n', csv.find('\n') + 1) + 1;
  std::size_t ok = csv.find(",ok,", line3);
  csv.replace(ok, 4, ",exploded,");
  std::ofstream(dir.path() / "results.csv") << csv;
  try {
    write_report(dir.str(), (dir.path() / "out").string());
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.line(), 3u);
    EXPECT_NE(
        std::string(e.what()).find("'exploded' is not one of ok, oom, crash, timeout, skipped"),
        std::string::npos);
  }
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
}

TEST(ReportCommand, BadInputExitsTwoWithLocationAndHint) {
  TempDir dir;
  CLI::App app;
  int exit_code = -1;
  register_report_command(app, exit_code);
  testing::internal::CaptureStderr();
  app.parse("report " + kMalformed + " --out " + dir.str());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(err.find("report_malformed.csv:4: "), std::string::npos) << err;
  EXPECT_NE(err.find("\nhint: "), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir.path()));
}

TEST(ReportCommand, MissingDirectoryExitsTwo) {
  CLI::App app;
  int exit_code = -1;
  register_report_command(app, exit_code);
  testing::internal::CaptureStderr();
  app.parse("report /nonexistent/results");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(err.find("hint: pass the directory `sweep run` wrote"), std::string::npos) << err;
}

TEST(ReportCommand, WritesTheReport) {
  TempDir dir;
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  CLI::App app;
  int exit_code = -1;
  register_report_command(app, exit_code);
  testing::internal::CaptureStderr();
  app.parse("report " + kFixture + " --out " + dir.str());
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(exit_code, 0);
  EXPECT_TRUE(fs::exists(dir.path() / "report.md"));
}

TEST(Report, HeaderOnlyFileGivesAnEmptyReport) {
  TempDir dir;
  fs::create_directories(dir.path());
  std::string csv = slurp(kFixture);
  std::ofstream(dir.path() / "results.csv") << csv.substr(0, csv.find('\n') + 1);
  EXPECT_EQ(write_report(dir.str()), 0);
  std::string md = slurp(dir.path() / "report.md");
  EXPECT_NE(md.find("The results file has no rows yet."), std::string::npos) << md;
  EXPECT_NE(md.find("- Points: 0 ok, 0 oom, 0 crash, 0 timeout, 0 skipped"), std::string::npos);
}

// Charts (issue 25, item 7): a colour per titled line, x labels that do not overlap, and an
// outlier that does not squash the throughput axis.
TEST(Report, ChartsGiveEachLineAColourThinTheirTicsAndClipAnOutlier) {
  std::set<std::string> colours;
  for (std::size_t i = 0; i < 8; ++i) colours.insert(palette(i));
  EXPECT_EQ(colours.size(), 8u);
  // Batches 21 and 22 (and 26 to 30) on a log axis up to 97 would overlap: the ends stay.
  const auto tics = thin_tics({1, 2, 4, 8, 16, 21, 22, 26, 27, 28, 29, 30, 64, 97}, true);
  ASSERT_GE(tics.size(), 2u);
  EXPECT_EQ(tics.front(), 1);
  EXPECT_EQ(tics.back(), 97);
  for (std::size_t i = 1; i + 1 < tics.size(); ++i)
    EXPECT_GE(std::log2(tics[i]) - std::log2(tics[i - 1]), std::log2(97.0) / 24 - 1e-9) << tics[i];

  // One row's throughput 40x the others': a chart stops above the rest and names it.
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string c; std::getline(in, c, ',');) cells.push_back(c);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    return cells;
  };
  std::ifstream in(kFixture);
  std::string header, line;
  std::getline(in, header);
  const auto names = split(header);
  const auto column = std::find(names.begin(), names.end(), "tokens_per_s") - names.begin();
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(line);
  bool changed = false;  // the last row with a throughput (an earlier one may be re-measured)
  for (auto r = rows.rbegin(); r != rows.rend() && !changed; ++r) {
    auto cells = split(*r);
    if (cells.size() != names.size() || cells[column].empty()) continue;
    cells[column] = std::to_string(std::stod(cells[column]) * 40);
    r->clear();
    for (std::size_t i = 0; i < cells.size(); ++i) *r += (i ? "," : "") + cells[i];
    changed = true;
  }
  ASSERT_TRUE(changed);
  std::string csv = header + "\n";
  for (const auto& r : rows) csv += r + "\n";
  ScopedEnv no_gnuplot("SWEEP_GNUPLOT", "/nonexistent");
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "out");
  const std::string path = (dir.path() / "in.csv").string();
  std::ofstream(path) << csv;
  testing::internal::CaptureStderr();
  ASSERT_EQ(write_report(path, (dir.path() / "out").string()), 0);
  testing::internal::GetCapturedStderr();
  int clipped = 0, charts = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "out")) {
    if (e.path().extension() != ".gp") continue;
    ++charts;
    const std::string gp = slurp(e.path());
    if (gp.find("off the scale") != std::string::npos) ++clipped;
    std::set<std::string> seen;  // the colours of titled lines of this chart
    std::stringstream lines(gp);
    for (std::string l; std::getline(lines, l);) {
      const auto lc = l.find("lc rgb '"), title = l.find(" title '");
      if (l.find("index ") == std::string::npos || lc == std::string::npos || title == std::string::npos)
        continue;
      EXPECT_TRUE(seen.insert(l.substr(lc + 8, 7)).second) << e.path() << ": a colour twice\n" << gp;
    }
  }
  EXPECT_GT(charts, 0);
  EXPECT_GE(clipped, 1) << "no chart clipped the 40x row";
}

}  // namespace
}  // namespace sweep::reports
