// Per-target MatMul for float weights (F32, F16, BF16): Highway FMA loops.
//
// Packed layout (ops::PackWeights, the default at load): [group of 16 rows][cols][16], rows past
// the matrix zero. Lanes are weight rows, so each activation element is broadcast into one FMA
// with 16 rows' weights: no horizontal sums, and each output is one FMA chain over the columns in
// order, the same for every m (a verification block reproduces decode bitwise). With one row per
// vector (the row layout below) an 8-position verification of the F16 reference target cost 2.4x
// one decode step, mostly horizontal sums.
//
// Row layout (--no-repack): each weight vector is loaded (and widened to f32) once per tile of up
// to 8 activation rows and multiplied into all of them.
#if defined(DSPARK_KERNELS_MATMUL_FLOAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_FLOAT_INL_H_
#undef DSPARK_KERNELS_MATMUL_FLOAT_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_FLOAT_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "kernels/ops.h"
#include "util/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class DF>
HWY_INLINE hn::Vec<DF> LoadWeights(DF df, const float* p) { return hn::LoadU(df, p); }
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWeights(DF df, const hwy::float16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWeights(DF df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}

// out[j] = Σ_k w[k]·x[j][k] for kMT activation rows (x rows `cols` apart). kMT = 8 keeps 8
// accumulators + the weight vector + one activation vector in registers on every target.
template <int kMT, typename WT>
HWY_INLINE void FloatRowTile(const WT* HWY_RESTRICT w, const float* HWY_RESTRICT x, int64_t cols,
                             float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = hn::Lanes(df);
  hn::Vec<decltype(df)> acc[kMT];
  for (int j = 0; j < kMT; ++j) acc[j] = hn::Zero(df);
  int64_t k = 0;
  for (; k + N <= cols; k += N) {
    const auto wv = LoadWeights(df, w + k);
    for (int j = 0; j < kMT; ++j) acc[j] = hn::MulAdd(wv, hn::LoadU(df, x + j * cols + k), acc[j]);
  }
  if (k < cols) {
    // Tail: widen through a zero-padded copy (half types have no masked load in Highway 1.0.3).
    HWY_ALIGN WT wt[hn::MaxLanes(df)] = {};
    HWY_ALIGN float xt[hn::MaxLanes(df)];
    for (int64_t i = k; i < cols; ++i) wt[i - k] = w[i];
    const auto wv = LoadWeights(df, wt);
    for (int j = 0; j < kMT; ++j) {
      for (int64_t i = 0; i < N; ++i) xt[i] = k + i < cols ? x[j * cols + k + i] : 0.f;
      acc[j] = hn::MulAdd(wv, hn::Load(df, xt), acc[j]);
    }
  }
  for (int j = 0; j < kMT; ++j) out[j] = hn::GetLane(hn::SumOfLanes(df, acc[j]));
}

template <typename WT>
void MatMulFloatTyped(const WT* w, int64_t rows, int64_t cols, const float* x, int64_t m,
                      float* y, ThreadPool& pool) {
  // 16 weight rows per task: with 8 activation rows in L1 (8 x cols floats) the 16 rows stream
  // from L2 once per activation tile.
  constexpr int64_t kRowsPerTask = 16;
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  pool.ParallelRange(tasks, 1, [&](int64_t tb, int64_t te, int) {
    const int64_t r_begin = tb * kRowsPerTask, r_end = std::min(rows, te * kRowsPerTask);
    for (int64_t j0 = 0; j0 < m;) {
      const int64_t left = m - j0;
      const int mt = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
      float out[8];
      for (int64_t r = r_begin; r < r_end; ++r) {
        const WT* wr = w + r * cols;
        const float* xt = x + j0 * cols;
        switch (mt) {
          case 8: FloatRowTile<8>(wr, xt, cols, out); break;
          case 4: FloatRowTile<4>(wr, xt, cols, out); break;
          case 2: FloatRowTile<2>(wr, xt, cols, out); break;
          default: FloatRowTile<1>(wr, xt, cols, out); break;
        }
        for (int j = 0; j < mt; ++j) y[(j0 + j) * rows + r] = out[j];
      }
      j0 += mt;
    }
  });
}

// Weight rows per packed group (one AVX-512 vector of f32 lanes; two AVX2 vectors, ...).
inline constexpr int64_t kFloatGroupRows = 16;
// Software prefetch distance in columns of a group (x 32 bytes for F16): the stream must arrive
// from DRAM while m > 1 keeps the FMA ports busy (bundled F16 target, 2 threads: 32 columns ahead
// decoded ~750 tok/s, 128-256 ~800-880 tok/s).
inline constexpr int64_t kFloatPrefetchCols = 256;

// out[j][l] = Σ_k packed[k][l] · xi[k][j] for kM activation rows and the 16 rows of one group; xi
// holds the rows interleaved ([cols][kM]) so every broadcast is [one pointer + constant]: with one
// pointer per row the indexed broadcasts unlaminate into two uops each.
template <int kM, typename WT>
HWY_NOINLINE void FloatPackedTile(const WT* HWY_RESTRICT g, int64_t cols, const float* HWY_RESTRICT xi,
                                  float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  constexpr int N = static_cast<int>(hn::MaxLanes(df));
  constexpr int kV = static_cast<int>(kFloatGroupRows) / N;
  hn::Vec<decltype(df)> acc[kM][kV];
  for (int j = 0; j < kM; ++j)
    for (int v = 0; v < kV; ++v) acc[j][v] = hn::Zero(df);
  for (int64_t k = 0; k < cols; ++k) {
    const WT* wk = g + k * kFloatGroupRows;
    if ((k & 3) == 0) __builtin_prefetch(wk + kFloatPrefetchCols * kFloatGroupRows);
    hn::Vec<decltype(df)> wv[kV];
    for (int v = 0; v < kV; ++v) wv[v] = LoadWeights(df, wk + v * N);
    const float* xk = xi + k * kM;
    for (int j = 0; j < kM; ++j) {
      const auto xb = hn::Set(df, xk[j]);
      for (int v = 0; v < kV; ++v) acc[j][v] = hn::MulAdd(wv[v], xb, acc[j][v]);
    }
  }
  for (int j = 0; j < kM; ++j)
    for (int v = 0; v < kV; ++v) hn::StoreU(acc[j][v], df, out + j * kFloatGroupRows + v * N);
}

template <typename WT>
void MatMulFloatPacked(const WT* packed, int64_t rows, int64_t cols, const float* x, int64_t m, float* y,
                       ThreadPool& pool) {
  const hn::ScalableTag<float> df;
  // Activation rows per pass: kM x (16 / N) accumulators stay within half the registers.
  constexpr int kMaxM = std::max(1, 8 * static_cast<int>(hn::MaxLanes(df)) / static_cast<int>(kFloatGroupRows));
  const int64_t groups = (rows + kFloatGroupRows - 1) / kFloatGroupRows;
  // Activation rows interleaved per chunk of kMaxM: chunk j0 (mt rows) holds [cols][mt].
  // One row is its own interleaving: decode copies nothing.
  thread_local std::vector<float> xi_buf;
  if (m > 1) xi_buf.resize(static_cast<size_t>(m * cols));
  const float* xi = m == 1 ? x : xi_buf.data();
  for (int64_t j0 = 0; m > 1 && j0 < m; j0 += kMaxM) {
    const int64_t mt = std::min<int64_t>(kMaxM, m - j0);
    float* dst = xi_buf.data() + j0 * cols;
    for (int64_t j = 0; j < mt; ++j)
      for (int64_t k = 0; k < cols; ++k) dst[k * mt + j] = x[(j0 + j) * cols + k];
  }
  pool.ParallelRange(groups, 1, [&](int64_t gb, int64_t ge, int) {
    HWY_ALIGN float out[kMaxM * kFloatGroupRows];
    for (int64_t grp = gb; grp < ge; ++grp) {
      const WT* g = packed + grp * cols * kFloatGroupRows;
      const int64_t r0 = grp * kFloatGroupRows;
      const int64_t live = std::min(kFloatGroupRows, rows - r0);
      for (int64_t j0 = 0; j0 < m; j0 += kMaxM) {
        const int mt = static_cast<int>(std::min<int64_t>(kMaxM, m - j0));
        const float* xj = xi + j0 * cols;
        switch (mt) {
          case 1: FloatPackedTile<1>(g, cols, xj, out); break;
          case 2: FloatPackedTile<std::min(2, kMaxM)>(g, cols, xj, out); break;
          case 3: FloatPackedTile<std::min(3, kMaxM)>(g, cols, xj, out); break;
          case 4: FloatPackedTile<std::min(4, kMaxM)>(g, cols, xj, out); break;
          case 5: FloatPackedTile<std::min(5, kMaxM)>(g, cols, xj, out); break;
          case 6: FloatPackedTile<std::min(6, kMaxM)>(g, cols, xj, out); break;
          case 7: FloatPackedTile<std::min(7, kMaxM)>(g, cols, xj, out); break;
          default: FloatPackedTile<std::min(8, kMaxM)>(g, cols, xj, out); break;
        }
        for (int j = 0; j < mt; ++j)
          std::memcpy(y + (j0 + j) * rows + r0, out + j * kFloatGroupRows, static_cast<size_t>(live) * sizeof(float));
      }
    }
  });
}

inline void MatMulFloatImpl(const ops::WeightView& w, const float* x, int64_t m, float* y,
                            ThreadPool& pool) {
  switch (w.type) {
    case DType::kF32:
      if (w.packed) return MatMulFloatPacked(static_cast<const float*>(w.packed), w.rows, w.cols, x, m, y, pool);
      MatMulFloatTyped(static_cast<const float*>(w.data), w.rows, w.cols, x, m, y, pool);
      break;
    case DType::kF16:
      if (w.packed) return MatMulFloatPacked(static_cast<const hwy::float16_t*>(w.packed), w.rows, w.cols, x, m, y, pool);
      MatMulFloatTyped(static_cast<const hwy::float16_t*>(w.data), w.rows, w.cols, x, m, y, pool);
      break;
    case DType::kBF16:
      if (w.packed) return MatMulFloatPacked(static_cast<const hwy::bfloat16_t*>(w.packed), w.rows, w.cols, x, m, y, pool);
      MatMulFloatTyped(static_cast<const hwy::bfloat16_t*>(w.data), w.rows, w.cols, x, m, y, pool);
      break;
    default:
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
