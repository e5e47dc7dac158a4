// Loading weights by name; see weights.h.
#include "models/weights.h"

#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

namespace sweep::models {

LoadReport load_state_dict(torch::nn::Module& m, const c10::Dict<c10::IValue, c10::IValue>& state) {
  LoadReport r;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& item : m.named_parameters()) {
    const auto& name = item.key();
    auto& param = item.value();
    auto it = state.find(name);
    if (it == state.end()) throw std::runtime_error("no saved tensor for parameter " + name);
    const auto saved = it->value().toTensor();
    if (saved.sizes() != param.sizes()) {
      throw std::runtime_error("parameter " + name + " has shape " + c10::str(param.sizes()) +
                               ", the saved tensor " + c10::str(saved.sizes()));
    }
    param.copy_(saved);
    used.insert(name);
    ++r.loaded;
  }
  for (const auto& entry : state) {
    const auto& key = entry.key().toStringRef();
    if (!used.count(key)) r.unused.push_back(key);
  }
  return r;
}

c10::IValue read_pickle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes);
}

}  // namespace sweep::models
