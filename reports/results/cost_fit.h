// Calibrating the step-time rules (cost_rules.h) on measured rows, and saying their error:
// a recorded step's kernels as text (the trace a worker appends to the file named by
// SWEEP_STEP_TRACE, one JSON line a point), the error of a calibration over measured steps,
// and the fit of the calibration's efficiencies on part of them (tests/step_time_test.cc
// runs it on the committed H100 rows and pins the held-out error; docs/fidelity.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "reports/results/cost_rules.h"

namespace sweep::cost {

// The kernels as JSON (an array of arrays, one per kernel) and back.
nlohmann::json trace_json(const std::vector<Kernel>& step);
std::vector<Kernel> parse_trace(const nlohmann::json& trace);

// A measured step and the kernels its emulation recorded.
struct Sample {
  std::string label;  // "gpt2 b8 seq256 fp16-amp none acc1 adamw train"
  std::string group;  // family and precision, the error table's rows: "gpt2 fp16-amp"
  std::vector<Kernel> step;
  double measured_ms = 0;
  Loop loop;  // the loop that measured it
};

// |predicted - measured| / measured, averaged.
double mean_abs_error(const std::vector<Sample>& samples, const Card& card, const Calibration& c);

// The calibration that minimises mean_abs_error on `train`, by coordinate descent on each
// efficiency's logarithm from `start` (steps of 25%, then 10%, then 3%); efficiencies stay in
// (0, 1]. Deterministic.
Calibration fit(const std::vector<Sample>& train, const Card& card, Calibration start);

}  // namespace sweep::cost
