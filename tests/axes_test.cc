// The axis table (schema::kAxes, reports/results/schema.h) is the one declaration of each axis:
// what the readers derive from it is what they wrote by hand before it, and a technique reads
// the same from a row, a config and fit's JSON.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reports/results/rows.h"
#include "reports/results/technique.h"
#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The first line where two texts part, for the failure message.
std::string first_difference(const std::string& want, const std::string& got) {
  std::istringstream a(want), b(got);
  std::string x, y;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, x)), more_b = static_cast<bool>(std::getline(b, y));
    if (!more_a && !more_b) return "equal";
    if (!more_a || !more_b || x != y)
      return "line " + std::to_string(line) + ":\n  before: " + (more_a ? x : "<end>") +
             "\n  now:    " + (more_b ? y : "<end>");
  }
}

// Report, recommend (text and JSON), compare and its dashboard exports on the committed results
// and on a run with every technique axis off its plain value, and the plan of that run's config:
// byte for byte what the binary before the table wrote (tests/data/axes/outputs.sh).
TEST(AxisTable, EveryReaderOfTheCommittedResultsWritesWhatItDidBeforeTheTable) {
  const fs::path expected = fs::path(SWEEP_TEST_DATA) / "axes" / "expected";
  const fs::path out = temp_dir("axes_outputs");
  const std::string cmd = (fs::path(SWEEP_TEST_DATA) / "axes" / "outputs.sh").string() + " " +
                          SWEEP_BINARY + " " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  int files = 0;
  for (const auto& e : fs::directory_iterator(expected)) {
    ++files;
    const fs::path got = out / e.path().filename();
    ASSERT_TRUE(fs::exists(got)) << got;
    const std::string want = slurp(e.path()), now = slurp(got);
    EXPECT_EQ(want, now) << e.path().filename() << " differs at " << first_difference(want, now);
  }
  EXPECT_GE(files, 20);
  remove_tree(out);
}

// Every technique axis's plain value is its member's default, and a technique names, counts and
// keys itself from its cells.
TEST(AxisTable, APlainTechniqueHasNoChangeAndNoName) {
  const Technique plain;
  EXPECT_EQ(plain.changes(), 0);
  EXPECT_EQ(name_tail(cells_of(plain), ", "), "");
  Technique t;
  ASSERT_TRUE(t.set("use_cache", "false"));
  ASSERT_TRUE(t.set("offload", "optimizer"));
  ASSERT_TRUE(t.set("weights", "int8"));
  EXPECT_FALSE(t.set("weights", "int9"));
  EXPECT_FALSE(t.set("lora_r", "8"));  // a LoRA setting is no member
  EXPECT_EQ(t.changes(), 3);
  EXPECT_EQ(name_tail(cells_of(t), ", "), ", use_cache=False, offload optimizer, int8 weights");
  EXPECT_EQ(name_tail(cells_of(t), "/", true), "/no-cache/offload-optimizer/weights-int8");
  EXPECT_EQ(t.key(), "fp32|none|adamw|0|none|optimizer|int8|hf");
  EXPECT_EQ(t.json().at("use_cache"), false);
  EXPECT_EQ(t.json().at("weights"), "int8");
  EXPECT_EQ(config_text("use_cache", t.cell("use_cache")), "false");
}

// A phrase's word that names another axis's cell is left out where that cell is empty: fit's
// techniques have no LoRA rank ("lora"), rows do ("lora r16").
TEST(AxisTable, ALoraNameSaysItsRankWhereItHasOne) {
  Technique t;
  ASSERT_TRUE(t.set("adapter", "lora"));
  EXPECT_EQ(name_tail(cells_of(t), ", "), ", lora");
  const TechniqueCells cells = {{"adapter", "lora"}, {"lora_r", "16"}, {"use_cache", "1"},
                               {"offload", "none"}, {"weights", "full"}};
  EXPECT_EQ(name_tail(cells_of(cells), ", "), ", lora r16");
  EXPECT_EQ(name_tail(cells_of(cells), "/", true), "/lora-r16");
  EXPECT_EQ(shown(cells_of(cells), "adapter"), "lora r16");
  EXPECT_EQ(shown(cells_of(cells), "use_cache"), "True");
}

// The config's grid keys nest in the order they always did (the points of a run keep their
// order; a new axis nests innermost), and fit searches its axes in the order its answers list
// them.
TEST(AxisTable, GridAndFitOrdersAreTheTables) {
  const auto grid = schema::grid_axes();
  // clang-format off
  const std::vector<std::string_view> want = {
      "mode",      "seq",          "target_seq", "audio_s",          "precision",    "checkpointing",
      "optimizer", "accumulation", "alloc_conf", "adapter",          "offload",      "batch",
      "use_cache", "weights",      "trainer",    "completion_share", "padding_free",
      "activation_offloading"};
  // clang-format on
  EXPECT_EQ(std::vector<std::string_view>(grid.begin(), grid.end()), want);
  std::vector<std::string_view> fit;
  for (const auto* a : schema::fit_axes()) fit.push_back(a->column);
  EXPECT_EQ(fit, (std::vector<std::string_view>{"precision", "checkpointing", "optimizer", "adapter",
                                                "offload", "weights", "use_cache", "trainer"}));
}

}  // namespace
}  // namespace sweep
