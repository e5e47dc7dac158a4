// `sweep tables` (sweeps/cli/tables.h): the committed tables are the emulator's regression test.
// One card's GPT-2 sections are regenerated from scratch and must equal docs/tables/rtx3060.md's, line
// for line (the emulation is deterministic); a change to the emulator, the allocator model or
// fit's search that moves a number fails here until the tables are regenerated
// (`sweep tables --card rtx3060`, or scripts/tables.sh for every card). The same run's progress
// lines are checked. Also: a misspelt card is a user error that names the flag and writes nothing.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "scratch_dir.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = fs::path(SWEEP_TEST_DATA).parent_path().parent_path();

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// "## heading" -> its text up to the next "## ".
std::map<std::string, std::string> sections(const std::string& md) {
  std::map<std::string, std::string> out;
  std::istringstream in(md);
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) current = line;
    if (!current.empty()) out[current] += line + "\n";
  }
  return out;
}

struct Outcome {
  int code = -1;
  std::string err;
};

Outcome sweep_tables(const std::string& args, const fs::path& dir) {
  const std::string err = (dir / "stderr").string();
  const int status = std::system((std::string(SWEEP_BINARY) + " tables " + args + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(err)};
}

TEST(Tables, RegeneratedRtx3060Gpt2EqualsTheCommittedTable) {
  const std::string committed = read(kSource / "docs/tables/rtx3060.md");
  ASSERT_FALSE(committed.empty()) << "docs/tables/rtx3060.md is missing: sweep tables --card rtx3060";
  ScratchDir dir("sweep_tables_regen");
  // The measured rows go along: the section of seq 512 shows them beside the emulation.
  fs::create_directories(dir.path / "out");
  fs::copy_file(kSource / "docs/tables/rtx3060-results.csv", dir.path / "out/rtx3060-results.csv");
  // The card's whole table is there already: --model regenerates GPT-2's sections only, and
  // keeps every other one. GPT-2 is named by its Hugging Face id, as `sweep models` prints it
  // (it once matched no model and wrote a table of 0 inputs over the committed one).
  fs::copy_file(kSource / "docs/tables/rtx3060.json", dir.path / "out/rtx3060.json");
  const Outcome r = sweep_tables("--card rtx3060 --model openai-community/gpt2 --out " +
                                     (dir.path / "out").string() + " --results " + (dir.path / "results").string(),
                                 dir.path);
  ASSERT_EQ(r.code, 0) << r.err;
  // Progress (issue 37, item 5): [k/N] per card, model and input, its searches' time, an ETA
  // from the first on; then the card's line.
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"((^|\n)\[1/2\] rtx3060, gpt2, seq 512  \d+ searches in \d+\.\d s \(\d+\.\d s a search\) \| ETA \d+ (s|min)[^\n]*\n)"
                        R"(\[2/2\] rtx3060, gpt2, seq 1024  \d+ searches in \d+\.\d s \(\d+\.\d s a search\)\n)"
                        R"(tables: rtx3060: 2 inputs in \d+\.\d s -> )")))
      << r.err;
  const auto fresh = sections(read(dir.path / "out/rtx3060.md"));
  const auto old = sections(committed);
  ASSERT_GT(old.size(), 2u);
  for (const auto& [heading, text] : old) {
    ASSERT_TRUE(fresh.count(heading)) << heading << " was dropped by --model";
    if (!heading.starts_with("## gpt2,")) EXPECT_EQ(fresh.at(heading), text) << heading;
  }
  for (const char* s : {"## gpt2, seq 512", "## gpt2, seq 1024"}) {
    ASSERT_TRUE(fresh.count(s)) << s;
    ASSERT_TRUE(old.count(s)) << s << " is not in docs/tables/rtx3060.md";
    EXPECT_EQ(fresh.at(s), old.at(s))
        << "the emulated RTX 3060 table moved: regenerate with `sweep tables --card rtx3060` "
           "and commit docs/tables/ if the change is meant";
  }
  // The page was written from the same data.
  EXPECT_NE(read(dir.path / "out/index.html").find("\"key\":\"rtx3060\""), std::string::npos);
  // The measured rows sit beside the prediction, and agree for GPT-2 (docs/fidelity.md).
  EXPECT_NE(fresh.at("## gpt2, seq 512").find("| bf16-amp / block / acc 1 / adamw | 27 | 28 | 27 | 28 |"),
            std::string::npos)
      << fresh.at("## gpt2, seq 512");
}

