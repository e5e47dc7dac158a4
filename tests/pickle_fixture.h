// Reading the fixtures that the scripts in tests/fixtures/ pickle with torch.save.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/weights.h"

namespace sweep {

// tests/fixtures/<name> as the dict torch.save wrote.
inline c10::Dict<c10::IValue, c10::IValue> read_fixture(const std::string& name) {
  return models::read_pickle(std::string(SWEEP_SOURCE_DIR) + "/tests/fixtures/" + name)
      .toGenericDict();
}

// A pickled list of tensors.
inline std::vector<torch::Tensor> tensors(const c10::IValue& list) {
  std::vector<torch::Tensor> out;
  for (const auto& t : list.toList()) out.push_back(t.get().toTensor());
  return out;
}

}  // namespace sweep
