// The per-card tables (reports/tables/tables.h): a card's data printed as Markdown and as the offline
// page with the same cells; the measured RTX 3060 rows beside a prediction, a disagreement said
// in docs/fidelity.md's words; and the committed docs/tables/index.html opened in headless
// Chromium (which scripts/setup.sh installs: its absence fails, it does not skip), driven by
// the URL's hash, its numbers read back from the DOM and compared with the committed Markdown.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include "reports/results/cards.h"
#include <sstream>

#include "reports/tables/tables.h"
#include "scratch_dir.h"

namespace sweep::reports {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSource = fs::path(SWEEP_TEST_DATA).parent_path().parent_path();

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

json technique(const std::string& label, json largest, json first_oom, double peak, int probes) {
  json t = {{"label", label}, {"largest_batch", largest}, {"first_oom", first_oom}, {"probes", probes}};
  if (largest.is_number()) {
    t["peak_reserved_bytes"] = peak;
    t["headroom_bytes"] = 10.0 * kGiB - peak;
  }
  return t;
}

json card_data() {
  json fit = {{"card", {{"budget_bytes", 10.0 * kGiB}, {"cap_bytes", 10.0 * kGiB}, {"ceiling_bytes", 9.8 * kGiB}}},
              {"techniques",
               {technique("fp32, no checkpointing, adamw", 4, 5, 9.5 * kGiB, 6),
                technique("bf16-amp, block checkpointing, adamw", 64, nullptr, 3.0 * kGiB, 8),
                technique("fp32, no checkpointing, adamw, use_cache=False", nullptr, 1, 0, 1),
                technique("bf16-amp, no checkpointing, adamw", 9, 10, 9.9 * kGiB, 7)}},
              {"recommendation",
               {{"label", "fp32, no checkpointing, adamw"},
                {"batch", 4},
                {"accumulation", 8},
                {"peak_reserved_bytes", 9.6 * kGiB}}}};
  return {{"tables_json_version", kTablesJsonVersion},
          {"card",
           {{"key", "t4"}, {"name", "T4"}, {"memory_gib_sold", 16}, {"memory_bytes", 14.56 * kGiB},
            {"memory_source", "https://github.com/Zheng-Chong/CatVTON/issues/133"},
            {"context_bytes", 512 << 20}, {"context_measured", false},
            {"context_source", sweep::kDefaultContextSource},
            {"compute_capability", "7.5"}, {"sms", 40}, {"margin", 0.1}, {"cap_bytes", 10.0 * kGiB}, {"ceiling_bytes", 9.8 * kGiB}}},
          {"command", "sweep tables --card t4"},
          {"fit_flags", ""},
          {"commit", "abc1234"},
          {"suite_version", "0.1.0"},
          {"effective_batch", 32},
          {"precision_note", "T4 (sm_75) has no bf16 tensor cores."},
          {"entries", {{{"model", "gpt2"}, {"input", "seq 512"}, {"fit", fit}}}}};
}

// The cells of the Markdown table that follows `heading` ("## gpt2, seq 512"), unescaped as a
// reader sees them: one vector per row, the header and the separator left out.
std::vector<std::vector<std::string>> markdown_rows(const std::string& md, const std::string& heading) {
  std::vector<std::vector<std::string>> rows;
  const auto at = md.find("\n" + heading + "\n");
  if (at == std::string::npos) return rows;
  std::istringstream in(md.substr(at + heading.size() + 2));
  std::string line;
  int table_lines = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) break;
    if (!line.starts_with("| ")) {
      if (table_lines) break;  // the first table only
      continue;
    }
    if (++table_lines <= 2) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (std::size_t i = 2; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        cell += line[++i];
      } else if (line[i] == '|') {
        cells.push_back(cell.substr(0, cell.find_last_not_of(' ') + 1));
        cell.clear();
        ++i;  // the space after
      } else {
        cell += line[i];
      }
    }
    rows.push_back(cells);
  }
  return rows;
}

