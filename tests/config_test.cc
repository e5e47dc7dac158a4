// Config errors name the file, the line and the key, carry a hint, and exit 2 in the CLI.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include "sweeps/config.h"
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

TEST(Config, DefaultsNameAndOutFromTheFile) {
  auto path = testing::write_file(testing::temp_dir("defaults") / "my-card.yaml", "models: gpt2-test\n");
  auto c = load_config(path);
  EXPECT_EQ(c.name, "my-card");
  EXPECT_EQ(c.out, "results/my-card");
  ASSERT_EQ(c.sweeps.size(), 1u);
  EXPECT_EQ(c.sweeps[0].models, std::vector<std::string>{"gpt2-test"});
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
