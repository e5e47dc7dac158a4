// The training burst; see burst.h. Step = k micro-batches (forward under autocast, loss/k,
// backward) then one optimizer step and zero_grad(set_to_none=True), as a PyTorch + HF loop.
#include "sweeps/burst.h"

#include <benchmark/benchmark.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>

#include "models/zoo.h"
#include "sweeps/checkpoint.h"
#include "sweeps/optim.h"
#include "sweeps/precision.h"

namespace sweep {
namespace {

// Follows the phase the burst is in and folds each phase's peak into the burst's peak.
class PeakMeter {
 public:
  PeakMeter(MemoryTracker& mem, const Fault& fault) : mem_(mem), fault_(fault) {}
  // Closes the current phase and returns its peak allocated bytes.
  int64_t enter(const std::string& phase) {
    const int64_t closed = close();
    phase_ = phase;
    mem_.reset_peaks();
    if (fault_.kind == "oom" && fault_.phase == phase) inject_oom();
    if ((fault_.kind == "crash" || fault_.kind == "hang") && phase == "forward") {
      if (fault_.kind == "crash") std::raise(SIGSEGV);
      std::this_thread::sleep_for(std::chrono::hours(24));
    }
    return closed;
  }
  int64_t close() {
    const int64_t a = mem_.peak_allocated();
    if (a > peak_allocated_) {
      peak_allocated_ = a;
      peak_phase_ = phase_;
    }
    peak_reserved_ = std::max(peak_reserved_, mem_.peak_reserved());
    if (mem_.peak_reserved() >= peak_reserved_) device_used_at_peak_ = device_used_estimate();
    return a;
  }
  const std::string& phase() const { return phase_; }
  int64_t peak_allocated() const { return peak_allocated_; }
  int64_t peak_reserved() const { return peak_reserved_; }
  const std::string& peak_phase() const { return peak_phase_; }
  int64_t device_used() const { return device_used_at_peak_; }

 private:
  // Whole-device use had the reserved peak been held: what the device uses besides the
  // allocator (context, workspaces) is (used now - reserved now).
  int64_t device_used_estimate() {
    return mem_.device_used() - mem_.reserved() + mem_.peak_reserved();
  }
  void inject_oom() {
    // Test switch: the next allocation past what is held now fails, as on a full device.
    mem_.set_budget(std::max<int64_t>(1, mem_.allocated()));
  }
  MemoryTracker& mem_;
  const Fault& fault_;
  std::string phase_ = "build";
  std::string peak_phase_;
  int64_t peak_allocated_ = 0, peak_reserved_ = 0, device_used_at_peak_ = 0;
};

int64_t grad_bytes(const std::vector<torch::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params)
    if (p.grad().defined()) n += p.grad().nbytes();
  return n;
}

// Google Benchmark reporter that keeps the per-repetition times and the aggregates.
class Collector : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.error_occurred) continue;
      if (r.run_type == Run::RT_Iteration) samples.push_back(r.GetAdjustedRealTime());
      else if (r.aggregate_name == "mean") mean = r.GetAdjustedRealTime();
      else if (r.aggregate_name == "median") median = r.GetAdjustedRealTime();
      else if (r.aggregate_name == "stddev") stddev = r.GetAdjustedRealTime();
      else if (r.aggregate_name == "cv") cv = r.real_accumulated_time;  // a fraction
    }
  }
  std::vector<double> samples;
  std::optional<double> mean, median, stddev, cv;
};

}  // namespace

Fault Fault::parse(const std::string& spec, const Point& p) {
  Fault f;
  if (spec.empty()) return f;
  std::string s = spec;
  if (auto at = s.find('@'); at != std::string::npos) {
    if (std::stoll(s.substr(at + 1)) != p.batch) return f;
    s = s.substr(0, at);
  }
  if (auto colon = s.find(':'); colon != std::string::npos) {
    f.phase = s.substr(colon + 1);
    s = s.substr(0, colon);
  }
  f.kind = s;
  return f;
}

