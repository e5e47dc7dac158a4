// Per-block activation checkpointing, as torch.utils.checkpoint(use_reentrant=True) (the
// default Hugging Face's gradient_checkpointing_enable() uses): forward runs the block
// without saving activations and keeps only its inputs; backward re-runs it with the RNG
// and autocast state of the first run (so dropout masks are identical) and back-propagates
// through the recomputed graph.
#pragma once

#include "models/model.h"

namespace sweep {

std::vector<torch::Tensor> checkpoint_block(const models::BlockFn& fn,
                                            const std::vector<torch::Tensor>& inputs);

}  // namespace sweep
