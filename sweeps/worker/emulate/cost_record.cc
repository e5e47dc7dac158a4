// The kernels of one emulated step, from RecordFunction; see cost_record.h.
#include "sweeps/worker/emulate/cost_record.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <cstring>
#include <string>
#include <unordered_map>

#include "sweeps/measure/trackers.h"

namespace sweep::emu {
namespace {

using cost::Kind;

enum class OpClass { kComposite, kFree, kGemm, kConv, kAttention, kForeach, kMemory };

// An op being recorded: its kernel, and what the ops it calls recorded.
struct Frame {
  const char* name;
  cost::Kernel kernel;
  std::vector<cost::Kernel> inner;
  bool calls_itself = false;
};

struct State {
  std::vector<cost::Kernel> kernels;
  std::vector<Frame> open;  // the recorded ops running now, outermost first
  int backward_nodes = 0;   // autograd nodes the engine is running now (their ops are autograd's)
};
thread_local State* t_state = nullptr;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Ops that only allocate or describe a tensor: no kernel on CUDA.
bool allocates_only(const std::string& op) {
  static const char* const kOps[] = {"empty", "empty_strided", "empty_like", "new_empty",
                                     "new_empty_strided", "resize_", "set_", "lift_fresh",
                                     "detach_", "size", "stride", "numel", "is_nonzero",
                                     "result_type", "_local_scalar_dense", "is_same_size"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

OpClass by_name(const std::string& op) {
  if (op == "mm" || op == "addmm" || op == "bmm" || op == "baddbmm" || op == "_int_mm" ||
      op == "_addmm_activation")
    return OpClass::kGemm;
  if (op == "convolution" || op == "convolution_backward" || op == "_convolution") return OpClass::kConv;
  if (starts_with(op, "_scaled_dot_product_flash_attention") ||
      starts_with(op, "_scaled_dot_product_efficient_attention") ||
      starts_with(op, "_scaled_dot_product_cudnn_attention") || starts_with(op, "_flash_attention_") ||
      starts_with(op, "_efficient_attention_") || starts_with(op, "_cudnn_attention_"))
    return OpClass::kAttention;
  if (starts_with(op, "_foreach_") || starts_with(op, "_fused_adam") ||
      op == "_amp_foreach_non_finite_check_and_unscale_")
    return OpClass::kForeach;
  if (allocates_only(op)) return OpClass::kFree;
  return OpClass::kMemory;
}

OpClass by_schema(const at::RecordFunction& fn, OpClass named) {
  const auto name = fn.operator_name();
  if (!name) return named;
  const auto op = c10::Dispatcher::singleton().findOp(*name);
  if (!op) return named;
  if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
      !op->hasKernelForDispatchKey(c10::DispatchKey::Meta))
    return OpClass::kComposite;
  if (named != OpClass::kMemory) return named;
  const auto& returns = op->schema().returns();
  const bool view = !returns.empty() && std::all_of(returns.begin(), returns.end(), [](const auto& r) {
    return r.alias_info() && !r.alias_info()->isWrite();
  });
  return view ? OpClass::kFree : OpClass::kMemory;
}

// By the name's address first (an op's RecordFunction name is its schema's, one string for the
// process), then by its text.
OpClass classify(const at::RecordFunction& fn) {
  static thread_local std::unordered_map<const char*, OpClass> by_address;
  static thread_local std::unordered_map<std::string, OpClass> cache;
  const char* name = fn.name();
  if (auto it = by_address.find(name); it != by_address.end()) return it->second;
  const std::string full = name;
  auto it = cache.find(full);
  if (it == cache.end()) {
    OpClass c = OpClass::kComposite;  // not an aten op: what it calls is recorded
    if (starts_with(full, "aten::")) c = by_schema(fn, by_name(full.substr(6)));
    it = cache.emplace(full, c).first;
  }
  return by_address.emplace(name, it->second).first->second;
}

cost::Dtype dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return cost::Dtype::kF32;
    case at::kHalf: return cost::Dtype::kF16;
    case at::kBFloat16: return cost::Dtype::kBf16;
    case at::kChar:
    case at::kByte: return cost::Dtype::kInt8;
    default: return cost::Dtype::kOther;
  }
}

// The bytes a tensor's kernel touches: its elements, or its storage where it is smaller (an
// expanded view reads each element once).
double tensor_bytes(const at::Tensor& t) {
  if (!t.defined()) return 0;
  double b = static_cast<double>(t.numel()) * static_cast<double>(t.element_size());
  if (t.has_storage()) b = std::min(b, static_cast<double>(t.storage().nbytes()));
  return b;
}

double value_bytes(const c10::IValue& v) {
  if (v.isTensor()) return tensor_bytes(v.toTensor());
  double b = 0;
  if (v.isTensorList())
    for (const at::Tensor& t : v.toTensorList().vec()) b += tensor_bytes(t);
  else if (v.isList())
    for (const auto& e : v.toListRef()) b += value_bytes(e);
  return b;
}

std::vector<at::Tensor> tensors_in(c10::ArrayRef<const c10::IValue> values) {
  std::vector<at::Tensor> out;
  for (const auto& v : values)
    if (v.isTensor() && v.toTensor().defined()) out.push_back(v.toTensor());
  return out;
}

// The index of a schema argument by name, or -1.
int arg_index(const at::RecordFunction& fn, const char* arg) {
  const auto name = fn.operator_name();
  const auto op = name ? c10::Dispatcher::singleton().findOp(*name) : std::nullopt;
  if (!op) return -1;
  const auto& args = op->schema().arguments();
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i].name() == arg) return static_cast<int>(i);
  return -1;
}

