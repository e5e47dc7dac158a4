// Median and the Mann-Whitney U test (see stats.h for the method and its conventions).
#include "reports/results/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace sweep::reports {

std::optional<int64_t> batch_at_budget(const std::map<int64_t, double>& peaks, double budget) {
  if (budget <= 0 || peaks.size() < 2) return std::nullopt;
  auto hi = std::prev(peaks.end());
  auto lo = std::prev(hi);
  const double per_sample = (hi->second - lo->second) / static_cast<double>(hi->first - lo->first);
  if (per_sample <= 0) return std::nullopt;
  return hi->first + static_cast<int64_t>(std::floor((budget - hi->second) / per_sample));
}

namespace {

struct Ranked {
  double rank_sum_x = 0;  // sum of the (mid-)ranks of the first sample
  double tie_term = 0;    // sum over tie groups of t^3 - t
};

Ranked rank(std::span<const double> x, std::span<const double> y) {
  std::vector<std::pair<double, bool>> all;  // value, from x
  all.reserve(x.size() + y.size());
  for (double v : x) all.emplace_back(v, true);
  for (double v : y) all.emplace_back(v, false);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Ranked r;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    // Ranks i+1 .. j share their mean.
    const double mid = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    const double t = static_cast<double>(j - i);
    r.tie_term += t * t * t - t;
    for (std::size_t k = i; k < j; ++k)
      if (all[k].second) r.rank_sum_x += mid;
    i = j;
  }
  return r;
}

// P(U <= u) under H0 for samples of sizes m and n without ties. The number of
// arrangements with U = k is the coefficient of q^k in the Gaussian binomial
// [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i); both steps only read lower
// coefficients, so truncating the polynomial at degree m*n is exact.
double exact_cdf(std::size_t m, std::size_t n, double u) {
  if (m > n) std::swap(m, n);
  const std::size_t degree = m * n;
  std::vector<long double> c(degree + 1, 0.0L);
  c[0] = 1;
  for (std::size_t i = 1; i <= m; ++i) {
    const std::size_t up = n + i;
    for (std::size_t d = degree; d >= up; --d) c[d] -= c[d - up];  // x (1 - q^(n+i))
    for (std::size_t d = i; d <= degree; ++d) c[d] += c[d - i];    // / (1 - q^i)
  }
  const long double total = std::accumulate(c.begin(), c.end(), 0.0L);
  long double below = 0;
  for (std::size_t k = 0; k <= degree && static_cast<double>(k) <= u; ++k) below += c[k];
  return static_cast<double>(below / total);
}

}  // namespace

double median(std::span<const double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(values.begin(), values.end());
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return (*std::max_element(v.begin(), mid) + *mid) / 2;
}

MannWhitney mann_whitney_u(std::span<const double> x, std::span<const double> y) {
  MannWhitney out;
  if (x.empty() || y.empty()) return out;
  const double n1 = static_cast<double>(x.size());
  const double n2 = static_cast<double>(y.size());
  const Ranked r = rank(x, y);
  out.u = r.rank_sum_x - n1 * (n1 + 1) / 2;
  const double u_max = std::max(out.u, n1 * n2 - out.u);

  if (r.tie_term == 0 && x.size() <= kExactMaxSamples && y.size() <= kExactMaxSamples) {
    out.exact = true;
    out.p = std::min(1.0, 2 * exact_cdf(x.size(), y.size(), n1 * n2 - u_max));
    return out;
  }
  const double n = n1 + n2;
  const double variance = n1 * n2 / 12 * ((n + 1) - r.tie_term / (n * (n - 1)));
  if (variance <= 0) return out;  // every value equal: nothing to tell apart
  const double z = (u_max - n1 * n2 / 2 - 0.5) / std::sqrt(variance);
  out.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));  // 2 P(Z >= z)
  return out;
}

}  // namespace sweep::reports
