// Every file report, recommend and compare write goes through the one install_file
// (reports/results/files.h): a link planted at an output's name, in a shared directory beside a
// results file, is replaced by the output and its target is left as it was. Before, plain
// ofstreams followed such links: `ln -s ../victim shared/report.md; sweep report shared/x.csv`
// overwrote the victim, and so did recommendations.md and the charts' .gp files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reports/common/plots.h"
#include "reports/compare/compare.h"
#include "reports/recommend/recommend.h"
#include "reports/report/report.h"
#include "reports/results/files.h"
#include "scratch_dir.h"

namespace sweep::reports {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string data(const std::string& name) { return std::string(SWEEP_TEST_DATA) + "/" + name; }

// Runs `sweep ARGS` through a CLI::App as main does; its exit code.
int cli(void (*register_command)(CLI::App&, int&), const std::string& args) {
  CLI::App app;
  int code = -1;
  register_command(app, code);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  app.parse(args);
  testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 0) << args << "\n" << err;
  return code;
}

// The files a command writes into a fresh directory, by name.
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Plants, in `shared`, a link at every name of `names` (but `keep`) to a victim file outside;
// after `write` runs, each victim still holds its text and each name is a regular file.
void expect_links_replaced(const fs::path& root, const std::set<std::string>& names, const std::string& keep,
                           const std::function<void(const fs::path& shared)>& write) {
  const fs::path shared = root / "shared", victims = root / "victims";
  fs::create_directories(shared);
  fs::create_directories(victims);
  int planted = 0;
  for (const auto& name : names) {
    if (name == keep) continue;
    std::ofstream(victims / name) << "the victim's own text\n";
    fs::create_symlink(fs::path("..") / "victims" / name, shared / name);
    ++planted;
  }
  ASSERT_GT(planted, 1);
  write(shared);
  for (const auto& name : names) {
    if (name == keep) continue;
    EXPECT_EQ(slurp(victims / name), "the victim's own text\n") << name << " was written through its link";
    EXPECT_FALSE(fs::is_symlink(shared / name)) << name;
  }
}

TEST(Outputs, ReportWritesThroughNoPlantedLink) {
  ::setenv("SWEEP_GNUPLOT", "/nonexistent", 1);  // the .dat and .gp files are written all the same
  ScratchDir dir("sweep_outputs_report");
  // The names it writes: report.md, report.html and every chart's .dat and .gp.
  fs::create_directories(dir.path / "first");
  fs::copy_file(data("report_fixture.csv"), dir.path / "first/x.csv");
  cli(register_report_command, "report " + (dir.path / "first/x.csv").string());
  const auto names = names_in(dir.path / "first");
  for (const char* must : {"report.md", "report.html"}) EXPECT_TRUE(names.count(must)) << must;
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.ends_with(".gp"); }));
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.ends_with(".dat"); }));
  expect_links_replaced(dir.path, names, "x.csv", [](const fs::path& shared) {
    fs::copy_file(data("report_fixture.csv"), shared / "x.csv");
    cli(register_report_command, "report " + (shared / "x.csv").string());  // beside the CSV
  });
  ::unsetenv("SWEEP_GNUPLOT");
}

TEST(Outputs, RecommendWritesThroughNoPlantedLink) {
  ScratchDir dir("sweep_outputs_recommend");
  expect_links_replaced(dir.path, {"recommendations.md", "recommendations.csv", "x.csv"}, "x.csv",
                        [](const fs::path& shared) {
                          fs::copy_file(data("recommend_accum.csv"), shared / "x.csv");
                          cli(register_recommend_command,
                              "recommend " + (shared / "x.csv").string() + " --effective-batch 32");
                        });
}

TEST(Outputs, CompareExportWritesThroughNoPlantedLink) {
  ScratchDir dir("sweep_outputs_compare");
  const std::set<std::string> names = {"compare.md",           "compare.json",           "compare.csv",
                                       "benchmark-smaller.json", "benchmark-bigger.json", "bencher.json"};
  expect_links_replaced(dir.path, names, "", [](const fs::path& shared) {
    cli(register_compare_command,
        "compare " + data("compare_base.csv") + " " + data("compare_base.csv") + " --export " + shared.string());
  });
}

// A chart of batches from 10^6 draws: its x range (the batch +- 0.5) once printed as
// [1e+06:1e+06], gnuplot failed with "empty x range", and `sweep run` exited 2 after writing
// every row.
TEST(Outputs, AChartOfAMillionBatchDraws) {
  ASSERT_EQ(std::system("command -v gnuplot >/dev/null 2>&1"), 0) << "gnuplot: run scripts/setup.sh";
  ::unsetenv("SWEEP_GNUPLOT");
  ScratchDir dir("sweep_outputs_million");
  Plotter plotter(dir.path.string());
  LineChart chart;
  chart.stem = "memory";
  chart.title = "peak";
  chart.xlabel = "batch";
  chart.ylabel = "GiB";
  chart.series.push_back({.title = "fp32", .points = {{1000000, 5}}, .color = "#000000"});
  EXPECT_TRUE(plotter.draw(chart)) << (plotter.errors().empty() ? "" : plotter.errors().front());
  EXPECT_NE(slurp(dir.path / "memory.gp").find("set xrange [999999.5:1000000.5]"), std::string::npos);
}

// The helper itself: the temporary file is gone, the link is replaced, its target untouched.
TEST(Outputs, InstallFileReplacesALinkAndLeavesNoTemporaryFile) {
  ScratchDir dir("sweep_outputs_install");
  std::ofstream(dir.path / "victim") << "kept";
  fs::create_symlink("victim", dir.path / "out.md");
  install_file(dir.path / "out.md", "new", "the test file", "", "");
  EXPECT_EQ(slurp(dir.path / "victim"), "kept");
  EXPECT_EQ(slurp(dir.path / "out.md"), "new");
  EXPECT_FALSE(fs::is_symlink(dir.path / "out.md"));
  EXPECT_EQ(names_in(dir.path), (std::set<std::string>{"out.md", "victim"}));
}

}  // namespace
}  // namespace sweep::reports
