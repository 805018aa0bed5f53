// Per-target MatMul for BF16 weights.
//
// BF16 weights multiply BF16 activations, as in llama.cpp (the vec_dot_type of GGML_TYPE_BF16 is
// BF16): each call rounds x to bf16 (nearest even) once. The product of two bf16 values is exact
// in f32, so every target forms the same products and they differ only in how the products are
// summed. AMD CPUs with AVX-512 BF16 (Zen 4, Zen 5) run vdpbf16ps, 32 multiply-adds per
// instruction, at about twice the rate of f32 FMAs (see UseBf16Dot for Intel's). The matmuls of a
// verification block read the weights once for all its rows and are bound by that rate, so there
// each extra row costs about half what it costs with F16.
//
// Packed layout (ops::PackWeights): [group of 16 rows][column pair][16][2]. The 32-bit lane l of a
// pair's 64 bytes holds row l's columns 2p (low half) and 2p + 1: the operand order of vdpbf16ps.
// An odd column count gets a zero column; rows past the matrix are zero. Targets without the
// instruction split each lane into its two columns (a shift and a mask) and use f32 FMAs in column
// order. Either way every output is one accumulation chain over the columns in order, whatever m,
// so a row verified in a block equals the same row decoded alone, bitwise.
#if defined(DSPARK_KERNELS_MATMUL_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_BF16_INL_H_
#undef DSPARK_KERNELS_MATMUL_BF16_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_BF16_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/matmul_float-inl.h"
#include "kernels/test_hooks.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

#if HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The bf16 bits (low half of each lane) of the f32 values whose bits are u: round to nearest
// even, NaN kept and made quiet, as util F32ToBF16.
template <class DU>
HWY_INLINE hn::Vec<DU> Bf16Bits(DU du, hn::Vec<DU> u) {
  const hn::RebindToSigned<DU> di;
  const auto top = hn::ShiftRight<16>(u);
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(top, hn::Set(du, 1u)))));
  const auto is_nan = hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu))), hn::Set(di, 0x7f800000));
  return hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Or(top, hn::Set(du, 64u)), rounded);
}

// x[0, n) rounded to bf16 into bits[0, n_pad), zeros past n: the operand of vdpbf16ps.
inline void RoundRowToBf16(const float* HWY_RESTRICT x, int64_t n, int64_t n_pad, uint16_t* HWY_RESTRICT bits) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(di)> du16;
  const int64_t N = hn::Lanes(df);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, Bf16Bits(du, hn::BitCast(du, hn::LoadU(df, x + i))))), du16, bits + i);
  for (; i < n; ++i) bits[i] = F32ToBF16(x[i]);
  for (; i < n_pad; ++i) bits[i] = 0;
}

// The m rows x[j][0, cols) rounded to bf16 and widened back to f32, as rows of cols_pad (zeros
// past cols) in out: the operand of the FMA paths.
inline const float* RoundRowsToBf16Floats(const float* HWY_RESTRICT x, int64_t m, int64_t cols, int64_t cols_pad,
                                          std::vector<float>& out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const int64_t N = hn::Lanes(df);
  out.resize(static_cast<size_t>(m * cols_pad));
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * cols;
    float* oj = out.data() + j * cols_pad;
    int64_t i = 0;
    for (; i + N <= cols; i += N)
      hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(Bf16Bits(du, hn::BitCast(du, hn::LoadU(df, xj + i))))), df, oj + i);
    for (; i < cols; ++i) oj[i] = BF16ToF32(F32ToBF16(xj[i]));
    for (; i < cols_pad; ++i) oj[i] = 0.f;
  }
  return out.data();
}

// ---- Targets without vdpbf16ps: f32 FMAs over the split pair lanes ----

// Software prefetch distance in column pairs (x 64 bytes per group), as kFloatPrefetchCols for F16.
inline constexpr int64_t kBf16PrefetchPairs = 64;

