// The 8-bit load onto a device; see load_int8.h.
#include "sweeps/worker/load_int8.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>

#include "models/int8.h"
#include "models/nf4.h"
#include "sweeps/measure/trackers.h"

namespace sweep {
namespace {

// core_model_loading.py dot_natural_key: per "."-separated part, (0, int) for digits, else
// (1, text without trailing digits[, trailing digits as an int]).
using KeyPart = std::tuple<int, std::string, int64_t, bool>;  // kind, text, number, has number
std::vector<KeyPart> natural_key(const std::string& s) {
  std::vector<KeyPart> parts;
  for (std::size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = std::min(s.find('.', b), s.size());
    const std::string part = s.substr(b, e - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); });
    if (digits) {
      parts.emplace_back(0, "", std::stoll(part), true);
      continue;
    }
    std::size_t t = part.size();
    while (t > 0 && std::isdigit(static_cast<unsigned char>(part[t - 1]))) --t;
    if (t < part.size()) parts.emplace_back(1, part.substr(0, t), std::stoll(part.substr(t)), true);
    else parts.emplace_back(1, part, 0, false);
  }
  return parts;
}

// A tensor on the device (outside any HostScope), or in host memory: Meta tensors on the
// emulated device, counted by its allocator or as host memory (HostScope).
torch::Tensor on_device(const torch::Tensor& t, torch::Device device, at::ScalarType dtype) {
  if (device.is_meta()) return at::empty_strided(t.sizes(), t.strides(), t.options().dtype(dtype));
  return t.to(device, dtype);
}
// value.to("cpu") then, in _quantize, .contiguous(): host memory, not the device's (on the
// emulated device only the host's counter sees it).
torch::Tensor on_host_contiguous(const torch::Tensor& t) {
  if (t.is_meta()) {
    HostScope host;
    return at::empty(t.sizes(), t.options());
  }
  return t.to(torch::kCPU).contiguous();
}

}  // namespace

bool natural_key_less(const std::string& a, const std::string& b) {
  // Python compares the tuples element by element; (0, n) sorts before any (1, ...).
  const auto ka = natural_key(a), kb = natural_key(b);
  for (std::size_t i = 0; i < std::min(ka.size(), kb.size()); ++i) {
    const auto& [kind_a, text_a, n_a, has_a] = ka[i];
    const auto& [kind_b, text_b, n_b, has_b] = kb[i];
    if (kind_a != kind_b) return kind_a < kind_b;
    if (kind_a == 0) {
      if (n_a != n_b) return n_a < n_b;
      continue;
    }
    if (text_a != text_b) return text_a < text_b;
    if (has_a != has_b) return !has_a;  // (1, "h") < (1, "h", 2): the shorter tuple first
    if (n_a != n_b) return n_a < n_b;
  }
  return ka.size() < kb.size();
}

namespace {

// The loader's walk: every parameter and buffer in natural key order, floating ones in
// `dtype`, each moved on its own; a converted layer's weight ("<layer>.weight" of one of
// `layers`) goes to `convert` with its layer and its value on the device instead.
template <class Layer, class Convert>
void load_each(torch::nn::Module& model, torch::Device device, at::ScalarType dtype,
               std::vector<Layer>& layers, Convert convert) {
  torch::NoGradGuard no_grad;
  std::map<std::string, Layer*> layer_of;
  for (auto& l : layers) layer_of[l.name + ".weight"] = &l;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::set<const c10::TensorImpl*> seen;  // a tensor registered twice moves once
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    if (t.defined() && seen.insert(t.unsafeGetTensorImpl()).second) tensors.emplace_back(name, t);
  };
  for (const auto& item : model.named_parameters()) add(item.key(), item.value());
  for (const auto& item : model.named_buffers()) add(item.key(), item.value());
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const auto& a, const auto& b) { return natural_key_less(a.first, b.first); });
  for (auto& [name, t] : tensors) {
    const at::ScalarType as = t.is_floating_point() ? dtype : t.scalar_type();
    const auto it = layer_of.find(name);
    if (it == layer_of.end()) {
      t.set_data(on_device(t, device, as));  // the host copy goes with the old data
      continue;
    }
    convert(*it->second, on_device(t, device, as));
  }
}

}  // namespace

void load_int8(torch::nn::Module& model, const std::string& family, torch::Device device,
               at::ScalarType dtype) {
  auto layers = models::int8_layers(model, family);
  load_each(model, device, dtype, layers, [&](models::Int8Layer& layer, torch::Tensor value) {
    torch::Tensor CB, SCB;
    {
      auto host = on_host_contiguous(layer.conv1d ? value.t() : value);
      auto B = on_device(host, device, torch::kHalf);
      const int64_t rows = B.numel() / B.size(-1);
      SCB = torch::empty({rows}, B.options().dtype(torch::kFloat));
      CB = torch::empty(B.sizes(), B.options().dtype(torch::kChar));
      if (!host.is_meta()) {
        auto [cb, scb] = models::int8_quantize_weight(host);
        CB.copy_(cb);
        SCB.copy_(scb);
      }
    }
    value.reset();
    set_int8_weight(layer, CB, SCB);
  });
}

