// How sure a prediction is: the emulated device's measured error per model family, from the
// comparisons of docs/fidelity.md (the emulated H100 against H100 rows measured with
// transformers and with sweep's CUDA device), and what it makes of a largest batch whose peak
// sits within that error of the cap ("borderline": it may not fit on the real card). Printed by
// every answer that predicts: fit, recommend, report and the per-card tables.
#pragma once

#include <optional>
#include <string>

namespace sweep::reports {

struct MeasuredError {
  std::string family;  // "gpt2"
  // The largest relative errors of the predicted peak reserved memory against the measured one
  // (predicted / measured - 1) over the family's compared rows: below 0 predicted low.
  double low = 0, high = 0;
  int rows = 0;        // how many measured rows the figures come from
  std::string where;   // what it was measured against, and where the table is
  std::string caveat;  // a known cause, or ""

  // "within -3.0% to +3.0% of peak reserved memory on 70 rows measured on an H100 ... (docs/fidelity.md)"
  std::string text() const;
  // The peak may exceed `cap` on the real card: predicted low by up to |low| puts it over.
  bool borderline(double peak, double cap) const { return peak * (1 - low) > cap; }
};

// The family's measured error; nullopt for a family never measured on a GPU (say so instead).
std::optional<MeasuredError> measured_error(const std::string& family);

// The sentence every predicted answer prints: the error, and that other cards than the H100 are
// predicted by the same rules, unchecked until measured there.
std::string measured_error_line(const std::string& family);

}  // namespace sweep::reports
