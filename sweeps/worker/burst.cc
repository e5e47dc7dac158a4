// The training burst; see burst.h. A step is k micro-batches (forward under autocast, loss/k,
// backward) then one optimizer step and zero_grad(set_to_none=True): the loop of
// scripts/hf_reference.py, which is the loop a PyTorch + Hugging Face user writes. The parts:
// build (model, optimizer, batches), step, measure (PeakMeter, the ledger), time (Google
// Benchmark over the same step).
#include "sweeps/worker/burst.h"

#include <benchmark/benchmark.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "models/zoo.h"
#include "reports/results/cost_fit.h"
#include "sweeps/worker/activation_offload.h"
#include "sweeps/worker/checkpoint.h"
#include "sweeps/worker/emulate/cost_record.h"
#include "sweeps/worker/emulate/emulation.h"
#include "sweeps/worker/emulate/grad_accumulation.h"
#include "sweeps/worker/load_int8.h"
#include "sweeps/worker/offload.h"
#include "sweeps/worker/optim.h"
#include "sweeps/worker/precision.h"

namespace sweep {
namespace {

// Follows the phase the burst is in: each phase's peak (over every step) and the burst's
// peak with the ledger as it stood then. Reads only allocator counters (no device sync).
class PeakMeter {
 public:
  PeakMeter(MemoryTracker& mem, const BurstHooks& hooks) : mem_(mem), hooks_(hooks) {
    mem_.reset_peaks();  // forget what came before the burst (an earlier one in this process)
  }
  // Closes the current phase and returns its peak allocated bytes.
  int64_t enter(const std::string& phase) {
    const int64_t closed = close();
    phase_ = phase;
    mem_.reset_peaks();
    mem_.note_reset();
    mem_.forget_oom();  // one recovered from in the phase before is not this phase's
    if (hooks_.on_phase) hooks_.on_phase(phase, mem_);
    return closed;
  }
  int64_t close() {
    const int64_t a = mem_.peak_allocated();
    if (a > peak_allocated_) {
      peak_allocated_ = a;
      peak_phase_ = phase_;
      at_peak_ = mem_.peak_breakdown();
    }
    auto& phase_peak = phase_peaks_[phase_];
    phase_peak = std::max(phase_peak, a);
    peak_reserved_ = std::max(peak_reserved_, mem_.peak_reserved());
    return a;
  }
  const std::string& phase() const { return phase_; }
  void fill(Measurement& m) const {
    m.peak_allocated_bytes = peak_allocated_;
    m.peak_reserved_bytes = peak_reserved_;
    m.peak_phase = peak_phase_;
    m.at_peak_weights_bytes = at_peak_.weights;
    m.at_peak_grads_bytes = at_peak_.grads;
    m.at_peak_optimizer_bytes = at_peak_.optimizer;
    m.at_peak_activations_bytes =
        peak_allocated_ - at_peak_.weights - at_peak_.grads - at_peak_.optimizer;
    auto get = [&](const char* phase) -> std::optional<int64_t> {
      auto it = phase_peaks_.find(phase);
      return it == phase_peaks_.end() ? std::nullopt : std::optional<int64_t>(it->second);
    };
    m.forward_peak_bytes = get("forward");
    m.backward_peak_bytes = get("backward");
    m.optimizer_peak_bytes = get("optimizer");
    m.load_peak_bytes = get("load");
    // Whole-device use had the reserved peak been held: what the device uses besides the
    // allocator (context, workspaces, a paged optimizer's resident state) is (used now -
    // reserved now), read once: after the steps while a paged optimizer is alive
    // (note_outside_allocator), else here.
    m.device_used_bytes = outside_.value_or(mem_.device_used() - mem_.reserved()) + peak_reserved_;
  }
  void note_outside_allocator() { outside_ = mem_.device_used() - mem_.reserved(); }

