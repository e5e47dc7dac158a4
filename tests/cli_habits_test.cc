// The CLI's habits (issue 25, item 10): `fit` first in --help and an example under every
// command; "did you mean" for models, cards and axis values from one helper; Hugging Face ids
// accepted where `sweep models` prints them; a missing config lists configs/*.yaml; an
// override's error names the override; a tab and an axis at the top level get their hints.
// A misspelt flag gets the nearest flag of its subcommand and that subcommand's --help (issue
// 37, item 6).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "reports/results/cards.h"
#include "reports/results/spelling.h"
#include "sweeps/cli/cli.h"
#include "sweeps/cli/command_line.h"
#include "sweeps/runner/config.h"
#include "test_util.h"

namespace sweep {
namespace {

TEST(Spelling, OneHelperSuggestsForEveryKindOfName) {
  EXPECT_EQ(edit_distance("meduim", "medium"), 1u);  // a swap of neighbours is one typo
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  const std::vector<std::string> precisions = {"fp32", "bf16", "bf16-amp", "fp16-amp"};
  EXPECT_EQ(nearest("bfloat16", precisions), (std::vector<std::string>{"bf16", "bf16-amp"}));
  EXPECT_EQ(did_you_mean("bfloat16", precisions), "did you mean bf16 or bf16-amp? ");
  EXPECT_EQ(did_you_mean("fp23", precisions), "did you mean fp32? ");
  EXPECT_EQ(did_you_mean("banana", precisions), "");
  EXPECT_EQ(did_you_mean("", precisions), "");
  EXPECT_EQ(nearest("gpt2-meduim", {"gpt2", "gpt2-medium", "gpt2-large"}),
            (std::vector<std::string>{"gpt2-medium"}));
  // The same name but for punctuation: that one, not the longer names it begins (a newcomer's
  // `gpt-2` was offered gpt2-xl or gpt2-test).
  EXPECT_EQ(nearest("gpt-2", {"gpt2", "gpt2-medium", "gpt2-xl", "gpt2-test"}),
            (std::vector<std::string>{"gpt2"}));
  EXPECT_NE(unknown_model_hint("gpt-2").find("did you mean gpt2? "), std::string::npos)
      << unknown_model_hint("gpt-2");
  EXPECT_NE(unknown_model_hint("gpt2-meduim").find("did you mean gpt2-medium? "), std::string::npos)
      << unknown_model_hint("gpt2-meduim");
  EXPECT_NE(unknown_model_hint("openai-community/gpt2-meduim").find("did you mean gpt2-medium? "),
            std::string::npos);
  try {
    canonical_axis_value("precision", "bfloat16", "c.yaml", 3, "grid.precision");
    ADD_FAILURE() << "bfloat16 was taken";
  } catch (const UserError& e) {
    EXPECT_EQ(e.hint().rfind("did you mean bf16 or bf16-amp? expected one of: ", 0), 0u) << e.hint();
  }
}

TEST(CliHabits, FitIsFirstInHelpAndEveryCommandShowsAnExample) {
  const auto help = testing::run_sweep_cli("--help");
  ASSERT_EQ(help.exit_code, 0) << help.output;
  const auto at = help.output.find("Subcommands:");
  ASSERT_NE(at, std::string::npos) << help.output;
  std::istringstream lines(help.output.substr(at));
  std::vector<std::string> commands;
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(^  ([a-z]+)\s)"))) commands.push_back(m[1]);
  }
  ASSERT_GE(commands.size(), 8u) << help.output;
  EXPECT_EQ(commands.front(), "fit") << help.output;
  for (const auto& c : commands) {
    const auto sub = testing::run_sweep_cli(c + " --help");
    EXPECT_EQ(sub.exit_code, 0) << c;
    EXPECT_TRUE(std::regex_search(sub.output, std::regex("\nExample:\n  sweep " + c + "[ \n]")))
        << c << ":\n" << sub.output;
  }
}

TEST(CliHabits, DidYouMeanForModelsCardsAndAxisValues) {
  const auto dir = testing::temp_dir("cli_did_you_mean");
  const std::string out = " --out " + (dir / "o").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"fit gpt2-meduim --gpu rtx3060", "hint: did you mean gpt2-medium? `sweep models` lists them"},
      {"fit gpt2-test --gpu 3060", "hint: did you mean rtx3060? "},
      {"fit gpt2-test --gpu a100", "hint: did you mean a100-40gb or a100-80gb? "},
      {"fit gpt2-test --gpu rtx3060 --precision bfloat16", "hint: did you mean bf16 or bf16-amp? "},
  };
  for (const auto& [args, hint] : cases) {
    const auto r = testing::run_sweep_cli(args + out);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(hint), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "o")) << args;
  }
  // An override: its error names the override as typed, not a file.
  const auto cfg = testing::write_file(dir / "c.yaml", "models: [gpt2-test]\ngrid: {batch: 1}\n");
  const auto o = testing::run_sweep_cli("run " + cfg + " 'grid.precision=[bfloat16]' --dry-run");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("error: command line: grid.precision=[bfloat16]: unknown value 'bfloat16'"),
            std::string::npos) << o.output;
  EXPECT_NE(o.output.find("hint: did you mean bf16 or bf16-amp? "), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("/tmp/"), std::string::npos) << o.output;
}

