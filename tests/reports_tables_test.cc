// The per-card tables (reports/tables/tables.h): a card's data printed as Markdown and as the offline
// page with the same cells; the measured RTX 3060 rows beside a prediction, a disagreement said
// in docs/fidelity.md's words; and the committed docs/tables/index.html opened in headless
// Chromium (which scripts/setup.sh installs: its absence fails, it does not skip), driven by
// the URL's hash, its numbers read back from the DOM and compared with the committed Markdown;
// and a page of three cards opened in the comparison view (#compare), its rows, sort, pick cells
// and chart read back and compared with the cards' data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

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

TEST(Tables, MarkdownRanksRowsByBatchAndSaysEveryCellIsPredicted) {
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
  // Rows by the largest batch; the pick is fit's, by predicted speed where one leads by more
  // than the step-time model's error, else by memory (never "no throughput is predicted": the
  // emulated rows carry the step-time model's tokens/s).
  EXPECT_NE(md.find("**Ranking:** rows by the largest batch first. The recommendation is `fit`'s: "
                    "by the tokens/s the step-time model predicts"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("no throughput is predicted"), std::string::npos);
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

// The catalogue's section (issue 34 item 5): a table per length, a column per way; a cell is
// the largest batch, or how far batch 1 is over the cap, or the model's context.
TEST(Tables, TheCatalogueSectionGivesTheLargestBatchOrHowFarOver) {
  json d = card_data();
  auto cell = [](int64_t seq, const char* way, json largest, json first_oom) {
    return json{{"seq", seq}, {"way", way}, {"largest_batch", largest}, {"first_oom", first_oom}};
  };
  json over = cell(2048, "full", nullptr, 1);
  over["over_bytes"] = 3.5 * (int64_t{1} << 30);
  json beyond = {{"seq", 4096}, {"way", "full"}, {"beyond_context", 2048}};
  d["catalogue"] = {
      {"lengths", {2048, 4096}},
      {"ways", {{{"key", "full"}, {"label", "bf16 full fine-tune"}, {"flags", "--precision bf16"}},
                {{"key", "qlora"}, {"label", "QLoRA, NF4 base"}, {"flags", "--weights nf4"}}}},
      {"rows", {{{"model", "qwen2.5-7b"}, {"hf_id", "Qwen/Qwen2.5-7B"}, {"parameters", 7615616512},
                 {"cells", {over, cell(2048, "qlora", 6, 7), beyond, cell(4096, "qlora", 3, nullptr)}}}}}};
  const std::string md = card_markdown(d);
  const auto at = md.find("## The Llama-family catalogue at 2048 and 4096 tokens (predicted)");
  ASSERT_NE(at, std::string::npos) << md;
  const auto first = markdown_rows(md, "## The Llama-family catalogue at 2048 and 4096 tokens (predicted)");
  ASSERT_EQ(first.size(), 1u) << md.substr(at);
  EXPECT_EQ(first[0], (std::vector<std::string>{"qwen2.5-7b", "7.62B", "does not fit at batch 1: 3.50 GiB over", "6"}));
  const auto second = markdown_rows(md, "Sequence length 4096:");
  ASSERT_EQ(second.size(), 1u) << md.substr(at);
  EXPECT_EQ(second[0], (std::vector<std::string>{"qwen2.5-7b", "7.62B", "beyond its 2048-token context",
                                                 "3 (limit not reached)"}));
  EXPECT_EQ(card_markdown(card_data()).find("catalogue"), std::string::npos);  // older data: no section
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
  ASSERT_TRUE(same.contains("whisper-small-cls|audio 30 s"));  // the encoder-classifier it measured
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
        EXPECT_NE(r.at("why").get<std::string>().find("at the cap's edge"), std::string::npos);
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

// One cell of a table as the DOM holds it after the page's script ran: its text (tags such as a
// link's taken out, entities read back) and its class.
struct DomCell {
  std::string text, cls;
  bool operator==(const DomCell&) const = default;
};
struct DomRow {
  std::string cls;
  bool header = false;  // <th> cells
  std::vector<DomCell> cells;
};

// Where the tag opening at `at` ends: past its ">", quoted attribute values skipped (a title
// may hold a "<" or a ">").
std::size_t tag_end(const std::string& s, std::size_t at) {
  char quote = 0;
  for (std::size_t i = at; i < s.size(); ++i) {
    if (quote) {
      if (s[i] == quote) quote = 0;
    } else if (s[i] == '"' || s[i] == '\'') {
      quote = s[i];
    } else if (s[i] == '>') {
      return i + 1;
    }
  }
  return s.size();
}

// The class attribute of the open tag s[at, end), "" when it has none.
std::string class_of(const std::string& s, std::size_t at, std::size_t end) {
  const std::string tag = s.substr(at, end - at);
  const auto c = tag.find(" class=\"");
  return c == std::string::npos ? "" : tag.substr(c + 8, tag.find('"', c + 8) - c - 8);
}

std::string text_of(const std::string& html) {
  std::string text;
  for (std::size_t i = 0; i < html.size();) {
    if (html[i] == '<') {
      i = tag_end(html, i);
      continue;
    }
    text += html[i++];
  }
  for (const auto& [from, to] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}})
    for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += std::strlen(to))
      text.replace(at, std::strlen(from), to);
  return text;
}