TEST(Tables, MarkdownRanksByMemoryAndSaysEveryCellIsPredicted) {
  const std::string md = card_markdown(card_data());
  EXPECT_EQ(md.rfind("# T4: what trains, predicted by emulation\n", 0), 0u) << md.substr(0, 200);
  EXPECT_NE(md.find("- **Commit:** abc1234 (sweep 0.1.0)."), std::string::npos);
  EXPECT_NE(md.find("- **Card:** T4, compute capability 7.5, 40 SMs; memory 14.56 GiB as CUDA "
                    "reports it"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- **Probes:** 22 over 4 combinations, 5.5 per combination on average, at most 8."),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("**Ranking:** by memory, not speed"), std::string::npos);
  EXPECT_NE(md.find("**Precision:** T4 (sm_75) has no bf16 tensor cores."), std::string::npos);
  EXPECT_NE(md.find("micro-batch 4 x accumulation 8, peak reserved 9.60 GiB, under the recommended ceiling of 9.80 GiB"),
            std::string::npos)
      << md;
  const auto rows = markdown_rows(md, "## gpt2, seq 512");
  ASSERT_EQ(rows.size(), 4u) << md;
  // The largest batch first; a search that never ran out of memory says so; nothing fits: none.
  EXPECT_EQ(rows[0], (std::vector<std::string>{"bf16-amp, block checkpointing, adamw",
                                               "64 (limit not reached)", "3.00 GiB", "7.00 GiB", "",
                                               "8", "predicted (emulated T4)"}));
  EXPECT_EQ(rows[1][0], "bf16-amp, no checkpointing, adamw");
  EXPECT_EQ(rows[2][1], "4");
  EXPECT_EQ(rows[2][4], "5");
  EXPECT_EQ(rows[3][0], "fp32, no checkpointing, adamw, use_cache=False");  // unescaped
  EXPECT_EQ(rows[3][1], "none");
}

TEST(Tables, ThePageEmbedsTheSameCellsAndCannotBeClosedByData) {
  json d = card_data();
  d["entries"][0]["fit"]["techniques"][0]["label"] = "fp32 </script><b>x";
  const std::string page = tables_page({d});
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  const auto start = page.find("type=\"application/json\">") + 24;
  const json views = json::parse(page.substr(start, page.find("</script>", start) - start));
  EXPECT_EQ(views, json::array({table_view(d)}));
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));  // no network
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

// A copy of the measured rows where t5-base's largest fitting batch (bf16-amp, block) is said
// out of memory: the prediction (the rows themselves) then disagrees there, and only there.
TEST(Tables, MeasuredBesidePredictedSaysWhereAndWhyTheyDiffer) {
  const fs::path measured = kSource / "docs/tables/rtx3060-results.csv";
  const Results m = read_results(measured.string());
  const json same = measured_beside_predicted(m, m);
  ASSERT_TRUE(same.contains("t5-base|seq 512, target 128")) << same.dump(1).substr(0, 500);
  ASSERT_TRUE(same.contains("whisper-small|audio 30 s"));
  for (const auto& [key, rows] : same.items())
    for (const auto& r : rows) EXPECT_TRUE(r.at("agree").get<bool>()) << key << r.dump();
  const auto& gpt2 = same.at("gpt2|seq 512");
  ASSERT_EQ(gpt2.size(), 3u);
  EXPECT_EQ(gpt2[0].at("technique"), "bf16-amp / none / acc 1 / adamw");  // fastest first
  EXPECT_EQ(gpt2[0].at("measured_largest"), 12);
  EXPECT_EQ(gpt2[0].at("measured_first_oom"), 13);

  ScratchDir dir("sweep_tables_measured");
  std::istringstream in(read(measured));
  std::ofstream out(dir.path / "predicted.csv");
  std::string line;
  int changed = 0;
  while (std::getline(in, line)) {
    if (line.find(",t5-base,") != std::string::npos && line.find(",97,512,128,") != std::string::npos &&
        line.find(",bf16-amp,block,") != std::string::npos && line.find(",ok,") != std::string::npos) {
      line.replace(line.find(",ok,"), 4, ",oom,");
      ++changed;
    }
    out << line << "\n";
  }
  out.close();
  ASSERT_EQ(changed, 1);
  const json differ = measured_beside_predicted(m, read_results((dir.path / "predicted.csv").string()));
  int disagreements = 0;
  for (const auto& [key, rows] : differ.items())
    for (const auto& r : rows)
      if (!r.at("agree").get<bool>()) {
        ++disagreements;
        EXPECT_EQ(key, "t5-base|seq 512, target 128");
        EXPECT_EQ(r.at("predicted_first_oom"), 97);
        EXPECT_EQ(r.at("measured_first_oom"), 98);
        EXPECT_NE(r.at("why").get<std::string>().find("T5's mask layout"), std::string::npos);
      }
  EXPECT_EQ(disagreements, 1);
}

// Runs a command, its stdout.
std::string output_of(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(command.c_str(), "r"), pclose);
  if (!p) return out;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return out;
}

