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

// The bytes of the model.safetensors save_pretrained writes for `model`'s parameters (each
// once; transformers leaves tied aliases and non-persistent buffers out), as safetensors 0.8
// lays it out: an 8-byte header size, the JSON header (metadata {"format": "pt"}, then each
// tensor's dtype, shape and data_offsets, sorted by dtype then name) padded with spaces to a
// multiple of 8, then the data.
int64_t safetensors_bytes(torch::nn::Module& model);

// from_pretrained(checkpoint, quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...) or
// (load_in_8bit=True), device_map="cpu") with no dtype (so the checkpoint's: the fp32 a model
// built here saves as), for a model built in a HostScope (standing for the file on disk), on
// the CPU or on Meta standing for it. Traced with torch.profiler's memory events
// (tests/fixtures/make_load_fixtures.py; transformers 5.23, safetensors 0.8, bitsandbytes
// 0.50.2): safetensors reads the whole file into one buffer of the CPU allocator
// (safetensors_bytes; what transformers' loader gets are views into it); then, in natural key
// order, every tensor it need not convert stays that view (same dtype, same device: no copy),
// and each converted layer's weight is quantised from its view (4 bit: Params4bit._quantize,
// the fp32 weight's temporaries; 8 bit: Int8Params._quantize, the weight as float16 then
// int8_vectorwise_quant). The buffer lives as long as any view of it: with an fp32 checkpoint
// the embeddings and norms keep the whole file allocated through training.
void load_checkpoint_cpu(torch::nn::Module& model, const std::string& family, bool four_bit,
                         const models::Quant4Settings& s);

}  // namespace sweep