// The rows of the page's table `id`. Searched, not matched with std::regex, whose recursion
// overflows the stack on a comparison row of some 40 cells.
std::vector<DomRow> dom_table(const std::string& dom, const std::string& id) {
  std::vector<DomRow> rows;
  const auto start = dom.find("<table id=\"" + id + "\"");
  if (start == std::string::npos) return rows;
  const std::string table = dom.substr(start, dom.find("</table>", start) - start);
  for (std::size_t tr = table.find("<tr"); tr != std::string::npos; tr = table.find("<tr", tr + 1)) {
    DomRow row;
    const auto open = tag_end(table, tr);
    row.cls = class_of(table, tr, open);
    const std::string inner = table.substr(open, table.find("</tr>", open) - open);
    for (std::size_t td = 0; (td = inner.find("<t", td)) != std::string::npos;) {
      const bool th = inner.compare(td, 3, "<th") == 0;
      const auto body = tag_end(inner, td);
      const auto close = inner.find(th ? "</th>" : "</td>", body);
      row.header = row.header || th;
      row.cells.push_back({text_of(inner.substr(body, close - body)), class_of(inner, td, body)});
      td = close;
    }
    rows.push_back(row);
  }
  return rows;
}

// The cells' text of the table's body rows (the header left out).
std::vector<std::vector<std::string>> dom_rows(const std::string& dom, const std::string& id) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : dom_table(dom, id)) {
    if (r.header || r.cells.empty()) continue;
    std::vector<std::string> cells;
    for (const auto& c : r.cells) cells.push_back(c.text);
    rows.push_back(cells);
  }
  return rows;
}

std::string chromium_dom_of(const fs::path& page, const std::string& hash) {
  return output_of("timeout 120 chromium --headless --no-sandbox --disable-gpu --dump-dom 'file://" +
                   page.string() + "#" + hash + "' 2>/dev/null");
}

