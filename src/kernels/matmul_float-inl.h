// Per-target MatMul for float weights (F32, F16; BF16 in matmul_bf16-inl.h): Highway FMA loops.
//
// Packed layout (ops::PackWeights, the default at load): [group of 16 rows][cols][16], rows past
// the matrix zero. Lanes are weight rows, so each activation element is broadcast into one FMA
// with 16 rows' weights: no horizontal sums, and each output is one FMA chain over the columns in
// order, the same for every m (a verification block reproduces decode bitwise). With one row per
// vector (the row layout below) a verification block spends most of its time on horizontal sums.
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
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
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
// while m > 1 keeps the FMA ports busy. Past the end of a group the prefetch goes to the same
// offset kG groups on (the next tile's group): the group that follows in memory is one of this
// tile's, already being read. A longer distance without the wrap would, on a matrix of a few
// hundred columns, mostly prefetch lines already in flight.
inline constexpr int64_t kFloatPrefetchCols = 128;
// One prefetch per 64-byte line of a group's stream, not one per 128 bytes: the adjacent line of
// a 128-byte pair does not come with it on every CPU (on Zen 3 it does not), and half the stream
// would then arrive on demand.
template <typename WT>
inline constexpr int64_t kFloatPrefetchEvery = std::max<int64_t>(1, 64 / (kFloatGroupRows * sizeof(WT)));

// The software prefetch address `ahead` columns past column k of group q's stream in a tile of kG
// groups starting at g (group_stride elements apart, kFloatGroupRows per column): in the same
// stream, or past its end the same offset in group kG + q, the next tile's (which follows this
// tile's groups in memory; the group after q is this tile's own, already being read).
template <typename T>
HWY_INLINE const T* StreamAhead(const T* g, int q, int kG, int64_t group_stride, int64_t k, int64_t cols,
                                int64_t ahead) {
  const int64_t a = k + ahead;
  return a < cols ? g + q * group_stride + a * kFloatGroupRows
                  : g + (kG + q) * group_stride + (a - cols) * kFloatGroupRows;
}

// Writes the outputs of a tile of kG groups x kM activation rows: store16(q, j, dst) writes the 16
// sums of group q for row j to dst. Outputs go straight to y (row j at y + j * y_stride); only a
// matrix whose row count is not a multiple of 16 has a last group with rows past the end, which
// goes through a buffer.
template <int kM, int kG, class Store16>
HWY_INLINE void StoreTileOutputs(float* HWY_RESTRICT y, int64_t y_stride, int64_t live_last, const Store16& store16) {
  if (live_last == kFloatGroupRows) {
    for (int q = 0; q < kG; ++q)
      for (int j = 0; j < kM; ++j) store16(q, j, y + j * y_stride + q * kFloatGroupRows);
    return;
  }
  HWY_ALIGN float out[kFloatGroupRows];
  for (int q = 0; q < kG; ++q) {
    const int64_t live = q + 1 == kG ? live_last : kFloatGroupRows;
    for (int j = 0; j < kM; ++j) {
      store16(q, j, out);
      std::memcpy(y + j * y_stride + q * kFloatGroupRows, out, static_cast<size_t>(live) * sizeof(float));
    }
  }
}

// Writes the float accumulators of a tile (acc[q][j][v]: group q, activation row j, vector v of the
// group's 16 rows) through a buffer: with the accumulators themselves captured by a store lambda,
// GCC 12 kept half of the 2-row, 2-group tile's accumulators on the stack through the whole column
// loop on AVX2 (a load and a store per FMA), and m = 2 took longer than m = 4.
template <int kM, int kG, int kV, class DF, class V>
HWY_INLINE void StoreTileSums(DF df, const V (&acc)[kG][kM][kV], float* HWY_RESTRICT y, int64_t y_stride,
                              int64_t live_last) {
  constexpr int N = static_cast<int>(hn::MaxLanes(df));
  HWY_ALIGN float sums[kG][kM][kFloatGroupRows];
  for (int q = 0; q < kG; ++q)
    for (int j = 0; j < kM; ++j)
      for (int v = 0; v < kV; ++v) hn::Store(acc[q][j][v], df, sums[q][j] + v * N);
  StoreTileOutputs<kM, kG>(y, y_stride, live_last, [&](int q, int j, float* dst) {
    std::memcpy(dst, sums[q][j], sizeof(sums[q][j]));
  });
}

