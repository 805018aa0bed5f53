// Comparisons shared by the golden tests of the bundled models (tools/train/export_golden.py):
// the engine runs F16 weights in float32 in another summation order than PyTorch, so rows are
// compared through their max logit and log-sum-exp, plus a few full rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace dspark::testing {

// The bundled models and their goldens (paths in the source tree).
inline std::string RefModelPath(const std::string& file) { return std::string(DSPARK_SOURCE_DIR) + "/models/" + file; }
inline std::string GoldenPath(const std::string& file) {
  return std::string(DSPARK_SOURCE_DIR) + "/tests/data/golden/" + file;
}

struct RowSummary {
  double max = 0, lse = 0;
  int argmax = 0;
};

inline RowSummary Summarise(const float* row, int n) {
  RowSummary s;
  s.max = -1e30;
  for (int v = 0; v < n; ++v)
    if (row[v] > s.max) s.max = row[v], s.argmax = v;
  double sum = 0;
  for (int v = 0; v < n; ++v) sum += std::exp(row[v] - s.max);
  s.lse = s.max + std::log(sum);
  return s;
}

// Max logit and log-sum-exp agree within `tol`; returns the summary for further checks.
inline RowSummary ExpectRowMatches(const float* row, int n, double want_max, double want_lse, double tol) {
  const RowSummary s = Summarise(row, n);
  EXPECT_NEAR(s.max, want_max, tol) << "(model and goldens out of sync? re-export both)";
  EXPECT_NEAR(s.lse, want_lse, tol);
  return s;
}

inline double MaxAbsDiff(const float* a, const float* b, int n) {
  double err = 0;
  for (int v = 0; v < n; ++v) err = std::max(err, static_cast<double>(std::abs(a[v] - b[v])));
  return err;
}

}  // namespace dspark::testing
