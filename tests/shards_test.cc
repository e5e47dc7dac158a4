// The pure parts of the Slurm launcher: which combinations a task owns, the --array value,
// the generated scripts, the plan's fingerprint. The cluster itself is in slurm_test.cc.
#include <gtest/gtest.h>

#include "sweeps/runner/shards.h"
#include "sweeps/runner/slurm.h"

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
        "exec '/opt/sweep/bin/sweep' run '/home/me/it'\\''s.yaml' --out '/shared/out' --slurm-task "
        "\"$SLURM_ARRAY_TASK_ID\" '--search' 'max-batch'\n"})
    EXPECT_NE(a.find(line), std::string::npos) << line << " not in\n" << a;
  for (const char* line : {"#SBATCH --job-name=sweep-rtx3060-merge\n", "#SBATCH --partition=gpu\n",
                           "#SBATCH --qos=high\n", "exec '/opt/sweep/bin/sweep' merge '/shared/out'\n"})
    EXPECT_NE(m.find(line), std::string::npos) << line << " not in\n" << m;
  EXPECT_EQ(m.find("--gres"), std::string::npos) << "the merge needs no GPU";
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