// out[g][j][l] = Σ_k packed_g[k][l] · xr[k][j] for kM activation rows (xr: the bf16-rounded rows
// as f32, interleaved [cols_pad][kM]) and the 16 rows of each of kG consecutive groups.
template <int kM, int kG>
HWY_NOINLINE void Bf16PackedTileFma(const uint32_t* HWY_RESTRICT g, int64_t pairs, const float* HWY_RESTRICT xr,
                                    float* HWY_RESTRICT y, int64_t y_stride, int64_t live_last) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  constexpr int N = static_cast<int>(hn::MaxLanes(df));
  constexpr int kV = static_cast<int>(kFloatGroupRows) / N;
  const int64_t group_stride = pairs * kFloatGroupRows;
  const auto high_half = hn::Set(du, 0xffff0000u);
  hn::Vec<decltype(df)> acc[kG][kM][kV];
  for (int q = 0; q < kG; ++q)
    for (int j = 0; j < kM; ++j)
      for (int v = 0; v < kV; ++v) acc[q][j][v] = hn::Zero(df);
  for (int64_t p = 0; p < pairs; ++p) {
    const float* xp = xr + 2 * p * kM;
    // One group's split weights at a time (the broadcasts are loads, re-read per group): with every
    // group's even and odd halves live at once, a 2-row, 2-group tile needs 19 of AVX2's 16 vector
    // registers and spills.
    for (int q = 0; q < kG; ++q) {
      const uint32_t* wp = g + q * group_stride + p * kFloatGroupRows;
      // One line per pair (16 rows x 4 bytes), kBf16PrefetchPairs ahead (StreamAhead).
      __builtin_prefetch(StreamAhead(g, q, kG, group_stride, p, pairs, kBf16PrefetchPairs));
      hn::Vec<decltype(df)> even[kV], odd[kV];
      for (int v = 0; v < kV; ++v) {
        const auto w = hn::LoadU(du, wp + v * N);
        even[v] = hn::BitCast(df, hn::ShiftLeft<16>(w));
        odd[v] = hn::BitCast(df, hn::And(w, high_half));
      }
      for (int j = 0; j < kM; ++j) {
        const auto xe = hn::Set(df, xp[j]), xo = hn::Set(df, xp[kM + j]);
        for (int v = 0; v < kV; ++v) acc[q][j][v] = hn::MulAdd(odd[v], xo, hn::MulAdd(even[v], xe, acc[q][j][v]));
      }
    }
  }
  StoreTileSums<kM, kG, kV>(df, acc, y, y_stride, live_last);
}

// ---- AVX-512 BF16: vdpbf16ps ----
#undef DSPARK_HAVE_BF16_DOT
#if HWY_TARGET == HWY_AVX3_DL
#define DSPARK_HAVE_BF16_DOT 1
#define DSPARK_BF16_ATTR \
  __attribute__((target(HWY_TARGET_STR ",avx512bf16")))

// As Bf16PackedTileFma with xi the bf16 pairs of each activation row interleaved [pairs][kM].
template <int kM, int kG>
DSPARK_BF16_ATTR HWY_NOINLINE void Bf16PackedTileDot(const uint32_t* HWY_RESTRICT g, int64_t pairs,
                                                     const uint32_t* HWY_RESTRICT xi, float* HWY_RESTRICT y,
                                                     int64_t y_stride, int64_t live_last) {
  const int64_t group_stride = pairs * kFloatGroupRows;
  __m512 acc[kG][kM];
  for (int q = 0; q < kG; ++q)
    for (int j = 0; j < kM; ++j) acc[q][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i w[kG];
    for (int q = 0; q < kG; ++q) {
      const uint32_t* wp = g + q * group_stride + p * kFloatGroupRows;
      // One prefetch per two pairs (128 bytes); past the group's end, the next tile's group.
      if (p % 2 == 0) __builtin_prefetch(StreamAhead(g, q, kG, group_stride, p, pairs, kBf16PrefetchPairs));
      w[q] = _mm512_loadu_si512(wp);
    }
    const uint32_t* xp = xi + p * kM;
    for (int j = 0; j < kM; ++j) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[j]));
      for (int q = 0; q < kG; ++q) acc[q][j] = _mm512_dpbf16_ps(acc[q][j], (__m512bh)w[q], xb);
    }
  }
  StoreTileOutputs<kM, kG>(y, y_stride, live_last, [&](int q, int j, float* dst) { _mm512_storeu_ps(dst, acc[q][j]); });
}
#endif  // HWY_TARGET == HWY_AVX3_DL

// Whether this target multiplies with vdpbf16ps: AVX3_DL code on an AMD CPU that has AVX-512 BF16
// (Highway 1.0.3 has no target that requires it; Ice Lake has AVX3_DL without it), unless a test
// turned it off to check the FMA path on the same CPU. Only AMD's: on Intel Xeons (Sapphire Rapids
// class) vdpbf16ps runs at about half the rate of f32 FMAs, on Zen 5 at about twice. The choice is
// fixed per CPU model, never timed, so a machine's outputs do not depend on load.
inline bool UseBf16Dot() {
#ifdef DSPARK_HAVE_BF16_DOT
  static const bool fast = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_is("amd");
  return fast && !kernels::Bf16DotDisabledForTest();
#else
  return false;
#endif
}