// The error `sweep ARGS` gets from the parser, with the commands the binary registers.
UserError parse_refusal(std::vector<std::string> args) {
  CLI::App app{"sweep"};
  app.name("sweep");
  app.set_version_flag("--version", "sweep (test)");  // as main.cc sets it
  app.require_subcommand(1);
  int code = 0;
  register_commands(app, code);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return command_line_error(app, e);
  }
  ADD_FAILURE() << "parsed";
  return UserError("", 0, "", "", "");
}

TEST(CliHabits, MisspeltFlagsGetTheNearestFlagOfTheirSubcommand) {
  struct Case {
    std::vector<std::string> args;
    std::string message, hint;
  };
  const std::vector<Case> cases = {
      {{"fit", "gpt2", "--gpu", "rtx3060", "--seq-len", "512"}, "`sweep fit` has no flag --seq-len",
       "did you mean --seq? run `sweep fit --help`"},
      {{"fit", "gpt2", "--gpu=rtx3060", "--precison=bf16"}, "`sweep fit` has no flag --precison",
       "did you mean --precision? run `sweep fit --help`"},
      {{"tables", "--crad", "a10g"}, "`sweep tables` has no flag --crad", "did you mean --card? run `sweep tables --help`"},
      {{"fit", "gpt2", "--banana"}, "`sweep fit` has no flag --banana", "run `sweep fit --help`"},
      {{"fitt", "gpt2"}, "`sweep` has no command fitt", "did you mean fit? run `sweep --help`"},
      {{"--verison"}, "`sweep` has no flag --verison", "did you mean --version? run `sweep --help`"},
  };
  for (const auto& c : cases) {
    const UserError e = parse_refusal(c.args);
    EXPECT_EQ(std::string(e.what()), c.message) << c.args.back();
    EXPECT_EQ(e.hint(), c.hint) << c.args.back();
  }
}

// A newcomer's `--adapter qlora` is told the two settings QLoRA is.
TEST(CliHabits, QloraIsLoraOverNf4Weights) {
  try {
    canonical_axis_value("adapter", "qlora", "", 0, "--adapter");
    ADD_FAILURE() << "qlora was taken";
  } catch (const UserError& e) {
    EXPECT_NE(e.hint().find("--adapter lora --weights nf4"), std::string::npos) << e.hint();
  }
}

TEST(CliHabits, MisspeltFlagEndToEnd) {
  const auto r = testing::run_sweep_cli("fit gpt2-test --gpu rtx3060 --seq-len 64");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("error: `sweep fit` has no flag --seq-len\nhint: did you mean --seq? run `sweep fit --help`"),
            std::string::npos)
      << r.output;
}

