// The emulated device's autocast. ATen's autocast applies only to tensors of its own device
// (autocast_mode.h is_autocast_eligible: tensor.is_cuda() for CUDA's lists), and Meta has no
// autocast key, so under emulation the policy is applied here: the same wrapper templates as
// autocast_mode.h (a transcription of WrapFunction_ per CastPolicy and of cached_cast in
// autocast_mode.cpp), with "eligible" meaning a floating Meta tensor, registered under the
// AutocastPrivateUse1 key (no PrivateUse1 backend exists in the worker), which is switched on
// for the thread while the emulated autocast is enabled. The op lists are ATen's own: CUDA's
// from autocast_mode.h's macros (as autocast_mode.cpp registers them for AutocastCUDA); the
// CPU's transcribed from autocast_mode.cpp's TORCH_LIBRARY_IMPL(aten, AutocastCPU, m).
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <mutex>

#include "models/emulation.h"
#include "sweeps/worker/emulate/emulation.h"

namespace sweep::emu {
namespace {

using at::autocast::CastPolicy;
constexpr auto kKey = c10::DispatchKey::AutocastPrivateUse1;

bool eligible(const at::Tensor& t) {
  return t.defined() && t.is_meta() && t.is_floating_point() && t.scalar_type() != at::kDouble;
}
at::ScalarType lower() { return models::emulated_autocast().dtype; }

// autocast_mode.cpp cached_cast: lower-precision casts of fp32 leaves that require grad (the
// weights) are cached until the outermost autocast region exits; the cache holds the source
// alive (a weak reference upstream, whose only effect is that the key stays valid).
using CacheEntry = std::pair<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>, at::Tensor>;
ska::flat_hash_map<c10::TensorImpl*, CacheEntry>& cache() {
  static ska::flat_hash_map<c10::TensorImpl*, CacheEntry> c;
  return c;
}
std::mutex cache_mu;

at::Tensor cached_cast(at::ScalarType to, const at::Tensor& arg) {
  if (!eligible(arg) || arg.scalar_type() == to) return arg;
  const bool can_cache = to == lower() && arg.scalar_type() == at::kFloat && arg.requires_grad() &&
                         arg.is_leaf() && !arg.is_view();
  if (!can_cache) return arg.to(to);
  std::lock_guard lock(cache_mu);
  auto it = cache().find(arg.unsafeGetTensorImpl());
  if (it != cache().end()) return it->second.second;
  auto cast = arg.to(to);
  cache().emplace(arg.unsafeGetTensorImpl(), CacheEntry{c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(arg.getIntrusivePtr()), cast});
  return cast;
}
std::optional<at::Tensor> cached_cast(at::ScalarType to, const std::optional<at::Tensor>& arg) {
  if (!arg) return std::nullopt;
  return cached_cast(to, *arg);
}
std::vector<at::Tensor> cached_cast(at::ScalarType to, at::TensorList args) {
  std::vector<at::Tensor> out;
  for (const auto& t : args) out.push_back(cached_cast(to, t));
  return out;
}
std::vector<at::Tensor> cached_cast(at::ScalarType to, const at::ITensorListRef& args) {
  std::vector<at::Tensor> out;
  for (const auto& t : args) out.push_back(cached_cast(to, t));
  return out;
}
template <class T>
T cached_cast(at::ScalarType, T arg) {
  return arg;
}

// autocast_mode.h prioritize / promote_type, with the emulated eligibility.
at::ScalarType prioritize(at::ScalarType current, const at::Tensor& next) {
  if (!eligible(next)) return current;
  const auto t = next.scalar_type();
  if (current == at::kFloat || t == at::kFloat) return at::kFloat;
  return current;
}
at::ScalarType prioritize(at::ScalarType current, at::TensorList list) {
  for (const auto& t : list) current = prioritize(current, t);
  return current;
}
at::ScalarType prioritize(at::ScalarType current, const at::ITensorListRef& list) {
  for (const auto& t : list) current = prioritize(current, t);
  return current;
}
template <class T>
at::ScalarType prioritize(at::ScalarType current, const T&) {
  return current;
}
template <class... Args>
at::ScalarType promote_type(at::ScalarType current, const Args&... args) {
  ((current = prioritize(current, args)), ...);
  return current;
}

template <class... Args>
bool firstarg_is_eligible(const at::Tensor& arg, const Args&...) {
  return eligible(arg);
}
template <class... Args>
at::ScalarType type_from_firstarg(at::ScalarType to, const at::Tensor& arg, const Args&...) {
  return eligible(arg) ? to : arg.scalar_type();
}

template <CastPolicy policy, class Redispatch, Redispatch* F, class Ret, class ArgList>
struct Wrap_ {};

template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::lower_precision_fp, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
    return (*F)(cached_cast(lower(), args)...);
  }
};
template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::fp32, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
    return (*F)(cached_cast(at::kFloat, args)...);
  }
};
template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::fp32_set_opt_dtype, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
    if (firstarg_is_eligible(args...)) return (*F)(at::autocast::set_opt_dtype(at::kFloat, args)...);
    return (*F)(args...);
  }
};
template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::fp32_append_dtype, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
    const at::ScalarType out_type = type_from_firstarg(at::kFloat, args...);
    return (*F)(args..., out_type);
  }
};
template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::promote, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
    const auto to = promote_type(lower(), args...);
    return (*F)(cached_cast(to, args)...);
  }
};

