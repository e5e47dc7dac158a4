// Per-block activation checkpointing as torch.utils.checkpoint(use_reentrant=False), which is
// what transformers 5.x's gradient_checkpointing_enable() uses. The block runs normally, with
// autograd on, but every tensor an op saves for backward is replaced by a placeholder (the
// block's inputs are saved as _NoopSaveInputs saves them, through any hooks outside the block,
// such as activation offloading's). When backward first needs one of them, the block is run again
// with the RNG and autocast state of the first run (so dropout masks are identical), keeping
// the tensors it saves, and stopping as soon as the last one is there; each is freed once the
// backward node that needed it has run.
//
// LibTorch has no C++ API for saved-tensor hooks; the autograd engine asks its default
// Engine for them (SavedVariable::get_default_hooks() ->
// Engine::get_default_engine().get_default_saved_variable_hooks(), a virtual that Python's
// engine overrides the same way), so we install an Engine subclass as the default engine.
#pragma once

#include "models/model.h"

namespace sweep {

std::vector<torch::Tensor> checkpoint_block(const models::BlockFn& fn,
                                            const std::vector<torch::Tensor>& inputs);

// Installs (once) the default engine whose saved-tensor hooks are checkpointing's inside a
// checkpointed block and, outside one, activation offloading's while its scope is alive
// (activation_offload.h): Python's saved_tensors_hooks stack, innermost first.
void install_saved_tensor_hooks();

}  // namespace sweep
