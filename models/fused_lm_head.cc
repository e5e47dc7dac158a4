// TRL 1.16's fused LM head; see fused_lm_head.h. Each function below is the Python function of
// trl/kernels/chunked_logprob.py or trl/trainer/utils.py it names, statement by statement.
#include "models/fused_lm_head.h"

#include <limits>

#include "models/emulation.h"

namespace sweep::models {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// _forward_tile with SFTTrainer's outputs (entropy and is_top1; no mean logits, no
// log_sum_sq_probs), no softcapping, logit_scale and temperature 1: the whole tile at once.
void forward_tile(const torch::Tensor& tile, const torch::Tensor& targets,
                  const torch::Tensor& running_max, const torch::Tensor& sum_exp,
                  const torch::Tensor& x_sum_exp, const torch::Tensor& max_before_target,
                  const torch::Tensor& target_logit, int64_t vocab_start, int64_t n_cols) {
  torch::Tensor z;
  {
    // z = _torch_transform(tile.float(), ...): z * logit_scale, then z * inv_t, the argument
    // (an fp32 copy of a half tile) held by the call until it returns.
    auto argument = tile.to(torch::kFloat);
    auto scaled = argument * 1.0;
    z = scaled * 1.0;
  }
  auto local = targets - vocab_start;
  // HAS_IS_TOP1: before_target is a local, alive to the end.
  auto before_target = torch::arange(n_cols, torch::dtype(torch::kLong).device(z.device())) <
                       local.unsqueeze(-1);
  {
    auto outside = before_target.bitwise_not();
    auto filled = z.masked_fill(outside, -kInf);
    outside.reset();
    auto row_max = filled.amax(-1);
    filled.reset();
    max_before_target.copy_(torch::maximum(max_before_target, row_max));
  }
  auto new_m = torch::maximum(running_max, z.amax(-1));
  auto rescale = torch::exp(running_max - new_m);
  torch::Tensor e;
  {
    auto shifted = z - new_m.unsqueeze(-1);
    e = torch::exp(shifted);
  }
  sum_exp.mul_(rescale).add_(e.sum(-1));
  {
    // HAS_ENTROPY
    auto ez = e * z;
    x_sum_exp.mul_(rescale).add_(ez.sum(-1));
  }
  running_max.copy_(new_m);
  auto in_tile = (local >= 0).bitwise_and(local < n_cols);
  auto target_z = z.gather(-1, local.clamp(0, n_cols - 1).unsqueeze(-1)).squeeze(-1);
  target_logit.copy_(torch::where(in_tile, target_z, target_logit));
}

// _backward_tile with the log-probabilities' gradient only (SFTTrainer reads the entropy
// detached): overwrites the tile with the gradient of the loss with respect to it.
void backward_tile(const torch::Tensor& tile, const torch::Tensor& targets,
                   const torch::Tensor& log_z, const torch::Tensor& grad_logprobs,
                   int64_t vocab_start, int64_t n_cols) {
  torch::Tensor y;
  {
    auto argument = tile.to(torch::kFloat);
    y = argument * 1.0;
  }
  auto z = y * 1.0;
  auto log_p = z - log_z.unsqueeze(-1);
  auto p = torch::exp(log_p);
  auto grad = torch::zeros_like(z);
  // HAS_LOGPROB_GRAD: d(log p_target) / dz_j = 1[j = target] - p_j
  auto is_target = torch::arange(vocab_start, vocab_start + n_cols,
                                 torch::dtype(torch::kLong).device(z.device())) == targets.unsqueeze(-1);
  {
    auto indicator = is_target.to(torch::kFloat);
    auto difference = indicator - p;
    indicator.reset();
    auto product = grad_logprobs.unsqueeze(-1) * difference;
    difference.reset();
    grad += product;
  }
  grad = grad * 1.0;  // * inv_t
  tile.copy_(grad * 1.0);  // * logit_scale
}

// _addmm_fp32: acc += a @ b without rounding the product to the inputs' dtype. CUDA's addmm
// writes fp32 from half inputs (out_dtype); elsewhere both are upcast first.
void addmm_fp32(torch::Tensor acc, const torch::Tensor& a, const torch::Tensor& b) {
  if (acts_cuda(acc) && (a.scalar_type() == torch::kHalf || a.scalar_type() == torch::kBFloat16)) {
    at::addmm_out(acc, acc, a, b, torch::kFloat);
  } else {
    acc.addmm_(a.to(torch::kFloat), b.to(torch::kFloat));
  }
}

// ChunkedLogProbFunction with SFTTrainer's outputs: log_probs, entropy and is_top1.
struct ChunkedLogProb : torch::autograd::Function<ChunkedLogProb> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& hidden,
                                                const torch::Tensor& weight,
                                                const torch::Tensor& targets) {
    ctx->set_materialize_grads(false);
    const int64_t N = hidden.size(0), vocab = weight.size(0);
    const auto device = device_type_of(hidden);
    const auto compute_dtype =
        autocast_enabled(device) ? autocast_dtype(device) : hidden.scalar_type();
    const bool triton = acts_cuda(hidden);  // _use_triton: the fold is a kernel there
    const auto f32 = hidden.options().dtype(torch::kFloat);
    auto running_max = torch::full({N}, -kInf, f32);
    auto sum_exp = torch::zeros({N}, f32);
    auto x_sum_exp = torch::zeros({N}, f32);
    auto sq_sum_exp = torch::zeros({N}, f32);
    auto z_sum = torch::zeros({N}, f32);
    auto max_before_target = torch::full({N}, -kInf, f32);
    auto target_logit = torch::zeros({N}, f32);
    auto mm_buf = torch::empty({std::min(N, kFusedHeadTokenChunk), kFusedHeadVocabChunk},
                               hidden.options().dtype(compute_dtype));
    torch::Tensor hidden_chunk, tile;
    for (int64_t token_start = 0; token_start < N; token_start += kFusedHeadTokenChunk) {
      const int64_t token_end = std::min(token_start + kFusedHeadTokenChunk, N), n = token_end - token_start;
      hidden_chunk = hidden.slice(0, token_start, token_end).to(compute_dtype);
      for (int64_t start = 0; start < vocab; start += kFusedHeadVocabChunk) {
        const int64_t end = std::min(start + kFusedHeadVocabChunk, vocab);
        tile = mm_buf.slice(0, 0, n).slice(1, 0, end - start);
        {
          auto w = weight.slice(0, start, end).to(compute_dtype);
          at::mm_out(tile, hidden_chunk, w.t());
        }
        if (triton) continue;  // _forward_kernel folds the tile in registers
        forward_tile(tile, targets.slice(0, token_start, token_end),
                     running_max.slice(0, token_start, token_end), sum_exp.slice(0, token_start, token_end),
                     x_sum_exp.slice(0, token_start, token_end),
                     max_before_target.slice(0, token_start, token_end),
                     target_logit.slice(0, token_start, token_end), start, end - start);
      }
    }
    torch::Tensor log_z;
    {
      auto log_sum = torch::log(sum_exp);
      log_z = running_max + log_sum;
    }
    auto logprobs = target_logit - log_z;
    torch::Tensor entropy;
    {
      auto ratio = x_sum_exp / sum_exp;
      entropy = log_z - ratio;
    }
    torch::Tensor is_top1;
    {
      auto at_max = target_logit >= running_max;
      auto above = target_logit > max_before_target;
      is_top1 = at_max.bitwise_and(above);
    }
    ctx->save_for_backward({hidden, weight, targets, log_z, entropy});
    ctx->saved_data["compute_dtype"] = static_cast<int64_t>(compute_dtype);
    ctx->mark_non_differentiable({is_top1});
    return {logprobs, entropy, is_top1};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& targets = saved[2];
    const auto& log_z = saved[3];
    const auto compute_dtype = static_cast<at::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const bool triton = acts_cuda(hidden);
    const int64_t N = hidden.size(0), vocab = weight.size(0);
    const auto f32 = torch::dtype(torch::kFloat).device(hidden.device());
    torch::Tensor grad_hidden, grad_weight;
    if (ctx->needs_input_grad(0)) grad_hidden = torch::zeros(hidden.sizes(), f32);
    if (ctx->needs_input_grad(1)) grad_weight = torch::zeros(weight.sizes(), f32);
    auto mm_buf = torch::empty({std::min(N, kFusedHeadTokenChunk), kFusedHeadVocabChunk},
                               hidden.options().dtype(compute_dtype));
    torch::Tensor grad_logprobs;
    if (grads[0].defined()) grad_logprobs = grads[0].to(torch::kFloat).contiguous();
    torch::Tensor hidden_chunk, w_chunk, tile;
    for (int64_t token_start = 0; token_start < N; token_start += kFusedHeadTokenChunk) {
      const int64_t token_end = std::min(token_start + kFusedHeadTokenChunk, N), n = token_end - token_start;
      hidden_chunk = hidden.slice(0, token_start, token_end).to(compute_dtype);
      for (int64_t start = 0; start < vocab; start += kFusedHeadVocabChunk) {
        const int64_t end = std::min(start + kFusedHeadVocabChunk, vocab);
        w_chunk = weight.slice(0, start, end).to(compute_dtype);
        tile = mm_buf.slice(0, 0, n).slice(1, 0, end - start);
        at::mm_out(tile, hidden_chunk, w_chunk.t());
        // _backward_kernel overwrites the tile in place where Triton runs.
        if (!triton && grad_logprobs.defined())
          backward_tile(tile, targets.slice(0, token_start, token_end),
                        log_z.slice(0, token_start, token_end),
                        grad_logprobs.slice(0, token_start, token_end), start, end - start);
        if (grad_hidden.defined()) addmm_fp32(grad_hidden.slice(0, token_start, token_end), tile, w_chunk);
        if (grad_weight.defined()) addmm_fp32(grad_weight.slice(0, start, end), tile.t(), hidden_chunk);
      }
    }
    // The locals of the loop and the buffer are gone before the casts of the return statement.
    tile.reset();
    w_chunk.reset();
    hidden_chunk.reset();
    mm_buf.reset();
    torch::Tensor dh = grad_hidden.defined() ? grad_hidden.to(hidden.scalar_type()) : torch::Tensor();
    torch::Tensor dw = grad_weight.defined() ? grad_weight.to(weight.scalar_type()) : torch::Tensor();
    return {dh, dw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_lm_head_loss(const torch::Tensor& last_hidden_state,
                                 const torch::Tensor& weight, const torch::Tensor& labels,
                                 int64_t scored) {
  // add_fused_lm_head's _fused_forward, fused_lm_head=True, no shift_labels.
  auto hidden_states = last_hidden_state.slice(1, 0, -1);
  auto shifted = labels.slice(1, 1);
  auto mask = shifted != -100;
  const bool compact = acts_cuda(last_hidden_state);  // _use_triton(hidden_states.device)
  torch::autograd::variable_list per_token;
  if (compact) {
    // hidden_states[mask], labels[mask]: the scored positions, copied. A boolean index is
    // nonzero's (count, 2) positions; a Meta tensor has no values to count: the batch's.
    std::vector<torch::Tensor> where;
    if (last_hidden_state.is_meta()) {
      note_mask_count(mask, scored);  // for masked_scatter's gradient (masked_select)
      where = torch::empty({scored, mask.dim()}, mask.options().dtype(torch::kLong)).unbind(1);
    } else {
      where = mask.nonzero().unbind(1);
    }
    const c10::List<std::optional<at::Tensor>> index({where[0], where[1]});
    auto h = at::index(hidden_states, index);
    auto t = at::index(shifted, index);
    per_token = ChunkedLogProb::apply(h, weight, t);
  } else {
    auto h = hidden_states.reshape({-1, hidden_states.size(-1)});
    auto t = shifted.clamp_min(0).reshape({-1});
    per_token = ChunkedLogProb::apply(h, weight, t);
  }
  // Each output back in the labels' shape, zero where not scored: masked_scatter into zeros
  // (compact) or masked_fill (every position); log_probs, entropy, is_top1 in that order, the
  // tuple of the raw outputs released once they are all unpacked.
  torch::Tensor log_probs, entropy, is_top1;
  for (int i = 0; i < 3; ++i) {
    auto& out = i == 0 ? log_probs : i == 1 ? entropy : is_top1;
    if (compact) {
      out = per_token[i].new_zeros(mask.sizes()).masked_scatter(mask, per_token[i]);
    } else {
      auto outside = mask.bitwise_not();
      out = per_token[i].view(mask.sizes()).masked_fill(outside, 0);
    }
  }
  per_token.clear();
  // The output's own loss (FusedCausalLMOutput.loss), which SFTTrainer does not use:
  // -log_probs.sum() / mask.sum().clamp(min=1).
  torch::Tensor output_loss;
  {
    auto total = log_probs.sum().neg();
    auto count = mask.sum().clamp_min(1);
    output_loss = total / count;
  }
  // SFTTrainer.compute_loss: per_token_loss = -outputs.log_probs, summed over the scored tokens
  // and divided by their count (num_items_in_batch).
  auto per_token_loss = log_probs.neg();
  auto num_tokens = mask.sum();
  auto sum = per_token_loss.sum();
  return sum / num_tokens.clamp_min(1);
}

}  // namespace sweep::models
