// Activation offloading (`activation_offloading: true`): TRL 1.16's
// get_act_offloading_ctx_manager (trl/models/activation_offloading.py, from torchtune), as
// SFTConfig(activation_offloading=True) wraps each training_step (forward and backward) in it.
// Every tensor autograd saves for backward that is on the card, at least 1024 bytes and not a
// parameter's storage is copied to pinned host memory on a second stream and dropped from the
// card once five later tensors were saved; backward brings each back on that stream when its
// node runs. Under checkpointing only what autograd saves outside the checkpointed blocks is
// offloaded, and each block's input (torch.utils.checkpoint saves it with save_for_backward
// before its own hooks take over): the residual stream per layer leaves the card.
//
// TRL's options are its defaults: pinned memory, streams, min_offload_size 1024,
// max_fwd_stash_size 5. Its NoOpManager hooks on `lm_head` never fire under SFTTrainer (the
// fused head multiplies by lm_head.weight without calling the module), so nothing is exempt.
//
// On an emulated card the copies are sizes only: host memory is counted as the CUDA host
// allocator holds it, and the card's side is what the caching allocator replays, the tensors
// brought back allocated on the second stream (its own cached blocks, as on a GPU).
// APPROXIMATION (emulated only): no events, so a tensor waits for no copy; it is freed when
// TRL drops it (or, after record_stream, its last use), as if the streams were done by then.
#pragma once

#include <torch/csrc/autograd/saved_variable_hooks.h>
#include <torch/torch.h>

#include <memory>

namespace sweep {

class MemoryTracker;

class ActivationOffload {
 public:
  // `params`: every parameter of the model (update_model_params: their storages are never
  // offloaded). `mem`: the device's tracker, emptied as TRL empties the cache on entering.
  ActivationOffload(const std::vector<torch::Tensor>& params, MemoryTracker& mem);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // The context manager around one training_step: while alive on this thread, what autograd
  // saves goes through the offloader (outside checkpointed blocks, whose own hooks are inner).
  class Scope {
   public:
    explicit Scope(ActivationOffload& offload);  // __enter__
    ~Scope();                                    // __exit__
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ActivationOffload& offload_;
    ActivationOffload* prev_;
  };

  // Pinned host memory held for the offloaded copies since construction (blocks in use and
  // cached, as the CUDA host allocator keeps them).
  int64_t host_bytes() const;

  struct State;

 private:
  friend std::unique_ptr<torch::autograd::SavedVariableHooks> activation_offload_hooks();
  std::shared_ptr<State> state_;
};

// The saved-tensor hooks of the offloader active on this thread, or none (checkpoint.cc's
// engine asks outside a checkpointed block).
std::unique_ptr<torch::autograd::SavedVariableHooks> activation_offload_hooks();

}  // namespace sweep
