// Loading weights saved under Hugging Face's names into a zoo model, by name.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace sweep::models {

// What a load matched: the tensors copied, and the saved names no parameter of ours has (for
// Hugging Face these are tied aliases such as lm_head.weight).
struct LoadReport {
  int64_t loaded = 0;
  std::vector<std::string> unused;
};

// Copies every parameter of `m` from `state` (name -> tensor). Throws std::runtime_error naming
// the parameter when one is missing or its shape differs.
LoadReport load_state_dict(torch::nn::Module& m, const c10::Dict<c10::IValue, c10::IValue>& state);

// Reads a file written by Python's torch.save (or torch::pickle_save) into an IValue.
c10::IValue read_pickle(const std::string& path);

}  // namespace sweep::models
