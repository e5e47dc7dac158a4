// Max-batch search; see search.h.
#include "sweeps/runner/search.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "reports/results/stats.h"

namespace sweep {
namespace {

// Guided jumps allowed before the search trusts plain doubling and bisection only.
constexpr int kGuidedProbes = 3;

}  // namespace

SearchResult search_max_batch(int64_t lo, int64_t hi, double budget_bytes,
                              const std::function<ProbeOutcome(int64_t)>& probe) {
  SearchResult r;
  std::map<int64_t, double> fits;  // batch -> peak
  int guided = 0;
  std::size_t fitted = 0;  // ok probes the last prediction was made from
  auto run = [&](int64_t b) {
    r.probed.push_back(b);
    const ProbeOutcome o = probe(b);
    if (o.status == Status::kOk) {
      fits[b] = o.peak_bytes;
      r.largest_fit = std::max(r.largest_fit.value_or(b), b);
    } else if (o.status == Status::kOom) {
      r.first_oom = std::min(r.first_oom.value_or(b), b);
    } else {
      r.stopped = "batch " + std::to_string(b) + ": " + to_string(o.status);
    }
  };
  run(lo);
  while (r.stopped.empty() && r.largest_fit) {
    const int64_t best = *r.largest_fit;
    const int64_t ceiling = r.first_oom ? *r.first_oom - 1 : hi;  // largest batch still possible
    if (best >= ceiling) break;
    int64_t next = r.first_oom ? best + (ceiling + 1 - best) / 2  // bisect
                               : std::min(hi, 2 * best);         // double
    // A prediction is tried once per new fitting probe: after a wrong one, the same data
    // would only predict the same again, so plain doubling or bisection takes the next step.
    if (auto guess = reports::batch_at_budget(fits, budget_bytes);
        guess && guided < kGuidedProbes && fits.size() > fitted) {
      next = std::clamp(*guess, best + 1, ceiling);
      fitted = fits.size();
      ++guided;
    }
    run(next);
  }
  return r;
}

}  // namespace sweep
