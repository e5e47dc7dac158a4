// The step-time rules' calibration and error (cost_fit.h).
#include "reports/results/cost_fit.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace sweep::cost {

nlohmann::json trace_json(const std::vector<Kernel>& step) {
  auto out = nlohmann::json::array();
  for (const Kernel& k : step)
    out.push_back({static_cast<int>(k.kind), static_cast<int>(k.dtype), k.m, k.n, k.k, k.batch,
                   k.bytes, k.tensors, k.chunks, k.lists, static_cast<int>(k.backend),
                   k.causal ? 1 : 0, k.backward ? 1 : 0, k.autograd ? 1 : 0});
  return out;
}

std::vector<Kernel> parse_trace(const nlohmann::json& trace) {
  std::vector<Kernel> out;
  out.reserve(trace.size());
  for (const auto& a : trace) {
    Kernel k;
    k.kind = static_cast<Kind>(a.at(0).get<int>());
    k.dtype = static_cast<Dtype>(a.at(1).get<int>());
    k.m = a.at(2).get<int64_t>();
    k.n = a.at(3).get<int64_t>();
    k.k = a.at(4).get<int64_t>();
    k.batch = a.at(5).get<int64_t>();
    k.bytes = a.at(6).get<double>();
    k.tensors = a.at(7).get<int64_t>();
    k.chunks = a.at(8).get<int64_t>();
    k.lists = a.at(9).get<int>();
    k.backend = static_cast<Attention>(a.at(10).get<int>());
    k.causal = a.at(11).get<int>() != 0;
    k.backward = a.at(12).get<int>() != 0;
    k.autograd = a.size() > 13 && a.at(13).get<int>() != 0;
    out.push_back(k);
  }
  return out;
}

double mean_abs_error(const std::vector<Sample>& samples, const Card& card, const Calibration& c) {
  if (samples.empty()) return 0;
  double sum = 0;
  for (const Sample& s : samples)
    sum += std::abs(predict_step(s.step, card, c, s.loop).step_ms - s.measured_ms) / s.measured_ms;
  return sum / static_cast<double>(samples.size());
}

Calibration fit(const std::vector<Sample>& train, const Card& card, Calibration start) {
  // The fitted parameters; host_gbs is not (no measured row exercises it).
  double Calibration::*const kParams[] = {
      &Calibration::gemm_tensor, &Calibration::gemm_simt,      &Calibration::gemm_k_half,
      &Calibration::attention,   &Calibration::bandwidth,      &Calibration::launch_us,
      &Calibration::host_kernel_us, &Calibration::host_dispatch_us, &Calibration::host_autograd_us,
      &Calibration::sync_us,
      &Calibration::python_host, &Calibration::host_hook_us, &Calibration::python_hook_us};
  auto is_fraction = [](double Calibration::*p) {
    return p == &Calibration::gemm_tensor || p == &Calibration::gemm_simt ||
           p == &Calibration::attention || p == &Calibration::bandwidth;
  };
  Calibration best = start;
  double best_err = mean_abs_error(train, card, best);
  for (const double step : {1.25, 1.10, 1.03}) {
    for (bool improved = true; improved;) {
      improved = false;
      for (auto param : kParams) {
        for (const double factor : {step, 1 / step}) {
          Calibration trial = best;
          trial.*param *= factor;
          if (is_fraction(param)) trial.*param = std::min(trial.*param, 1.0);
          if (trial.*param == best.*param) continue;
          const double err = mean_abs_error(train, card, trial);
          if (err < best_err - 1e-6) {
            best = trial;
            best_err = err;
            improved = true;
          }
        }
      }
    }
  }
  return best;
}

}  // namespace sweep::cost