cost::Kernel gemm(const std::string& op, const std::vector<at::Tensor>& in) {
  cost::Kernel k{.kind = Kind::kGemm};
  const bool has_bias = op == "addmm" || op == "baddbmm" || op == "_addmm_activation";
  if (in.size() < (has_bias ? 3u : 2u)) return {.kind = Kind::kMemory};
  const at::Tensor& a = in[has_bias ? 1 : 0];
  const at::Tensor& b = in[has_bias ? 2 : 1];
  if (a.dim() < 2 || b.dim() < 2) return {.kind = Kind::kMemory};
  k.dtype = dtype_of(a);
  k.m = a.size(-2);
  k.k = a.size(-1);
  k.n = b.size(-1);
  k.batch = a.dim() == 3 ? a.size(0) : 1;
  return k;
}

// N x output positions of a convolution's output (N, C, positions...).
int64_t output_rows(const at::Tensor& output) {
  int64_t rows = output.size(0);
  for (int64_t d = 2; d < output.dim(); ++d) rows *= output.size(d);
  return rows;
}

// convolution(input, weight, ...) and convolution_backward(grad_output, input, weight, ...):
// the implicit GEMM M = N x output positions, N = out channels, K = in channels per group x
// kernel positions; backward computes the input's and the weight's gradients, two such GEMMs.
cost::Kernel conv(const std::string& op, const std::vector<at::Tensor>& in) {
  const bool backward = op == "convolution_backward";
  if (in.size() < (backward ? 3u : 2u)) return {.kind = Kind::kMemory};
  const at::Tensor& input = in[backward ? 1 : 0];
  const at::Tensor& weight = in[backward ? 2 : 1];
  cost::Kernel k{.kind = Kind::kConv, .dtype = dtype_of(input)};
  int64_t window = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) window *= weight.size(d);
  k.n = weight.size(0);
  k.k = weight.size(1) * window;
  k.batch = backward ? 2 : 1;
  if (backward) k.m = output_rows(in[0]);  // grad_output has the output's shape
  return k;
}

cost::Kernel attention(const at::RecordFunction& fn, const std::string& op) {
  const bool backward = op.find("backward") != std::string::npos;
  const int qi = arg_index(fn, "query");
  const int ci = arg_index(fn, "is_causal");
  const auto inputs = fn.inputs();
  if (qi < 0 || qi + 2 >= static_cast<int>(inputs.size())) return {.kind = Kind::kMemory};
  const at::Tensor q = inputs[qi].toTensor(), kt = inputs[qi + 1].toTensor();
  if (q.dim() != 4) return {.kind = Kind::kMemory};
  cost::Kernel k{.kind = Kind::kAttention, .dtype = dtype_of(q)};
  k.batch = q.size(0) * q.size(1);
  k.m = q.size(2);
  k.n = kt.size(2);
  k.k = q.size(3);
  k.causal = ci >= 0 && ci < static_cast<int>(inputs.size()) && inputs[ci].isBool() && inputs[ci].toBool();
  k.backward = backward;
  k.backend = op.find("efficient") != std::string::npos ? cost::Attention::kEfficient
              : op.find("cudnn") != std::string::npos   ? cost::Attention::kCudnn
                                                        : cost::Attention::kFlash;
  return k;
}

// A foreach op: its first tensor list's tensors and 64 Ki-element chunks, and the lists it
// reads (those it returns are counted when it ends).
cost::Kernel foreach_op(const at::RecordFunction& fn) {
  cost::Kernel k{.kind = Kind::kForeach, .lists = 0};
  for (const auto& v : fn.inputs()) {
    if (!v.isTensorList()) continue;
    if (k.lists++ > 0) continue;
    for (const at::Tensor& t : v.toTensorList().vec()) {
      ++k.tensors;
      k.chunks += (t.numel() + 65535) / 65536;
      k.dtype = dtype_of(t);
    }
  }
  return k;
}

