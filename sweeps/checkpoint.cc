// Reentrant checkpointing as a custom autograd Function; see checkpoint.h.
#include "sweeps/checkpoint.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include "sweeps/precision.h"

namespace sweep {
namespace {

// Keeps the block function alive from forward to backward inside the autograd context.
struct FnHolder : torch::CustomClassHolder {
  models::BlockFn fn;
  explicit FnHolder(models::BlockFn f) : fn(std::move(f)) {}
};

at::Generator default_generator(const torch::Device& d) {
  return d.is_cuda() ? at::cuda::detail::getDefaultCUDAGenerator(d.index())
                     : at::detail::getDefaultCPUGenerator();
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<FnHolder> holder,
                                                at::TensorList input_list) {
    // Taken as a TensorList: that is what apply() recognises as differentiable inputs (a
    // std::vector argument would be treated as an opaque non-tensor and cut the graph).
    const auto inputs = input_list.vec();
    const auto device = inputs.at(0).device();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->saved_data["cpu_rng"] = at::detail::getDefaultCPUGenerator().get_state();
    if (device.is_cuda()) ctx->saved_data["dev_rng"] = default_generator(device).get_state();
    ctx->saved_data["cpu_autocast"] = at::autocast::is_autocast_enabled(at::kCPU);
    ctx->saved_data["cpu_dtype"] = at::autocast::get_autocast_dtype(at::kCPU);
    ctx->saved_data["dev_autocast"] = at::autocast::is_autocast_enabled(at::kCUDA);
    ctx->saved_data["dev_dtype"] = at::autocast::get_autocast_dtype(at::kCUDA);
    ctx->save_for_backward(inputs);
    // Autograd is off here (custom Function forward): nothing inside the block is saved.
    return holder->fn(inputs);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto holder = ctx->saved_data["fn"].toCapsule();
    auto* fn = static_cast<FnHolder*>(holder.get());
    const auto device = saved.at(0).device();

    // Replay with the first run's RNG state, then put the current state back.
    auto cpu_gen = at::detail::getDefaultCPUGenerator();
    auto cpu_now = cpu_gen.get_state();
    cpu_gen.set_state(ctx->saved_data["cpu_rng"].toTensor());
    std::optional<at::Generator> dev_gen;
    torch::Tensor dev_now;
    if (device.is_cuda()) {
      dev_gen = default_generator(device);
      dev_now = dev_gen->get_state();
      dev_gen->set_state(ctx->saved_data["dev_rng"].toTensor());
    }

    std::vector<torch::Tensor> detached;
    for (const auto& t : saved) {
      detached.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    }
    torch::autograd::variable_list outputs;
    {
      torch::AutoGradMode grad(true);
      AutocastScope cpu(at::kCPU, ctx->saved_data["cpu_autocast"].toBool(),
                        ctx->saved_data["cpu_dtype"].toScalarType());
      AutocastScope cuda(at::kCUDA, ctx->saved_data["dev_autocast"].toBool(),
                         ctx->saved_data["dev_dtype"].toScalarType());
      outputs = fn->fn(detached);
    }
    cpu_gen.set_state(cpu_now);
    if (dev_gen) dev_gen->set_state(dev_now);

    torch::autograd::variable_list outs, grads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_out[i].defined()) {
        outs.push_back(outputs[i]);
        grads.push_back(grad_out[i]);
      }
    }
    if (!outs.empty()) torch::autograd::backward(outs, grads);
    torch::autograd::variable_list result;
    result.push_back(torch::Tensor());  // for the holder argument
    for (const auto& d : detached)
      result.push_back(d.defined() && d.requires_grad() ? d.grad() : torch::Tensor());
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint_block(const models::BlockFn& fn,
                                            const std::vector<torch::Tensor>& inputs) {
  // Like use_reentrant=True: without grad mode there is nothing to save or recompute.
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  return CheckpointFunction::apply(c10::make_intrusive<FnHolder>(fn), at::TensorList(inputs));
}

}  // namespace sweep