 private:
  MemoryTracker& mem_;
  const BurstHooks& hooks_;
  std::string phase_ = "build";
  std::string peak_phase_;
  std::map<std::string, int64_t> phase_peaks_;
  int64_t peak_allocated_ = 0, peak_reserved_ = 0;
  std::optional<int64_t> outside_;
  Breakdown at_peak_;
};

// Keeps the ledger's gradient bytes current: runs after each AccumulateGrad (every leaf's
// gradient, also those a checkpointed block's recompute produces) and adds the change in its
// own parameter's gradient, so the cost per accumulation does not grow with the model.
struct GradCounts {
  Ledger& ledger;
  std::vector<int64_t> counted;  // per parameter: the gradient bytes in the ledger
  void reset() {  // after zero_grad(set_to_none=True)
    ledger.grads = 0;
    std::fill(counted.begin(), counted.end(), 0);
  }
};

class GradLedgerHook final : public torch::autograd::FunctionPostHook {
 public:
  GradLedgerHook(GradCounts& counts, std::size_t index, torch::Tensor param)
      : counts_(counts), index_(index), param_(std::move(param)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    const auto& g = param_.grad();
    const int64_t now = g.defined() ? static_cast<int64_t>(g.nbytes()) : 0;
    counts_.ledger.grads += now - counts_.counted[index_];
    counts_.counted[index_] = now;
    return outputs;
  }