std::string chromium_dom(const std::string& hash) {
  return chromium_dom_of(kSource / "docs/tables/index.html", hash);
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
  // The card's catalogue below whatever model is chosen: the Markdown's two tables.
  const auto at2048 = dom_rows(dom512, "catalogue-2048");
  ASSERT_FALSE(at2048.empty()) << "the page drew no catalogue";
  EXPECT_EQ(at2048, markdown_rows(md, "## The Llama-family catalogue at 2048 and 4096 tokens (predicted)"));
  EXPECT_EQ(dom_rows(dom512, "catalogue-4096"), markdown_rows(md, "Sequence length 4096:"));
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
  // The data element's text, where the names are (the page's own markup has a <script>).
  const auto start = page.find("type=\"application/json\">") + 24;
  const std::string data = page.substr(start, page.find("</script>", start) - start);
  for (const char* raw : {"<!--", "<script>", "& <", "\xe2\x80\xa8"})
    EXPECT_EQ(data.find(raw), std::string::npos) << raw;
  EXPECT_EQ(json::parse(data), json::array({table_view(d)}));

  ScratchDir dir("sweep_tables_hostile");
  std::ofstream(dir.path / "index.html", std::ios::binary) << page;
  const std::string dom = chromium_dom_of(dir.path / "index.html", "card=t4");
  const auto rows = dom_rows(dom, "techniques");
  ASSERT_FALSE(rows.empty()) << "the page drew no table:\n" << dom.substr(0, 3000);
  // The table ranks by largest batch: fp32's 4 is the third row.
  EXPECT_TRUE(std::ranges::any_of(rows, [](const auto& r) { return r[0] == "fp32 <!--<script"; }));
  EXPECT_NE(dom.find("Measured on an H100 &lt;!--&lt;script"), std::string::npos);
  EXPECT_NE(dom.find("T4 &lt;!--&lt;script&gt; &amp; &lt;/script&gt;"), std::string::npos);  // the card's option
}

// card_data() as another card: its key, name and memory (the cap 0.5 GiB under it), each
// technique's largest batch (a number: its first OOM one above; null: nothing fits) and the
// recommendation (null: nothing fits); no precision note.
json another_card(const std::string& key, const std::string& name, double memory_gib,
                  const std::vector<json>& largest, const json& recommendation) {
  json d = card_data();
  d["card"]["key"] = key;
  d["card"]["name"] = name;
  d["card"]["memory_bytes"] = memory_gib * kGiB;
  d["card"]["cap_bytes"] = (memory_gib - 0.5) * kGiB;
  d.erase("precision_note");
  json& fit = d["entries"][0]["fit"];
  fit["card"]["cap_bytes"] = fit["card"]["budget_bytes"] = d["card"]["cap_bytes"];
  for (std::size_t i = 0; i < largest.size(); ++i) {
    json& t = fit["techniques"][i];
    t["largest_batch"] = largest[i];
    t["first_oom"] = largest[i].is_number() ? json(largest[i].get<int>() + 1) : json(1);
    t["peak_reserved_bytes"] = 3.0 * kGiB;
    t["headroom_bytes"] = (memory_gib - 3.5) * kGiB;
    if (largest[i].is_null()) t.erase("peak_reserved_bytes"), t.erase("headroom_bytes");
  }
  fit["recommendation"] = recommendation;
  return d;
}

// The page with three cards, T4 (card_data()), an A10 with the gpt2 family's measured error,
// and a card whose name and one technique label are HTML, on which nothing fits.
struct ThreeCards {
  std::vector<json> data;
  ScratchDir dir{"sweep_tables_compare"};
  fs::path page = dir.path / "index.html";
  ThreeCards() {
    json a10 = another_card("a10", "A10", 22.5, {12, 128, 3, 20},
                            {{"label", "bf16-amp, no checkpointing, adamw"}, {"batch", 16},
                             {"accumulation", 2}, {"peak_reserved_bytes", 20.0 * kGiB}});
    a10["entries"][0]["fit"]["measured_error"] = {
        {"family", "gpt2"}, {"low", -0.064}, {"high", 0.052}, {"rows", 70}, {"text", "How sure: ..."}};
    json evil = another_card("evil", "<!--<script> & </script><img src=x onerror=alert(1)>", 8,
                             {nullptr, nullptr, nullptr, 2}, nullptr);
    evil["entries"][0]["fit"]["techniques"][3]["label"] = "bf16 <b>bold</b>";
    data = {card_data(), a10, evil};
    std::ofstream(page, std::ios::binary) << tables_page(data);
  }
};