template <CastPolicy policy, class Registered, class Redispatch, Redispatch* F>
struct Wrap {
  using type = Wrap_<policy, Redispatch, F, typename c10::guts::function_traits<Registered>::return_type,
                     typename c10::guts::function_traits<Registered>::parameter_types>;
};

#define EMU_KERNEL1(OP, POLICY)                                                                  \
  m.impl(TORCH_SELECTIVE_NAME("aten::" #OP),                                                     \
         &Wrap<CastPolicy::POLICY, decltype(ATEN_FN(OP)), decltype(ATEN_FN(OP)), &ATEN_FN(OP)>::type::call);
#define EMU_KERNEL2(OP, OVERLOAD, POLICY)                                                        \
  m.impl(TORCH_SELECTIVE_NAME("aten::" #OP "." #OVERLOAD),                                       \
         &Wrap<CastPolicy::POLICY, decltype(ATEN_FN2(OP, OVERLOAD)),                             \
               decltype(ATEN_FN2(OP, OVERLOAD)), &ATEN_FN2(OP, OVERLOAD)>::type::call);
#define EMU_KERNEL_N(NARG, ...) C10_CONCATENATE(EMU_KERNEL, NARG)(__VA_ARGS__)
#define EMU_KERNEL(...) EMU_KERNEL_N(_KERNEL_OVERLOAD_NARG(__VA_ARGS__), __VA_ARGS__)
#define EMU_KERNEL_DIFFERENT_REDISPATCH_SIGNATURE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY) \
  m.impl(TORCH_SELECTIVE_NAME("aten::" NAME),                                                \
         &Wrap<CastPolicy::POLICY, SIGNATURE, REDISPATCH, &FUNC>::type::call);

#define EMU_LOW(...) EMU_KERNEL(__VA_ARGS__, lower_precision_fp)
#define EMU_FP32(...) EMU_KERNEL(__VA_ARGS__, fp32)
#define EMU_FP32_SET_OPT_DTYPE(...) EMU_KERNEL(__VA_ARGS__, fp32_set_opt_dtype)
#define EMU_PROMOTE(...) EMU_KERNEL(__VA_ARGS__, promote)

// The lists' signatures name ATen's types unqualified (they are expanded in at::autocast).
using at::DimnameList;
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// autocast_mode.cpp TORCH_LIBRARY_IMPL(aten, Autocast, m): the CUDA lists.
void cuda_lists(torch::Library& m) {
  AT_FORALL_LOWER_PRECISION_FP(EMU_LOW)
  EMU_LOW(cudnn_convolution)
  EMU_LOW(cudnn_convolution_transpose)
  AT_FORALL_FP32(EMU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(EMU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(EMU_KERNEL_DIFFERENT_REDISPATCH_SIGNATURE)
  AT_FORALL_PROMOTE(EMU_PROMOTE)
}

// autocast_mode.cpp TORCH_LIBRARY_IMPL(aten, AutocastCPU, m): the CPU lists (the lower
// precision and promote lists whole; of the fp32 list, the losses, norms and reductions a
// training loop meets; its linear algebra, FFT and pooling entries are left out).
void cpu_lists(torch::Library& m) {
  EMU_LOW(conv1d)
  EMU_LOW(conv1d, padding)
  EMU_LOW(conv2d)
  EMU_LOW(conv2d, padding)
  EMU_LOW(conv3d)
  EMU_LOW(conv3d, padding)
  EMU_LOW(bmm)
  EMU_LOW(mm)
  EMU_LOW(linalg_vecdot)
  EMU_LOW(baddbmm)
  EMU_LOW(addmm)
  EMU_LOW(_addmm_activation)
  EMU_LOW(addbmm)
  EMU_LOW(linear)
  EMU_LOW(_convolution, deprecated)
  EMU_LOW(matmul)
  EMU_LOW(conv_tbc)
  EMU_LOW(mkldnn_rnn_layer)
  EMU_LOW(conv_transpose1d)
  EMU_LOW(conv_transpose2d, input)
  EMU_LOW(conv_transpose3d, input)
  EMU_LOW(prelu)
  EMU_LOW(scaled_dot_product_attention)
  EMU_LOW(_native_multi_head_attention)
  EMU_FP32(avg_pool3d)
  EMU_FP32(binary_cross_entropy)
  EMU_FP32(grid_sampler)
  EMU_FP32(polar)
  EMU_FP32(prod)
  EMU_FP32(prod, dim_int)
  EMU_FP32(prod, dim_Dimname)
  EMU_FP32(cdist)
  EMU_FP32(trace)
  EMU_FP32(mse_loss)
  EMU_FP32(cosine_embedding_loss)
  EMU_FP32(nll_loss)
  EMU_FP32(nll_loss2d)
  EMU_FP32(hinge_embedding_loss)
  EMU_FP32(poisson_nll_loss)
  EMU_FP32(smooth_l1_loss)
  EMU_FP32(cross_entropy_loss)
  EMU_FP32(l1_loss)
  EMU_FP32(huber_loss)
  EMU_FP32(margin_ranking_loss)
  EMU_FP32(soft_margin_loss)
  EMU_FP32(triplet_margin_loss)
  EMU_FP32(multi_margin_loss)
  EMU_FP32(kl_div)
  EMU_FP32(multilabel_margin_loss)
  EMU_FP32(binary_cross_entropy_with_logits)
  EMU_PROMOTE(stack)
  EMU_PROMOTE(cat)
  EMU_PROMOTE(index_copy)
  EMU_PROMOTE(index_copy, dimname)
}

}  // namespace

void register_autocast(bool cuda) {
  static std::unique_ptr<torch::Library> lib, fallback;
  auto& d = c10::Dispatcher::singleton();
  if (!d.hasBackendFallbackForDispatchKey(kKey)) {
    // Every op outside the lists passes through, as autocast_mode.cpp's fallthrough for its keys.
    fallback = std::make_unique<torch::Library>(torch::Library::IMPL, "_", kKey, __FILE__, __LINE__);
    fallback->fallback(torch::CppFunction::makeFallthrough());
  }
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", kKey, __FILE__, __LINE__);
  if (cuda) cuda_lists(*lib);
  else cpu_lists(*lib);
}

void set_emulated_autocast(bool enabled, at::ScalarType dtype) {
  models::emulated_autocast() = {enabled, dtype};
  // at::autocast::set_autocast_enabled excludes the key when off; Meta tensors never carry it,
  // so it is also included for the thread while on.
  c10::impl::tls_set_dispatch_key_excluded(kKey, !enabled);
  c10::impl::tls_set_dispatch_key_included(kKey, enabled);
}

void clear_autocast_cache() {
  std::lock_guard lock(cache_mu);
  cache().clear();
}

}  // namespace sweep::emu
