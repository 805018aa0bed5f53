// Scalar (de)quantisers mirroring ggml-quants.c (quantize_row_*_ref, dequantize_row_*). Comments
// give the formula; the control flow is kept close to ggml's so that bit-exactness can be checked
// by reading the two side by side.
#include "kernels/ref/quant_ref.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "util/fp16.h"

namespace dspark::ref {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

inline uint16_t ToF16(float f) { return F32ToF16(f); }
inline float FromF16(uint16_t h) { return F16ToF32(h); }

// ggml's make_qx_quants: symmetric quantisation of n values to [-nmax, nmax-1] with a search
// over 18 candidate scales that maximises the weighted (w = x^2 for rmse_type 1) fit.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = NearestInt(iscale * x[i]);
      L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  auto weight = [&](int i) { return rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1.f : rmse_type == 3 ? std::fabs(x[i]) : std::sqrt(std::fabs(x[i])); };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml's make_qkx2_quants: asymmetric quantisation x ≈ scale * L - the_min, L in [0, nmax],
// searching nstep+1 candidate scales for the smallest weighted squared error.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        cur_error += weights[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Shared by Q4_K and Q5_K: per-sub-block (scale, min) search, then 6-bit packing of the eight
// scales and mins into `scales`, then requantisation of L against the packed values.
template <int kNmax>
void QuantizeKSuperBlock(const float* x, float rmin, float rdelta, int nstep, uint16_t* d_out,
                         uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, kNmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                               rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
      packed[j - 4] |= ((ls >> 4) << 6);
      packed[j - 0] |= ((lm >> 4) << 6);
    }
  }
  *d_out = ToF16(max_scale / 63.f);
  *dmin_out = ToF16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, packed, &sc, &m);
    const float d = FromF16(*d_out) * sc;
    if (!d) continue;
    const float dm = FromF16(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(kNmax, l)));
    }
  }
}

template <typename Block>
inline void AbsMaxSigned(const float* x, int n, float* amax, float* max) {
  *amax = 0.f;
  *max = 0.f;
  for (int j = 0; j < n; ++j) {
    if (*amax < std::fabs(x[j])) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}

}  // namespace

int NearestInt(float f) {
  const float val = f + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// d = amax / 127, q = roundf(x / d)
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) {
    float amax = 0.f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ToF16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i, x += kQK8_1) {
    float amax = 0.f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ToF16(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1 / 2; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      y[i].qs[kQK8_1 / 2 + j] = static_cast<int8_t>(std::roundf(x[kQK8_1 / 2 + j] * id));
      sum += y[i].qs[j] + y[i].qs[kQK8_1 / 2 + j];
    }
    y[i].s = ToF16(sum * d);
  }
}

// d = max / -8 (max = the signed value of largest magnitude), q = min(15, trunc(x/d + 8.5))
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i, x += kQK4_0) {
    float amax, max;
    AbsMaxSigned<BlockQ4_0>(x, kQK4_0, &amax, &max);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ToF16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t q0 = std::min<uint8_t>(15, static_cast<int8_t>(x[j] * id + 8.5f));
      const uint8_t q1 = std::min<uint8_t>(15, static_cast<int8_t>(x[j + 16] * id + 8.5f));
      y[i].qs[j] = q0 | (q1 << 4);
    }
  }
}

// d = (max - min) / 15, m = min, q = min(15, trunc((x - min)/d + 0.5))
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i, x += kQK4_1) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK4_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ToF16(d);
    y[i].m = ToF16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const uint8_t q0 = std::min<uint8_t>(15, static_cast<int8_t>((x[j] - min) * id + 0.5f));
      const uint8_t q1 = std::min<uint8_t>(15, static_cast<int8_t>((x[j + 16] - min) * id + 0.5f));
      y[i].qs[j] = q0 | (q1 << 4);
    }
  }
}