 private:
  GradCounts& counts_;
  std::size_t index_;
  torch::Tensor param_;
};

// Everything a step uses, built once.
struct Workload {
  std::shared_ptr<models::ModelImpl> model;
  std::vector<torch::Tensor> params;  // those the optimizer updates
  std::unique_ptr<GradCounts> grad_counts;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // hold the ledger hooks
  std::unique_ptr<Optimizer> opt;
  OffloadOptimizer* offload = nullptr;  // opt, when the optimizer state lives on the host
  // SFTConfig(activation_offloading=True): what autograd saves goes to pinned host memory.
  std::unique_ptr<ActivationOffload> activation_offload;
  std::unique_ptr<GradScaler> scaler;
  std::vector<models::Batch> batches;  // one per micro-batch
  bool train = true, autocast = false;
  bool emulated = false;  // Meta tensors standing for an emulated device's (nothing computed)
  at::ScalarType autocast_dtype = at::kBFloat16;
  torch::Device device = torch::kCPU;
  int64_t k = 1;  // micro-batches per step
  int64_t weights_bytes = 0;  // what the model holds once built
  // The loop is transformers' Trainer's (SFTTrainer's): training_step returns loss.detach(),
  // so each micro-batch's graph dies after its backward; else the reference loop's, whose
  // `loss` lives to the end of the step.
  bool trainer_loop = false;
};

// QLoRA's BitsAndBytesConfig: bnb_4bit_compute_dtype (and the load's dtype) bf16, fp16 under
// fp16 autocast.
models::Quant4Settings quant4_settings(const Point& p) {
  return {p.weights == Weights::kFp4 ? models::Quant4::kFp4 : models::Quant4::kNf4,
          p.precision == Precision::kFp16Amp ? torch::kHalf : torch::kBFloat16};
}

// peft's prepare_model_for_kbit_training(model, use_gradient_checkpointing=...): every
// parameter frozen, each fp16 or bf16 one that is not Params4bit cast to fp32 (param.data =
// param.data.to(torch.float32): the copy, then the old freed), then torch.cuda.empty_cache().
// Its checkpointing is the point's (the Trainer's gradient_checkpointing=True re-enables it
// non-reentrant; the input embeddings' output requiring grad is set with LoRA below).
void prepare_model_for_kbit_training(models::ModelImpl& model, MemoryTracker& mem) {
  torch::NoGradGuard no_grad;
  for (auto& t : model.parameters()) {
    t.set_requires_grad(false);
    const bool half = t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16;
    if (half) t.set_data(t.to(torch::kFloat));  // Params4bit is uint8: never cast
  }
  mem.empty_cache();
}

// The families whose bf16 checkpoints people load with from_pretrained(dtype=torch.bfloat16):
// the Llama-family decoders read from a config.json.
bool loads_in_its_dtype(const std::string& family) { return family == "llama" || family == "phi3"; }

// Whether a quantised model loads from a checkpoint with the checkpoint's dtype (Point::load).
bool loads_checkpoint(const Point& p) {
  if (p.weights == Weights::kFull) return false;
  if (!p.load.empty()) return p.load == "checkpoint";
  return p.device == Device::kCpu;
}

// The model onto its device as from_pretrained loads it: in full (moved, then cast for a bf16
// point), or in 8 or 4 bit (bitsandbytes' layers, quantised as they load), before PEFT adds its
// adapters.
void load(Workload& w, const Point& p, bool from_host, MemoryTracker& mem) {
  const bool four_bit = p.weights == Weights::kNf4 || p.weights == Weights::kFp4;
  if (four_bit && w.device.is_cuda()) {
    const auto props = cuda_device_props();
    models::set_cuda_dispatch_props({props.sms, props.major, props.minor});
  }
  if (loads_checkpoint(p) && !from_host) {
    // from_pretrained(checkpoint, quantization_config=..., device_map="cpu"): the model (built
    // in host memory, standing for the file) read through safetensors' buffer (load_int8.h).
    load_checkpoint_cpu(*w.model, p.family, four_bit, quant4_settings(p));
  } else if (loads_checkpoint(p)) {
    // The same onto a card: tensor by tensor in the checkpoint's dtype (fp32), each converted
    // weight quantised there; the file's buffer is host memory.
    if (four_bit) load_4bit(*w.model, p.family, w.device, torch::kFloat, quant4_settings(p));
    else load_int8(*w.model, p.family, w.device, torch::kFloat);
  } else if (p.weights == Weights::kInt8 && from_host) {
    // BitsAndBytesConfig(load_in_8bit=True) onto a GPU: tensor by tensor from the host in the
    // load's dtype, the frozen base's linear weights quantised as they move (load_int8.h).
    load_int8(*w.model, p.family, w.device,
              p.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat);
  } else if (four_bit && from_host) {
    // BitsAndBytesConfig(load_in_4bit=True, ...) with dtype=bnb_4bit_compute_dtype: the same
    // walk, each converted weight quantised on the device (load_int8.h load_4bit).
    const auto s = quant4_settings(p);
    load_4bit(*w.model, p.family, w.device, s.compute_dtype, s);
  } else {
    // bf16 weights: GPT-2, T5 and Whisper as the measured references cast them, on the device
    // after the move (model.to(cuda).to(torch.bfloat16)); a decoder read from its config.json
    // as its users load it, from_pretrained(name, dtype=torch.bfloat16), so the card never
    // holds it in fp32 (cast on the host, then moved).
    const bool bf16 = p.precision == Precision::kBf16 && !four_bit;
    const bool cast_first = bf16 && from_host && loads_in_its_dtype(p.family);
    if (cast_first) {
      std::optional<HostScope> host;
      if (w.emulated) host.emplace();
      w.model->to(torch::kBFloat16);
    }
    if (w.emulated && from_host) emu::move_to_device(*w.model);
    else w.model->to(w.device);
    if (bf16 && !cast_first) w.model->to(torch::kBFloat16);
    // On the CPU the loader converts in place (models/int8.h, nf4.h), host and device being one.
    if (p.weights == Weights::kInt8) models::quantize_int8(*w.model, p.family);
    if (four_bit) {
      const auto s = quant4_settings(p);
      w.model->to(s.compute_dtype);
      models::quantize_4bit(*w.model, p.family, s);
    }
  }
  if (four_bit && w.train) prepare_model_for_kbit_training(*w.model, mem);
}

// `loaded` runs when the model is loaded (the phase "load" ends there for a quantised model).
Workload build(const Point& p, Ledger& ledger, MemoryTracker& mem, const std::function<void()>& loaded) {
  Workload w;
  const int64_t base = mem.allocated();
  w.emulated = p.device == Device::kEmulated;
  w.device = p.device == Device::kCuda ? torch::Device(torch::kCUDA, 0)
             : w.emulated              ? torch::Device(torch::kMeta)
                                       : torch::Device(torch::kCPU);
  w.train = p.mode == Mode::kTrain;
  w.k = w.train ? p.accumulation : 1;
  w.trainer_loop = p.trainer == Trainer::kSft;
  const auto* spec = models::find_model(p.model);
  TORCH_CHECK(spec, "unknown model ", p.model);
  const auto release = models::parse_transformers_release(p.transformers);
  TORCH_CHECK(release, "unknown transformers release ", p.transformers, " (5.17 or 5.23)");
  models::follow_transformers(*release);
  // Emulated: the model is built on Meta (its parameters are sizes only). A CUDA card's model
  // is built in host memory, as the reference builds it on the CPU, and then moved; the CPU's
  // is built where it stays. LoRA's adapters, made further down, are made on Meta too.
  std::optional<emu::MetaFactories> on_meta;
  if (w.emulated) on_meta.emplace();
  const bool from_host = w.device.is_cuda() || (w.emulated && !p.card.cpu);
  {
    // From a checkpoint on the CPU the model built here stands for the file on disk: host
    // memory until the load reads it.
    std::optional<HostScope> host;
    if ((w.emulated && from_host) || (loads_checkpoint(p) && !from_host)) host.emplace();
    w.model = spec->make();
  }
  load(w, p, from_host, mem);
  loaded();
  w.model->train(w.train);  // train mode: dropout on, as in a training loop
  if (w.train && p.checkpointing == Checkpointing::kBlock) w.model->set_block_runner(&checkpoint_block);
  w.model->set_use_cache(p.use_cache);
  w.model->set_fused_lm_head(p.trainer == Trainer::kSft);
  if (p.adapter == Adapter::kLora) {
    // peft.get_peft_model after gradient_checkpointing_enable(), as in scripts/hf_reference.py:
    // the base frozen, adapters on the target layers. With checkpointing on, transformers
    // (token models) and PEFT (every model: peft_model.py _prepare_model_for_gradient_
    // checkpointing) make the input embeddings' output require grad; with a trained
    // embedding that changes nothing, so only LoRA turns it on here.
    models::add_lora(*w.model, {p.lora_r, p.lora_alpha, p.lora_dropout,
                                models::lora_targets_of(p.family, p.lora_targets)});
    // PEFT skips it for a model loaded in 8 bit (is_loaded_in_8bit), leaving it to
    // transformers, which turns it on for token models only (main_input_name "input_ids").
    const bool token_model = !p.family.starts_with("whisper");
    w.model->set_inputs_require_grad(w.train && p.checkpointing == Checkpointing::kBlock &&
                                     (p.weights != Weights::kInt8 || token_model));
    // SFTTrainer on a quantised model (trl/trainer/sft_trainer.py, after get_peft_model): every
    // trainable parameter's data cast to bf16, QLoRA's recommendation (param.data =
    // param.data.to(torch.bfloat16), the fp32 adapters freed).
    if (p.trainer == Trainer::kSft && p.weights != Weights::kFull) {
      torch::NoGradGuard no_grad;
      for (auto& t : w.model->parameters())
        if (t.requires_grad()) t.set_data(t.data().to(torch::kBFloat16));
    }
  }
  // The parameters a training loop updates: all but those the model freezes (Whisper's
  // sinusoidal positions, the base under LoRA), as with transformers and PEFT. Eval updates
  // none, and leaves them requiring grad as the reference's eval loop does (model.eval() under
  // torch.no_grad()): autocast then caches each weight's cast for the whole forward
  // (autocast_mode.cpp cached_cast: a leaf that requires grad), where a frozen one is cast anew
  // at each use and freed.
  if (w.train)
    for (auto& t : w.model->parameters())
      if (t.requires_grad()) w.params.push_back(t);
  on_meta.reset();  // the optimizer's CPU step counters stay on the CPU, as on the device
  w.weights_bytes = mem.allocated() - base;
  ledger.weights = w.weights_bytes;
  w.grad_counts.reset(new GradCounts{ledger, std::vector<int64_t>(w.params.size(), 0)});
  for (std::size_t i = 0; i < w.params.size(); ++i) {
    w.accumulators.push_back(torch::autograd::impl::grad_accumulator(w.params[i]));
    w.accumulators.back()->add_post_hook(
        std::make_unique<GradLedgerHook>(*w.grad_counts, i, w.params[i]));
  }
  if (w.train && p.offload == Offload::kOptimizer) {
    // ZeRO-Offload's AdamW (the config refuses other optimizers): its host copies are made
    // here, in the build, as DeepSpeed makes them when the engine is initialised.
    TORCH_CHECK(p.optimizer == OptimizerKind::kAdamW, "offload optimizer with ", name_of(p.optimizer));
    auto offload = std::make_unique<OffloadOptimizer>(w.params, p.lr, p.weight_decay);
    w.offload = offload.get();
    w.opt = std::move(offload);
  } else if (w.train) {
    w.opt = make_optimizer({p.optimizer, p.lr, p.weight_decay}, w.params);
  }
  // SFTTrainer.__init__'s get_act_offloading_ctx_manager(model): every parameter's storage
  // kept off its list (the config allows it with trainer sft on a card only).
  if (w.train && p.activation_offloading)
    w.activation_offload = std::make_unique<ActivationOffload>(w.model->parameters(), mem);
  if (w.train && p.precision == Precision::kFp16Amp) w.scaler = std::make_unique<GradScaler>(w.device);
  w.autocast = p.precision == Precision::kFp16Amp || p.precision == Precision::kBf16Amp;
  w.autocast_dtype = p.precision == Precision::kFp16Amp ? torch::kHalf : torch::kBFloat16;
  const models::BatchShape shape{p.batch,       p.seq, p.target_seq, p.audio_s, p.completion_share,
                                 p.padding_free};
  auto gen = at::detail::createCPUGenerator(p.seed + 1);
  for (int64_t i = 0; i < w.k; ++i) {
    // Emulated: the inputs are made on Meta where the model would make them on the host and
    // then move them (the same one device allocation, at the same place in the order), so no
    // host data is drawn: Whisper's 30 s of features at batch 300 were 0.3 GB of randn, most
    // of a probe's time.
    std::optional<emu::MetaFactories> meta_inputs;
    if (w.emulated) meta_inputs.emplace();
    w.batches.push_back(w.model->synthetic_batch(shape, w.device, gen));
    if (p.precision == Precision::kBf16)
      for (auto& t : w.batches.back().tensors)
        if (t.is_floating_point()) t = t.to(torch::kBFloat16);
  }
  return w;
}

// A run that ended in an error: Google Benchmark 1.7 (Debian 12) says so in `error_occurred`,
// 1.8 and later (the GPU image's) in `skipped`.
template <class R>
bool failed_run(const R& r) {
  if constexpr (requires { r.error_occurred; }) return r.error_occurred;
  else return static_cast<int>(r.skipped) != 0;
}

// Google Benchmark reporter that keeps the per-repetition times and the aggregates.
class Collector : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (failed_run(r)) continue;
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

// Google Benchmark runs `steps` iterations, `repetitions` times, with manual time: one timer
// span per repetition (one CUDA event pair on a GPU), as scripts/hf_reference.py brackets its
// N steps, so that no host sync falls between the steps of a repetition. Google Benchmark adds
// up the iterations' times and divides by the iterations; the whole span is given at the last.
// A failed step ends the burst: Google Benchmark (1.7.1, runner.cc) still runs every later
// repetition after SkipWithError, and its statistics read the first repetition's report, which
// a skipped repetition never fills (statistics.cc ComputeStats, *reports[0].statistics: a
// SIGSEGV when the first failed and two later ones did not). So each later repetition is
// skipped before its first step: no step runs after the failure, and the phase and the peaks
// the burst reports are those at the failure.
void time_steps(const Point& p, StepTimer& timer, const std::function<void()>& step,
                Measurement& m) {
  std::exception_ptr failure;
  auto* bm = benchmark::RegisterBenchmark("burst", [&](benchmark::State& st) {
    if (failure) st.SkipWithError("an earlier repetition failed");  // the loop runs no step
    benchmark::IterationCount done = 0;
    for (auto _ : st) {
      try {
        if (done == 0) timer.start();
        step();
        st.SetIterationTime(++done == st.max_iterations ? timer.stop_seconds() : 0.0);
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
  m.step_ms_samples = collector.samples;
  if (collector.samples.size() == 1) {
    m.step_ms = m.step_ms_mean = collector.samples[0];
  } else {
    m.step_ms = collector.median;
    m.step_ms_mean = collector.mean;
    m.step_ms_stddev = collector.stddev;
    m.step_ms_cv = collector.cv;
  }
}

// An emulated card's step time, predicted (reports/results/cost_rules.h) from the kernels the
// step launches; none for the CPU stand-in or a card whose peaks are not published.
void predict_step_time(const Point& p, const std::function<void()>& step, Measurement& m) {
  const auto card = p.card.cpu ? std::nullopt : cost::card_for(p.card.name);
  if (!card) return step();
  emu::CostRecorder recorder;
  step();
  // As a PyTorch + transformers loop dispatches the step (cost_rules.h, Loop).
  const cost::Loop loop{.python = true};
  m.step_ms = m.step_ms_mean = cost::predict_step(recorder.kernels(), *card, cost::calibration(), loop).step_ms;
  // The calibration's input (reports/results/cost_fit.h): the step's kernels, one line a point.
  if (const char* trace = std::getenv("SWEEP_STEP_TRACE"))
    std::ofstream(trace, std::ios::app) << cost::trace_json(recorder.kernels()).dump() << '\n';
}

void throughput(const Point& p, const Workload& w, Measurement& m) {
  if (!m.step_ms || *m.step_ms <= 0) return;
  const double step_s = *m.step_ms / 1000.0;
  const double tokens = static_cast<double>(w.batches[0].tokens * w.k);
  const double samples = static_cast<double>(w.batches[0].samples * w.k);
  m.tokens_per_s = tokens / step_s;
  m.samples_per_s = samples / step_s;
  const auto f = w.model->forward_flops({p.batch, p.seq, p.target_seq, p.audio_s});
  const double per_sample =
      w.train ? 3 * f.forward + (p.checkpointing == Checkpointing::kBlock ? f.blocks_forward : 0) : f.forward;
  m.tflops = per_sample * samples / step_s / 1e12;
}

// What one step hands the next, and what the burst reads after the last.
struct StepState {
  bool first = true;
  std::vector<int64_t> allocated_after;  // allocated bytes after each step
  torch::Tensor last_loss;
};

// One optimizer step of the reference's training loop: k micro-batches (forward, backward),
// then the optimizer. Each phase is entered on the meter; the first step records the sizes of
// the gradients and the optimizer state.
void train_step(Workload& w, Ledger& ledger, MemoryTracker& mem, PeakMeter& meter, StepState& s,
                Measurement& m) {
  // `loss` is a local of the reference's step function: the last micro-batch's loss (and
  // with it the graph's nodes, and any non-parameter leaf they hold, such as T5's
  // checkpointed cross-attention bias and its gradient) lives until the step returns; under
  // Trainer's loop (trainer_loop) only until its backward.
  torch::Tensor loss;
  for (int64_t i = 0; i < w.k; ++i) {
    // SFTTrainer.training_step: `with self.maybe_activation_offload_context:` around the
    // forward and the backward (entering empties the allocator's cache).
    std::optional<ActivationOffload::Scope> offloading;
    if (w.activation_offload) offloading.emplace(*w.activation_offload);  // training only
    const int64_t start = mem.allocated();
    const int64_t grads_before = ledger.grads;
    meter.enter("forward");
    {
      std::optional<torch::NoGradGuard> no_grad;
      if (!w.train) no_grad.emplace();
      AutocastScope amp(w.device.type(), w.autocast, w.autocast_dtype);
      loss = w.model->loss(w.batches[i]);
    }
    if (!w.train) {
      m.activations_bytes = std::max(m.activations_bytes, meter.enter("idle") - start);
      continue;
    }
    loss = loss / static_cast<double>(w.k);  // the reference divides even by 1
    const int64_t fwd_peak = meter.enter("backward");
    {
      std::optional<emu::BackwardThread> engine_thread;  // CUDA runs backward on its own thread
      std::optional<emu::InPlaceAccumulation> sums;        // its gradient sums in place, as CUDA's
      if (w.emulated) {
        engine_thread.emplace();
        sums.emplace();
      }
      (w.scaler ? w.scaler->scale(loss) : loss).backward();
    }
    // Trainer.training_step: `return loss.detach()`, the graph (and any leaf it holds, such as
    // the input embeddings' output that LoRA under checkpointing makes require grad, and its
    // gradient) released before the next micro-batch and the optimizer.
    if (w.trainer_loop) loss = loss.detach();
    offloading.reset();  // __exit__: the streams synchronised, the stashes cleared
    const int64_t bwd_peak = meter.enter("idle");
    // Activations: what the micro-batch held above its start, less the gradients it
    // created (those are counted as gradients).
    m.activations_bytes = std::max({m.activations_bytes, fwd_peak - start,
                                    bwd_peak - start - (ledger.grads - grads_before)});
    if (s.first) m.grads_bytes = ledger.grads;
  }
  if (w.train) {
    meter.enter("optimizer");
    if (w.scaler) {
      w.scaler->step(*w.opt);
      w.scaler->update();
    } else {
      w.opt->step();
    }
    ledger.optimizer = w.opt->state_bytes();
    w.opt->zero_grad();
    w.grad_counts->reset();
    meter.enter("idle");
    if (s.first) {
      m.optimizer_bytes = ledger.optimizer;
      if (w.opt->paged()) m.paged_bytes = w.opt->paged_bytes();
    }
  }
  s.last_loss = loss.detach();
  s.first = false;
  s.allocated_after.push_back(mem.allocated());
}

// A leak: allocated memory after each step still growing after the second step; the mean
// growth per step from there.
std::optional<int64_t> leak_per_step(const std::vector<int64_t>& a) {
  if (a.size() < 4) return std::nullopt;
  for (std::size_t i = 2; i < a.size(); ++i)
    if (a[i] <= a[i - 1]) return std::nullopt;
  return (a.back() - a[1]) / static_cast<int64_t>(a.size() - 2);
}

// An out-of-memory failure that bypassed the caching allocator, as torch 2.11 reports it: the
// reason, or "" for any other error. cuBLAS's handle and workspace (TORCH_CUDABLAS_CHECK:
// "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `...`"), cuDNN's (AT_CUDNN_CHECK: cuDNN 9
// says CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, or _HOST_; cuDNN 8
// CUDNN_STATUS_ALLOC_FAILED), and the CUDA runtime's own allocations, a lazily loaded kernel
// module's near capacity among them (C10_CUDA_CHECK throws c10::AcceleratorError with
// cudaErrorMemoryAllocation, "CUDA error: out of memory"; the driver API's checks say
// "CUDA driver error: out of memory"). And cuDNN's plan search near the cap: it runs each
// plan, catching c10::OutOfMemoryError when a plan's workspace does not fit, and when none
// ran says "FIND was unable to find an engine to execute this computation" (or GET, for the
// heuristics' plans: aten/src/ATen/native/cudnn/Conv_v8.cpp, try_plans and try_configs, v2.11.0).
// That is out of memory when the allocator failed in this phase (gap_at_oom: the plans'
// workspaces did not fit); without such a failure no engine supports the convolution, a crash.
std::string oom_outside_allocator(const c10::Error& e, MemoryTracker& mem) {
  constexpr int32_t kCudaErrorMemoryAllocation = 2;  // driver_types.h
  const std::string msg = e.what_without_backtrace();
  auto has = [&](const char* s) { return msg.find(s) != std::string::npos; };
  if (has("CUBLAS_STATUS_ALLOC_FAILED")) return "cublas-alloc-failed";
  if (has("unable to find an engine to execute this computation") && mem.gap_at_oom())
    return "cudnn-no-engine-fits";
  if (has("CUDNN_STATUS_ALLOC_FAILED") || has("CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED") ||
      has("CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"))
    return "cudnn-alloc-failed";
  const auto* accelerator = dynamic_cast<const c10::AcceleratorError*>(&e);
  if ((accelerator && accelerator->get_error_code() == kCudaErrorMemoryAllocation) ||
      has("CUDA error: out of memory") || has("CUDA driver error: out of memory"))
    return "cuda-out-of-memory";
  return "";
}

// An out-of-memory row: the phase it happened in and the peak before it. The gap is known only
// where the allocator's observer fired (its own failure); outside it, unknown, never 0.
void record_oom(Measurement& m, PeakMeter& meter, MemoryTracker& mem, const c10::Error& e,
                const std::string& reason) {
  m.status = Status::kOom;
  m.phase = meter.phase();
  m.reason = reason;
  const std::string msg = e.what_without_backtrace();
  m.message = msg.substr(0, msg.find('\n'));
  m.oom_retries = mem.alloc_retries();
  if (reason.empty()) m.oom_gap_bytes = mem.gap_at_oom();
  meter.close();
}

}  // namespace

Measurement run_burst(const Point& p, MemoryTracker& mem, StepTimer& timer,
                      const BurstHooks& hooks) {
  Measurement m;
  Ledger ledger;
  mem.set_ledger(&ledger);
  PeakMeter meter(mem, hooks);
  mem.set_budget(p.budget_bytes);  // 0 clears a cap left by an earlier burst in this process
  try {
    torch::manual_seed(p.seed);
    // A quantised model's from_pretrained is a phase of its own, "load" (its peak is QLoRA's at
    // small batches); the rest of the set-up is "build".
    const bool quantised = p.weights != Weights::kFull;
    meter.enter(quantised ? "load" : "build");
    Workload w = build(p, ledger, mem, [&] {
      if (quantised) meter.enter("build");
    });
    m.weights_bytes = w.weights_bytes;

    StepState state;
    auto step = [&] { train_step(w, ledger, mem, meter, state, m); };

    for (int i = 0; i < p.warmup_steps; ++i) step();
    if (hooks.after_warmup) hooks.after_warmup();
    if (w.offload) w.offload->reset_transfer();
    if (w.emulated) {
      // Nothing to time: the same steps, for the memory they allocate; the first of them
      // recorded, kernel by kernel, for the predicted step time.
      for (int i = 0; i < p.steps * p.repetitions; ++i) {
        if (i == 0) predict_step_time(p, step, m);
        else step();
      }
    } else {
      time_steps(p, timer, step, m);
    }
    if (w.activation_offload) m.host_peak_bytes = w.activation_offload->host_bytes();
    if (w.offload) {
      m.host_peak_bytes = m.host_peak_bytes.value_or(0) + w.offload->host_peak_bytes();
      if (w.offload->transfer_steps() > 0 && !w.emulated)  // nothing moves on an emulated card
        m.offload_transfer_ms = w.offload->transfer_ms() / static_cast<double>(w.offload->transfer_steps());
    }
    meter.close();
    // A paged optimizer's unified memory goes with the workload: read the device while it is
    // alive. (Elsewhere the reading stays after the workload, as the CPU's resident set has
    // always been read.)
    if (w.opt && w.opt->paged()) meter.note_outside_allocator();
    // The loss is read once, after the timed steps: a read per micro-batch would add a device
    // sync to every step that the reference loop does not have.
    if (state.last_loss.defined() && !w.emulated)
      m.loss = state.last_loss.item<double>() * static_cast<double>(w.k);
    if (w.scaler) m.skipped_steps = w.scaler->skipped_steps();  // after the timed steps: may sync
    throughput(p, w, m);
    m.leak_bytes_per_step = leak_per_step(state.allocated_after);
  } catch (const c10::OutOfMemoryError& e) {
    record_oom(m, meter, mem, e, "");
  } catch (const c10::Error& e) {
    const std::string reason = oom_outside_allocator(e, mem);
    if (reason.empty()) throw;  // not memory: the worker records a crash
    record_oom(m, meter, mem, e, reason);
  }
  meter.fill(m);
  mem.set_ledger(nullptr);
  return m;
}

}  // namespace sweep
