// TRL 1.16's fused LM head, as SFTTrainer runs every causal LM it trains (trainer: sft).
//
// SFTTrainer.__init__ calls add_fused_lm_head (trl/trainer/utils.py) with outputs
// ("log_probs", "entropy", "is_top1"), and its compute_loss calls the model with
// fused_lm_head=True: the backbone runs without its cache (use_cache=False), and instead of the
// (B, T, V) logits and transformers' loss over them, ChunkedLogProbFunction
// (trl/kernels/chunked_logprob.py) projects the hidden states through the LM head's weight in
// tiles of 4096 tokens x 32768 vocabulary entries, folding each tile into running
// log-sum-exp statistics; its backward recomputes each tile and turns it into the logits'
// gradient in place, accumulating the gradients of the hidden states and of the weight in fp32.
//
// Where Triton runs (CUDA) the fold is a Triton kernel that allocates nothing, and only the
// labelled positions are scored (`compact`: hidden_states[mask], a copy); elsewhere (the CPU)
// every position is scored and the fold is torch code whose temporaries are each a tile's size
// (_forward_tile, _backward_tile), transcribed here statement by statement with Python's
// lifetimes: a temporary dies when its statement ends, a local when its function returns.
#pragma once

#include <torch/torch.h>

namespace sweep::models {

// SFTTrainer.compute_loss's loss from the backbone's last hidden state (B, T, C), the output
// embedding's weight (V, C; the models of the zoo have no LM-head bias) and the labels (B, T,
// unshifted, -100 where not scored): -log_probs.sum() / the count of scored labels (the
// Trainer's num_items_in_batch for one micro-batch). `scored`: that count, which a Meta
// tensor cannot count and the compact (CUDA) path copies that many positions of.
torch::Tensor fused_lm_head_loss(const torch::Tensor& last_hidden_state,
                                 const torch::Tensor& weight, const torch::Tensor& labels,
                                 int64_t scored);

// ChunkedLogProbFunction's tiles: tokens per projection tile, and the vocabulary width
// (trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE).
inline constexpr int64_t kFusedHeadTokenChunk = 4096;
inline constexpr int64_t kFusedHeadVocabChunk = 32768;

}  // namespace sweep::models
