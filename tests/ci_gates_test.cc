// The gates around the GPU CI (issue 57): the workflow's own run and compare steps, taken from
// .github/workflows/gpu-regression.yml and run here with bash on a tiny CPU config, must fail a
// run whose points crash, never record such a run as a baseline, and move the baseline on when
// a push to main passes; scripts/setup.sh installs only what a plain build needs and keeps its
// warnings warnings; scripts/gpu-check.sh refuses binaries of another commit.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "test_util.h"

namespace sweep {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `bash -c CMD` in `dir`, stdout and stderr together.
testing::CommandResult shell(const fs::path& dir, const std::string& cmd) {
  testing::CommandResult r;
  const std::string full = "cd '" + dir.string() + "' && ( " + cmd + " ) 2>&1";
  FILE* p = popen(full.c_str(), "r");
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The `run:` script of the workflow step named `name`.
std::string workflow_step(const std::string& name) {
  const YAML::Node wf =
      YAML::LoadFile(std::string(SWEEP_SOURCE_DIR) + "/.github/workflows/gpu-regression.yml");
  for (const auto& step : wf["jobs"]["gpu-regression"]["steps"])
    if (step["name"] && step["name"].as<std::string>() == name) return step["run"].as<std::string>();
  ADD_FAILURE() << "no step '" << name << "' in the workflow";
  return "exit 99";
}

// A work tree for the workflow's steps: build/sweeps/sweep is this build's binary, and
// configs/ci-gpu.yaml a config of two tiny CPU points (the real one needs a GPU).
class GpuWorkflow : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("gpu_workflow");
    fs::create_directories(dir_ / "build" / "sweeps");
    fs::create_symlink(SWEEP_BINARY, dir_ / "build" / "sweeps" / "sweep");
    fs::create_directories(dir_ / "configs");
    testing::write_file(dir_ / "configs" / "ci-gpu.yaml",
                        "name: ci-gpu\ndevice: cpu\nsteps: 1\nwarmup_steps: 1\nrepetitions: 1\n"
                        "timeout_s: 60\nmodels: [gpt2-test]\ngrid: {seq: 16, batch: [1, 2]}\n");
    base_ = dir_ / "baselines" / "ci-gpu" / "cpu";
  }

  // Runs the step as GitHub does (bash -e -o pipefail), with its outputs file; returns the
  // step's exit status and fills outputs_ with what it wrote to $GITHUB_OUTPUT.
  int step(const std::string& name, const std::string& env) {
    const fs::path script = dir_ / "step.sh", outputs = dir_ / "github_output";
    testing::write_file(script, workflow_step(name));
    fs::remove(outputs);
    const auto r = shell(dir_, "env GITHUB_OUTPUT='" + outputs.string() + "' GITHUB_STEP_SUMMARY='" +
                                   (dir_ / "summary.md").string() + "' BASE='" + base_.string() +
                                   "' COMMITTED='" + (dir_ / "committed").string() +
                                   "' MEMORY_THRESHOLD=1% THROUGHPUT_THRESHOLD=5% " + env +
                                   " bash --noprofile --norc -e -o pipefail " + script.string());
    log_ += "--- " + name + " (" + env + "): exit " + std::to_string(r.exit_code) + "\n" + r.output;
    outputs_.clear();
    std::ifstream in(outputs);
    for (std::string line; std::getline(in, line);)
      if (const auto eq = line.find('='); eq != std::string::npos)
        outputs_[line.substr(0, eq)] = line.substr(eq + 1);
    return r.exit_code;
  }

  fs::path dir_, base_;
  std::map<std::string, std::string> outputs_;
  std::string log_;
};

TEST_F(GpuWorkflow, ItsStepsAreRunnableAsTheyStand) {
  // No ${{ }} inside a script: the values come in through env, so these tests run the text.
  for (const char* name : {"Run the CI sweep", "Compare with this GPU's baseline"})
    EXPECT_EQ(workflow_step(name).find("${{"), std::string::npos) << name;
}

