// Hugging Face nests modules that own no parameters of their own ("transformer", "attn",
// "encoder", "DenseReluDense"); an empty holder module reproduces those names, so that our
// parameter names equal Hugging Face's and reference weights load by name.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace sweep::models {

inline std::shared_ptr<torch::nn::Module> holder(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

}  // namespace sweep::models
