// What every model in the zoo offers the training burst: a loss on a synthetic batch, its
// repeated blocks run through a pluggable BlockRunner (so the burst can checkpoint them
// block by block without the model knowing), and a FLOP count for MFU.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/int8.h"
#include "models/nf4.h"
#include "models/lora.h"

namespace sweep::models {

// The sequence axes a point can set; a model reads only those it takes.
struct BatchShape {
  int64_t batch = 1;
  int64_t seq = 0;         // GPT-2 tokens, T5 encoder tokens
  int64_t target_seq = 0;  // T5 decoder tokens
  double audio_s = 0;      // Whisper seconds of audio (100 frames per second)
  // A causal LM's: a prompt-completion dataset's completion share of each sequence (0: every
  // token labelled), and the micro-batch as one padding-free row (schema::kAxes).
  double completion_share = 0;
  bool padding_free = false;
};

// One synthetic micro-batch, already on the device.
struct Batch {
  std::vector<torch::Tensor> tensors;  // model-specific: ids, labels, features...
  int64_t tokens = 0;                  // tokens (or audio frames after the conv stem) processed
  int64_t samples = 0;
  // A causal LM's labels the loss scores (labels[:, 1:] != -100): what a Meta tensor cannot
  // count where the loss copies only those (models/fused_lm_head.h).
  int64_t scored = 0;
};

// One repeated block as a function of its tensor inputs.
using BlockFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;
// How a model runs a block: directly, or through activation checkpointing.
using BlockRunner =
    std::function<std::vector<torch::Tensor>(const BlockFn&, const std::vector<torch::Tensor>&)>;

class ModelImpl : public torch::nn::Module {
 public:
  // Training loss as Hugging Face computes it (logits upcast to fp32), a scalar.
  virtual torch::Tensor loss(const Batch& batch) = 0;
  // Logits (for reference checks against transformers), in eval or train mode.
  virtual torch::Tensor logits(const Batch& batch) = 0;
  virtual Batch synthetic_batch(const BatchShape& shape, torch::Device device,
                                torch::Generator& gen) const = 0;
  // Forward FLOPs for one sample: all of it, and the part inside repeated blocks (what
  // checkpointing computes twice). Training costs 3x forward (+ blocks again if checkpointed).
  struct Flops {
    double forward = 0;
    double blocks_forward = 0;
  };
  virtual Flops forward_flops(const BatchShape& shape) const = 0;

  void set_block_runner(BlockRunner runner) { runner_ = std::move(runner); }
  // transformers' use_cache (true by default in every config of the zoo): a DynamicCache
  // built even when nothing will ever read it. Models without a cache ignore it.
  void set_use_cache(bool on) { use_cache_ = on; }
  bool use_cache() const { return use_cache_; }
  // transformers' enable_input_require_grads(): the input embeddings' output (GPT-2's wte,
  // T5's shared, Whisper's conv1) is made to require grad, so that gradients flow through
  // checkpointed blocks when the base is frozen. gradient_checkpointing_enable() turns it on
  // for token models and get_peft_model for every model that was already checkpointing.
  void set_inputs_require_grad(bool on) { inputs_require_grad_ = on; }
  // TRL's add_fused_lm_head, as SFTTrainer trains a causal LM (trainer: sft): the loss from
  // the backbone's hidden states through models/fused_lm_head.h, the backbone without its
  // cache, never the (B, T, V) logits. Models without an LM head ignore it.
  void set_fused_lm_head(bool on) { fused_lm_head_ = on; }

 protected:
  std::vector<torch::Tensor> run_block(const BlockFn& fn, const std::vector<torch::Tensor>& in) {
    return runner_ ? runner_(fn, in) : fn(in);
  }
  // Whether blocks run through activation checkpointing (transformers then turns the cache off).
  bool checkpointing() const { return static_cast<bool>(runner_); }
  bool fused_lm_head() const { return fused_lm_head_; }
  // The forward hook enable_input_require_grads() registers: on the embedding's output.
  torch::Tensor input_embeddings_hook(torch::Tensor output) const {
    if (inputs_require_grad_) output.requires_grad_(true);
    return output;
  }

