// Per-target activation quantisers for MatMul, bit-exact with the reference quantisers
// (ref::QuantizeRowQ8_0 / QuantizeRowQ8_K, themselves ggml's *_ref) so every target multiplies
// the same integers. Output is the kernels' canonical form: int8 values plus, per weight
// sub-block of `sub` elements, the activation scale da and da * Σq (for min/offset terms).
#if defined(DSPARK_KERNELS_MATMUL_ACT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_ACT_INL_H_
#undef DSPARK_KERNELS_MATMUL_ACT_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_ACT_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/matmul_decode-inl.h"  // HalfToFloat
#include "util/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Highway vectors of at most 16 floats so a 32-element block is a whole number of vectors on
// every target (1 lane on SCALAR, 4 on SSE4, 8 on AVX2, 16 on AVX-512).
using ActTag = hn::CappedTag<float, 16>;

// Stores the int32 lanes of v as int8 (values are already within [-127, 127]).
template <class DF>
HWY_INLINE void StoreI8(DF df, hn::Vec<hn::RebindToSigned<DF>> v, int8_t* p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  hn::StoreU(hn::DemoteTo(d8, hn::DemoteTo(d16, v)), d8, p);
}

// ggml quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d) (half away from zero).
// da[b] = fp16(d) as float, asum[b] = da[b] * Σq.
inline void QuantizeActQ8_0(const float* HWY_RESTRICT x, int64_t cols, int8_t* HWY_RESTRICT q,
                            float* HWY_RESTRICT da, float* HWY_RESTRICT asum) {
  const ActTag df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = hn::Lanes(df);
  const auto half = hn::Set(df, 0.5f);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    auto vmax = hn::Zero(df);
    for (int64_t k = 0; k < 32; k += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + k)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16(d);
    const auto vid = hn::Set(df, id);
    auto vsum = hn::Zero(di);
    for (int64_t k = 0; k < 32; k += N) {
      const auto v = hn::Mul(hn::LoadU(df, xb + k), vid);
      // roundf: truncate, then step away from zero when the dropped fraction is >= 0.5 (exact:
      // v - trunc(v) is representable for |v| < 2^23).
      const auto t = hn::Trunc(v);
      const auto away = hn::Ge(hn::Abs(hn::Sub(v, t)), half);
      const auto r = hn::Add(t, hn::IfThenElseZero(away, hn::CopySign(hn::Set(df, 1.0f), v)));
      const auto qi = hn::ConvertTo(di, r);
      vsum = hn::Add(vsum, qi);
      StoreI8(df, qi, q + 32 * b + k);
    }
    da[b] = HalfToFloat(dh);
    asum[b] = da[b] * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, vsum)));
  }
}

// ggml quantize_row_q8_K_ref: max = signed value of largest |x| (first one), iscale = -127/max,
// q = min(127, nearest_int(iscale*x)) (half to even), d = 1/iscale. Per sub-block of `sub`
// (16 or 32): da = d, asum = d * Σq.
inline void QuantizeActQ8_K(const float* HWY_RESTRICT x, int64_t cols, int sub,
                            int8_t* HWY_RESTRICT q, float* HWY_RESTRICT da,
                            float* HWY_RESTRICT asum) {
  const ActTag df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = hn::Lanes(df);
  const int per = 256 / sub;
  for (int64_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    auto vmax = hn::Zero(df);
    for (int64_t k = 0; k < 256; k += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + k)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    if (!amax) {
      for (int k = 0; k < 256; ++k) q[256 * b + k] = 0;
      for (int s = 0; s < per; ++s) da[b * per + s] = asum[b * per + s] = 0.f;
      continue;
    }
    float max = 0.f;
    const auto vamax = hn::Set(df, amax);
    for (int64_t k = 0; k < 256; k += N) {
      const auto hit = hn::Eq(hn::Abs(hn::LoadU(df, xb + k)), vamax);
      if (!hn::AllFalse(df, hit)) {
        max = xb[k + hn::FindFirstTrue(df, hit)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const float d = 1 / iscale;
    const auto vis = hn::Set(df, iscale);
    const auto k127 = hn::Set(di, 127);
    for (int s = 0; s < per; ++s) {
      auto vsum = hn::Zero(di);
      for (int64_t k = s * sub; k < (s + 1) * sub; k += N) {
        const auto qi = hn::Min(hn::NearestInt(hn::Mul(vis, hn::LoadU(df, xb + k))), k127);
        vsum = hn::Add(vsum, qi);
        StoreI8(df, qi, q + 256 * b + k);
      }
      da[b * per + s] = d;
      asum[b * per + s] = d * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, vsum)));
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