// Calls fn(std::integral_constant<int, kM>()) for a chunk of mt activation rows, kM = min(mt, kMaxM):
// the row count is a template argument of the tiles (their accumulators live in registers).
template <int kMaxM, class Fn>
HWY_INLINE void WithRowChunk(int mt, const Fn& fn) {
  switch (mt) {
    case 1: return fn(std::integral_constant<int, 1>());
    case 2: return fn(std::integral_constant<int, std::min(2, kMaxM)>());
    case 3: return fn(std::integral_constant<int, std::min(3, kMaxM)>());
    case 4: return fn(std::integral_constant<int, std::min(4, kMaxM)>());
    case 5: return fn(std::integral_constant<int, std::min(5, kMaxM)>());
    case 6: return fn(std::integral_constant<int, std::min(6, kMaxM)>());
    case 7: return fn(std::integral_constant<int, std::min(7, kMaxM)>());
    case 8: return fn(std::integral_constant<int, std::min(8, kMaxM)>());
    case 9: return fn(std::integral_constant<int, std::min(9, kMaxM)>());
    case 10: return fn(std::integral_constant<int, std::min(10, kMaxM)>());
    case 11: return fn(std::integral_constant<int, std::min(11, kMaxM)>());
    case 12: return fn(std::integral_constant<int, std::min(12, kMaxM)>());
    case 13: return fn(std::integral_constant<int, std::min(13, kMaxM)>());
    case 14: return fn(std::integral_constant<int, std::min(14, kMaxM)>());
    case 15: return fn(std::integral_constant<int, std::min(15, kMaxM)>());
    default: return fn(std::integral_constant<int, std::min(16, kMaxM)>());
  }
}

// Groups per tile for kM activation rows: enough independent FMA chains to hide FMA latency (8:
// latency 4 x two ports) and, with 32 registers, 16-24 accumulators so that each weight vector and
// each broadcast feeds several FMAs (kM = 8 with one group needs 9 loads per 8 FMAs and was
// load-bound), without spilling accumulators, weight vectors and the broadcast out of the registers.
// per_group_loads: the weight vectors of one group are live at a time (FloatPerGroupLoads below).
template <class DF>
constexpr int FloatTileGroups(int kM, bool per_group_loads) {
  constexpr int N = static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kV = std::max(1, static_cast<int>(kFloatGroupRows) / N);
  constexpr int kRegs = N * sizeof(float) >= 64 ? 32 : 16;
  constexpr int kChains = kRegs == 32 ? 16 : 8;
  int g = std::min(4, std::max(1, (kChains + kM * kV - 1) / (kM * kV)));
  while (g > 1 && kM * kV * g + kV * (per_group_loads ? 1 : g) + 1 > kRegs) --g;
  return g;
}

// Whether a tile of kM rows loads one group's weights at a time, re-reading the broadcasts per
// group, instead of every group's before the FMAs: where that allows more groups. On AVX2 (16
// registers) it does for 3 rows: the weights of two groups left no room for their accumulators, and
// one group (6 FMA chains, short of the 8 that hide FMA latency) made a 3-row pass cost as much as a
// 4-row one. For 1 and 2 rows the shared broadcasts are worth more (per-group loads are slower
// there); with 32 registers every group's weights fit.
template <class DF>
constexpr bool FloatPerGroupLoads(int kM) {
  return kM >= 2 && FloatTileGroups<DF>(kM, true) > FloatTileGroups<DF>(kM, false);
}