// The comparison of cards (#compare): a row per card, each technique's largest batch the data's,
// the recommended technique's cell marked pick, the chart's bar for each card, names as text.
TEST(Tables, TheComparisonOfCardsShowsEveryCardsNumbersInChromium) {
  ASSERT_EQ(std::system("command -v chromium >/dev/null"), 0)
      << "chromium is not installed: scripts/setup.sh installs it (apt-get install chromium)";
  const ThreeCards three;
  const std::string dom = chromium_dom_of(three.page, "compare&model=gpt2&input=seq%20512");
  const auto table = dom_table(dom, "cards");
  ASSERT_EQ(table.size(), 4u) << "the page drew no comparison:\n" << dom.substr(0, 3000);
  ASSERT_TRUE(table[0].header);
  std::vector<std::string> headers;
  for (const auto& c : table[0].cells) headers.push_back(c.text);
  const std::vector<std::string> labels = {
      "fp32, no checkpointing, adamw", "bf16-amp, block checkpointing, adamw",
      "fp32, no checkpointing, adamw, use_cache=False", "bf16-amp, no checkpointing, adamw",
      "bf16 <b>bold</b>"};  // every card's, in fit's order
  std::vector<std::string> want = {"card", "memory (as CUDA reports it)", "cap", "recommended",
                                   "micro-batch x accumulation", "peak reserved", "caveats"};
  const std::size_t first_technique = want.size();
  want.insert(want.end(), labels.begin(), labels.end());
  EXPECT_EQ(headers, want);

  for (std::size_t i = 0; i < three.data.size(); ++i) {
    const json& d = three.data[i];
    const json& fit = d["entries"][0]["fit"];
    const auto& cells = table[i + 1].cells;
    ASSERT_EQ(cells.size(), want.size()) << i;
    EXPECT_EQ(cells[0].text, d["card"]["name"]);  // the data's order
    EXPECT_EQ(cells[1].text, format_bytes(d["card"]["memory_bytes"].get<double>()));
    EXPECT_EQ(cells[2].text, format_bytes(d["card"]["cap_bytes"].get<double>()));
    int picks = 0;
    for (std::size_t j = 0; j < labels.size(); ++j) {
      const DomCell& cell = cells[first_technique + j];
      const auto t = std::ranges::find_if(fit["techniques"], [&](const json& x) { return x["label"] == labels[j]; });
      if (t == fit["techniques"].end()) {
        EXPECT_EQ(cell.text, "") << d["card"]["name"] << " " << labels[j];
        continue;
      }
      const json shown = cell.text == "none" ? json(nullptr) : json(std::stoi(cell.text));
      EXPECT_EQ(shown, (*t)["largest_batch"]) << d["card"]["name"] << " " << labels[j] << ": " << cell.text;
      const bool pick = fit["recommendation"].is_object() && fit["recommendation"]["label"] == labels[j];
      EXPECT_EQ(cell.cls, pick ? "n pick" : "n") << d["card"]["name"] << " " << labels[j];
      picks += pick;
    }
    EXPECT_EQ(picks, fit["recommendation"].is_object() ? 1 : 0) << d["card"]["name"];
  }
  const auto row = [&](std::size_t i, std::size_t from) {
    return std::vector<std::string>{table[i].cells[from].text, table[i].cells[from + 1].text,
                                    table[i].cells[from + 2].text};
  };
  EXPECT_EQ(row(1, 3), (std::vector<std::string>{"fp32, no checkpointing, adamw", "4 x 8", "9.60 GiB"}));
  EXPECT_EQ(row(2, 3), (std::vector<std::string>{"bf16-amp, no checkpointing, adamw", "16 x 2", "20.00 GiB"}));
  EXPECT_EQ(row(3, 3), (std::vector<std::string>{"nothing fits", "", ""}));
  EXPECT_EQ(table[1].cells[first_technique + 1].text, "64+");  // the search stopped at 64 without an OOM
  EXPECT_EQ(table[1].cells[6].text, "T4 (sm_75) has no bf16 tensor cores; predicted");
  EXPECT_EQ(table[2].cells[6].text, "predicted; measured error -6.4% to +5.2% of peak (70 rows)");

  // The chart: each card's largest batch of its recommended technique.
  const auto chart_at = dom.find("<div id=\"compare-chart\"><svg");
  ASSERT_NE(chart_at, std::string::npos) << dom.substr(0, 3000);
  const std::string chart = dom.substr(chart_at, dom.find("</svg>", chart_at) - chart_at);
  for (const char* bar : {">T4<", ">4, fp32, no checkpointing, adamw<", ">A10<",
                          ">20, bf16-amp, no checkpointing, adamw<", ">nothing fits<",
                          ">&lt;!--&lt;script&gt; &amp; &lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;<"})
    EXPECT_NE(chart.find(bar), std::string::npos) << bar << "\n" << chart;
  // Names as text: no element came from the data.
  EXPECT_EQ(dom.find("<img"), std::string::npos);
  EXPECT_EQ(dom.find("<b>"), std::string::npos);
  EXPECT_NE(dom.find("<div id=\"one\" hidden"), std::string::npos);  // the one-card view is put away
}