inline const char* Bf16KernelName() { return UseBf16Dot() ? "vdpbf16ps" : "f32 FMA"; }

// Groups [gb, ge) for one chunk of kM activation rows starting at row j0. xj: the chunk's
// interleaved activations (u32 pairs for the dot path, f32 else).
template <int kM, bool kDot, typename XT>
HWY_INLINE void Bf16PackedGroups(const uint32_t* packed, int64_t rows, int64_t pairs, int64_t gb, int64_t ge,
                                 const XT* xj, int64_t j0, float* y) {
  // Every group's weights counted as live (the vdpbf16ps tile holds them all; the FMA tile's even
  // and odd halves of one group take as many registers as two groups' would).
  constexpr int kG = FloatTileGroups<hn::ScalableTag<float>>(kM, false);
  ForEachGroupTile<kM, kG>(rows, gb, ge, [&](auto groups_tag, int64_t grp, int64_t r0, int64_t live_last) {
    constexpr int kTileG = decltype(groups_tag)::value;
    const uint32_t* g = packed + grp * pairs * kFloatGroupRows;
#ifdef DSPARK_HAVE_BF16_DOT
    if constexpr (kDot) {
      Bf16PackedTileDot<kM, kTileG>(g, pairs, xj, y + j0 * rows + r0, rows, live_last);
      return;
    }
#endif
    if constexpr (!kDot) Bf16PackedTileFma<kM, kTileG>(g, pairs, xj, y + j0 * rows + r0, rows, live_last);
  });
}

inline void MatMulBf16Packed(const uint32_t* packed, int64_t rows, int64_t cols, const float* x, int64_t m,
                             float* y, ThreadPool& pool) {
  constexpr int kMaxM = FloatPackedMaxRows<hn::ScalableTag<float>>();
  const int64_t pairs = (cols + 1) / 2, cols_pad = 2 * pairs;
  const int64_t groups = (rows + kFloatGroupRows - 1) / kFloatGroupRows;
  const int64_t chunk = PackedRowChunk(m, kMaxM);
#ifdef DSPARK_HAVE_BF16_DOT
  if (UseBf16Dot()) {
    // The rounded rows as bf16 bits [m][cols_pad] (zero-padded); a row's pairs are its bits read
    // as uint32 (little-endian: column 2p in the low half).
    thread_local std::vector<uint16_t> bits;
    thread_local std::vector<uint32_t> rows_u32, xi_buf;
    bits.resize(static_cast<size_t>(m * cols_pad));
    for (int64_t j = 0; j < m; ++j) RoundRowToBf16(x + j * cols, cols, cols_pad, bits.data() + j * cols_pad);
    rows_u32.resize(static_cast<size_t>(m * pairs));
    std::memcpy(rows_u32.data(), bits.data(), rows_u32.size() * sizeof(uint32_t));
    const uint32_t* xi = m == 1 ? rows_u32.data() : InterleaveRowChunks(rows_u32.data(), m, pairs, chunk, xi_buf);
    ForPackedGroupBlocks(groups, m, chunk, pool, [&](int64_t gb, int64_t ge, int64_t j0, int mt) {
      WithRowChunk<kMaxM>(mt, [&](auto rows_tag) {
        Bf16PackedGroups<decltype(rows_tag)::value, true>(packed, rows, pairs, gb, ge, xi + j0 * pairs, j0, y);
      });
    });
    return;
  }
#endif
  thread_local std::vector<float> rounded, xi_buf;
  RoundRowsToBf16Floats(x, m, cols, cols_pad, rounded);
  const float* xr = m == 1 ? rounded.data() : InterleaveRowChunks(rounded.data(), m, cols_pad, chunk, xi_buf);
  ForPackedGroupBlocks(groups, m, chunk, pool, [&](int64_t gb, int64_t ge, int64_t j0, int mt) {
    WithRowChunk<kMaxM>(mt, [&](auto rows_tag) {
      Bf16PackedGroups<decltype(rows_tag)::value, false>(packed, rows, pairs, gb, ge, xr + j0 * cols_pad, j0, y);
    });
  });
}

inline void MatMulBf16Impl(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  if (w.packed) return MatMulBf16Packed(static_cast<const uint32_t*>(w.packed), w.rows, w.cols, x, m, y, pool);
  // Row layout (--no-repack): the FMA loops of the float kernel over the bf16-rounded rows.
  thread_local std::vector<float> rounded;
  RoundRowsToBf16Floats(x, m, w.cols, w.cols, rounded);
  MatMulFloatTyped(static_cast<const hwy::bfloat16_t*>(w.data), w.rows, w.cols, rounded.data(), m, y, pool);
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
