// Optimizer algorithms transcribed from torch/optim (adam.py with decoupled weight decay,
// sgd.py, _adafactor.py), keeping their order of operations and temporaries, because the
// optimizer step's temporaries can be the peak of a small-batch point.
#include "sweeps/worker/optim.h"

#include "models/emulation.h"
#include "sweeps/worker/optim8bit.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sweep {
namespace {

int64_t bytes_of(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts)
    if (t.defined()) n += t.nbytes();
  return n;
}

// optimizer.py _default_to_fused_or_foreach (fused only when asked for): foreach where the
// parameters are on a foreach device (CUDA, an emulated card's included), the for-loop
// elsewhere (the CPU).
bool use_foreach(Impl impl, const torch::Tensor& param) {
  return impl == Impl::kDefault ? models::acts_cuda(param) : impl == Impl::kForeach;
}

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<torch::Tensor> params, double lr, double wd, bool fused, Impl impl)
      : Optimizer(std::move(params)), lr_(lr), wd_(wd), fused_(fused), impl_(impl),
        exp_avg_(params_.size()), exp_avg_sq_(params_.size()), steps_(params_.size()) {}
  bool takes_amp_scaling() const override { return fused_; }
  int64_t state_bytes() const override { return bytes_of(exp_avg_) + bytes_of(exp_avg_sq_); }

  void step(const torch::Tensor& grad_scale, const torch::Tensor& found_inf) override {
    torch::NoGradGuard no_grad;
    // adam.py Adam._init_group: parameters with a gradient, their state created on first use.
    std::vector<torch::Tensor> p, g, m, v, s;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].grad().defined()) continue;
      if (!steps_[i].defined()) init_state(i);
      p.push_back(params_[i]);
      g.push_back(params_[i].grad());
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      s.push_back(steps_[i]);
    }
    if (p.empty()) return;
    if (fused_) fused(p, g, m, v, s, grad_scale, found_inf);
    else if (use_foreach(impl_, p[0])) multi_tensor(p, g, m, v, s);
    else single_tensor(p, g, m, v, s);
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

  void init_state(std::size_t i) {
    const auto& q = params_[i];
    // "[special device hosting for step]": a CPU float scalar, except fused (or capturable),
    // which keeps it on the parameter's device.
    steps_[i] = torch::zeros({}, torch::dtype(torch::kFloat).device(fused_ ? q.device() : torch::kCPU));
    exp_avg_[i] = torch::zeros_like(q, at::MemoryFormat::Preserve);
    exp_avg_sq_[i] = torch::zeros_like(q, at::MemoryFormat::Preserve);
  }

  // adam.py _fused_adam. The kernel reads the step counters but does not advance them: the
  // counters are incremented before it, and a step the kernel skipped for found_inf is taken
  // back after it.
  void fused(std::vector<torch::Tensor>& p, std::vector<torch::Tensor>& g,
             std::vector<torch::Tensor>& m, std::vector<torch::Tensor>& v,
             std::vector<torch::Tensor>& s, const torch::Tensor& grad_scale,
             const torch::Tensor& found_inf) {
    at::_foreach_add_(s, 1);
    at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, s, lr_, kBeta1, kBeta2, wd_, kEps,
                      /*amsgrad=*/false, /*maximize=*/false,
                      grad_scale.defined() ? std::optional<at::Tensor>(grad_scale) : std::nullopt,
                      found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt);
    if (found_inf.defined()) at::_foreach_sub_(s, std::vector<at::Tensor>(s.size(), found_inf));
  }

  // adam.py _single_tensor_adam with decoupled weight decay.
  void single_tensor(std::vector<torch::Tensor>& p, std::vector<torch::Tensor>& g,
                     std::vector<torch::Tensor>& m, std::vector<torch::Tensor>& v,
                     std::vector<torch::Tensor>& s) {
    // As in Python, `denom` lives until the next iteration replaces it.
    torch::Tensor denom;
    for (std::size_t i = 0; i < p.size(); ++i) {
      s[i].add_(1);
      if (wd_ != 0) p[i].mul_(1 - lr_ * wd_);
      m[i].lerp_(g[i], 1 - kBeta1);
      v[i].mul_(kBeta2).addcmul_(g[i], g[i], 1 - kBeta2);
      const double step = models::scalar_value(s[i]);
      const double bc1 = 1 - std::pow(kBeta1, step), bc2 = 1 - std::pow(kBeta2, step);
      denom = (v[i].sqrt() / std::pow(bc2, 0.5)).add_(kEps);  // Python's x**0.5
      p[i].addcdiv_(m[i], denom, -lr_ / bc1);
    }
  }

  // adam.py _multi_tensor_adam (foreach), not capturable, decoupled weight decay.
  void multi_tensor(std::vector<torch::Tensor>& p, std::vector<torch::Tensor>& g,
                    std::vector<torch::Tensor>& m, std::vector<torch::Tensor>& v,
                    std::vector<torch::Tensor>& s) {
    // Counters on the CPU: adam.py adds a CPU scalar tensor (one kernel for the list).
    at::_foreach_add_(s, torch::tensor(1.0), 1.0);
    if (wd_ != 0) at::_foreach_mul_(p, 1 - lr_ * wd_);
    at::_foreach_lerp_(m, g, 1 - kBeta1);
    at::_foreach_mul_(v, kBeta2);
    at::_foreach_addcmul_(v, g, g, 1 - kBeta2);
    std::vector<at::Scalar> step_size, bc2_sqrt;
    for (const auto& t : s) {
      const double step = models::scalar_value(t);
      step_size.emplace_back(-lr_ / (1 - std::pow(kBeta1, step)));
      bc2_sqrt.emplace_back(std::pow(1 - std::pow(kBeta2, step), 0.5));
    }
    auto denom = at::_foreach_sqrt(v);  // a temporary the size of all parameters
    at::_foreach_div_(denom, bc2_sqrt);
    at::_foreach_add_(denom, kEps);
    at::_foreach_addcdiv_(p, m, denom, step_size);
  }

  double lr_, wd_;
  bool fused_;
  Impl impl_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, steps_;  // per parameter, once it has a grad
};