// Sorting: the hash names the column (a header's click writes it); numbers sort as numbers (4
// before 12 ascending) and a card with none comes last either way. The chart draws the technique
// the hash names. One card's view marks its recommended row and charts largest batches.
TEST(Tables, TheComparisonSortsByAColumnAndOneCardMarksItsPickInChromium) {
  ASSERT_EQ(std::system("command -v chromium >/dev/null"), 0)
      << "chromium is not installed: scripts/setup.sh installs it (apt-get install chromium)";
  const ThreeCards three;
  const std::string column = "compare&model=gpt2&input=seq%20512&sort=fp32%2C%20no%20checkpointing%2C%20adamw";
  const auto names = [](const std::string& dom) {
    std::vector<std::string> out;
    for (const auto& r : dom_rows(dom, "cards")) out.push_back(r[0]);
    return out;
  };
  const std::string evil = three.data[2]["card"]["name"];
  const std::string down = chromium_dom_of(three.page, column + "&order=desc");
  EXPECT_EQ(names(down), (std::vector<std::string>{"A10", "T4", evil}));
  EXPECT_EQ(dom_table(down, "cards")[0].cells[7].text, "fp32, no checkpointing, adamw \u25bc");
  const std::string up = chromium_dom_of(three.page, column + "&order=asc&chart=bf16-amp%2C%20block%20checkpointing%2C%20adamw");
  EXPECT_EQ(names(up), (std::vector<std::string>{"T4", "A10", evil}));
  for (const char* bar : {">64 (limit not reached)<", ">128<", ">none<"})
    EXPECT_NE(up.find(bar), std::string::npos) << bar;

  const std::string one = chromium_dom_of(three.page, "card=a10&model=gpt2&input=seq%20512");
  const auto rows = dom_table(one, "techniques");
  ASSERT_EQ(rows.size(), 5u) << one.substr(0, 3000);
  for (const auto& r : std::vector<DomRow>(rows.begin() + 1, rows.end()))
    EXPECT_EQ(r.cls, r.cells[0].text == "bf16-amp, no checkpointing, adamw" ? "pick" : "") << r.cells[0].text;
  // The chart is the largest batch per technique, not the peak at it.
  EXPECT_NE(one.find(">batch 128, peak 3.00 GiB<"), std::string::npos);
  EXPECT_NE(one.find(">largest batch under the cap of 22.00 GiB, per technique"), std::string::npos);
}

}  // namespace
}  // namespace sweep::reports