// A build whose every point crashes: the run step records exit 3, the compare step refuses to
// record those rows as the runner's first baseline (exit 2, nothing written), and the job's
// last step fails on either. Before, the run exited 0 and the crash rows became the baseline.
TEST_F(GpuWorkflow, AnAllCrashRunFailsAndIsNeverRecordedAsTheBaseline) {
  ASSERT_EQ(step("Run the CI sweep", "SWEEP_TEST_FAULT=crash"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "3") << log_;
  ASSERT_EQ(step("Compare with this GPU's baseline", "ADVANCE=false"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "2") << log_;
  EXPECT_FALSE(fs::exists(base_ / "results.csv")) << log_;
  const std::string report = slurp(dir_ / "out" / "report.md");
  EXPECT_NE(report.find("could not compare"), std::string::npos) << report;
  EXPECT_NE(report.find("2 of 2 point(s) crashed or timed out"), std::string::npos) << report;
  EXPECT_NE(report.find("not recorded as the baseline"), std::string::npos) << report;
}

// A passing pull request records the first baseline (and its rerun); a passing push to main
// then moves the baseline to its run and keeps the one before beside it; a push whose points
// crash fails and leaves the baseline alone.
TEST_F(GpuWorkflow, APassingRunRecordsThenAdvancesTheBaselineOnMain) {
  ASSERT_EQ(step("Run the CI sweep", ""), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "0") << log_;
  ASSERT_EQ(step("Compare with this GPU's baseline", "ADVANCE=false"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "0") << log_;
  EXPECT_NE(slurp(dir_ / "out" / "report.md").find("## sweep compare: baseline recorded"),
            std::string::npos) << log_;
  const std::string first = slurp(dir_ / "out" / "ci-gpu" / "results.csv");
  EXPECT_EQ(slurp(base_ / "results.csv"), first);
  EXPECT_TRUE(fs::exists(base_ / "rerun.csv")) << log_;
  EXPECT_FALSE(fs::exists(base_ / "results.previous.csv"));

  // A pull request that passes leaves the baseline where it is.
  ASSERT_EQ(step("Run the CI sweep", ""), 0) << log_;
  ASSERT_EQ(step("Compare with this GPU's baseline", "ADVANCE=false"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "0") << log_;
  EXPECT_EQ(slurp(base_ / "results.csv"), first);

  // A push to main that passes: its run is the baseline, the previous one kept beside it.
  ASSERT_EQ(step("Run the CI sweep", ""), 0) << log_;
  const std::string second = slurp(dir_ / "out" / "ci-gpu" / "results.csv");
  ASSERT_NE(second, first);  // other timestamps and times
  ASSERT_EQ(step("Compare with this GPU's baseline", "ADVANCE=true"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "0") << log_;
  EXPECT_EQ(slurp(base_ / "results.csv"), second) << log_;
  EXPECT_EQ(slurp(base_ / "results.previous.csv"), first) << log_;
  EXPECT_NE(slurp(dir_ / "out" / "report.md").find("The baseline advanced to this run"),
            std::string::npos) << log_;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "compare" / "results.previous.csv")) << log_;

  // A push whose points crash: newly failing, a regression; the baseline stays (even were the
  // workflow to ask for an advance, which it does only after a run that exited 0).
  ASSERT_EQ(step("Run the CI sweep", "SWEEP_TEST_FAULT=crash"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "3") << log_;
  ASSERT_EQ(step("Compare with this GPU's baseline", "ADVANCE=true"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "1") << log_;
  EXPECT_EQ(slurp(base_ / "results.csv"), second);
  EXPECT_EQ(slurp(base_ / "results.previous.csv"), first);
}

// The advance refuses a run with a crashed point even when nothing could regress (a point the
// baseline does not have): the baseline is left as it was.
TEST_F(GpuWorkflow, AdvancingRefusesARunWithACrashedPoint) {
  ASSERT_EQ(step("Run the CI sweep", ""), 0) << log_;
  ASSERT_EQ(step("Compare with this GPU's baseline", "ADVANCE=false"), 0) << log_;
  const std::string first = slurp(base_ / "results.csv");
  // batch 4 is new (not comparable) and crashes; batches 1 and 2 are as before.
  testing::write_file(dir_ / "configs" / "ci-gpu.yaml",
                      "name: ci-gpu\ndevice: cpu\nsteps: 1\nwarmup_steps: 1\nrepetitions: 1\n"
                      "timeout_s: 60\nmodels: [gpt2-test]\ngrid: {seq: 16, batch: [1, 2, 4]}\n");
  ASSERT_EQ(step("Run the CI sweep", "SWEEP_TEST_FAULT=crash@4"), 0) << log_;
  EXPECT_EQ(outputs_["exit_code"], "3") << log_;
  const auto r = testing::run_sweep_cli("compare " + (base_ / "results.csv").string() + " " +
                                        (dir_ / "out" / "ci-gpu").string() + " --advance-baseline");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not advanced to this run: 1 of 3 point(s) crashed or timed out"),
            std::string::npos) << r.output;
  EXPECT_EQ(slurp(base_ / "results.csv"), first);
  EXPECT_FALSE(fs::exists(base_ / "results.previous.csv"));
}

// scripts/setup.sh with apt-get, dpkg-query, sudo, python and cmake stubbed: the packages it
// would install and the -Werror it would configure, for a plain build and --tests, under CI.
struct SetupRun {
  std::string apt, cmake, output;
};
SetupRun run_setup(const std::string& name, const std::string& args, const std::string& env = "") {
  const fs::path dir = testing::temp_dir("setup_" + name), bin = dir / "bin";
  fs::create_directories(bin);
  auto stub = [&](const std::string& file, const std::string& body) {
    testing::write_file(bin / file, "#!/bin/sh\n" + body + "\n");
    fs::permissions(bin / file, fs::perms::owner_all);
  };
  stub("dpkg-query", "exit 1");  // nothing installed
  stub("sudo", "exec \"$@\"");
  stub("apt-get", "echo \"$*\" >>'" + (dir / "apt.log").string() + "'");
  stub("python", "echo " + (dir / "torch").string());  // has torch; its cmake prefix
  stub("cmake", "echo \"$*\" >>'" + (dir / "cmake.log").string() + "'; exit 1");  // stops it
  SetupRun r;
  r.output = shell(dir, "env " + env + " PATH='" + bin.string() + ":" + std::getenv("PATH") + "' CI=true SWEEP_PYTHON='" +
                            (bin / "python").string() + "' SWEEP_CACHE='" + (dir / "cache").string() +
                            "' SWEEP_BUILD_DIR='" + (dir / "build").string() + "' '" +
                            SWEEP_SOURCE_DIR + "/scripts/setup.sh' " + args)
                 .output;
  r.apt = slurp(dir / "apt.log");
  r.cmake = slurp(dir / "cmake.log");
  return r;
}

TEST(SetupScript, APlainBuildInstallsOnlyWhatItNeeds) {
  const SetupRun r = run_setup("plain", "");
  EXPECT_NE(r.apt.find("install"), std::string::npos) << r.output;
  for (const char* needed : {" g++", " cmake", " libgtest-dev", " gnuplot-nox"})
    EXPECT_NE(r.apt.find(needed), std::string::npos) << needed << ": " << r.apt;
  for (const char* test_only : {"chromium", "slurmd", "slurmctld", "slurm-client", "munge"})
    EXPECT_EQ(r.apt.find(test_only), std::string::npos) << test_only << ": " << r.apt;
}

// --tests (what .ci/run runs, under CI=true): the test packages too.
TEST(SetupScript, TestsGetTheirPackages) {
  const SetupRun r = run_setup("tests", "--tests");
  for (const char* test_only : {"chromium", "slurmd", "slurmctld", "slurm-client", "munge", "g++"})
    EXPECT_NE(r.apt.find(test_only), std::string::npos) << test_only << ": " << r.apt;
}

// README command 2 after command 1 reuses command 1's objects: both configure alike, with no
// -Werror of their own (CMakeLists.txt decides it by the compiler, for every build), so that
// --tests changes no compile flag of the plain build's objects. SWEEP_WERROR, where set, is
// passed as it is, to both.
TEST(SetupScript, APlainBuildAndTestsConfigureAlike) {
  const SetupRun plain = run_setup("alike_plain", ""), tests = run_setup("alike_tests", "--tests");
  EXPECT_EQ(plain.cmake.find("SWEEP_WERROR"), std::string::npos) << plain.cmake << plain.output;
  EXPECT_EQ(tests.cmake.find("SWEEP_WERROR"), std::string::npos) << tests.cmake << tests.output;
  auto args = [](const std::string& log, const std::string& name) {  // the paths differ by name
    std::string a = log;
    for (auto at = a.find(name); at != std::string::npos; at = a.find(name)) a.replace(at, name.size(), "X");
    return a;
  };
  EXPECT_EQ(args(plain.cmake, "alike_plain"), args(tests.cmake, "alike_tests"));
  for (const char* how : {"", "--tests"}) {
    const SetupRun off = run_setup(std::string("off") + (*how ? "_tests" : ""), how, "SWEEP_WERROR=OFF");
    EXPECT_NE(off.cmake.find("-DSWEEP_WERROR=OFF"), std::string::npos) << how << off.cmake << off.output;
  }
}

// scripts/gpu-check.sh with a packed .gpu/sweep-bin.tar.xz (stub binaries that name a commit),
// in a git checkout of its own; nvidia-smi and python3 stubbed. No stage is asked for: only the
// choice of binaries runs.
class GpuCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("gpu_check");
    fs::create_directories(dir_ / "scripts");
    fs::copy_file(std::string(SWEEP_SOURCE_DIR) + "/scripts/gpu-check.sh", dir_ / "scripts" / "gpu-check.sh");
    testing::write_file(dir_ / "source.cc", "int main() {}\n");
    testing::write_file(dir_ / ".gitignore", "/.gpu/\n/bin/\n/results/\n/build/\n/stage/\n");
    ASSERT_EQ(shell(dir_, "git init -q . && git add -A && git -c user.name=t -c user.email=t@t "
                          "commit -qm t").exit_code, 0);
    head_ = shell(dir_, "git rev-parse --short=12 HEAD").output;
    head_.erase(head_.find_last_not_of('\n') + 1);
    fs::create_directories(dir_ / "bin");
    for (const char* tool : {"nvidia-smi", "python3"}) {
      testing::write_file(dir_ / "bin" / tool, "#!/bin/sh\necho " + (dir_ / "site").string() + "\n");
      fs::permissions(dir_ / "bin" / tool, fs::perms::owner_all);
    }
    fs::create_directories(dir_ / "site");
    fs::create_directories(dir_ / ".gpu");
    testing::write_file(dir_ / ".gpu" / "site-packages", (dir_ / "site").string() + "\n");
    testing::write_file(dir_ / ".gpu" / "source-dir", dir_.string() + "\n");
  }

  // Packs stub binaries whose --version names `commit`.
  void pack(const std::string& commit) {
    const fs::path stage = dir_ / "stage";
    fs::remove_all(stage);
    fs::create_directories(stage / "build" / "sweeps");
    fs::create_directories(stage / "build" / "tests");
    fs::create_directories(stage / "lib");
    for (const char* b : {"build/sweeps/sweep", "build/tests/sweep_tests"}) {
      testing::write_file(stage / b, "#!/bin/sh\necho 'sweep 0.0.0 (" + commit + ")'\n");
      fs::permissions(stage / b, fs::perms::owner_all);
    }
    ASSERT_EQ(shell(stage, "tar -cJf ../.gpu/sweep-bin.tar.xz build lib").exit_code, 0);
  }

  testing::CommandResult check(const std::string& env = "") {
    fs::remove_all(dir_ / "build");
    return shell(dir_, "env PATH='" + (dir_ / "bin").string() + ":" + std::getenv("PATH") +
                           "' RES=results/gpu " + env + " scripts/gpu-check.sh");
  }

  fs::path dir_;
  std::string head_;
};

TEST_F(GpuCheck, BinariesOfAnotherCommitAreRefusedUnlessForced) {
  pack("0123456789ab");
  const auto refused = check();
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("refused .gpu/sweep-bin.tar.xz: they were built at commit "
                                "0123456789ab, the checkout is at " + head_),
            std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(dir_ / "build" / "sweeps" / "sweep"));

  const auto forced = check("FORCE_PREBUILT=1");
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("FORCE_PREBUILT: stale binaries used"), std::string::npos) << forced.output;
  EXPECT_TRUE(fs::exists(dir_ / "build" / "sweeps" / "sweep"));
}

TEST_F(GpuCheck, TheCheckoutsOwnBinariesRunAndChangedSourcesAreRefused) {
  pack(head_);
  const auto same = check();
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("prebuilt binaries"), std::string::npos) << same.output;
  EXPECT_TRUE(fs::exists(dir_ / "build" / "sweeps" / "sweep"));

  // The same commit, a source edited since the binaries were built (sources.sha256 says so).
  ASSERT_EQ(shell(dir_, "sha256sum source.cc >.gpu/sources.sha256").exit_code, 0);
  testing::write_file(dir_ / "source.cc", "int main() { return 1; }\n");
  const auto edited = check();
  EXPECT_EQ(edited.exit_code, 1) << edited.output;
  EXPECT_NE(edited.output.find("sources changed since they were built: source.cc: FAILED"),
            std::string::npos) << edited.output;
}

}  // namespace
}  // namespace sweep
