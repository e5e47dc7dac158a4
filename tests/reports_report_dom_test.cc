// The report's first screen is the answer (issue 25): rendered by headless Chromium, the
// summary (the recommendation, the largest batch per technique, the device) is the first
// section of report.html's DOM, before the metadata. Chromium comes from scripts/setup.sh
// (apt package `chromium`); without it this test fails and says so.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "reports/report/report.h"
#include "temp_tree.h"

namespace sweep::reports {
namespace {

namespace fs = std::filesystem;

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

TEST(ReportDom, TheSummaryIsTheFirstSectionChromiumRenders) {
  const std::string browser = chromium();
  ASSERT_FALSE(browser.empty())
      << "headless Chromium is needed to render the report: scripts/setup.sh installs it "
         "(apt-get install chromium)";
  const fs::path dir =
      fs::temp_directory_path() / ("sweep_report_dom_" + std::to_string(::getpid()));
  sweep::remove_tree(dir);
  const std::string rows = std::string(SWEEP_TEST_DATA) + "/../../docs/tables/rtx3060-results.csv";
  ::setenv("SWEEP_GNUPLOT", "/nonexistent", 1);  // the DOM, not the plots
  ASSERT_EQ(write_report(rows, dir.string()), 0);
  ::unsetenv("SWEEP_GNUPLOT");
  const std::string cmd = browser + " --headless --no-sandbox --disable-gpu --dump-dom file://" +
                          (dir / "report.html").string() + " 2>/dev/null";
  std::string dom;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  ASSERT_TRUE(pipe);
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0;) dom.append(buf.data(), n);
  const auto body = dom.find("<body>");
  ASSERT_NE(body, std::string::npos) << dom.substr(0, 500);
  const auto summary = dom.find("<section id=\"summary\">");
  ASSERT_NE(summary, std::string::npos) << dom.substr(0, 2000);
  // Only the title before it; the metadata and every chart after it.
  EXPECT_EQ(dom.find("<section", body), summary);
  EXPECT_EQ(dom.find("<h2", body), dom.find("<h2", summary));
  EXPECT_GT(dom.find("About these results"), summary);
  const std::string top = dom.substr(summary, dom.find("</section>", summary) - summary);
  EXPECT_NE(top.find("measured on NVIDIA H100 80GB HBM3"), std::string::npos) << top;
  EXPECT_NE(top.find("Recommended"), std::string::npos) << top;
  EXPECT_NE(top.find("11.00 GiB"), std::string::npos) << top;  // the cap, said once
  EXPECT_NE(top.find("<td class=\"r\">14</td>"), std::string::npos) << top;  // gpt2-medium, block
  // The per-model details open folded.
  EXPECT_NE(dom.find("<details><summary>"), std::string::npos);
  sweep::remove_tree(dir);
}

}  // namespace
}  // namespace sweep::reports
