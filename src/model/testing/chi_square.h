// χ² helpers for the sampling-distribution tests of speculative decoding.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace dspark::testing {

// Two-sample χ² statistic over outcomes (e.g. the first generated tokens) counted in two equally
// sized samples a and b. Outcomes seen fewer than 20 times in total are pooled into one cell so
// expected counts stay large enough. *dof receives the degrees of freedom.
inline double TwoSampleChi2(const std::map<std::vector<int32_t>, int>& a, const std::map<std::vector<int32_t>, int>& b,
                            int* dof) {
  std::map<std::vector<int32_t>, std::pair<int, int>> all;
  for (const auto& [k, v] : a) all[k].first += v;
  for (const auto& [k, v] : b) all[k].second += v;
  std::pair<int, int> rare{0, 0};
  double chi = 0;
  int cells = 0;
  auto add = [&](std::pair<int, int> c) {
    const double n = c.first + c.second;
    if (n == 0) return;
    const double e = n / 2;  // equal sample sizes
    chi += (c.first - e) * (c.first - e) / e + (c.second - e) * (c.second - e) / e;
    ++cells;
  };
  for (const auto& [k, c] : all) {
    if (c.first + c.second < 20) {
      rare.first += c.first;
      rare.second += c.second;
    } else {
      add(c);
    }
  }
  add(rare);
  *dof = cells - 1;
  return chi;
}

// Upper 99.9% quantile of χ² with `dof` degrees of freedom (Wilson-Hilferty approximation).
inline double Chi2Critical999(int dof) {
  const double z = 3.09;
  const double k = dof;
  const double t = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * t * t * t;
}

}  // namespace dspark::testing