// out[g][j][l] = Σ_k packed_g[k][l] · xi[k][j] for kM activation rows and the 16 rows of each of kG
// consecutive groups; xi holds the rows interleaved ([cols][kM]) so every broadcast is [one pointer +
// constant]: with one pointer per row the indexed broadcasts unlaminate into two uops each. Every
// output is still one FMA chain over the columns in order, whatever kM and kG are; several groups
// only give the FMA units independent chains to overlap when there are few activation rows (one row
// of one group is a single chain bound by FMA latency).
// Software prefetch: kFloatPrefetchCols columns ahead in each group's stream, for any kM. Farther
// prefetches for several rows (the same place in the next tile, or the whole next block of groups
// from the first chunk of rows) would put a tile or more of lines into L1 ahead of use: 12-32 KB
// per group for the bundled target's 384- and 1024-column matrices, against a 32 KB L1 that also
// holds the interleaved activations, so lines would be evicted before they are read.
template <int kM, int kG, typename WT>
HWY_NOINLINE void FloatPackedTile(const WT* HWY_RESTRICT g, int64_t cols, const float* HWY_RESTRICT xi,
                                  float* HWY_RESTRICT y, int64_t y_stride, int64_t live_last) {
  const hn::ScalableTag<float> df;
  constexpr int N = static_cast<int>(hn::MaxLanes(df));
  constexpr int kV = static_cast<int>(kFloatGroupRows) / N;
  const int64_t group_stride = cols * kFloatGroupRows;
  hn::Vec<decltype(df)> acc[kG][kM][kV];
  for (int q = 0; q < kG; ++q)
    for (int j = 0; j < kM; ++j)
      for (int v = 0; v < kV; ++v) acc[q][j][v] = hn::Zero(df);
  for (int64_t k = 0; k < cols; ++k) {
    const float* xk = xi + k * kM;
    hn::Vec<decltype(df)> wv[kG][kV];
    for (int q = 0; q < kG; ++q) {
      const WT* wk = g + q * group_stride + k * kFloatGroupRows;
      if (k % kFloatPrefetchEvery<WT> == 0)
        __builtin_prefetch(StreamAhead(g, q, kG, group_stride, k, cols, kFloatPrefetchCols));
      for (int v = 0; v < kV; ++v) wv[q][v] = LoadWeights(df, wk + v * N);
      if constexpr (FloatPerGroupLoads<decltype(df)>(kM)) {
        // The same broadcasts for every group: hidden from the compiler's common-subexpression
        // pass, which otherwise keeps them all live across the groups (3 rows x 2 groups: 17
        // registers, one accumulator on the stack).
        const float* xq = xk;
        asm("" : "+r"(xq));
        for (int j = 0; j < kM; ++j) {
          const auto xb = hn::Set(df, xq[j]);
          for (int v = 0; v < kV; ++v) acc[q][j][v] = hn::MulAdd(wv[q][v], xb, acc[q][j][v]);
        }
      }
    }
    if constexpr (FloatPerGroupLoads<decltype(df)>(kM)) continue;
    for (int j = 0; j < kM; ++j) {
      const auto xb = hn::Set(df, xk[j]);
      for (int q = 0; q < kG; ++q)
        for (int v = 0; v < kV; ++v) acc[q][j][v] = hn::MulAdd(wv[q][v], xb, acc[q][j][v]);
    }
  }
  StoreTileSums<kM, kG, kV>(df, acc, y, y_stride, live_last);
}

// Calls tile(std::integral_constant<int, kTileG>(), grp, r0, live_last) for the tiles that cover
// groups [gb, ge) of a chunk of kM activation rows: kG groups per tile (FloatTileGroups), then
// one at a time. r0: the tile's first weight row; live_last: rows of its last group inside the matrix.
template <int kM, int kG, class Tile>
HWY_INLINE void ForEachGroupTile(int64_t rows, int64_t gb, int64_t ge, const Tile& tile) {
  const auto run = [&](auto groups_tag, int64_t grp) {
    constexpr int kTileG = decltype(groups_tag)::value;
    const int64_t r0 = grp * kFloatGroupRows;
    tile(groups_tag, grp, r0, std::min(kFloatGroupRows, rows - (r0 + (kTileG - 1) * kFloatGroupRows)));
  };
  int64_t grp = gb;
  for (; kG > 1 && grp + kG <= ge; grp += kG) run(std::integral_constant<int, kG>(), grp);
  for (; grp < ge; ++grp) run(std::integral_constant<int, 1>(), grp);
}

// Groups [gb, ge) for one chunk of mt == kM activation rows starting at row j0.
template <int kM, typename WT>
HWY_INLINE void FloatPackedGroups(const WT* packed, int64_t rows, int64_t cols, int64_t gb, int64_t ge,
                                  const float* xj, int64_t j0, float* y) {
  using DF = hn::ScalableTag<float>;
  constexpr int kG = FloatTileGroups<DF>(kM, FloatPerGroupLoads<DF>(kM));
  ForEachGroupTile<kM, kG>(rows, gb, ge, [&](auto groups_tag, int64_t grp, int64_t r0, int64_t live_last) {
    FloatPackedTile<kM, decltype(groups_tag)::value>(packed + grp * cols * kFloatGroupRows, cols, xj,
                                                     y + j0 * rows + r0, rows, live_last);
  });
}

