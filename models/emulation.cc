// What code asks of its device under emulation; see emulation.h.
#include "models/emulation.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <utility>
#include <vector>

namespace sweep::models {
namespace {
std::atomic<c10::DeviceType> g_emulated{c10::kMeta};
std::atomic<AttentionFn> g_attention{nullptr};
std::atomic<DeviceReadFn> g_device_read{nullptr};
}  // namespace

void set_emulated_device(c10::DeviceType as) { g_emulated = as; }
bool emulating() { return g_emulated.load() != c10::kMeta; }
c10::DeviceType emulated_device() { return g_emulated.load(); }

c10::DeviceType device_type_of(const at::Tensor& t) {
  const auto type = t.device().type();
  return type == c10::kMeta && emulating() ? g_emulated.load() : type;
}

EmulatedAutocast& emulated_autocast() {
  thread_local EmulatedAutocast state;
  return state;
}

bool autocast_enabled(c10::DeviceType device) {
  if (emulating() && device == emulated_device()) return emulated_autocast().enabled;
  return at::autocast::is_autocast_enabled(device);
}

at::ScalarType autocast_dtype(c10::DeviceType device) {
  if (emulating() && device == emulated_device()) return emulated_autocast().dtype;
  return at::autocast::get_autocast_dtype(device);
}

void set_attention(AttentionFn fn) { g_attention = fn; }

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                std::optional<double> scale, bool enable_gqa) {
  if (auto fn = g_attention.load(); fn && q.is_meta()) {
    // scaled_dot_product_attention is on autocast's lower-precision lists (CUDA's and the
    // CPU's, autocast_mode.h AT_FORALL_LOWER_PRECISION_FP): under autocast the dispatcher's
    // wrapper casts every floating argument, the mask too, to the autocast dtype before the
    // kernel runs (autocast_mode.cpp cached_cast; none of these is a weight it would cache).
    // The emulated call goes past the dispatcher, so the cast is made here.
    if (emulated_autocast().enabled) {
      const at::ScalarType to = emulated_autocast().dtype;
      auto cast = [to](const at::Tensor& t) {
        return t.is_floating_point() && t.scalar_type() != at::kDouble && t.scalar_type() != to
                   ? t.to(to)
                   : t;
      };
      const std::optional<at::Tensor> m = mask ? std::optional<at::Tensor>(cast(*mask)) : std::nullopt;
      // And, as that wrapper does, the kernel runs with autocast's key excluded: the key the
      // emulated autocast registers under (sweeps/worker/emulate/autocast.cc).
      c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
      return fn(cast(q), cast(k), cast(v), m, dropout_p, is_causal, scale, enable_gqa);
    }
    return fn(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  }
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

at::Tensor apply_dropout(const at::Tensor& input, double p, bool train) {
  // aten/src/ATen/native/Dropout.cpp: dropout() and is_fused_kernel_acceptable().
  if (train && input.is_meta() && acts_cuda(input) && p > 0 && p < 1 && input.numel() > 0)
    return std::get<0>(at::native_dropout(input, p, train));
  return at::dropout(input, p, train);
}

void set_device_read(DeviceReadFn fn) { g_device_read = fn; }

namespace {
void read_meta() {
  if (auto fn = g_device_read.load()) fn();
}
}  // namespace

double scalar_value(const at::Tensor& t) {
  if (!t.is_meta()) return t.item<double>();
  read_meta();
  return 1.0;
}
bool any_value(const at::Tensor& t) {
  if (!t.is_meta()) return t.any().item<bool>();
  read_meta();
  return false;
}

namespace {
// The masks noted, by their TensorImpl (weakly: a mask that died is dropped at the next note).
thread_local std::vector<std::pair<c10::weak_intrusive_ptr<c10::TensorImpl>, int64_t>>
    tl_mask_counts;
}  // namespace

void note_mask_count(const at::Tensor& mask, int64_t count) {
  std::erase_if(tl_mask_counts, [](const auto& e) { return e.first.expired(); });
  tl_mask_counts.emplace_back(c10::weak_intrusive_ptr<c10::TensorImpl>(mask.getIntrusivePtr()),
                              count);
}

std::optional<int64_t> mask_count(const at::Tensor& mask) {
  for (const auto& [impl, count] : tl_mask_counts)
    if (!impl.expired() && impl._unsafe_get_target() == mask.unsafeGetTensorImpl()) return count;
  return std::nullopt;
}

}  // namespace sweep::models