 private:
  BlockRunner runner_;
  bool use_cache_ = true;
  bool inputs_require_grad_ = false;
  bool fused_lm_head_ = false;
};

// The transformers release whose forward code the models follow where releases differ. Known
// difference: T5's position-bias mask reaches scaled_dot_product_attention contiguous from 5.23
// on (integrations/sdpa_attention.py create_position_bias_mask ends in .contiguous()), and in the
// bias's permuted layout in 5.17, which on CUDA rules out every fused SDPA kernel (the math path
// keeps B x H x L x L probabilities for backward). One per process: the worker sets it from its
// point before it builds the model. 5.23 unless a config names 5.17 (`transformers: "5.17"`).
enum class TransformersRelease { k5_17, k5_23 };
void follow_transformers(TransformersRelease release);
TransformersRelease followed_transformers();
// "5.17" or "5.23" (a patch level, "5.17.0", is accepted); nullopt for any other release.
std::optional<TransformersRelease> parse_transformers_release(const std::string& text);

// transformers' DynamicCache as one forward pass uses it: DynamicLayer.update concatenates the
// new keys and values onto an empty tensor (a contiguous copy of each) and attention uses the
// copies; the cache holds them until the model's output is dropped, after the loss.
class KVCache {
 public:
  // k, v: (B, H, T, D) -> the cached (B, H, T, D) copies, which attention must use.
  std::pair<torch::Tensor, torch::Tensor> update(const torch::Tensor& k, const torch::Tensor& v) {
    auto empty = torch::empty({0}, k.options());  // torch.tensor([], dtype=..., device=...)
    keys_.push_back(torch::cat({empty, k}, -2));
    values_.push_back(torch::cat({empty, v}, -2));
    return {keys_.back(), values_.back()};
  }

 private:
  std::vector<torch::Tensor> keys_, values_;
};

// torch.nn.functional.linear as Python calls it: at::linear (addmm on the folded batch when
// there is a bias). LibTorch's C++ torch::nn::Linear and F::linear are an older composite
// (matmul, then an in-place bias add) whose backward runs other kernels in another order,
// so every linear layer of the zoo goes through this. A layer with a LoRA adapter adds it; one
// loaded in 8 bit runs as bitsandbytes' Linear8bitLt (int8.h), one in 4 bit as Linear4bit (nf4.h).
inline torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  if (is_int8(layer->weight)) return int8_linear(*layer, layer->weight, layer->bias, x);
  if (state_4bit(*layer)) return linear_4bit(*layer, layer->weight, layer->bias, x);
  return with_lora(*layer, x,
                   at::linear(x, layer->weight,
                              layer->bias.defined() ? std::optional<at::Tensor>(layer->bias)
                                                    : std::nullopt));
}

// transformers' ForCausalLMLoss, as every causal LM of the zoo runs it: logits.float() (a
// (B, T, V) fp32 copy under mixed precision, beside the half logits), the labels padded with
// -100 and shifted left, mean cross-entropy ignoring -100.
inline torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                                    int64_t vocab_size) {
  auto upcast = logits.to(torch::kFloat);
  // The padded labels stay referenced until the loss returns, as in transformers.
  auto padded = torch::constant_pad_nd(labels, {0, 1}, -100);
  auto shift_labels = padded.slice(1, 1).contiguous();
  return torch::nn::functional::cross_entropy(
      upcast.view({-1, vocab_size}), shift_labels.view({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}

// A causal LM's synthetic batch: random token ids, the labels the ids themselves (causal-LM
// fine-tuning; the loss shifts them). A prompt-completion dataset's labels are a copy, -100
// over each prompt (SFTTrainer's labels from its completion_mask). Padding-free, as
// DataCollatorForLanguageModeling(padding_free=True) collates it: the ids and the labels as
// one row, position_ids restarting at each sequence, each sequence's first label -100 (a
// Trainer's DataCollatorWithFlattening does the same); tensors {ids, labels, position_ids}.
inline Batch causal_lm_batch(int64_t vocab_size, const BatchShape& s, torch::Device device,
                             torch::Generator& gen, const char* model) {
  TORCH_CHECK(s.seq > 0, model, " needs seq > 0");
  auto ids = torch::randint(vocab_size, {s.batch, s.seq}, gen, torch::kLong).to(device);
  auto labels = ids;
  // The completion: its share of each sequence rounded half up, at least one token.
  const int64_t completion =
      s.completion_share > 0
          ? std::clamp<int64_t>(std::llround(s.completion_share * static_cast<double>(s.seq)), 1,
                                s.seq)
          : s.seq;
  const int64_t prompt = s.seq - completion;
  if (prompt > 0) {
    labels = ids.clone();
    labels.slice(1, 0, prompt).fill_(-100);
  }
  Batch b{{ids, labels}, s.batch * s.seq, s.batch};
  // After the shift, each sequence's labels past its first token and its prompt.
  b.scored = s.batch * (s.seq - std::max<int64_t>(prompt, 1));
  if (s.padding_free) {
    auto flat_labels = labels.reshape({1, -1}).clone();
    flat_labels.view({s.batch, s.seq}).select(1, 0).fill_(-100);
    // One arange per sequence, concatenated (the collator's torch.cat of its position_ids).
    const std::vector<torch::Tensor> each(
        s.batch, torch::arange(s.seq, torch::dtype(torch::kLong).device(device)));
    auto position_ids = torch::cat(each).unsqueeze(0);
    b.tensors = {ids.reshape({1, -1}), flat_labels, position_ids};
  }
  return b;
}

// FLOPs of a (rows x inner) @ (inner x cols) matmul: one multiply and one add each.
inline double matmul_flops(double rows, double inner, double cols) { return 2 * rows * inner * cols; }

}  // namespace sweep::models