// torch.optim.SGD(momentum=0.9): weight decay is L2 added to the gradient (sgd.py).
class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<torch::Tensor> params, double lr, double wd, Impl impl)
      : Optimizer(std::move(params)), lr_(lr), wd_(wd), impl_(impl),
        buf_(params_.size()) {}
  int64_t state_bytes() const override { return bytes_of(buf_); }
  void step(const torch::Tensor&, const torch::Tensor&) override {
    torch::NoGradGuard no_grad;
    std::vector<std::size_t> idx;  // SGD._init_group: the parameters with a gradient
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (params_[i].grad().defined()) idx.push_back(i);
    if (idx.empty()) return;
    if (use_foreach(impl_, params_[idx[0]])) multi_tensor(idx);
    else single_tensor(idx);
  }

 private:
  static constexpr double kMomentum = 0.9;

  // sgd.py _single_tensor_sgd (dampening 0, not nesterov): one parameter at a time.
  void single_tensor(const std::vector<std::size_t>& idx) {
    for (auto i : idx) {
      auto g = params_[i].grad();
      if (wd_ != 0) g = g.add(params_[i], wd_);
      if (!buf_[i].defined()) buf_[i] = g.detach().clone();
      else buf_[i].mul_(kMomentum).add_(g);
      params_[i].add_(buf_[i], -lr_);
    }
  }

  // sgd.py _multi_tensor_sgd: the weight-decayed gradients are one foreach temporary spanning
  // every parameter, alive until the update is done.
  void multi_tensor(const std::vector<std::size_t>& idx) {
    std::vector<torch::Tensor> p, g, bufs;
    bool all_have_buffers = true;
    for (auto i : idx) {
      p.push_back(params_[i]);
      g.push_back(params_[i].grad());
      all_have_buffers = all_have_buffers && buf_[i].defined();
    }
    if (wd_ != 0) g = at::_foreach_add(g, p, wd_);
    if (all_have_buffers) {
      for (auto i : idx) bufs.push_back(buf_[i]);
      at::_foreach_mul_(bufs, kMomentum);
      at::_foreach_add_(bufs, g, 1.0);
    } else {
      for (std::size_t k = 0; k < idx.size(); ++k) {
        auto& b = buf_[idx[k]];
        if (!b.defined()) b = g[k].detach().clone();
        else b.mul_(kMomentum).add_(g[k], 1.0);
        bufs.push_back(b);
      }
    }
    at::_foreach_add_(p, bufs, -lr_);
  }

  double lr_, wd_;
  Impl impl_;
  std::vector<torch::Tensor> buf_;
};