TEST(CliHabits, HuggingFaceIdsNameTheirModels) {
  const auto dir = testing::temp_dir("cli_hf_ids");
  const auto cfg = testing::write_file(dir / "c.yaml",
                                       "device: cpu\nmodels: [openai-community/gpt2-medium]\n"
                                       "grid: {batch: 1, seq: 64}\nexclude: [{model: openai-community/gpt2-medium, batch: 2}]\n");
  const auto r = testing::run_sweep_cli("run " + cfg + " --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gpt2-medium b=1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("openai-community/gpt2-medium b="), std::string::npos) << r.output;
  // fit takes the id as `sweep models` prints it, and names the model by its zoo name (here
  // in the flag error that stops it before anything runs).
  const auto f = testing::run_sweep_cli("fit openai-community/gpt2 --gpu rtx3060 --seq 100000 --out " +
                                        (dir / "o").string());
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("longer than gpt2's"), std::string::npos) << f.output;
}

TEST(CliHabits, ConfigMistakesGetTheirHints) {
  const auto dir = testing::temp_dir("cli_config_hints");
  // A missing config lists the configs there are.
  const auto missing = testing::run_sweep_cli("run configs/nosuch.yaml --dry-run",
                                              std::string("cd ") + SWEEP_SOURCE_DIR + " &&");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("error: configs/nosuch.yaml: no such file"), std::string::npos)
      << missing.output;
  EXPECT_NE(missing.output.find("configs/quickstart.yaml"), std::string::npos) << missing.output;
  // A tab in the indentation: said so, at its line (yaml-cpp says "illegal map value").
  const auto tab = testing::write_file(dir / "tab.yaml", "models: [gpt2-test]\ngrid:\n\tbatch: [1, 2]\n");
  const auto t = testing::run_sweep_cli("run " + tab + " --dry-run");
  EXPECT_EQ(t.exit_code, 2) << t.output;
  EXPECT_NE(t.output.find(tab + ":3: YAML syntax error: this line is indented with a tab"), std::string::npos)
      << t.output;
  EXPECT_NE(t.output.find("hint: YAML forbids tabs for indentation: indent with spaces"), std::string::npos)
      << t.output;
  // An axis at the top level, or in a sweeps entry: towards its grid.
  const auto top = testing::write_file(dir / "top.yaml", "models: [gpt2-test]\nbatch: [1, 2]\n");
  const auto b = testing::run_sweep_cli("run " + top + " --dry-run");
  EXPECT_EQ(b.exit_code, 2) << b.output;
  EXPECT_NE(b.output.find("batch: unknown key: batch is a grid axis"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("hint: write it under `grid:`, e.g. grid: {batch: [...]} (on the command line "
                          "grid.batch=[...])"),
            std::string::npos) << b.output;
  const auto group = testing::write_file(dir / "group.yaml", "sweeps:\n  - models: [gpt2-test]\n    seq: 64\n");
  const auto g = testing::run_sweep_cli("run " + group + " --dry-run");
  EXPECT_EQ(g.exit_code, 2) << g.output;
  EXPECT_NE(g.output.find("sweeps[0].grid.seq=[...]"), std::string::npos) << g.output;
  // A misspelt key: the nearest.
  const auto key = testing::write_file(dir / "key.yaml", "models: [gpt2-test]\nstep: 3\n");
  const auto k = testing::run_sweep_cli("run " + key + " --dry-run");
  EXPECT_NE(k.output.find("hint: did you mean steps? "), std::string::npos) << k.output;
}