void load_4bit(torch::nn::Module& model, const std::string& family, torch::Device device,
               at::ScalarType dtype, const models::Quant4Settings& s) {
  auto layers = models::layers_4bit(model, family);
  load_each(model, device, dtype, layers, [&](models::Layer4& layer, torch::Tensor value) {
    // Bnb4bitQuantize.convert: Params4bit(value (a Conv1D's transposed), ...).to(value.device),
    // quantised where it is; `value` dies with the conversion.
    models::quantize_4bit_layer(layer, layer.conv1d ? value.t() : value, s);
  });
}

namespace {

// The parameters save_pretrained writes: each tensor once, under its first name.
std::vector<std::pair<std::string, torch::Tensor>> saved_parameters(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : model.named_parameters())
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) out.emplace_back(item.key(), item.value());
  return out;
}

// safetensors' dtype names (src/tensor.rs Dtype), for the header's length.
std::string safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kDouble: return "F64";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kBool: return "BOOL";
    default: break;
  }
  TORCH_CHECK(false, "no safetensors dtype for ", t);
  return "";
}

struct Layout {
  int64_t data_start = 0, file_bytes = 0;
  std::map<std::string, int64_t> offset;  // by name, from data_start
};

// safetensors src/tensor.rs prepare: tensors sorted by dtype (larger elements first, as its
// Dtype order puts them for the float types here) then name; the header JSON
// serde_json writes (no spaces) padded with spaces to 8 bytes; data back to back.
Layout safetensors_layout(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::vector<std::pair<std::string, torch::Tensor>> sorted = tensors;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second.element_size() != b.second.element_size())
      return a.second.element_size() > b.second.element_size();
    return a.first < b.first;
  });
  Layout l;
  std::string header = R"({"__metadata__":{"format":"pt"})";
  int64_t at = 0;
  for (const auto& [name, t] : sorted) {
    const int64_t n = static_cast<int64_t>(t.nbytes());
    // Appended piece by piece: g++ 12 warns falsely on "text" + std::string&& (CMakeLists.txt).
    header.append(",\"").append(name).append("\":{\"dtype\":\"");
    header.append(safetensors_dtype(t.scalar_type())).append("\",\"shape\":[");
    for (std::size_t i = 0; i < t.sizes().size(); ++i) {
      if (i) header.append(",");
      header.append(std::to_string(t.sizes()[i]));
    }
    header.append("],\"data_offsets\":[").append(std::to_string(at)).append(",");
    header.append(std::to_string(at + n)).append("]}");
    l.offset[name] = at;
    at += n;
  }
  header += "}";
  const int64_t padded = (static_cast<int64_t>(header.size()) + 7) / 8 * 8;
  l.data_start = 8 + padded;
  l.file_bytes = l.data_start + at;
  return l;
}

}  // namespace

int64_t safetensors_bytes(torch::nn::Module& model) {
  return safetensors_layout(saved_parameters(model)).file_bytes;
}

void load_checkpoint_cpu(torch::nn::Module& model, const std::string& family, bool four_bit,
                         const models::Quant4Settings& s) {
  torch::NoGradGuard no_grad;
  // The model's non-persistent buffers (the rotary tables) are made where it is instantiated.
  for (auto& b : model.buffers()) b.set_data(b.clone());
  auto saved = saved_parameters(model);
  const Layout layout = safetensors_layout(saved);
  // safetensors' load: the whole file in one buffer (a CPU tensor of its bytes).
  auto file = torch::empty({layout.file_bytes}, saved.front().second.options().dtype(torch::kByte));
  auto view_of = [&](const std::string& name, const torch::Tensor& t) {
    auto v = file.narrow(0, layout.data_start + layout.offset.at(name), static_cast<int64_t>(t.nbytes()));
    v = v.view(t.scalar_type()).view(t.sizes());
    if (!v.is_meta()) v.copy_(t);  // the bytes the file holds
    return v;
  };
  std::map<std::string, models::Int8Layer*> int8_of;
  std::map<std::string, models::Layer4*> four_of;
  auto int8 = four_bit ? std::vector<models::Int8Layer>{} : models::int8_layers(model, family);
  auto four = four_bit ? models::layers_4bit(model, family) : std::vector<models::Layer4>{};
  for (auto& l : int8) int8_of[l.name + ".weight"] = &l;
  for (auto& l : four) four_of[l.name + ".weight"] = &l;
  std::stable_sort(saved.begin(), saved.end(),
                   [](const auto& a, const auto& b) { return natural_key_less(a.first, b.first); });
  for (auto& [name, t] : saved) {
    auto value = view_of(name, t);
    if (auto it = four_of.find(name); it != four_of.end()) {
      auto& layer = *it->second;
      models::quantize_4bit_layer(layer, layer.conv1d ? value.t() : value, s);
    } else if (auto it8 = int8_of.find(name); it8 != int8_of.end()) {
      auto& layer = *it8->second;
      auto [CB, SCB] = models::int8_quantize_weight(layer.conv1d ? value.t() : value);
      set_int8_weight(layer, CB, SCB);
    } else {
      t.set_data(value);  // the host copy goes with the old data
    }
  }
}

}  // namespace sweep
