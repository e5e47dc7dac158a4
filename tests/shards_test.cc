// The pure parts of the Slurm launcher: which combinations a task owns, the --array value,
// the generated scripts, the plan's fingerprint. The cluster itself is in slurm_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "sweeps/runner/shards.h"
#include "sweeps/runner/slurm.h"
#include "test_util.h"

namespace sweep {
namespace {

TEST(Shards, TaskOwnsEveryKthCombination) {
  EXPECT_EQ(task_combinations(1, 3, 8), (std::vector<std::size_t>{1, 4, 7}));
  EXPECT_EQ(task_combinations(2, 3, 2), (std::vector<std::size_t>{}));
  std::vector<int> owner(2500, -1);
  for (std::size_t t = 0; t < kMaxArrayTasks; ++t)
    for (std::size_t j : task_combinations(t, kMaxArrayTasks, owner.size())) {
      EXPECT_EQ(owner[j], -1) << "combination " << j << " has two tasks";
      owner[j] = static_cast<int>(t);
    }
  for (std::size_t j = 0; j < owner.size(); ++j) EXPECT_GE(owner[j], 0) << "combination " << j << " has none";
}

TEST(Shards, ArraySpecCompressesRunsAndLimitsParallelism) {
  EXPECT_EQ(array_spec({0, 1, 2, 3}, 2), "0-3%2");
  EXPECT_EQ(array_spec({0, 1, 2, 5, 7, 8}, 0), "0-2,5,7-8");
  EXPECT_EQ(array_spec({4}, 1), "4%1");
}

TEST(Shards, ScriptsCarryTheOptionsAndRunTheTaskAndTheMerge) {
  ScriptSpec s;
  s.name = "rtx3060";
  s.exe = "/opt/sweep/bin/sweep";
  s.config = "/home/me/it's.yaml";
  s.out = "/shared/out";
  s.array = "0-68%8";
  s.task_args = {"--search", "max-batch"};
  s.slurm.partition = "gpu";
  s.slurm.gres = "gpu:1";
  s.slurm.time = "02:00:00";
  s.slurm.account = "lab";
  s.slurm.sbatch_args = {"--qos=high"};
  const std::string a = array_script(s), m = merge_script(s);
  for (const char* line :
       {"#!/bin/bash\n", "#SBATCH --job-name=sweep-rtx3060\n", "#SBATCH --array=0-68%8\n",
        "#SBATCH --output=/shared/out/slurm/logs/task-%a-%A.out\n", "#SBATCH --gres=gpu:1\n",
        "#SBATCH --time=02:00:00\n", "#SBATCH --partition=gpu\n", "#SBATCH --account=lab\n",
        "#SBATCH --qos=high\n",
        "exec /opt/sweep/bin/sweep run '/home/me/it'\\''s.yaml' --out /shared/out --slurm-task "
        "\"$SLURM_ARRAY_TASK_ID\" --search max-batch\n"})
    EXPECT_NE(a.find(line), std::string::npos) << line << " not in\n" << a;
  for (const char* line : {"#SBATCH --job-name=sweep-rtx3060-merge\n", "#SBATCH --partition=gpu\n",
                           "#SBATCH --qos=high\n", "exec /opt/sweep/bin/sweep merge /shared/out\n"})
    EXPECT_NE(m.find(line), std::string::npos) << line << " not in\n" << m;
  EXPECT_EQ(m.find("--gres"), std::string::npos) << "the merge needs no GPU";
}

// Strings a hostile user passes as --partition, --sbatch-arg, the config's name or --out
// (control characters are refused before they reach a script: hostile_input_test.cc).
std::vector<std::string> hostile_words(const std::string& marker) {
  return {"gpu'; touch " + marker + "; '", "$(touch " + marker + ")", "`touch " + marker + "`",
          "${IFS}touch${IFS}" + marker, "a;touch " + marker, "a && touch " + marker,
          "a || touch " + marker, "a | touch " + marker, "a > " + marker, "<" + marker,
          "two  spaces", "*", "?", "[a-z]*", "~", "{a,b}", "$HOME", "-leading-dash", "--x=y",
          "\"double\"", "'", "''", "\\", "a\\'b", "\\\\'", "#not-a-comment", "a #b", "!!",
          "%a%A", "üñíçødé ✓", "", "plain-word_1.2:3,4@5%6+7=8/9"};
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Each hostile word quoted, read back by bash as the very same word.
TEST(SlurmScript, ShellQuoteReadsBackAsTheSameWordInBash) {
  const auto dir = testing::temp_dir("shell_quote");
  const std::string marker = (dir / "PWNED").string();
  const auto words = hostile_words(marker);
  std::string script = "printf '%s\\0'";
  for (const auto& w : words) script += " " + shell_quote(w);
  testing::write_file(dir / "q.sh", script + " > " + (dir / "words").string() + "\n");
  ASSERT_EQ(std::system(("cd " + dir.string() + " && bash q.sh").c_str()), 0) << script;
  std::vector<std::string> back;
  std::stringstream in(read_file(dir / "words"));
  for (std::string w; std::getline(in, w, '\0');) back.push_back(w);
  EXPECT_EQ(back, words) << script;
  EXPECT_FALSE(std::filesystem::exists(marker)) << script;
  // Plain words stay readable; everything else is quoted.
  EXPECT_EQ(shell_quote("gpu:1"), "gpu:1");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("a\\b"), "'a'\\\\'b'");
  EXPECT_EQ(shell_quote(""), "''");
}

// The generated scripts with a hostile word in every value that reaches them, run by bash with
// the sweep binary replaced by a stub that records its arguments: nothing else runs, and the
// stub gets each value whole.
TEST(SlurmScript, GeneratedScriptsRunOnlySweepWhateverTheValues) {
  const auto dir = testing::temp_dir("slurm_script_exec");
  const std::string marker = (dir / "PWNED").string();
  const auto stub = testing::write_file(dir / "stub sweep", "#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$ARGS\"\n");
  std::filesystem::permissions(stub, std::filesystem::perms::owner_all);
  for (const auto& w : hostile_words(marker)) {
    SCOPED_TRACE("value: " + w);
    ScriptSpec s;
    s.name = w;
    s.exe = stub;
    s.config = (dir / ("c " + w + ".yaml")).string();
    s.out = (dir / ("o " + w)).string();
    s.array = "0-3%2";
    s.task_args = {"--search", w};
    s.slurm.partition = s.slurm.account = s.slurm.gres = s.slurm.time = w;
    s.slurm.sbatch_args = {"--comment=" + w, w};
    for (const auto& [file, text, expected] :
         {std::tuple{"array.sbatch", array_script(s),
                     std::vector<std::string>{"run", s.config, "--out", s.out, "--slurm-task", "7",
                                              "--search", w}},
          std::tuple{"merge.sbatch", merge_script(s), std::vector<std::string>{"merge", s.out}}}) {
      testing::write_file(dir / file, text);
      const std::string args = (dir / "args").string();
      std::filesystem::remove(args);
      const int rc = std::system(("cd " + dir.string() + " && SLURM_ARRAY_TASK_ID=7 ARGS=" + args +
                                  " bash " + file + " 2>/dev/null").c_str());
      EXPECT_EQ(rc, 0) << text;
      std::vector<std::string> got;
      std::stringstream in(read_file(args));
      for (std::string a; std::getline(in, a, '\0');) got.push_back(a);
      EXPECT_EQ(got, expected) << text;
      EXPECT_FALSE(std::filesystem::exists(marker)) << "the script ran a command of the value:\n" << text;
      // Every #SBATCH line stays one line: a comment to bash.
      std::stringstream lines(text);
      std::size_t sbatch = 0, commands = 0;
      for (std::string l; std::getline(lines, l);) {
        sbatch += l.rfind("#SBATCH ", 0) == 0;
        commands += !l.empty() && l[0] != '#';
      }
      EXPECT_EQ(commands, 1u) << text;
      // Always: job name, output, ntasks (and the array's --array), the two --sbatch-arg;
      // unless empty: partition, account (and the array's gres, time).
      const std::size_t given = w.empty() ? 0 : 1;
      EXPECT_EQ(sbatch, file == std::string("array.sbatch") ? 4 + 2 + 4 * given : 3 + 2 + 2 * given)
          << text;
    }
  }
}

TEST(Shards, FingerprintFollowsTheCombinationsNotTheBudget) {
  Point p;
  p.model = "gpt2";
  std::vector<std::vector<Point>> combos = {{p}};
  const std::string before = plan_fingerprint(combos, false);
  combos[0][0].budget_bytes = 1 << 30;  // a node that measured another context allowance
  EXPECT_EQ(plan_fingerprint(combos, false), before);
  combos[0][0].batch = 2;
  EXPECT_NE(plan_fingerprint(combos, false), before);
  EXPECT_NE(plan_fingerprint(combos, true), plan_fingerprint(combos, false));
}

}  // namespace
}  // namespace sweep