// Item 9: `report` and `recommend` take a results CSV as well as a directory, and a file inside
// a git work tree but outside its results/ gets its output under results/<name>/, not beside it
// (`recommend docs/tables` used to fail; `report` on a repo folder wrote its files into it).
TEST(CliHabits, ReportAndRecommendTakeACsvAndWriteUnderResults) {
  namespace fs = std::filesystem;
  const fs::path repo = testing::temp_dir("cli_habits_csv");
  fs::create_directories(repo / ".git");
  fs::create_directories(repo / "data");
  fs::copy_file(fs::path(SWEEP_SOURCE_DIR) / "docs/tables/rtx3060-results.csv", repo / "data/rtx3060-results.csv",
                fs::copy_options::overwrite_existing);
  const std::string csv = (repo / "data/rtx3060-results.csv").string();
  const auto rec = testing::run_sweep_cli("recommend " + csv + " --gpu rtx3060");
  ASSERT_EQ(rec.exit_code, 0) << rec.output;
  EXPECT_TRUE(fs::exists(repo / "results/rtx3060-results/recommendations.md")) << rec.output;
  EXPECT_NE(rec.output.find((repo / "results/rtx3060-results").string()), std::string::npos) << rec.output;
  // The one card of these rows is its cross-GPU column: no column of cards nothing reached.
  EXPECT_EQ(rec.output.find("| A100 80GB"), std::string::npos) << rec.output;
  const auto rep = testing::run_sweep_cli("report " + csv, "SWEEP_GNUPLOT=/nonexistent");
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_TRUE(fs::exists(repo / "results/rtx3060-results/report.html")) << rep.output;
  EXPECT_NE(rep.output.find("report.html"), std::string::npos) << rep.output;
  std::vector<std::string> in_data;
  for (const auto& e : fs::directory_iterator(repo / "data")) in_data.push_back(e.path().filename());
  EXPECT_EQ(in_data, (std::vector<std::string>{"rtx3060-results.csv"})) << "written beside the CSV";
}

// Item 4: the README is a front page (at most 200 lines, the two commands first) and every
// page it sends the reader to exists; every card's table is on its first screen (#26).
TEST(CliHabits, TheReadmeIsAFrontPageWhoseLinksExist) {
  namespace fs = std::filesystem;
  const fs::path root = SWEEP_SOURCE_DIR;
  std::ifstream in(root / "README.md");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  EXPECT_LE(lines.size(), 200u);
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  const auto block = text.find("```sh\n");
  ASSERT_NE(block, std::string::npos);
  EXPECT_NE(text.find("scripts/setup.sh && build/sweeps/sweep run configs/quickstart.yaml", block), std::string::npos);
  // Command 1 builds only what it runs; command 2 builds the tests and runs them, and CI runs
  // exactly command 2 (issue 37, item 1).
  const std::string test_command =
      "scripts/setup.sh --tests && ctest --test-dir build --output-on-failure -j \"$(nproc)\"";
  EXPECT_NE(text.find(test_command, block), std::string::npos);
  std::ifstream ci(root / ".ci" / "run");
  const std::string ci_text{std::istreambuf_iterator<char>(ci), {}};
  EXPECT_NE(ci_text.find("\n" + test_command + "\n"), std::string::npos) << ci_text;
  const std::regex link(R"(\]\(((docs|configs|scripts)/[^)#]+)[)#])");
  int links = 0;
  for (std::sregex_iterator m(text.begin(), text.end(), link), end; m != end; ++m, ++links)
    EXPECT_TRUE(fs::exists(root / (*m)[1].str())) << (*m)[1].str();
  EXPECT_GE(links, 8);
  // A newcomer finds their card on the first screen: every card's table is linked above the
  // two commands, within the first 20 lines.
  std::string first_screen;
  for (std::size_t i = 0; i < std::min<std::size_t>(20, lines.size()); ++i) first_screen += lines[i] + "\n";
  EXPECT_LT(first_screen.find("docs/tables/index.html"), first_screen.find("```sh"));
  int cards = 0;
  for (const auto& e : fs::directory_iterator(root / "docs" / "tables")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".md" || name.find("-measured") != std::string::npos) continue;
    ++cards;
    EXPECT_NE(first_screen.find("](docs/tables/" + name + ")"), std::string::npos) << name;
  }
  // Ten or more once every card is regenerated; after 2026-11-27's release (memory as CUDA
  // reports it, T5 on transformers 5.23) only the RTX 3060 and A10 were, and the stale tables
  // were taken down rather than left answering wrong (README says how to write one).
  EXPECT_GE(cards, 2);
}

}  // namespace
}  // namespace sweep
