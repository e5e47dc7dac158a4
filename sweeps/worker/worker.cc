// Worker process entry; see worker.h.
#include "sweeps/worker/worker.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "reports/results/cards.h"
#include "sweeps/worker/burst.h"
#include "sweeps/measure/env.h"
#include "sweeps/worker/emulate/emulation.h"
#include "sweeps/worker/fault.h"

namespace sweep {
namespace {

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  std::size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) return;  // the parent is gone; nothing else to do
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

template <class T>
void put(nlohmann::json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

nlohmann::json to_record(const Measurement& m) {
  nlohmann::json j;
  j["status"] = name_of(m.status);
  if (!m.phase.empty()) j["phase"] = m.phase;
  if (!m.message.empty()) j["message"] = m.message;
  if (!m.reason.empty()) j["reason"] = m.reason;
  j["weights_bytes"] = m.weights_bytes;
  j["grads_bytes"] = m.grads_bytes;
  j["optimizer_bytes"] = m.optimizer_bytes;
  j["activations_bytes"] = m.activations_bytes;
  j["peak_allocated_bytes"] = m.peak_allocated_bytes;
  j["peak_reserved_bytes"] = m.peak_reserved_bytes;
  j["device_used_bytes"] = m.device_used_bytes;
  j["peak_phase"] = m.peak_phase;
  j["at_peak_weights_bytes"] = m.at_peak_weights_bytes;
  j["at_peak_grads_bytes"] = m.at_peak_grads_bytes;
  j["at_peak_optimizer_bytes"] = m.at_peak_optimizer_bytes;
  j["at_peak_activations_bytes"] = m.at_peak_activations_bytes;
  put(j, "forward_peak_bytes", m.forward_peak_bytes);
  put(j, "backward_peak_bytes", m.backward_peak_bytes);
  put(j, "optimizer_peak_bytes", m.optimizer_peak_bytes);
  put(j, "load_peak_bytes", m.load_peak_bytes);
  put(j, "leak_bytes_per_step", m.leak_bytes_per_step);
  put(j, "oom_retries", m.oom_retries);
  put(j, "oom_gap_bytes", m.oom_gap_bytes);
  put(j, "step_ms", m.step_ms);
  put(j, "step_ms_mean", m.step_ms_mean);
  put(j, "step_ms_stddev", m.step_ms_stddev);
  put(j, "step_ms_cv", m.step_ms_cv);
  std::string samples;
  for (double s : m.step_ms_samples) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", s);
    // Appended in two steps: GCC 12 warned (-Wstringop-overflow, a false bound) on the
    // temporary that `(";" or "") + std::string(buf)` built.
    if (!samples.empty()) samples += ';';
    samples += buf;
  }
  if (!samples.empty()) j["step_ms_samples"] = samples;
  put(j, "tokens_per_s", m.tokens_per_s);
  put(j, "samples_per_s", m.samples_per_s);
  put(j, "tflops", m.tflops);
  put(j, "host_peak_bytes", m.host_peak_bytes);
  put(j, "offload_transfer_ms", m.offload_transfer_ms);
  put(j, "paged_bytes", m.paged_bytes);
  return j;
}

// SWEEP_SDPA_KERNEL=flash|efficient|cudnn|math: that attention kernel alone, as
// torch.nn.attention.sdpa_kernel(SDPBackend.X) leaves at::Context's flags (a diagnostic: the
// GPU lease's forced-kernel points, docs/fidelity.md). A call that kernel cannot take fails
// as PyTorch fails it ("No available kernel"), on the emulated card too.
void force_sdpa_kernel(const char* env) {
  if (!env || !*env) return;
  const std::string k = env;
  TORCH_CHECK(k == "flash" || k == "efficient" || k == "cudnn" || k == "math",
              "SWEEP_SDPA_KERNEL: '", k, "' is not one of flash, efficient, cudnn, math");
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(k == "flash");
  ctx.setSDPUseMemEfficient(k == "efficient");
  ctx.setSDPUseCuDNN(k == "cudnn");
  ctx.setSDPUseMath(k == "math");
}

}  // namespace

