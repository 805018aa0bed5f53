// Scalar twins of the elementwise ops in ops.h: obvious loops with double accumulation, for the
// tests to compare the Highway versions against.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

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

inline int64_t ArgMax(const float* x, int64_t n, float* prob) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - x[best]);
  *prob = static_cast<float>(1.0 / sum);
  return best;
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

// Attention of one query position for a GQA group (ops::AttentionGroup), in double precision.
inline void AttentionGroup(const float* q, int n_q, int head_dim, int head_dim_v, const float* k, int64_t k_stride,
                           const float* v, int64_t v_stride, const int32_t* cells, int n, float scale,
                           const float* sinks, float* out) {
  for (int h = 0; h < n_q; ++h) {
    double max = sinks ? sinks[h] : -std::numeric_limits<double>::infinity();
    std::vector<double> s(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
      double dot = 0;
      for (int i = 0; i < head_dim; ++i) dot += static_cast<double>(q[h * head_dim + i]) * k[cells[t] * k_stride + i];
      s[t] = dot * scale;
      max = s[t] > max ? s[t] : max;
    }
    double sum = sinks ? std::exp(sinks[h] - max) : 0.0;
    for (int t = 0; t < n; ++t) sum += (s[t] = std::exp(s[t] - max));
    for (int i = 0; i < head_dim_v; ++i) {
      double o = 0;
      for (int t = 0; t < n; ++t) o += s[t] / sum * v[cells[t] * v_stride + i];
      out[h * head_dim_v + i] = static_cast<float>(o);
    }
  }
}

}  // namespace dspark::ref