// The rows of the page's technique table, as the DOM holds them after its script ran.
std::vector<std::vector<std::string>> dom_rows(const std::string& dom, const std::string& id) {
  std::vector<std::vector<std::string>> rows;
  const auto start = dom.find("<table id=\"" + id + "\">");
  if (start == std::string::npos) return rows;
  const std::string table = dom.substr(start, dom.find("</table>", start) - start);
  const std::regex tr("<tr[^>]*>(.*?)</tr>"), td("<td[^>]*>(.*?)</td>");
  for (auto r = std::sregex_iterator(table.begin(), table.end(), tr); r != std::sregex_iterator(); ++r) {
    const std::string inner = (*r)[1];
    std::vector<std::string> cells;
    for (auto c = std::sregex_iterator(inner.begin(), inner.end(), td); c != std::sregex_iterator(); ++c) {
      std::string cell = (*c)[1];
      for (const auto& [from, to] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}})
        for (std::size_t at; (at = cell.find(from)) != std::string::npos;) cell.replace(at, std::strlen(from), to);
      cells.push_back(cell);
    }
    if (!cells.empty()) rows.push_back(cells);  // the header row has <th> only
  }
  return rows;
}

std::string chromium_dom(const std::string& hash) {
  const fs::path page = kSource / "docs/tables/index.html";
  return output_of("timeout 120 chromium --headless --no-sandbox --disable-gpu --dump-dom 'file://" +
                   page.string() + "#" + hash + "' 2>/dev/null");
}

TEST(Tables, ThePageRendersInChromiumAndItsNumbersAreTheMarkdowns) {
  ASSERT_EQ(std::system("command -v chromium >/dev/null"), 0)
      << "chromium is not installed: scripts/setup.sh installs it (apt-get install chromium); "
         "this test opens docs/tables/index.html in it";
  const std::string md = read(kSource / "docs/tables/rtx3060.md");
  ASSERT_FALSE(md.empty()) << "docs/tables/rtx3060.md is missing: sweep tables --card rtx3060";
  const auto dom512 = chromium_dom("card=rtx3060&model=gpt2&input=seq%20512");
  const auto rows512 = dom_rows(dom512, "techniques");
  ASSERT_FALSE(rows512.empty()) << "the page drew no table:\n" << dom512.substr(0, 2000);
  EXPECT_EQ(rows512, markdown_rows(md, "## gpt2, seq 512"));
  EXPECT_NE(dom512.find("<svg"), std::string::npos);  // the memory chart
  EXPECT_FALSE(dom_rows(dom512, "measured").empty());  // the measured rows beside
  // Another selection, another table: the numbers of seq 1024's section.
  const auto rows1024 = dom_rows(chromium_dom("card=rtx3060&model=gpt2&seq=1024"), "techniques");
  EXPECT_EQ(rows1024, markdown_rows(md, "## gpt2, seq 1024"));
  EXPECT_NE(rows512, rows1024);
}

// A card name, a technique label and a measured row's device (`measured_on`, the title of the
// measured table) that open HTML's double-escaped script state ("<!--<script"): before the
// page escaped "<", ">" and "&", the data element swallowed the page's script and no card
// rendered. In Chromium the page draws them, each shown as written.
TEST(Tables, HostileNamesInTheDataRenderAsTextInChromium) {
  ASSERT_EQ(std::system("command -v chromium >/dev/null"), 0)
      << "chromium is not installed: scripts/setup.sh installs it (apt-get install chromium)";
  const std::string hostile = "T4 <!--<script> & </script> \u2028\xe2\x80\xa8\xe2\x80\xa9";
  json d = card_data();
  d["card"]["name"] = hostile;
  d["entries"][0]["fit"]["techniques"][0]["label"] = "fp32 <!--<script";
  d["entries"][0]["measured"] = {{"where", "Measured on an H100 <!--<script"}, {"rows", json::array()}};
  const std::string page = tables_page({d});
  for (const char* raw : {"<!--", "<script>", "& <", "\xe2\x80\xa8"})
    EXPECT_EQ(page.find(raw), std::string::npos) << raw;
  const auto start = page.find("type=\"application/json\">") + 24;
  EXPECT_EQ(json::parse(page.substr(start, page.find("</script>", start) - start)),
            json::array({table_view(d)}));

  ScratchDir dir("sweep_tables_hostile");
  std::ofstream(dir.path / "index.html", std::ios::binary) << page;
  const std::string dom = output_of("timeout 120 chromium --headless --no-sandbox --disable-gpu --dump-dom 'file://" +
                                    (dir.path / "index.html").string() + "#card=t4' 2>/dev/null");
  const auto rows = dom_rows(dom, "techniques");
  ASSERT_FALSE(rows.empty()) << "the page drew no table:\n" << dom.substr(0, 3000);
  EXPECT_EQ(rows[0][0], "fp32 <!--<script");
  EXPECT_NE(dom.find("Measured on an H100 &lt;!--&lt;script"), std::string::npos);
  EXPECT_NE(dom.find("T4 &lt;!--&lt;script&gt; &amp; &lt;/script&gt;"), std::string::npos);  // the card's option
}

}  // namespace
}  // namespace sweep::reports
