#include "kernels/ref/matmul_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/quant_blocks.h"
#include "kernels/ref/quant_ref.h"
#include "util/fp16.h"

namespace dspark::ref {

namespace {

struct Acc {
  double sum = 0, bound = 0;
  void Add(double term) {
    sum += term;
    bound += std::fabs(term);
  }
};

// Weight block b of a 32-element type as (integer values, scale d, offset m): x = d*q + m.
void Block32(DType t, const void* row, int64_t b, int* q, float* d, float* m) {
  *m = 0.f;
  *d = 0.f;
  switch (t) {
    case DType::kQ8_0: {
      const auto& blk = static_cast<const BlockQ8_0*>(row)[b];
      *d = F16ToF32(blk.d);
      for (int j = 0; j < 32; ++j) q[j] = blk.qs[j];
      break;
    }
    case DType::kQ4_0: {
      const auto& blk = static_cast<const BlockQ4_0*>(row)[b];
      *d = F16ToF32(blk.d);
      for (int j = 0; j < 16; ++j) {
        q[j] = (blk.qs[j] & 0xF) - 8;
        q[j + 16] = (blk.qs[j] >> 4) - 8;
      }
      break;
    }
    case DType::kQ4_1: {
      const auto& blk = static_cast<const BlockQ4_1*>(row)[b];
      *d = F16ToF32(blk.d);
      *m = F16ToF32(blk.m);
      for (int j = 0; j < 16; ++j) {
        q[j] = blk.qs[j] & 0xF;
        q[j + 16] = blk.qs[j] >> 4;
      }
      break;
    }
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const bool has_min = t == DType::kQ5_1;
      const uint8_t* qs = has_min ? static_cast<const BlockQ5_1*>(row)[b].qs
                                  : static_cast<const BlockQ5_0*>(row)[b].qs;
      const uint8_t* qhp = has_min ? static_cast<const BlockQ5_1*>(row)[b].qh
                                   : static_cast<const BlockQ5_0*>(row)[b].qh;
      uint32_t qh;
      std::memcpy(&qh, qhp, 4);
      if (has_min) {
        *d = F16ToF32(static_cast<const BlockQ5_1*>(row)[b].d);
        *m = F16ToF32(static_cast<const BlockQ5_1*>(row)[b].m);
      } else {
        *d = F16ToF32(static_cast<const BlockQ5_0*>(row)[b].d);
      }
      const int off = has_min ? 0 : 16;
      for (int j = 0; j < 16; ++j) {
        q[j] = ((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - off;
        q[j + 16] = ((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off;
      }
      break;
    }
    default:
      break;
  }
}

// Super-block b of a K-quant as 256 integer values with per-element (scale, min) factors:
// x[i] = d[i/sub] * q[i] - mn[i/sub]; sub = 32 (Q4_K, Q5_K) or 16 (Q6_K).
int KBlock(DType t, const void* row, int64_t b, int* q, float* d, float* mn) {
  if (t == DType::kQ6_K) {
    const auto& blk = static_cast<const BlockQ6_K*>(row)[b];
    const float dd = F16ToF32(blk.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = blk.ql + 64 * half;
      const uint8_t* qh = blk.qh + 32 * half;
      int* qq = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        qq[l + 0] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        qq[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        qq[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        qq[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
    }
    for (int s = 0; s < 16; ++s) {
      d[s] = dd * blk.scales[s];
      mn[s] = 0;
    }
    return 16;
  }
  const bool q5 = t == DType::kQ5_K;
  const uint8_t* scales = q5 ? static_cast<const BlockQ5_K*>(row)[b].scales
                             : static_cast<const BlockQ4_K*>(row)[b].scales;
  const uint8_t* qs = q5 ? static_cast<const BlockQ5_K*>(row)[b].qs
                         : static_cast<const BlockQ4_K*>(row)[b].qs;
  const float dd = F16ToF32(q5 ? static_cast<const BlockQ5_K*>(row)[b].d
                               : static_cast<const BlockQ4_K*>(row)[b].d);
  const float dmin = F16ToF32(q5 ? static_cast<const BlockQ5_K*>(row)[b].dmin
                                 : static_cast<const BlockQ4_K*>(row)[b].dmin);
  for (int c = 0; c < 4; ++c) {  // 64-element chunks: low nibbles, then high nibbles
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
      if (q5) {
        const uint8_t qh = static_cast<const BlockQ5_K*>(row)[b].qh[l];
        lo |= ((qh >> (2 * c)) & 1) << 4;
        hi |= ((qh >> (2 * c + 1)) & 1) << 4;
      }
      q[64 * c + l] = lo;
      q[64 * c + 32 + l] = hi;
    }
  }
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    GetScaleMinK4(s, scales, &sc, &m);
    d[s] = dd * sc;
    mn[s] = dmin * m;
  }
  return 32;
}

}  // namespace

DType ActivationType(DType t) {
  switch (t) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
      return DType::kQ8_0;
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return DType::kQ8_K;
    case DType::kBF16:
      return DType::kBF16;  // as ggml: BF16 weights multiply BF16-rounded activations
    default:
      return DType::kF32;
  }
}

void MatMulRef(const ops::WeightView& w, const float* x, int64_t m, double* y, double* bound) {
  const int64_t n = w.cols;
  const size_t row_bytes = RowBytes(w.type, n);
  const DType act = ActivationType(w.type);
  std::vector<float> wf(n);
  std::vector<BlockQ8_0> a0(n / 32 + 1);
  std::vector<BlockQ8_K> ak(n / 256 + 1);
  std::vector<float> xr(n);
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * n;
    if (act == DType::kBF16) {
      for (int64_t i = 0; i < n; ++i) xr[i] = BF16ToF32(F32ToBF16(xj[i]));
      xj = xr.data();
    }
    if (act == DType::kQ8_0) QuantizeRowQ8_0(xj, a0.data(), n);
    if (act == DType::kQ8_K) QuantizeRowQ8_K(xj, ak.data(), n);
    for (int64_t r = 0; r < w.rows; ++r) {
      const void* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
      Acc acc;
      if (act == DType::kF32 || act == DType::kBF16) {
        DequantizeRow(w.type, row, wf.data(), n);
        for (int64_t i = 0; i < n; ++i) acc.Add(static_cast<double>(wf[i]) * xj[i]);
      } else if (act == DType::kQ8_0) {
        int q[32];
        float d, mm;
        for (int64_t b = 0; b < n / 32; ++b) {
          Block32(w.type, row, b, q, &d, &mm);
          const double da = F16ToF32(a0[b].d);
          int64_t isum = 0, asum = 0;
          for (int k = 0; k < 32; ++k) {
            isum += q[k] * a0[b].qs[k];
            asum += a0[b].qs[k];
          }
          acc.Add(static_cast<double>(d) * da * isum);
          if (mm != 0) acc.Add(static_cast<double>(mm) * da * asum);
        }
      } else {
        int q[256];
        float d[16], mn[16];
        for (int64_t b = 0; b < n / 256; ++b) {
          const int sub = KBlock(w.type, row, b, q, d, mn);
          const double da = ak[b].d;
          for (int s = 0; s < 256 / sub; ++s) {
            int64_t isum = 0, asum = 0;
            for (int k = s * sub; k < (s + 1) * sub; ++k) isum += q[k] * ak[b].qs[k];
            for (int k = s * sub / 16; k < (s + 1) * sub / 16; ++k) asum += ak[b].bsums[k];
            acc.Add(static_cast<double>(d[s]) * da * isum);
            if (mn[s] != 0) acc.Add(-static_cast<double>(mn[s]) * da * asum);
          }
        }
      }
      y[j * w.rows + r] = acc.sum;
      if (bound) bound[j * w.rows + r] = acc.bound;
    }
  }
}

}  // namespace dspark::ref
