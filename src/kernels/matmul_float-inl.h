// Per-target MatMul for float weights (F32, F16, BF16): Highway FMA loops. Each weight vector is
// loaded (and widened to f32) once per tile of up to 8 activation rows and multiplied into all
// of them, so small m costs about one pass over the weights.
#if defined(DSPARK_KERNELS_MATMUL_FLOAT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_FLOAT_INL_H_
#undef DSPARK_KERNELS_MATMUL_FLOAT_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_FLOAT_INL_H_
#endif

#include <algorithm>
#include <cstdint>

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

inline void MatMulFloatImpl(const ops::WeightView& w, const float* x, int64_t m, float* y,
                            ThreadPool& pool) {
  switch (w.type) {
    case DType::kF32:
      MatMulFloatTyped(static_cast<const float*>(w.data), w.rows, w.cols, x, m, y, pool);
      break;
    case DType::kF16:
      MatMulFloatTyped(static_cast<const hwy::float16_t*>(w.data), w.rows, w.cols, x, m, y, pool);
      break;
    case DType::kBF16:
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
