// Q8_0 blocks of the KV cache and of the queries that attend over it (ops::kAttentionQ8Block
// elements): one f32 scale d = max|x| / 127 and q = round(x / d), as ggml's quantize_row_q8_0
// (with an f32 d instead of an fp16 one). One definition, so the cache writer and the attention
// kernel round alike.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace dspark {

// std::lround(v) for |v| < 2^31, half away from zero, without the libm call: truncate, then step
// away from zero when the (exact) remainder reaches one half. The libm call of std::lround would
// be most of the cost of a Q8_0 cache write.
inline int32_t RoundHalfAway(float v) {
  const int32_t t = static_cast<int32_t>(v);
  const float rest = v - static_cast<float>(t);
  return t + (rest >= 0.5f) - (rest <= -0.5f);
}

// q[i * q_stride] for the 32 elements of x; returns d.
inline float QuantizeQ8Block(const float* x, int8_t* q, int64_t q_stride = 1) {
  constexpr int kN = ops::kAttentionQ8Block;
  float amax = 0.f;
  for (int i = 0; i < kN; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < kN; ++i) q[i * q_stride] = static_cast<int8_t>(RoundHalfAway(x[i] * id));
  return d;
}

}  // namespace dspark
