// Non-reentrant checkpointing through saved-tensor hooks; see checkpoint.h. A transcription of
// torch/utils/checkpoint.py (torch 2.11): _checkpoint_without_reentrant_generator,
// _CheckpointFrame, _checkpoint_hook (forward: a placeholder per saved tensor) and
// _recomputation_hook (backward: the recomputed tensors, early stop).
#include "sweeps/worker/checkpoint.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <memory>
#include <mutex>

#include "models/emulation.h"
#include "sweeps/worker/activation_offload.h"
#include "sweeps/worker/emulate/cost_record.h"
#include "sweeps/worker/precision.h"

namespace sweep {
namespace {

// _Holder with its _Handle: where the recomputed tensor waits until backward unpacks it.
struct Holder {
  torch::Tensor recomputed;
  bool filled = false, unpacked = false;
};

// _CheckpointFrame: one per checkpointed call, alive while any of its placeholders is.
struct Frame {
  models::BlockFn fn;
  // _NoopSaveInputs.save_for_backward(dummy, *args): saved as autograd saves any tensor, so
  // through the hooks outside the block (activation offloading's) or, without any, kept.
  std::vector<torch::autograd::SavedVariable> inputs;
  torch::Tensor cpu_rng, dev_rng;     // preserve_rng_state
  std::optional<at::Generator> dev_gen;
  bool cpu_autocast = false, dev_autocast = false;
  models::EmulatedAutocast emulated_autocast;  // the emulated device's, when emulating
  at::ScalarType cpu_dtype = at::kBFloat16, dev_dtype = at::kHalf;
  std::vector<std::weak_ptr<Holder>> holders;  // weak_holders, in the order saved
  std::size_t recomp_counter = 0;
  bool recomputed = false;
};

// Which hooks this thread's saved tensors get: none, the forward's placeholders, or the
// recomputation's. Thread-local like Python's saved_tensors_hooks stack.
enum class Mode { kNone, kForward, kRecompute };
thread_local Mode tl_mode = Mode::kNone;
thread_local std::shared_ptr<Frame> tl_frame;

class ModeGuard {
 public:
  ModeGuard(Mode mode, std::shared_ptr<Frame> frame)
      : prev_mode_(tl_mode), prev_frame_(std::move(tl_frame)) {
    tl_mode = mode;
    tl_frame = std::move(frame);
  }
  ~ModeGuard() {
    tl_mode = prev_mode_;
    tl_frame = std::move(prev_frame_);
  }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  Mode prev_mode_;
  std::shared_ptr<Frame> prev_frame_;
};

// _StopRecomputationError: every saved tensor is back; the rest of the block is not run.
struct StopRecomputation {};

void recompute(const std::shared_ptr<Frame>& frame);

// _checkpoint_hook: the forward keeps a placeholder instead of the tensor.
class PlaceholderHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit PlaceholderHooks(std::shared_ptr<Frame> frame) : frame_(std::move(frame)) {}
  void call_pack_hook(const at::Tensor&) override {
    emu::note_hook();
    holder_ = std::make_shared<Holder>();
    frame_->holders.push_back(holder_);
  }
  at::Tensor call_unpack_hook() override {
    emu::note_hook();
    if (!frame_->recomputed) recompute(frame_);
    TORCH_CHECK(holder_->filled, "checkpoint: a saved tensor was not recomputed");
    TORCH_CHECK(!holder_->unpacked,
                "checkpoint: a saved tensor was unpacked twice (backward through the same "
                "checkpointed graph twice is not supported)");
    holder_->unpacked = true;
    // Handed over: freed once the backward node that unpacked it has run.
    return std::move(holder_->recomputed);
  }

 private:
  std::shared_ptr<Frame> frame_;
  std::shared_ptr<Holder> holder_;
};

// _recomputation_hook: the recomputed tensors go to the forward's holders, in order.
class RecomputeHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit RecomputeHooks(std::shared_ptr<Frame> frame) : frame_(std::move(frame)) {}
  void call_pack_hook(const at::Tensor& t) override {
    emu::note_hook();
    x_ = t.requires_grad() ? t.detach() : t;
    Frame& f = *frame_;
    const std::size_t idx = f.recomp_counter++;
    TORCH_CHECK(idx < f.holders.size(),
                "checkpoint: the recomputation saved more tensors than the forward");
    if (auto holder = f.holders[idx].lock()) {
      holder->recomputed = x_;
      holder->filled = true;
    }
    if (f.recomp_counter == f.holders.size()) throw StopRecomputation{};  // early_stop
  }
  at::Tensor call_unpack_hook() override { return x_; }

