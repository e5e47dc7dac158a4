// Config errors name the file, the line and the key, carry a hint, and exit 2 in the CLI.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include "reports/results/vocab.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "test_util.h"

namespace sweep {
namespace {

UserError error_of(const std::string& name, const std::string& yaml) {
  auto path = testing::write_file(testing::temp_dir(name) / "bad.yaml", yaml);
  try {
    load_config(path);
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << "no UserError for:\n" << yaml;
  return UserError("", 0, "", "");
}

TEST(Config, UnknownTopLevelKeyNamesLineAndKey) {
  auto e = error_of("unknown", "models: [gpt2-test]\nstepz: 3\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.key(), "stepz");
  EXPECT_NE(e.hint().find("steps"), std::string::npos);
}

TEST(Config, BadAxisValueNamesItsLine) {
  auto e = error_of("precision", "models: [gpt2-test]\ngrid:\n  batch: [1, 2]\n  precision: [fp32,\n    fp8]\n");
  EXPECT_EQ(e.line(), 5);
  EXPECT_EQ(e.key(), "grid.precision");
  EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos);
  EXPECT_NE(e.hint().find("bf16-amp"), std::string::npos);
}

// Each enumerated axis offers its vocabulary's names (reports/results/vocab.h), and the hint
// lists them all; optimizer "none" is what an eval point gets, not something to ask for.
TEST(Config, EnumeratedAxesOfferTheVocabularysNames) {
  const std::pair<std::string, std::string> axes[] = {
      {"mode", choices<Mode>()},           {"precision", choices<Precision>()},
      {"checkpointing", choices<Checkpointing>()}, {"adapter", choices<Adapter>()},
      {"offload", choices<Offload>()},     {"weights", choices<Weights>()},
      {"optimizer", "adamw, adamw-fused, sgd, adafactor, adamw8bit, paged-adamw8bit, paged-adamw32bit"},
  };
  for (const auto& [axis, names] : axes) {
    auto e = error_of("vocab_" + axis, "models: [gpt2-test]\ngrid:\n  " + axis + ": [nonesuch]\n");
    EXPECT_EQ(e.key(), "grid." + axis);
    // After a "did you mean" where a name is near ("nonesuch" spells out checkpointing's none).
    EXPECT_TRUE(e.hint().ends_with("expected one of: " + names)) << axis << ": " << e.hint();
  }
  auto none = error_of("vocab_none", "models: [gpt2-test]\ngrid:\n  optimizer: [none]\n");
  EXPECT_EQ(none.key(), "grid.optimizer");
  auto device = error_of("vocab_device", "models: [gpt2-test]\ndevice: tpu\n");
  EXPECT_EQ(device.hint(), "expected one of: auto, cpu, cuda, emulated");
}

TEST(Config, NonNumericBatch) {
  auto e = error_of("batch", "models: [gpt2-test]\ngrid:\n  batch: [1, two]\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "grid.batch");
}

TEST(Config, UnknownModel) {
  auto e = error_of("model", "models:\n  - gpt2-test\n  - gpt5\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(std::string(e.what()).find("gpt5"), std::string::npos);
}

TEST(Config, YamlSyntaxError) {
  auto e = error_of("syntax", "models: [gpt2-test\ngrid: {batch: 1}\n");
  EXPECT_GT(e.line(), 0);
}

TEST(Config, UnknownKeyInsideSweepGroup) {
  auto e = error_of("group", "sweeps:\n  - models: [gpt2-test]\n    gird: {batch: 1}\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "sweeps[0].gird");
}

TEST(Config, MissingModels) {
  auto e = error_of("nomodels", "grid: {batch: 1}\n");
  EXPECT_EQ(e.key(), "models");
}

// Every numeric key keeps its value exactly or is refused with its range; nothing is
// printed with 6 significant digits and read back (batch 1000000 used to run batch 1).
TEST(ConfigNumbers, LargeIntegersStayExact) {
  auto path = testing::write_file(testing::temp_dir("bigints") / "c.yaml",
                                  "models: [gpt2-test]\ngrid: {batch: [1000000, 1e6, 1234567], seq: 1000000}\n");
  auto c = load_config(path);
  EXPECT_EQ(c.grid.at("batch").values, (std::vector<std::string>{"1000000", "1000000", "1234567"}));
  EXPECT_EQ(c.grid.at("seq").values, std::vector<std::string>{"1000000"});
}

TEST(ConfigNumbers, OutOfRangeValuesAreRefusedWithTheirRange) {
  struct Case {
    std::string yaml, key, message, hint;
  };
  const Case cases[] = {
      {"grid: {batch: 1e12}", "grid.batch", "must be at most 1073741824, got 1e12",
       "expected a whole number from 1 to 1073741824"},
      {"grid: {batch: 0}", "grid.batch", "must be at least 1, got 0", "a whole number from 1"},
      {"grid: {batch: -4}", "grid.batch", "must be at least 1, got -4", "a whole number from 1"},
      {"grid: {batch: 2.5}", "grid.batch", "'2.5' is not a whole number", "a whole number"},
      {"grid: {seq: 0}", "grid.seq", "must be at least 1, got 0", "from 1 to 1048576"},
      {"steps: 4294967297", "steps", "must be at most 1000000, got 4294967297", "from 1 to 1000000"},
      {"steps: 2147483648", "steps", "must be at most 1000000", "from 1 to 1000000"},
      {"steps: 99999999999999999999999", "steps", "must be at most 1000000", "from 1 to"},
      {"timeout_s: 1e300", "timeout_s", "must be at most 86400, got 1e300", "from 0.1 to 86400"},
      {"timeout_s: 0", "timeout_s", "must be at least 0.1, got 0", "from 0.1 to 86400"},
      {"timeout_s: .nan", "timeout_s", "is not a number", "from 0.1 to 86400"},
      {"repetitions: 1e9", "repetitions", "must be at most 10000", "from 1 to 10000"},
      {"seed: -1", "seed", "must be at least 0", "a whole number from 0"},
      {"lr: inf", "lr", "'inf' is not a finite number", "a number from 0 to 1000"},
      {"lr: 1e400", "lr", "must be at most 1000, got 1e400", "a number from 0 to 1000"},
      {"grid: {audio_s: 31}", "grid.audio_s", "must be at most 30, got 31", "30 s of audio"},
      {"steps:", "steps", "has no value", "steps: VALUE"},
      {"steps: [3]", "steps", "expected a single value", "steps: VALUE"},
  };
  for (const auto& c : cases) {
    auto e = error_of("range", "models: [gpt2-test]\n" + c.yaml + "\n");
    EXPECT_EQ(e.line(), 2) << c.yaml;
    EXPECT_EQ(e.key(), c.key) << c.yaml;
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.yaml << ": " << e.what();
    EXPECT_NE(e.hint().find(c.hint), std::string::npos) << c.yaml << ": " << e.hint();
  }
}

TEST(ConfigNumbers, ParseIntegerIsExact) {
  const Range r{0, 9e15, true};
  EXPECT_EQ(parse_integer("9007199254740993", {0, 1e17, true}), 9007199254740993);
  EXPECT_EQ(parse_integer("4e3", r), 4000);
  EXPECT_THROW(parse_integer("4e-3", r), std::invalid_argument);
  EXPECT_THROW(parse_integer("", r), std::invalid_argument);
  EXPECT_THROW(parse_integer("0x10", r), std::invalid_argument);
  EXPECT_EQ(number_text(2.5), "2.5");
  EXPECT_EQ(number_text(1e6), "1000000");
}

TEST(Config, DuplicateKeysAreRefused) {
  auto top = error_of("dup_top", "models: [gpt2-test]\nsteps: 3\nsteps: 5\n");
  EXPECT_EQ(top.line(), 3);
  EXPECT_EQ(top.key(), "steps");
  EXPECT_NE(std::string(top.what()).find("duplicate key"), std::string::npos);
  EXPECT_NE(top.hint().find("line 2"), std::string::npos) << top.hint();
  auto grid = error_of("dup_grid", "models: [gpt2-test]\ngrid:\n  batch: [1]\n  seq: 64\n  batch: [2]\n");
  EXPECT_EQ(grid.line(), 5);
  EXPECT_EQ(grid.key(), "grid.batch");
}

TEST(Config, YamlSyntaxErrorHasAHint) {
  auto e = error_of("syntax_hint", "models: [gpt2-test\ngrid: {batch: 1}\n");
  EXPECT_NE(e.hint().find("indentation"), std::string::npos) << e.hint();
}

TEST(Config, DefaultsNameAndOutFromTheFile) {
  auto path = testing::write_file(testing::temp_dir("defaults") / "my-card.yaml", "models: gpt2-test\n");
  auto c = load_config(path);
  EXPECT_EQ(c.name, "my-card");
  EXPECT_EQ(c.out, "results/my-card");
  ASSERT_EQ(c.sweeps.size(), 1u);
  EXPECT_EQ(c.sweeps[0].models, std::vector<std::string>{"gpt2-test"});
}

// The transformers release the models follow (issue 36 item 3): 5.23 unless named; another
// release is refused by line and key, since no other one's forward code is known.
TEST(Config, TransformersReleaseIsFiveTwentyThreeUnlessNamed) {
  const auto dir = testing::temp_dir("transformers");
  EXPECT_EQ(load_config(testing::write_file(dir / "a.yaml", "models: t5-test\n")).transformers, "5.23");
  const auto named = load_config(testing::write_file(dir / "b.yaml", "models: t5-test\ntransformers: \"5.17\"\n"));
  EXPECT_EQ(named.transformers, "5.17");
  RunSettings run;
  for (const auto& p : expand_grid(named, run)) EXPECT_EQ(p.transformers, "5.17");
  auto e = error_of("transformers", "models: t5-test\ntransformers: \"4.40\"\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.key(), "transformers");
  EXPECT_NE(e.hint().find("5.17"), std::string::npos);
}

TEST(Config, DashAndUnderscoreSpellTheSameValue) {
  auto load = [](const std::string& name, const std::string& yaml) {
    return load_config(testing::write_file(testing::temp_dir(name) / "c.yaml", yaml));
  };
  EXPECT_EQ(load("search-dash", "models: [gpt2-test]\nsearch: max-batch\n").search, "max_batch");
  EXPECT_EQ(load("search-underscore", "models: [gpt2-test]\nsearch: max_batch\n").search, "max_batch");
  EXPECT_EQ(load("search-none", "models: [gpt2-test]\nsearch: none\n").search, "");
  // Axis values are kept in their one spelling, so both name the same point.
  const Config c = load("axis", "models: [gpt2-test]\ngrid:\n  precision: [bf16_amp, fp16-amp]\n"
                                "  optimizer: adamw_fused\nexclude:\n  - {precision: bf16_amp}\n");
  EXPECT_EQ(c.grid.at("precision").values, (std::vector<std::string>{"bf16-amp", "fp16-amp"}));
  EXPECT_EQ(c.grid.at("optimizer").values, std::vector<std::string>{"adamw-fused"});
  EXPECT_EQ(c.exclude.at(0).match.at("precision"), "bf16-amp");
  // A value that is neither spelling is still refused, on its line, with the choices.
  auto e = error_of("search-bad", "models: [gpt2-test]\nsearch: maxbatch\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.key(), "search");
  EXPECT_NE(e.hint().find("max-batch"), std::string::npos) << e.hint();
  EXPECT_EQ(spelled_as("max-batch", {"max_batch", "none"}), "max_batch");
  EXPECT_EQ(spelled_as("max batch", {"max_batch", "none"}), "");
}

TEST(Config, CliSearchTakesEitherSpelling) {
  auto path = testing::write_file(testing::temp_dir("cli-search") / "c.yaml",
                                  "device: cpu\nmodels: [gpt2-test]\ngrid: {batch: [1, 2]}\n");
  for (const std::string spelling : {"max-batch", "max_batch"}) {
    auto r = testing::run_sweep_cli("run " + path + " --dry-run --search " + spelling);
    EXPECT_EQ(r.exit_code, 0) << spelling << "\n" << r.output;
    EXPECT_NE(r.output.find("1 combinations to search"), std::string::npos) << r.output;
  }
  auto r = testing::run_sweep_cli("run " + path + " --dry-run --search maxbatch");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("max-batch (or max_batch), max-seq or none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
  // The override goes through the config's reading: either spelling there too.
  r = testing::run_sweep_cli("run " + path + " --dry-run search=max-batch");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 combinations to search"), std::string::npos) << r.output;
}

TEST(Config, CliExitsTwoWithFileLineAndHint) {
  auto path = testing::write_file(testing::temp_dir("cli") / "bad.yaml",
                                  "models: [gpt2-test]\ngrid:\n  checkpointing: full\n");
  auto r = testing::run_sweep_cli("run " + path + " --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":3: grid.checkpointing"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

TEST(Config, EveryShippedConfigLoads) {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(SWEEP_SOURCE_DIR) + "/configs")) {
    if (f.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(load_config(f.path().string())) << f.path();
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST(Workflow, GpuRegressionWorkflowIsValidYamlWithItsJob) {
  // actionlint is not packaged in Debian; this at least pins the structure CI relies on.
  auto wf = YAML::LoadFile(std::string(SWEEP_SOURCE_DIR) + "/.github/workflows/gpu-regression.yml");
  ASSERT_TRUE(wf["jobs"].IsMap());
  bool gpu_job = false;
  for (const auto& job : wf["jobs"]) {
    const auto& runs_on = job.second["runs-on"];
    std::string text = YAML::Dump(runs_on);
    if (text.find("gpu") != std::string::npos) gpu_job = true;
    ASSERT_TRUE(job.second["steps"].IsSequence());
  }
  EXPECT_TRUE(gpu_job);
}

}  // namespace
}  // namespace sweep

namespace sweep {
namespace {

// `sweep run CONFIG key=value ...`: the overrides set keys and axes, and are checked like the
// file itself (an error names the line of the config with the overrides applied).
TEST(ConfigOverrides, SetAxesAndKeysAndAreCheckedLikeTheFile) {
  const auto dir = testing::temp_dir("overrides");
  const auto cfg = testing::write_file(dir / "c.yaml", "device: cpu\nmodels: [gpt2-test]\ngrid: {batch: [1, 2]}\n");
  auto r = testing::run_sweep_cli("run " + cfg + " --dry-run grid.batch=[1,2,4,8] 'grid.precision=[fp32, bf16]'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("8 points"), std::string::npos) << r.output;
  r = testing::run_sweep_cli("run " + cfg + " --dry-run models=[t5-test] grid.seq=16");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("t5-test b=2 seq=16"), std::string::npos) << r.output;
  for (const std::string bad : {"grid.batch=[0]", "nosuch=1", "'grid.batch=[1,'", "=3", "steps=1e12"}) {
    r = testing::run_sweep_cli("run " + cfg + " --dry-run " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("hint:"), std::string::npos) << bad << "\n" << r.output;
  }
  // A real run keeps the config it ran beside its results.
  r = testing::run_sweep_cli("run " + cfg + " -q --out " + (dir / "out").string() + " steps=1 repetitions=1 grid.seq=8 grid.batch=1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::is_directory(dir / "out" / "configs"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "out" / "configs"),
                          std::filesystem::directory_iterator{}), 1);
  // Another run with other overrides keeps its own file beside the first.
  r = testing::run_sweep_cli("run " + cfg + " -q --out " + (dir / "out").string() + " steps=1 repetitions=1 grid.seq=8 grid.batch=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "out" / "configs"),
                          std::filesystem::directory_iterator{}), 2);
}

}  // namespace
}  // namespace sweep
