// Point identity and (de)serialisation.
#include "sweeps/point.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "models/zoo.h"
#include "sweep_version.h"

namespace sweep {

Point tiny_point(const std::string& model, const std::string& device, const std::string& precision,
                 const std::string& optimizer) {
  const auto* spec = models::find_model(model);
  if (!spec) throw std::invalid_argument("unknown model " + model);
  Point p;
  p.model = model;
  p.family = spec->family;
  p.device = device;
  p.batch = 2;
  if (p.family != "whisper") p.seq = 32;
  if (p.family == "t5") p.target_seq = 16;
  if (p.family == "whisper") p.audio_s = 2;
  p.precision = precision;
  p.optimizer = optimizer;
  p.steps = p.warmup_steps = p.repetitions = 1;
  return p;
}

std::string Point::id() const {
  // The identity axes in schema::kIdentityColumns order, written as key=value; pairs.
  std::ostringstream s;
  s << "model=" << model << ";mode=" << mode << ";batch=" << batch << ";seq=" << seq
    << ";target_seq=" << target_seq << ";audio_s=" << audio_s << ";precision=" << precision
    << ";checkpointing=" << checkpointing << ";accumulation=" << accumulation
    << ";optimizer=" << optimizer << ";alloc_conf=" << alloc_conf << ";steps=" << steps
    << ";warmup_steps=" << warmup_steps << ";repetitions=" << repetitions
    << ";budget_bytes=" << budget_bytes << ";suite_version=" << SWEEP_VERSION;
  // Added after the first release: written only when it differs from the default, so that
  // the points measured before it keep their ids.
  if (!use_cache) s << ";use_cache=false";
  if (adapter != "none") {
    s << ";adapter=" << adapter << ";lora_r=" << lora_r << ";lora_alpha=" << lora_alpha
      << ";lora_dropout=" << lora_dropout << ";lora_targets=" << lora_targets_text();
  }
  if (offload != "none") s << ";offload=" << offload;
  if (weights != "full") s << ";weights=" << weights;
  return fnv1a_hex(s.str());
}

std::string Point::lora_targets_text() const {
  const auto& targets =
      lora_targets.empty() ? models::default_lora_targets(family) : lora_targets;
  std::string s;
  for (const auto& t : targets) s += (s.empty() ? "" : ";") + t;
  return s;
}

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string Point::label() const {
  std::ostringstream s;
  s << model << " b=" << batch;
  if (seq) s << " seq=" << seq;
  if (target_seq) s << " tgt=" << target_seq;
  if (audio_s) s << " audio=" << audio_s << "s";
  s << " " << precision << " ckpt=" << checkpointing << " acc=" << accumulation << " "
    << optimizer;
  if (!use_cache) s << " no-cache";
  if (adapter == "lora") s << " lora r=" << lora_r;
  if (offload != "none") s << " offload=" << offload;
  if (weights != "full") s << " weights=" << weights;
  if (mode != "train") s << " " << mode;
  if (!alloc_conf.empty()) s << " [" << alloc_conf << "]";
  return s.str();
}

#define SWEEP_POINT_FIELDS(X)                                                              \
  X(model) X(family) X(mode) X(batch) X(seq) X(target_seq) X(audio_s) X(precision)         \
  X(checkpointing) X(accumulation) X(optimizer) X(use_cache) X(adapter) X(lora_r) X(lora_alpha) X(lora_dropout) X(lora_targets) X(offload) X(weights) X(alloc_conf) X(steps) X(warmup_steps)     \
  X(repetitions) X(budget_bytes) X(budget_emulated) X(timeout_s) X(device) X(lr)           \
  X(weight_decay) X(seed)

void to_json(nlohmann::json& j, const Point& p) {
#define X(f) j[#f] = p.f;
  SWEEP_POINT_FIELDS(X)
#undef X
}

void from_json(const nlohmann::json& j, Point& p) {
#define X(f) if (j.contains(#f)) j.at(#f).get_to(p.f);
  SWEEP_POINT_FIELDS(X)
#undef X
}

}  // namespace sweep