// d = max / -16, q = min(31, trunc(x/d + 16.5)); bit 4 of element j goes to bit j of qh.
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i, x += kQK5_0) {
    float amax, max;
    AbsMaxSigned<BlockQ5_0>(x, kQK5_0, &amax, &max);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const uint8_t q0 = std::min<uint8_t>(31, static_cast<int8_t>(x[j] * id + 16.5f));
      const uint8_t q1 = std::min<uint8_t>(31, static_cast<int8_t>(x[j + 16] * id + 16.5f));
      y[i].qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
      qh |= ((q0 & 0x10u) >> 4) << (j + 0);
      qh |= ((q1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

// d = (max - min) / 31, m = min, q = trunc((x - min)/d + 0.5)
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i, x += kQK5_1) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK5_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ToF16(d);
    y[i].m = ToF16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const uint8_t q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      const uint8_t q1 = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
      y[i].qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
      qh |= ((q0 & 0x10u) >> 4) << (j + 0);
      qh |= ((q1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    QuantizeKSuperBlock<15>(x, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (L[j + l + 32] << 4);
  }
}

void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    QuantizeKSuperBlock<31>(x, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int nn = 0; nn < kQK_K; nn += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[nn + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[nn + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 <<= 2;
      m2 <<= 2;
    }
  }
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      scales[ib] = scale;
      if (std::fabs(scale) > max_abs_scale) {
        max_abs_scale = std::fabs(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = ToF16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = ToF16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = FromF16(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = NearestInt(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = q1 | (q3 << 4);
        ql[l + 32] = q2 | (q4 << 4);
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

// iscale = -127 / max (max = signed value of largest magnitude), q = min(127, nearest(x*iscale)),
// d = 1 / iscale; bsums over 16s.
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, kQK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

namespace {

void DequantQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = FromF16(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}
void DequantQ8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const float d = FromF16(x[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[i * kQK8_1 + j] = x[i].qs[j] * d;
  }
}
void DequantQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float d = FromF16(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[i * 32 + j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}
void DequantQ4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float d = FromF16(x[i].d), m = FromF16(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = (x[i].qs[j] & 0x0F) * d + m;
      y[i * 32 + j + 16] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}
void DequantQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const float d = FromF16(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < 16; ++j) {
      const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh1 = ((qh >> (j + 12))) & 0x10;
      y[i * 32 + j] = (((x[i].qs[j] & 0x0F) | xh0) - 16) * d;
      y[i * 32 + j + 16] = (((x[i].qs[j] >> 4) | xh1) - 16) * d;
    }
  }
}
void DequantQ5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    const float d = FromF16(x[i].d), m = FromF16(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < 16; ++j) {
      const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh1 = ((qh >> (j + 12))) & 0x10;
      y[i * 32 + j] = ((x[i].qs[j] & 0x0F) | xh0) * d + m;
      y[i * 32 + j + 16] = ((x[i].qs[j] >> 4) | xh1) * d + m;
    }
  }
}
void DequantQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = FromF16(x[i].d), min = FromF16(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      GetScaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}
void DequantQ5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = FromF16(x[i].d), min = FromF16(x[i].dmin);
    int is = 0;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
      GetScaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}
void DequantQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = FromF16(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int nn = 0; nn < kQK_K; nn += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}
void DequantQ8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i)
    for (int j = 0; j < kQK_K; ++j) y[i * kQK_K + j] = x[i].d * x[i].qs[j];
}

}  // namespace

bool CanQuantize(DType type) {
  switch (type) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ8_1:
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ4_K:
    case DType::kQ5_K: case DType::kQ6_K: case DType::kQ8_K:
      return true;
    default:
      return false;
  }
}

bool QuantizeRow(DType type, const float* x, void* y, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(y, x, n * sizeof(float)); return true;
    case DType::kF16: {
      auto* o = static_cast<uint16_t*>(y);
      for (int64_t i = 0; i < n; ++i) o[i] = F32ToF16(x[i]);
      return true;
    }
    case DType::kBF16: {
      auto* o = static_cast<uint16_t*>(y);
      for (int64_t i = 0; i < n; ++i) o[i] = F32ToBF16(x[i]);
      return true;
    }
    case DType::kQ8_0: QuantizeRowQ8_0(x, static_cast<BlockQ8_0*>(y), n); return true;
    case DType::kQ8_1: QuantizeRowQ8_1(x, static_cast<BlockQ8_1*>(y), n); return true;
    case DType::kQ4_0: QuantizeRowQ4_0(x, static_cast<BlockQ4_0*>(y), n); return true;
    case DType::kQ4_1: QuantizeRowQ4_1(x, static_cast<BlockQ4_1*>(y), n); return true;
    case DType::kQ5_0: QuantizeRowQ5_0(x, static_cast<BlockQ5_0*>(y), n); return true;
    case DType::kQ5_1: QuantizeRowQ5_1(x, static_cast<BlockQ5_1*>(y), n); return true;
    case DType::kQ4_K: QuantizeRowQ4_K(x, static_cast<BlockQ4_K*>(y), n); return true;
    case DType::kQ5_K: QuantizeRowQ5_K(x, static_cast<BlockQ5_K*>(y), n); return true;
    case DType::kQ6_K: QuantizeRowQ6_K(x, static_cast<BlockQ6_K*>(y), n); return true;
    case DType::kQ8_K: QuantizeRowQ8_K(x, static_cast<BlockQ8_K*>(y), n); return true;
    default: return false;
  }
}

bool DequantizeRow(DType type, const void* x, float* y, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(y, x, n * sizeof(float)); return true;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(h[i]);
      return true;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < n; ++i) y[i] = BF16ToF32(h[i]);
      return true;
    }
    case DType::kQ8_0: DequantQ8_0(static_cast<const BlockQ8_0*>(x), y, n); return true;
    case DType::kQ8_1: DequantQ8_1(static_cast<const BlockQ8_1*>(x), y, n); return true;
    case DType::kQ4_0: DequantQ4_0(static_cast<const BlockQ4_0*>(x), y, n); return true;
    case DType::kQ4_1: DequantQ4_1(static_cast<const BlockQ4_1*>(x), y, n); return true;
    case DType::kQ5_0: DequantQ5_0(static_cast<const BlockQ5_0*>(x), y, n); return true;
    case DType::kQ5_1: DequantQ5_1(static_cast<const BlockQ5_1*>(x), y, n); return true;
    case DType::kQ4_K: DequantQ4_K(static_cast<const BlockQ4_K*>(x), y, n); return true;
    case DType::kQ5_K: DequantQ5_K(static_cast<const BlockQ5_K*>(x), y, n); return true;
    case DType::kQ6_K: DequantQ6_K(static_cast<const BlockQ6_K*>(x), y, n); return true;
    case DType::kQ8_K: DequantQ8_K(static_cast<const BlockQ8_K*>(x), y, n); return true;
    default: return false;
  }
}

}  // namespace dspark::ref