// torch.optim.Adafactor (_init_group, then _single_tensor_adafactor): beta2_decay -0.8, eps
// (dtype eps, 1e-3), d 1. Python's loop variables (row_mean, col_mean, var_estimate/update,
// grad_squared) live until the next iteration rebinds them, so one parameter's update is
// still held while the next one's is computed: they are kept outside the loop here too.
class Adafactor final : public Optimizer {
 public:
  Adafactor(std::vector<torch::Tensor> params, double lr, double wd)
      : Optimizer(std::move(params)), lr_(lr), wd_(wd), row_(params_.size()), col_(params_.size()),
        var_(params_.size()), steps_(params_.size()) {}
  int64_t state_bytes() const override {
    return bytes_of(row_) + bytes_of(col_) + bytes_of(var_) + bytes_of(steps_);
  }
  void step(const torch::Tensor&, const torch::Tensor&) override {
    torch::NoGradGuard no_grad;
    // _init_group: state for every parameter with a gradient, before any update.
    std::vector<std::size_t> with_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& g = params_[i].grad();
      if (!g.defined()) continue;
      with_grad.push_back(i);
      if (steps_[i].defined()) continue;
      steps_[i] = torch::zeros({}, torch::kFloat);  // torch.tensor(0.0): a CPU scalar
      if (g.dim() > 1) {
        auto rs = g.sizes().vec(), cs = g.sizes().vec();
        rs.back() = 1;
        cs[cs.size() - 2] = 1;
        row_[i] = g.new_zeros(rs);
        col_[i] = g.new_zeros(cs);
      } else {
        var_[i] = torch::zeros_like(g, at::MemoryFormat::Preserve);
      }
    }
    torch::Tensor row_mean, col_mean, var_estimate, update, grad_squared;
    for (std::size_t i : with_grad) {
      auto& param = params_[i];
      const auto grad = param.grad();
      // eps1 defaults to torch.finfo(param.dtype).eps.
      const double eps1 = param.scalar_type() == torch::kBFloat16 ? 0.0078125
                          : param.scalar_type() == torch::kHalf   ? 0.0009765625
                                                                  : std::numeric_limits<float>::epsilon();
      steps_[i].add_(1);
      const double step_float = models::scalar_value(steps_[i]);
      const double one_minus_beta2_t = std::pow(step_float, kBeta2Decay);
      const double rho_t = std::min(lr_, 1.0 / std::pow(step_float, 0.5));  // Python's x**0.5
      const double alpha =
          std::max(kEps2, models::scalar_value(param.norm(2)) / std::pow(double(param.numel()), 0.5)) * rho_t;
      if (wd_ != 0) param.mul_(1 - lr_ * wd_);
      if (grad.dim() > 1) {
        row_mean = torch::norm(grad, 2, {-1}, true).square_().div_(grad.size(-1));
        row_[i].lerp_(row_mean, one_minus_beta2_t);
        col_mean = torch::norm(grad, 2, {-2}, true).square_().div_(grad.size(-2));
        col_[i].lerp_(col_mean, one_minus_beta2_t);
        var_estimate = row_[i].matmul(col_[i]);
        var_estimate.div_(row_[i].mean({-2}, true).clamp_(eps1));
      } else {
        grad_squared = grad * grad;
        var_[i].lerp_(grad_squared, one_minus_beta2_t);
        var_estimate = var_[i].clone();
      }
      update = var_estimate.clamp_(eps1 * eps1).rsqrt_();
      update.mul_(grad);
      const double denom =
          std::max(1.0, models::scalar_value(update.norm(2)) / std::pow(double(update.numel()), 0.5));
      param.add_(update, -alpha / denom);
    }
  }

 private:
  static constexpr double kBeta2Decay = -0.8, kEps2 = 1e-3;
  double lr_, wd_;
  std::vector<torch::Tensor> row_, col_, var_, steps_;
};

}  // namespace

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> Optimizer::grads() const {
  std::vector<torch::Tensor> g;
  for (const auto& p : params_)
    if (p.grad().defined()) g.push_back(p.grad());
  return g;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o,
                                          std::vector<torch::Tensor> params) {
  switch (o.kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdamWFused:
      return std::make_unique<AdamW>(std::move(params), o.lr, o.weight_decay,
                                     o.kind == OptimizerKind::kAdamWFused, o.impl);
    case OptimizerKind::kSgd:
      return std::make_unique<Sgd>(std::move(params), o.lr, o.weight_decay, o.impl);
    case OptimizerKind::kAdafactor:
      return std::make_unique<Adafactor>(std::move(params), o.lr, o.weight_decay);
    case OptimizerKind::kAdamW8bit:
      return make_bnb_adamw(o.lr, o.weight_decay, std::move(params), {8, false});
    case OptimizerKind::kPagedAdamW8bit:
      return make_bnb_adamw(o.lr, o.weight_decay, std::move(params), {8, true});
    case OptimizerKind::kPagedAdamW32bit:
      return make_bnb_adamw(o.lr, o.weight_decay, std::move(params), {32, true});
    case OptimizerKind::kNone:
      break;
  }
  SWEEP_CHECK(false, "an optimizer kind without a factory");
}

}  // namespace sweep
