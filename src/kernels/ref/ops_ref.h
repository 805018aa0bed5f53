// Scalar twins of the elementwise ops in ops.h: obvious loops with double accumulation, for the
// tests to compare the Highway versions against.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace dspark::ref {

inline void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * weight[i]);
}

inline void Softmax(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  if (max == -std::numeric_limits<float>::infinity()) {  // all masked: define as zeros
    for (int64_t i = 0; i < n; ++i) x[i] = 0.f;
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - max) / sum);
}

inline void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

inline void Add(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

inline double Dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline void Axpy(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void Scale(float alpha, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

}  // namespace dspark::ref