 private:
  std::shared_ptr<Frame> frame_;
  torch::Tensor x_;
};

// The default engine, with the hooks of the mode this thread is in; outside a checkpointed
// block, activation offloading's while its scope is alive.
struct CheckpointEngine final : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (tl_mode == Mode::kForward) return std::make_unique<PlaceholderHooks>(tl_frame);
    if (tl_mode == Mode::kRecompute) return std::make_unique<RecomputeHooks>(tl_frame);
    return activation_offload_hooks();
  }
};

torch::autograd::Engine& checkpoint_engine() {
  // One engine for the process's lifetime, as the base engine (never destroyed: its
  // destructor would join worker threads at exit).
  static auto* engine = new CheckpointEngine();
  return *engine;
}

void recompute(const std::shared_ptr<Frame>& frame) {
  Frame& f = *frame;
  // ctx.get_args(ctx.saved_tensors): every saved input unpacked, the dummy first (dropped).
  std::vector<torch::Tensor> inputs;
  for (std::size_t i = 0; i < f.inputs.size(); ++i) {
    auto t = f.inputs[i].unpack();
    if (i > 0) inputs.push_back(std::move(t));
  }
  // recompute_fn: torch.random.fork_rng with the forward's states, the forward's autocast,
  // grad enabled; the block's own outputs are dropped.
  auto cpu_gen = at::detail::getDefaultCPUGenerator();
  auto cpu_now = cpu_gen.get_state();
  cpu_gen.set_state(f.cpu_rng);
  torch::Tensor dev_now;
  if (f.dev_gen) {
    dev_now = f.dev_gen->get_state();
    f.dev_gen->set_state(f.dev_rng);
  }
  {
    ModeGuard mode(Mode::kRecompute, frame);
    torch::AutoGradMode grad(true);
    AutocastScope cpu(at::kCPU, f.cpu_autocast, f.cpu_dtype);
    AutocastScope cuda(at::kCUDA, f.dev_autocast, f.dev_dtype);
    std::optional<AutocastScope> emulated;  // the emulated device's, as its forward ran
    if (models::emulating())
      emulated.emplace(at::kMeta, f.emulated_autocast.enabled, f.emulated_autocast.dtype);
    try {
      f.fn(inputs);
    } catch (const StopRecomputation&) {
    }
  }
  cpu_gen.set_state(cpu_now);
  if (f.dev_gen) f.dev_gen->set_state(dev_now);
  f.recomputed = true;
}

}  // namespace

void install_saved_tensor_hooks() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&checkpoint_engine); });
}

std::vector<torch::Tensor> checkpoint_block(const models::BlockFn& fn,
                                            const std::vector<torch::Tensor>& inputs) {
  // Without grad mode there is nothing to save or recompute (input_saver has no grad_fn).
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  install_saved_tensor_hooks();
  auto f = std::make_shared<Frame>();
  f->fn = fn;
  // _NoopSaveInputs.apply(dummy, kwargs, *args), before the block's own hooks: a dummy that
  // requires grad (torch.empty((0,), requires_grad=True), on the CPU) and the block's inputs.
  f->inputs.emplace_back(torch::empty({0}, torch::requires_grad()), /*is_output=*/false);
  for (const auto& t : inputs) f->inputs.emplace_back(t, /*is_output=*/false);
  f->cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
  for (const auto& t : inputs) {
    if (t.defined() && t.is_cuda()) {
      f->dev_gen = at::cuda::detail::getDefaultCUDAGenerator(t.device().index());
      f->dev_rng = f->dev_gen->get_state();
      break;
    }
  }
  f->cpu_autocast = at::autocast::is_autocast_enabled(at::kCPU);
  f->cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  f->dev_autocast = at::autocast::is_autocast_enabled(at::kCUDA);
  f->dev_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  f->emulated_autocast = models::emulated_autocast();
  ModeGuard mode(Mode::kForward, f);
  return fn(inputs);
}

}  // namespace sweep