// The kernel of an op from its inputs, when it starts: RecordFunction's inputs are the
// dispatcher's boxed arguments, destroyed before the op ends (Dispatcher.h,
// callWithDispatchKeySlowPath); the outputs are added when it ends.
cost::Kernel kernel_from_inputs(const at::RecordFunction& fn, OpClass cls, const std::string& op) {
  if (cls == OpClass::kFree) return {.kind = Kind::kDispatch};
  const auto in = tensors_in(fn.inputs());
  cost::Kernel k;
  switch (cls) {
    case OpClass::kGemm: k = gemm(op, in); break;
    case OpClass::kConv: k = conv(op, in); break;
    case OpClass::kAttention: k = attention(fn, op); break;
    case OpClass::kForeach: k = foreach_op(fn); break;
    default: k.kind = Kind::kMemory;
  }
  for (const auto& v : fn.inputs()) k.bytes += value_bytes(v);
  // The optimizer's step counters stay on the CPU (foreach's CPU tensors): host work there too,
  // and the foreach ops' CPU path is a loop of one op a tensor.
  bool cpu = !in.empty() && in[0].is_cpu();
  for (const auto& v : fn.inputs()) {
    if (!v.isTensorList()) continue;
    const auto list = v.toTensorList();
    cpu = cpu || (list.size() > 0 && list.get(0).is_cpu());
    break;
  }
  if (in_host_scope() || cpu) k.kind = op == "copy_" && !cpu ? Kind::kPcie : Kind::kHostCompute;
  return k;
}

// Whether the op records an autograd node: grad mode on and an input that requires grad (the
// Autograd dispatch key's kernel then builds one: torch/csrc/autograd/generated/VariableType).
bool records_node(const at::RecordFunction& fn) {
  if (!at::GradMode::is_enabled()) return false;
  auto needs_grad = [](const at::Tensor& t) { return t.defined() && t.requires_grad(); };
  for (const auto& v : fn.inputs()) {
    if (v.isTensor() && needs_grad(v.toTensor())) return true;
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        if (needs_grad(t)) return true;
  }
  return false;
}

struct Recorded final : at::ObserverContext {};
struct InBackward final : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  State* s = t_state;
  if (!s) return nullptr;
  // The engine runs a node (autograd/function.h, Node::operator(): RecordScope::BACKWARD_FUNCTION).
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ++s->backward_nodes;
    return std::make_unique<InBackward>();
  }
  const OpClass cls = classify(fn);
  if (cls == OpClass::kComposite) return nullptr;
  const char* name = fn.name();
  const std::string op = cls == OpClass::kFree ? std::string() : std::string(name + 6);
  cost::Kernel kernel = kernel_from_inputs(fn, cls, op);
  kernel.autograd = s->backward_nodes > 0 || records_node(fn);
  s->open.push_back({name, kernel, {}, false});
  return std::make_unique<Recorded>();
}

// An op's kernels once it ends: its own, unless it called itself, which an autocast wrapper
// does (autocast_mode.h WrapFunction_, emulated in autocast.cc: the op is called again with
// its inputs cast): then what it called, the casts and the op at its cast dtype.
void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  State* s = t_state;
  if (!s || !ctx) return;
  if (dynamic_cast<InBackward*>(ctx)) {
    --s->backward_nodes;
    return;
  }
  if (s->open.empty()) return;
  Frame f = std::move(s->open.back());
  s->open.pop_back();
  cost::Kernel& k = f.kernel;
  if (k.kind != Kind::kDispatch) {
    for (const auto& v : fn.outputs()) {
      k.bytes += value_bytes(v);
      if (v.isTensorList()) ++k.lists;  // an out-of-place foreach op's result
      if (k.kind == Kind::kConv && k.m == 0 && v.isTensor()) k.m = output_rows(v.toTensor());
    }
  }
  std::vector<cost::Kernel> done;
  if (f.calls_itself) done = std::move(f.inner);
  else done.push_back(k);
  if (s->open.empty()) {
    s->kernels.insert(s->kernels.end(), done.begin(), done.end());
    return;
  }
  // Inside another recorded op: its own kernel stands for these unless it turns out to be an
  // autocast wrapper of this one.
  Frame& parent = s->open.back();
  parent.calls_itself = parent.calls_itself || std::strcmp(parent.name, f.name) == 0;
  parent.inner.insert(parent.inner.end(), done.begin(), done.end());
}

}  // namespace

CostRecorder::CostRecorder() {
  TORCH_CHECK(t_state == nullptr, "one CostRecorder per thread");
  t_state = new State();
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                           .needsInputs(true)
                                           .needsOutputs(true)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

CostRecorder::~CostRecorder() {
  at::removeCallback(handle_);
  delete t_state;
  t_state = nullptr;
}

const std::vector<cost::Kernel>& CostRecorder::kernels() const { return t_state->kernels; }

void note_kernel(const cost::Kernel& kernel) {
  if (t_state && t_state->open.empty()) t_state->kernels.push_back(kernel);
}

void note_sync() { note_kernel({.kind = Kind::kSync}); }

void note_hook() {
  if (t_state) t_state->kernels.push_back({.kind = Kind::kHook});
}

}  // namespace sweep::emu
