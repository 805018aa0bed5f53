// Lane-tile kernel for x86 targets without VNNI (SSSE3/SSE4/AVX2/AVX3): the same shape as
// LanesTileVnni (lane l of each vector = activation row l of a tile, weights broadcast and
// applied to the whole tile at once) built on vpmaddwd (Highway's ReorderWidenMulAccumulate on
// int16, which on x86 sums exactly the adjacent pair of each 32-bit lane). Weights and
// activations are widened to int16, so there is no saturation and no sign trick: the integer
// sums are exact like the VNNI ones. Tile height = int32 lanes: 4 (SSE4), 8 (AVX2), 16 (AVX3).
#if defined(DSPARK_KERNELS_MATMUL_LANES16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_LANES16_INL_H_
#undef DSPARK_KERNELS_MATMUL_LANES16_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_LANES16_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef DSPARK_HAVE_LANES16
#if HWY_ARCH_X86 && HWY_TARGET != HWY_AVX3_DL && HWY_TARGET != HWY_SCALAR && \
    HWY_TARGET != HWY_EMU128
#define DSPARK_HAVE_LANES16 1

// Weight rows per call: AVX3 has 32 vector registers (8 rows: 8 int32 + 8 float accumulators),
// AVX2/SSE4 have 16 (4 rows).
inline constexpr int kLanes16Rows = HWY_TARGET <= HWY_AVX3 ? 8 : 4;

struct Tile16View {
  const int16_t* a;     // [cols_pad / 2][N][2] activation pairs
  const float* da;      // [nsub][N]
  const float* asum;    // [nsub][N]
};

// out[r][l] for R rows of the interleaved int16 tile wt ([s][kTile][kSub], q as int16).
template <int R, int kTile, int kSub, bool kMin>
HWY_INLINE void LanesTile16(const int16_t* HWY_RESTRICT wt, const float* HWY_RESTRICT dt,
                            const float* HWY_RESTRICT mt, const Tile16View& at, int64_t nsub,
                            float* HWY_RESTRICT out) {
  const hn::ScalableTag<int32_t> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  const hn::Repartition<float, decltype(d32)> df;
  const int64_t N = hn::Lanes(d32);
  hn::Vec<decltype(df)> f[R];
  for (int r = 0; r < R; ++r) f[r] = hn::Zero(df);
  for (int64_t s = 0; s < nsub; ++s) {
    hn::Vec<decltype(d32)> acc[R], unused[R];
    for (int r = 0; r < R; ++r) acc[r] = unused[r] = hn::Zero(d32);
    const int16_t* as = at.a + s * kSub * N;  // kSub/2 pairs of N lanes x 2 int16
    const int16_t* ws = wt + s * kTile * kSub;
    for (int p = 0; p < kSub / 2; ++p) {
      const auto av = hn::Load(d16, as + 2 * N * p);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, ws + r * kSub + 2 * p, 4);
        acc[r] = hn::ReorderWidenMulAccumulate(d32, hn::BitCast(d16, hn::Set(d32, pair)), av,
                                               acc[r], unused[r]);
      }
    }
    const auto da = hn::Load(df, at.da + s * N);
    for (int r = 0; r < R; ++r) {
      const auto t = hn::Mul(hn::ConvertTo(df, hn::Add(acc[r], unused[r])), da);
      f[r] = hn::MulAdd(t, hn::Set(df, dt[s * kTile + r]), f[r]);
    }
    if constexpr (kMin) {
      const auto asv = hn::Load(df, at.asum + s * N);
      for (int r = 0; r < R; ++r) f[r] = hn::MulAdd(hn::Set(df, mt[s * kTile + r]), asv, f[r]);
    }
  }
  for (int r = 0; r < R; ++r) hn::Store(f[r], df, out + r * N);
}

// wt[i] = u[i] - 128 over a decoded tile (u8 with +128 offset -> signed int16).
inline void WidenTile(const uint8_t* HWY_RESTRICT u, int64_t n, int16_t* HWY_RESTRICT wt) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const int64_t N = hn::Lanes(d16);
  const auto k128 = hn::Set(d16, 128);
  for (int64_t i = 0; i < n; i += N)
    hn::Store(hn::Sub(hn::PromoteTo(d16, hn::LoadU(du8, u + i)), k128), d16, wt + i);
}

#else
#define DSPARK_HAVE_LANES16 0
#endif

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