int worker_main(const std::string& point_json, int result_fd) {
  const Point p = nlohmann::json::parse(point_json).get<Point>();
  const char* fault_env = std::getenv("SWEEP_TEST_FAULT");
  const Fault fault = Fault::parse(fault_env ? fault_env : "", p);
  if (fault.kind == Fault::Kind::kState) {
    nlohmann::json state = process_state();
    state["status"] = name_of(Status::kOk);
    write_all(result_fd, state.dump() + "\n");
    return 0;
  }
  if (fault.kind == Fault::Kind::kStopped) std::raise(SIGSTOP);
  // Started: the runner times the point from here (kWorkerStarted, sweeps/runner/isolate.h).
  write_all(result_fd, "\n");
  nlohmann::json record;
  try {
    std::unique_ptr<MemoryTracker> mem;
    std::unique_ptr<StepTimer> timer;
    if (p.device == Device::kCuda) {
      TORCH_CHECK(torch::cuda::is_available(), "device cuda requested but no GPU is visible");
      mem = make_cuda_tracker();  // initialises CUDA before any allocator call
      timer = make_cuda_timer();
    } else if (p.device == Device::kEmulated) {
      // Before any tensor: the card's kernels and choices, then its allocator for Meta.
      emu::start_emulation(p.card);
      mem = make_emulated_tracker(p.card, p.alloc_conf);
      timer = make_cpu_timer();  // never read: nothing is timed on an emulated device
    } else {
      mem = make_cpu_tracker();  // before any tensor exists, so every byte is counted
      timer = make_cpu_timer();
    }
    force_sdpa_kernel(std::getenv("SWEEP_SDPA_KERNEL"));
    DeviceInfo dev;
    if (p.device == Device::kEmulated) {
      dev.name = emulated_device_name(p.card.name);  // how reports know a prediction's card
      dev.memory_bytes = p.card.memory_bytes;
    } else {
      dev = query_device(p.device);
    }
    // --snapshot: the runner names the file prefix; CUDA records the allocator history of
    // the build and the warm-up steps, and stops before the timed steps, which recording
    // stacks would slow down. An OOM in the timed steps still writes PREFIX.oom.pickle: the
    // allocator's segments and blocks then, without the history.
    const char* snapshot = std::getenv("SWEEP_SNAPSHOT");
    const bool recording = snapshot && *snapshot && mem->record_history(snapshot);
    BurstHooks hooks = fault_hooks(fault);
    bool written = false;
    if (recording)
      hooks.after_warmup = [&] {
        mem->write_snapshot(std::string(snapshot) + ".pickle");
        mem->stop_history();
        written = true;
      };
    const Measurement m = run_burst(p, *mem, *timer, hooks);
    // The log keeps a failure's whole message; the progress line says it in a few words.
    if (!m.message.empty())
      std::fprintf(stderr, "%s in %s: %s\n", to_string(m.status).c_str(), m.phase.c_str(), m.message.c_str());
    if (recording && !written) mem->write_snapshot(std::string(snapshot) + ".pickle");
    // PREFIX.oom.pickle stays only for the allocator's failure that ended the burst, not for
    // one recovered from (cuDNN's plan search) in a point that went on.
    if (m.status != Status::kOom || !m.oom_gap_bytes) mem->forget_oom();
    record = to_record(m);
    record["allocator_settings"] = mem->allocator_settings();
    record["device_name"] = dev.name;
    record["device_memory_bytes"] = dev.memory_bytes;
    record["driver_version"] = dev.driver_version;
    record["cuda_version"] = dev.cuda_version;
    if (!dev.cuda_driver_version.empty()) record["cuda_driver_version"] = dev.cuda_driver_version;
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    record = {{"status", name_of(Status::kCrash)}, {"message", msg.substr(0, msg.find('\n'))}};
    write_all(result_fd, record.dump() + "\n");
    return 1;
  } catch (const std::exception& e) {
    record = {{"status", name_of(Status::kCrash)}, {"message", e.what()}};
    write_all(result_fd, record.dump() + "\n");
    return 1;
  }
  write_all(result_fd, record.dump() + "\n");
  return 0;
}

}  // namespace sweep
