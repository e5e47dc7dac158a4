// fit's second stage, the plan: the technique combinations to search (every axis fit searches,
// schema::fit_axes(), in its nesting order: precision x checkpointing x optimizer x adapter x
// offload x weights x the model's cache) and the config that searches them, OUT/fit.yaml, not
// yet written.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sweeps/cli/fit.h"
#include "sweeps/cli/fit_question.h"

namespace sweep {

struct FitPlan {
  std::vector<FitTechnique> wanted;  // in the order the answer lists them
  std::string out;                   // OUT: --out, or results/fit-<model slug>-<card>
  std::string name;                  // fit-<model>-<card>
  YAML::Node gpu;                    // the emulated card as fit.yaml names it; null otherwise
  YAML::Node config;                 // fit.yaml
  std::string comment;               // fit.yaml's first lines
};

// Stage 2. UserError for a flag's value that is no technique, or a combination that cannot
// train (int8 weights without LoRA).
FitPlan plan(const FitQuestion& q);

}  // namespace sweep
