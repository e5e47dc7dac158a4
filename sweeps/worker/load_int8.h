// from_pretrained(quantization_config=BitsAndBytesConfig(load_in_8bit=True), device_map=
// {"": device}, dtype) onto a GPU, as transformers 5.17 and bitsandbytes 0.50.2 run it: the
// model exists in host memory, and each tensor moves to the device on its own, the converted
// layers' weights quantised as they move. The whole fp32 model is never on the device.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/nf4.h"

namespace sweep {

// The order transformers loads a checkpoint's tensors in: core_model_loading.py sorts the
// state dict by dot_natural_key (split on ".", numbers as numbers: h.2 before h.10).
bool natural_key_less(const std::string& a, const std::string& b);

// Moves a model built in host memory to `device` (CUDA, or Meta standing for a card's) in 8
// bit: every parameter and buffer in natural key order, floating ones in `dtype` (the load's
// dtype), and each converted layer's weight (models::int8_layers) as the loader converts it:
//   value = tensor.to(device, dtype)                 core_model_loading.py _materialize_copy
//   host  = value.T (Conv1D) .to("cpu")               integrations/bitsandbytes.py Bnb8bitQuantize
//   B     = host.contiguous().to(device, float16)     nn/modules.py Int8Params._quantize
//   int8_vectorwise_quant(B): row_stats (fp32, rows), then out_row (int8), nothing else
//                                                     backends/cuda/ops.py (bnb's CUDA kernel)
// B dies when _quantize returns, `value` when the conversion does. The kernel's values are
// computed on the host from the same float16 values (models::int8_quantize_weight, bnb's
// reference code) and copied in; on Meta there are none.
void load_int8(torch::nn::Module& model, const std::string& family, torch::Device device,
               at::ScalarType dtype);

// from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)) onto a GPU
// the same way: tensor by tensor in `dtype`, each converted layer's weight (models::
// layers_4bit) quantised on the device as Bnb4bitQuantize.convert does (Params4bit(value).to(
// device): bnb's quantize_4bit kernel, then the double quantisation; models/nf4.h).
void load_4bit(torch::nn::Module& model, const std::string& family, torch::Device device,
               at::ScalarType dtype, const models::Quant4Settings& s);

}  // namespace sweep