// Activation rows per pass over packed float weights: as many as the registers hold accumulators
// for (kM x 16 / N, plus the weight vectors and a broadcast), up to 16. A verification block of 9
// rows is then one pass, not 8 + 1 or 5 + 4: at this size a pass is bound by reading the weights
// (from L3 for the bundled target), so a second pass cost as much as the first.
template <class DF>
constexpr int FloatPackedMaxRows() {
  constexpr int N = static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kV = std::max(1, static_cast<int>(kFloatGroupRows) / N);
  constexpr int kRegs = N * sizeof(float) >= 64 ? 32 : 16;
  return std::clamp((kRegs - kV - 1) / kV, 1, 16);
}

// Activation rows interleaved per chunk of `chunk` rows, so that a tile's broadcasts are [one
// pointer + constant]: chunk j0 (mt rows) of the result holds x's rows j0.. as [cols][mt].
template <typename T>
const T* InterleaveRowChunks(const T* x, int64_t m, int64_t cols, int64_t chunk, std::vector<T>& buf) {
  buf.resize(static_cast<size_t>(m * cols));
  for (int64_t j0 = 0; j0 < m; j0 += chunk) {
    const int64_t mt = std::min(chunk, m - j0);
    T* dst = buf.data() + j0 * cols;
    for (int64_t j = 0; j < mt; ++j)
      for (int64_t k = 0; k < cols; ++k) dst[k * mt + j] = x[(j0 + j) * cols + k];
  }
  return buf.data();
}

// Activation rows per chunk for m rows and at most kMaxM per pass: near-equal chunks (9 rows =
// 5 + 4, not 8 + 1: a lone row is the slowest tile).
inline int64_t PackedRowChunk(int64_t m, int64_t max_m) {
  const int64_t n_chunks = (m + max_m - 1) / max_m;
  return (m + n_chunks - 1) / n_chunks;
}

// Runs run(gb, ge, j0, mt) over every block of row groups [gb, ge) and chunk of activation rows
// [j0, j0 + mt) of a packed matrix. Threads take ranges of at least 4 groups, the widest tile (one
// range each for few rows: kernels::MatMulGrain). Groups are visited in blocks of 12 (a multiple
// of every tile width) and every chunk of rows runs over a block before the next: the block's
// weights stay in L2 across the chunks of a long prefill.
inline constexpr int64_t kPackedBlockGroups = 12;
template <class Run>
void ForPackedGroupBlocks(int64_t groups, int64_t m, int64_t chunk, ThreadPool& pool, const Run& run) {
  pool.ParallelRange(groups, kernels::MatMulGrain(groups, 4, 4, m, pool), [&](int64_t range_begin,
                                                                             int64_t range_end, int) {
    for (int64_t gb = range_begin; gb < range_end; gb += kPackedBlockGroups)
      for (int64_t j0 = 0, ge = std::min(range_end, gb + kPackedBlockGroups); j0 < m; j0 += chunk)
        run(gb, ge, j0, static_cast<int>(std::min(chunk, m - j0)));
  });
}

template <typename WT>
void MatMulFloatPacked(const WT* packed, int64_t rows, int64_t cols, const float* x, int64_t m, float* y,
                       ThreadPool& pool) {
  constexpr int kMaxM = FloatPackedMaxRows<hn::ScalableTag<float>>();
  const int64_t groups = (rows + kFloatGroupRows - 1) / kFloatGroupRows;
  const int64_t chunk = PackedRowChunk(m, kMaxM);
  // One row is its own interleaving: decode copies nothing.
  thread_local std::vector<float> xi_buf;
  const float* xi = m == 1 ? x : InterleaveRowChunks(x, m, cols, chunk, xi_buf);
  ForPackedGroupBlocks(groups, m, chunk, pool, [&](int64_t gb, int64_t ge, int64_t j0, int mt) {
    const float* xj = xi + j0 * cols;
    WithRowChunk<kMaxM>(mt, [&](auto rows_tag) {
      FloatPackedGroups<decltype(rows_tag)::value>(packed, rows, cols, gb, ge, xj, j0, y);
    });
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
    default:
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