// The catalogue's section (issue 34 item 5) for two decoders on the RTX 3060 (11.0 GiB under
// its cap). Qwen2.5-0.5B trains all three ways at 2048 tokens. Qwen2.5-7B does not at batch 1,
// and each cell says by how much (batch 1's peak on the card without its limit, less the cap):
// most for the full fine-tune (bf16 weights, gradients and AdamW's two moments: 8 bytes a
// parameter), then LoRA on its 15 GB bf16 base, least for QLoRA. The two rows are regenerated
// equal to the committed ones (docs/tables/rtx3060.json), the other rows kept.
TEST(Tables, TheCatalogueSectionSaysTheLargestBatchOrHowFarOver) {
  ScratchDir dir("sweep_tables_catalogue");
  fs::create_directories(dir.path / "out");
  fs::copy_file(kSource / "docs/tables/rtx3060.json", dir.path / "out/rtx3060.json");
  const Outcome r = sweep_tables("--card rtx3060 --model Qwen/Qwen2.5-0.5B --model Qwen/Qwen2.5-7B --out " +
                                     (dir.path / "out").string() + " --results " + (dir.path / "results").string(),
                                 dir.path);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto data = nlohmann::json::parse(read(dir.path / "out/rtx3060.json"));
  ASSERT_TRUE(data.contains("catalogue")) << data.dump().substr(0, 300);
  const double cap = data.at("card").at("cap_bytes");
  std::map<std::string, std::map<std::string, nlohmann::json>> at2048;  // model -> way -> cell
  for (const auto& row : data.at("catalogue").at("rows"))
    for (const auto& c : row.at("cells"))
      if (c.at("seq") == 2048) at2048[row.at("model")][c.at("way")] = c;
  ASSERT_EQ(at2048.count("qwen2.5-0.5b") + at2048.count("qwen2.5-7b"), 2u);
  for (const char* way : {"full", "lora", "qlora"}) {
    EXPECT_GE(at2048["qwen2.5-0.5b"].at(way).at("largest_batch").get<int64_t>(), 1) << way;
    const auto& c = at2048["qwen2.5-7b"].at(way);
    EXPECT_TRUE(c.at("largest_batch").is_null()) << c.dump();
    ASSERT_TRUE(c.contains("over_bytes")) << c.dump();
    EXPECT_GT(c.at("over_bytes").get<double>(), 0) << c.dump();
    EXPECT_DOUBLE_EQ(c.at("over_bytes").get<double>(), c.at("batch1_peak_reserved_bytes").get<double>() - cap);
  }
  auto over = [&](const char* way) { return at2048["qwen2.5-7b"].at(way).at("over_bytes").get<double>(); };
  EXPECT_GT(over("full"), over("lora"));
  EXPECT_GT(over("lora"), over("qlora"));
  EXPECT_GT(at2048["qwen2.5-7b"].at("full").at("batch1_peak_reserved_bytes").get<double>(), 8 * 7615616512.0);
  const std::string md = read(dir.path / "out/rtx3060.md");
  EXPECT_NE(md.find("| qwen2.5-7b | 7.62B | does not fit at batch 1: "), std::string::npos) << md;
  // The emulation is deterministic: the two rows regenerated equal the committed ones, and the
  // card's every section (the catalogue's too, its other rows kept from the data) the committed.
  const auto committed = nlohmann::json::parse(read(kSource / "docs/tables/rtx3060.json"));
  ASSERT_TRUE(committed.contains("catalogue")) << "regenerate: sweep tables --card rtx3060";
  EXPECT_EQ(data.at("catalogue").at("rows"), committed.at("catalogue").at("rows"))
      << "the emulated catalogue moved: regenerate with `sweep tables --card rtx3060` and commit "
         "docs/tables/ if the change is meant";
  const auto fresh = sections(md);
  for (const auto& [heading, text] : sections(read(kSource / "docs/tables/rtx3060.md")))
    EXPECT_EQ(fresh.at(heading), text) << heading;
}

TEST(Tables, AMisspeltCardIsAUserErrorAndWritesNothing) {
  ScratchDir dir("sweep_tables_badcard");
  const Outcome r = sweep_tables("--card rtx3600 --out " + (dir.path / "out").string(), dir.path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--card"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown card 'rtx3600'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: did you mean rtx3060?"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

// Every file tables reads goes through the check the results reader uses (files.h): a FIFO
// where a card's data belongs (it blocked forever), or data missing a key (it said "json
// out_of_range" without the file), is refused with the file's name, before any fit runs, and
// nothing is written.
TEST(Tables, AFifoOrBrokenCardDataIsRefusedByNameBeforeAnyFit) {
  ScratchDir dir("sweep_tables_fifo");
  const fs::path out = dir.path / "out";
  fs::create_directories(out);
  ASSERT_EQ(::mkfifo((out / "l4.json").c_str(), 0644), 0);
  const std::string args = "--card t4 --model gpt2 -q --out " + out.string() + " --results " +
                           (dir.path / "results").string();
  const std::string err = (dir.path / "stderr").string();
  int status = std::system(("timeout 60 " + std::string(SWEEP_BINARY) + " tables " + args + " 2>" + err).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << "124: it blocked on the FIFO\n" << read(err);
  EXPECT_NE(read(err).find((out / "l4.json").string() + ": not a regular file (a FIFO)"), std::string::npos)
      << read(err);
  EXPECT_FALSE(fs::exists(out / "t4.json"));
  EXPECT_FALSE(fs::exists(dir.path / "results"));  // no fit ran

  fs::remove(out / "l4.json");
  std::ofstream(out / "l4.json") << R"({"tables_json_version": 2, "entries": []})";
  const Outcome broken = sweep_tables(args, dir.path);
  EXPECT_EQ(broken.code, 2) << broken.err;
  EXPECT_NE(broken.err.find((out / "l4.json").string() +
                                ": tables_json_version: not the data of a table this sweep writes"),
            std::string::npos)
      << broken.err;
  EXPECT_NE(broken.err.find("hint: regenerate it: sweep tables --card l4"), std::string::npos) << broken.err;
  EXPECT_FALSE(fs::exists(out / "t4.json"));
}

}  // namespace
}  // namespace sweep
