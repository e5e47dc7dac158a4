// The engine's in-place gradient accumulation on the emulated device; see grad_accumulation.h.
#include "sweeps/worker/emulate/grad_accumulation.h"

#include <ATen/CachedTensorUtils.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <memory>

#include "sweeps/measure/trackers.h"

namespace sweep::emu {
namespace {

struct State {
  int nodes = 0;         // autograd nodes running now (their ops are the nodes' own)
  int ops = 0;           // recorded ops running now, the engine's evaluate_function among them
  int engine_steps = 0;  // of which the engine's evaluate_function
};

// The engine's span around one node and the sums of its outputs into the next nodes' buffers
// (engine.cpp thread_main: RECORD_FUNCTION("autograd::engine::evaluate_function: " + name)).
bool is_engine_step(const at::RecordFunction& fn) {
  return std::strncmp(fn.name(), "autograd::engine::evaluate_function: ", 37) == 0;
}
thread_local State* t_state = nullptr;

struct InNode final : at::ObserverContext {};
struct InOp final : at::ObserverContext {};
struct InEngineStep final : at::ObserverContext {};

// The engine's sum of two gradients: InputBuffer::add -> accumulate's `old_var + var`, an
// aten::add.Tensor (alpha 1) of two tensors of one shape and dtype, called in the engine's step
// after its node returned (no node and no other op running) with grad mode off.
bool is_buffer_sum(const at::RecordFunction& fn, const State& s) {
  if (s.nodes != 0 || s.ops != 1 || s.engine_steps != 1 || at::GradMode::is_enabled()) return false;
  if (std::strcmp(fn.name(), "aten::add") != 0) return false;
  const auto& schema = fn.operator_name();
  if (!schema || schema->overload_name != "Tensor") return false;
  const auto in = fn.inputs();
  if (in.size() != 3 || !in[0].isTensor() || !in[1].isTensor() || !in[2].isScalar()) return false;
  const at::Tensor& a = in[0].toTensor();
  const at::Tensor& b = in[1].toTensor();
  return a.is_meta() && b.is_meta() && in[2].toScalar().equal(1) && a.sizes().equals(b.sizes()) &&
         a.scalar_type() == b.scalar_type();
}

// input_buffer.cpp can_accumulate_inplace(old_var), but for the Meta bit: a plain tensor, dense,
// and the buffer's the last reference to it and to its storage. The boxed input this callback
// reads holds one reference more while the op runs.
bool accumulates_in_place(const at::Tensor& old) {
  constexpr int64_t kBoxed = 1;
  return !old.is_nested() && !old._is_zerotensor() && old.numel() > 0 && old.is_non_overlapping_and_dense() &&
         at::caching::adjusted_use_count(old) == 1 + kBoxed && old.has_storage() && old.storage().use_count() == 1;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  State* s = t_state;
  if (!s) return nullptr;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ++s->nodes;
    return std::make_unique<InNode>();
  }
  if (is_buffer_sum(fn, *s)) {
    const at::Tensor& old = fn.inputs()[0].toTensor();
    if (accumulates_in_place(old)) reuse_for_next_allocation(old.storage(), static_cast<int64_t>(old.nbytes()));
  }
  ++s->ops;
  if (is_engine_step(fn)) {
    ++s->engine_steps;
    return std::make_unique<InEngineStep>();
  }
  return std::make_unique<InOp>();
}

void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  State* s = t_state;
  if (!s || !ctx) return;
  if (dynamic_cast<InNode*>(ctx)) {
    --s->nodes;
    return;
  }
  if (dynamic_cast<InEngineStep*>(ctx)) --s->engine_steps;
  --s->ops;
  reuse_for_next_allocation({}, 0);  // a sum's: unused if it allocated nothing
}

}  // namespace

InPlaceAccumulation::InPlaceAccumulation() {
  TORCH_CHECK(t_state == nullptr, "one InPlaceAccumulation per thread");
  t_state = new State();
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                           .needsInputs(true)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

InPlaceAccumulation::~InPlaceAccumulation() {
  at::removeCallback(handle_);
  reuse_for_next_allocation({}, 0);
  delete t_state;
  t_state = nullptr;
}

}  // namespace sweep::emu