Measurement run_burst(const Point& p, MemoryTracker& mem, StepTimer& timer, const Fault& fault) {
  Measurement m;
  PeakMeter meter(mem, fault);
  mem.set_budget(p.budget_bytes);  // 0 clears a cap left by an earlier burst in this process
  const torch::Device device = p.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
  const bool train = p.mode == "train";
  const int64_t k = train ? p.accumulation : 1;
  try {
    torch::manual_seed(p.seed);
    mem.reset_peaks();
    meter.enter("build");
    const int64_t base = mem.allocated();
    const auto* spec = models::find_model(p.model);
    TORCH_CHECK(spec, "unknown model ", p.model);
    auto model = spec->make();
    model->to(device);
    if (p.precision == "bf16") model->to(torch::kBFloat16);
    model->train(train);  // train mode: dropout on, as in a training loop
    if (p.checkpointing == "block") model->set_block_runner(&checkpoint_block);
    // The parameters a training loop updates: all but those the model freezes (Whisper's
    // sinusoidal positions), as with transformers. Eval needs no gradients at all.
    std::vector<torch::Tensor> params;
    for (auto& t : model->parameters()) {
      if (!train) t.set_requires_grad(false);
      if (t.requires_grad()) params.push_back(t);
    }
    m.weights_bytes = mem.allocated() - base;

    std::unique_ptr<Optimizer> opt;
    if (train) opt = make_optimizer({p.optimizer, p.lr, p.weight_decay}, params);
    std::unique_ptr<GradScaler> scaler;
    if (train && p.precision == "fp16-amp") scaler = std::make_unique<GradScaler>(device);
    const bool autocast = p.precision == "fp16-amp" || p.precision == "bf16-amp";
    const auto autocast_dtype = p.precision == "fp16-amp" ? torch::kHalf : torch::kBFloat16;

    const models::BatchShape shape{p.batch, p.seq, p.target_seq, p.audio_s};
    auto gen = at::detail::createCPUGenerator(p.seed + 1);
    std::vector<models::Batch> batches;
    for (int64_t i = 0; i < k; ++i) {
      batches.push_back(model->synthetic_batch(shape, device, gen));
      if (p.precision == "bf16")
        for (auto& t : batches.back().tensors)
          if (t.is_floating_point()) t = t.to(torch::kBFloat16);
    }

    bool first_step = true;
    std::vector<int64_t> allocated_after;
    auto step = [&] {
      for (int64_t i = 0; i < k; ++i) {
        const int64_t start = mem.allocated();
        const int64_t grads_before = train ? grad_bytes(params) : 0;
        meter.enter("forward");
        torch::Tensor loss;
        {
          std::optional<torch::NoGradGuard> no_grad;
          if (!train) no_grad.emplace();
          AutocastScope amp(device.type(), autocast, autocast_dtype);
          loss = model->loss(batches[i]);
        }
        if (!train) {
          m.activations_bytes = std::max(m.activations_bytes, meter.enter("idle") - start);
          m.loss = loss.item<double>();
          continue;
        }
        if (k > 1) loss = loss / static_cast<double>(k);
        const int64_t fwd_peak = meter.enter("backward");
        (scaler ? scaler->scale(loss) : loss).backward();
        const int64_t bwd_peak = meter.enter("idle");
        const int64_t grads_after = grad_bytes(params);
        // Activations: what the micro-batch held above its start, less the gradients
        // it created (those are counted as gradients).
        m.activations_bytes = std::max({m.activations_bytes, fwd_peak - start,
                                        bwd_peak - start - (grads_after - grads_before)});
        if (first_step) m.grads_bytes = grads_after;
        m.loss = loss.item<double>() * static_cast<double>(k);
      }
      if (train) {
        meter.enter("optimizer");
        if (scaler) {
          scaler->step(*opt);
          scaler->update();
        } else {
          opt->step();
        }
        opt->zero_grad();
        meter.enter("idle");
        if (first_step) m.optimizer_bytes = opt->state_bytes();
      }
      first_step = false;
      allocated_after.push_back(mem.allocated());
    };

    for (int i = 0; i < p.warmup_steps; ++i) step();

    // Timed steps: Google Benchmark runs `steps` iterations, `repetitions` times, with the
    // step time we measure (CUDA events on a GPU) as manual time.
    std::exception_ptr failure;
    auto* bm = benchmark::RegisterBenchmark("burst", [&](benchmark::State& st) {
      for (auto _ : st) {
        try {
          timer.start();
          step();
          st.SetIterationTime(timer.stop_seconds());
        } catch (...) {
          failure = std::current_exception();
          st.SkipWithError("step failed");
          break;
        }
      }
    });
    bm->UseManualTime()->Iterations(p.steps)->Repetitions(p.repetitions)->Unit(benchmark::kMillisecond);
    Collector collector;
    benchmark::RunSpecifiedBenchmarks(&collector);
    benchmark::ClearRegisteredBenchmarks();
    if (failure) std::rethrow_exception(failure);
    meter.close();
    if (scaler) m.skipped_steps = scaler->skipped_steps();  // after the timed steps: may sync

    m.step_ms_samples = collector.samples;
    if (collector.samples.size() == 1) {
      m.step_ms = m.step_ms_mean = collector.samples[0];
    } else {
      m.step_ms = collector.median;
      m.step_ms_mean = collector.mean;
      m.step_ms_stddev = collector.stddev;
      m.step_ms_cv = collector.cv;
    }
    if (m.step_ms && *m.step_ms > 0) {
      const double step_s = *m.step_ms / 1000.0;
      const double tokens = static_cast<double>(batches[0].tokens * k);
      const double samples = static_cast<double>(batches[0].samples * k);
      m.tokens_per_s = tokens / step_s;
      m.samples_per_s = samples / step_s;
      const auto f = model->forward_flops(shape);
      const double per_sample = train ? 3 * f.forward + (p.checkpointing == "block" ? f.blocks_forward : 0)
                                      : f.forward;
      m.tflops = per_sample * samples / step_s / 1e12;
    }
    // Leak: allocated memory after each step still growing after the second step.
    const auto& a = allocated_after;
    if (a.size() >= 4) {
      bool growing = true;
      for (std::size_t i = 2; i < a.size(); ++i) growing = growing && a[i] > a[i - 1];
      if (growing) m.leak_bytes_per_step = (a.back() - a[1]) / static_cast<int64_t>(a.size() - 2);
    }
  } catch (const c10::OutOfMemoryError& e) {
    m.status = "oom";
    m.phase = meter.phase();
    std::string msg = e.what_without_backtrace();
    m.message = msg.substr(0, msg.find('\n'));
    m.oom_retries = mem.alloc_retries();
    m.oom_gap_bytes = mem.gap_at_oom();
    meter.close();
  }
  m.peak_allocated_bytes = meter.peak_allocated();
  m.peak_reserved_bytes = meter.peak_reserved();
  m.peak_phase = meter.peak_phase();
  m.device_used_bytes = meter.device_used();
  return m;
}

}  // namespace sweep
