// Max-batch search; see search.h.
#include "sweeps/runner/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "reports/results/stats.h"
#include "sweeps/worker/point.h"

namespace sweep {
namespace {

// Guided jumps allowed before the search trusts plain doubling and bisection only.
constexpr int kGuidedProbes = 3;

}  // namespace

SearchedAxis searched_axis(std::string_view search) {
  if (search == "max_seq") return {"max_seq", "seq", kSeqStep, kSeqWithinPercent};
  return {};
}

int64_t SearchedAxis::value_of(const Point& p) const {
  return column == "seq" ? (p.seq + step - 1) / step : p.batch;
}

void SearchedAxis::set(Point& p, int64_t steps) const {
  (column == "seq" ? p.seq : p.batch) = steps * step;
}

std::string SearchedAxis::words(int64_t steps) const {
  return std::string(column) + " " + std::to_string(steps * step);
}

SearchResult search_max_batch(int64_t lo, int64_t hi, double budget_bytes,
                              const std::function<ProbeOutcome(int64_t)>& probe,
                              std::optional<int64_t> predicted, const SearchedAxis& axis) {
  SearchResult r;
  std::map<int64_t, double> fits;  // batch -> peak
  int guided = 0;
  std::size_t fitted = 0;  // ok probes the last prediction was made from
  std::optional<int64_t> known_oom;  // a predicted batch that ran out of memory
  std::optional<int64_t> seed;       // the predicted batch, probed first
  int64_t step = 1;                  // too low and no slope: up from the seed by 1, 2, 4...
  auto run = [&](int64_t b) {
    // Memory grows with the batch: past a batch out of memory, so is every larger one.
    const ProbeOutcome o = known_oom && b >= *known_oom ? ProbeOutcome{Status::kOom, 0} : probe(b);
    if (!known_oom || b < *known_oom) r.probed.push_back(b);
    if (o.status == Status::kOk) {
      fits[b] = o.peak_bytes;
      r.largest_fit = std::max(r.largest_fit.value_or(b), b);
    } else if (o.status == Status::kOom) {
      r.first_oom = std::min(r.first_oom.value_or(b), b);
    } else {
      r.stopped = axis.words(b) + ": " + to_string(o.status);
    }
  };
  if (predicted) {
    seed = std::clamp(*predicted, lo, hi);
    run(*seed);
    if (r.stopped.empty() && r.largest_fit && *seed < hi) run(*seed + 1);
    if (r.stopped.empty() && !r.largest_fit) {
      // Too high: the search without a prediction, every batch from the seed up known.
      known_oom = seed;
      r.first_oom.reset();
      if (*seed > lo) run(lo);
      else r.first_oom = seed;
    }
  } else {
    run(lo);
  }
  while (r.stopped.empty() && r.largest_fit) {
    const int64_t best = *r.largest_fit;
    const int64_t ceiling = r.first_oom ? *r.first_oom - 1 : hi;  // largest batch still possible
    if (best >= ceiling) break;
    // Close enough: the first value out of memory within the share asked of the answer.
    if (r.first_oom && (*r.first_oom - best) * 100 <= best * axis.within_percent) break;
    // Too low (the seed and the next batch fit): the answer is likely close above, so
    // without a slope to go by (two batches in one allocator block peak alike) it steps up
    // by 1, 2, 4... rather than doubling a batch far from the answer and bisecting back.
    const bool too_low = seed && best > *seed && !r.first_oom;
    int64_t next = r.first_oom ? best + (ceiling + 1 - best) / 2  // bisect
                   : too_low   ? std::min(hi, best + step)       // step up from the seed
                               : std::min(hi, 2 * best);         // double
    // A prediction is tried once per new fitting probe: after a wrong one, the same data
    // would only predict the same again, so plain doubling or bisection takes the next step.
    if (auto guess = reports::batch_at_budget(fits, budget_bytes);
        guess && guided < kGuidedProbes && fits.size() > fitted) {
      next = std::clamp(*guess, best + 1, ceiling);
      fitted = fits.size();
      ++guided;
    } else if (too_low) {
      step *= 2;
    }
    run(next);
  }
  if (known_oom) r.first_oom = std::min(r.first_oom.value_or(*known_oom), *known_oom);
  return r;
}

std::string probes_text(int probes, int searches, int predictions) {
  char per[32];
  std::snprintf(per, sizeof per, "%.1f", searches ? static_cast<double>(probes) / searches : 0.0);
  std::string s = std::string(per) + " probes per search (" + std::to_string(probes) + " in " +
                  std::to_string(searches) + (searches == 1 ? " search)" : " searches)");
  if (predictions)
    s += ", each seeded by a prediction (" + std::to_string(predictions) +
         " emulated runs, not counted as probes)";
  return s;
}

}  // namespace sweep
