// Per-target driver of MatMul for quantised weights: quantises the activations once per call
// (Q8_0 or Q8_K, as ggml pairs them), lays them out for the kernel, then splits the weight rows
// over the pool. Each task decodes its weight rows once (matmul_decode-inl.h) and applies them to
// every activation row while the decoded bytes sit in L1.
//
// Kernel choice (per target, per call):
//   m < kLanesMinM: row-dot kernels, one pass over the decoded row per activation row
//     (AVX3_DL: DotNaturalVnni; others: DotNaturalGeneric, Highway int16).
//   m >= kLanesMinM: lane-tile kernels, activation rows in vector lanes and weights broadcast,
//     so a weight byte costs the same for 1..16 rows (AVX3_DL: LanesTileVnni, 16 rows;
//     SSE4/AVX2/AVX3: LanesTile16, 4/8/16 rows; other architectures: row-dot).
//   Large m loops over 16-row activation tiles inside each decoded weight tile (prefill).
// Scratch: activations in the caller's thread_local buffer, decoded weights in each worker's;
// both grow only, so steady-state calls do not allocate. Safe to call concurrently from
// different threads (each with its own pool).
#if defined(DSPARK_KERNELS_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_QUANT_INL_H_
#undef DSPARK_KERNELS_MATMUL_QUANT_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_QUANT_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/elementwise-inl.h"
#include "kernels/matmul_act-inl.h"
#include "kernels/matmul_decode-inl.h"
#include "kernels/matmul_lanes16-inl.h"
#include "kernels/matmul_vnni-inl.h"
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Activation rows per lane tile: one int32 lane per row in a 512-bit vector.
inline constexpr int64_t kTileRows = 16;
// From this m on, the lane-tile kernel (cost independent of m up to 16, ~12 vector ops per
// weight row and 32 columns) beats running the row-dot kernel (~2.5 ops per row, 32 columns and
// activation row) m times; bench/kernels/matmul_bench.cc MatMulHot shows the crossover.
inline constexpr int64_t kLanesMinM = 3;
// Weight rows decoded and applied together by the lane-tile kernel.
inline constexpr int kRowTile = 8;
// Software prefetch of the next row tile inside the row-dot kernel.
inline constexpr bool kNaturalPrefetch = false;
inline constexpr bool kLanesPrefetch = true;

// Quantised activations of one MatMul call, in the layouts the kernels read.
struct QuantActs {
  int64_t m = 0, cols = 0, cols_pad = 0, nsub = 0;
  int sub = 32;
  int8_t* q = nullptr;   // [m][cols_pad] (pad = 0)
  float* da = nullptr;   // [m][nsub] activation scale of each weight sub-block
  float* asum = nullptr; // [m][nsub] da * Σ q over the sub-block
  // Row-dot (natural) layout extras, VNNI only.
  int32_t* corr = nullptr;   // [m][cols_pad / 4] -128 * (sum of each dword of q)
  // Lane tiles of tile_rows activation rows (16 for VNNI, int32 lanes for the int16 kernel).
  int64_t tiles = 0, tile_rows = 0;
  int8_t* tq = nullptr;       // VNNI: [tiles][cols_pad / 4][16][4]; int16: [tiles][cols_pad / 2][N][2]
  int32_t* tcorr = nullptr;   // [tiles][nsub][16], VNNI only
  float* tda = nullptr;       // [tiles][nsub][tile_rows]
  float* tasum = nullptr;     // [tiles][nsub][tile_rows]
};

// Quantises row x[cols] to the canonical form (bytes + per-sub-block scale and scaled sum).
inline void QuantizeActRow(const float* x, const QuantActs& qa, bool k_quant, int64_t j) {
  int8_t* q = qa.q + j * qa.cols_pad;
  float* da = qa.da + j * qa.nsub;
  float* asum = qa.asum + j * qa.nsub;
  if (!k_quant) {
    QuantizeActQ8_0(x, qa.cols, q, da, asum);
  } else {
    QuantizeActQ8_K(x, qa.cols, qa.sub, q, da, asum);
  }
  std::memset(q + qa.cols, 0, qa.cols_pad - qa.cols);
  for (int64_t s = qa.cols / qa.sub; s < qa.nsub; ++s) da[s] = asum[s] = 0.f;
}

// Test hook: the canonical activation form this target computes for one row.
inline void QuantizeActForTest(bool k_quant, int sub, const float* x, int64_t cols, int8_t* q,
                               float* da, float* asum) {
  if (!k_quant) {
    QuantizeActQ8_0(x, cols, q, da, asum);
  } else {
    QuantizeActQ8_K(x, cols, sub, q, da, asum);
  }
}

inline void BuildNaturalExtras(const QuantActs& qa, int64_t j) {
  const int8_t* q = qa.q + j * qa.cols_pad;
  int32_t* corr = qa.corr + j * (qa.cols_pad / 4);
  for (int64_t g = 0; g < qa.cols_pad / 4; ++g)
    corr[g] = -128 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
}

// Interleaves rows [L*t, L*t+L) of the canonical form into tile t (L = tile_rows, 16 or 8;
// missing rows are zeros).
inline void BuildTile(const QuantActs& qa, int64_t t) {
  const int64_t L = qa.tile_rows, groups = qa.cols_pad / 4;
  int8_t* tq = qa.tq + t * groups * 4 * L;
  int32_t* tc = qa.tcorr + t * qa.nsub * L;
  float* td = qa.tda + t * qa.nsub * L;
  float* ts = qa.tasum + t * qa.nsub * L;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t j = t * L + l;
    if (j >= qa.m) {
      for (int64_t g = 0; g < groups; ++g) std::memset(tq + (g * L + l) * 4, 0, 4);
      for (int64_t s = 0; s < qa.nsub; ++s) {
        tc[L * s + l] = 0;
        td[L * s + l] = ts[L * s + l] = 0.f;
      }
      continue;
    }
    const int8_t* q = qa.q + j * qa.cols_pad;
    for (int64_t g = 0; g < groups; ++g) std::memcpy(tq + (g * L + l) * 4, q + 4 * g, 4);
    for (int64_t s = 0; s < qa.nsub; ++s) {
      int sum = 0;
      for (int k = 0; k < qa.sub; ++k) sum += q[s * qa.sub + k];
      tc[L * s + l] = -128 * sum;
      td[L * s + l] = qa.da[j * qa.nsub + s];
      ts[L * s + l] = qa.asum[j * qa.nsub + s];
    }
  }
}

// int16 form of tile t for the non-VNNI lane kernel: pairs of columns, tile_rows lanes.
inline void BuildTile16(const QuantActs& qa, int64_t t) {
  const int64_t N = qa.tile_rows, pairs = qa.cols_pad / 2;
  int16_t* a = reinterpret_cast<int16_t*>(qa.tq) + t * pairs * N * 2;
  float* td = qa.tda + t * qa.nsub * N;
  float* ts = qa.tasum + t * qa.nsub * N;
  for (int64_t l = 0; l < N; ++l) {
    const int64_t j = t * N + l;
    const bool live = j < qa.m;
    const int8_t* q = qa.q + (live ? j : 0) * qa.cols_pad;
    for (int64_t p = 0; p < pairs; ++p) {
      a[(p * N + l) * 2] = live ? q[2 * p] : 0;
      a[(p * N + l) * 2 + 1] = live ? q[2 * p + 1] : 0;
    }
    for (int64_t s = 0; s < qa.nsub; ++s) {
      td[s * N + l] = live ? qa.da[j * qa.nsub + s] : 0.f;
      ts[s * N + l] = live ? qa.asum[j * qa.nsub + s] : 0.f;
    }
  }
}

// Generic Highway row dot: Σ_s dsc[s]·da[s]·Σ_{i in s} q_i·a_i, in int16 x int16 -> int32.
// CappedTag keeps one vector within a sub-block (>= 16 elements) on every target.
inline float DotNaturalGeneric(const uint8_t* HWY_RESTRICT u, const float* HWY_RESTRICT dsc,
                               const int8_t* HWY_RESTRICT a, const float* HWY_RESTRICT da,
                               int64_t nsub, int sub) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Repartition<float, decltype(d16)> df;
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::Rebind<int8_t, decltype(d16)> di8;
  const int64_t N = hn::Lanes(d16);
  const auto k128 = hn::Set(d16, 128);
  auto facc = hn::Zero(df);
  for (int64_t s = 0; s < nsub; ++s) {
    auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
    for (int64_t k = s * sub; k < (s + 1) * sub; k += N) {
      const auto w = hn::Sub(hn::PromoteTo(d16, hn::LoadU(du8, u + k)), k128);
      const auto av = hn::PromoteTo(d16, hn::LoadU(di8, a + k));
      sum0 = hn::ReorderWidenMulAccumulate(d32, w, av, sum0, sum1);
    }
    const auto isum = hn::ConvertTo(df, hn::Add(sum0, sum1));
    facc = hn::MulAdd(isum, hn::Set(df, dsc[s] * da[s]), facc);
  }
  return hn::GetLane(hn::SumOfLanes(df, facc));
}

// Decode buffers of one worker thread: kRowTile rows in plain layout (row-dot kernels) and one
// tile in the interleaved layout of the lane-tile kernel.
struct DecodeBuffers {
  uint8_t* u[kRowTile];
  float* dsc[kRowTile];
  float* msc[kRowTile];
  uint8_t* ut;  // [nsub][kRowTile][sub]
  float* dt;    // [nsub][kRowTile]
  float* mt;    // [nsub][kRowTile]
  int16_t* wt;  // [nsub][kRowTile][sub] ut widened to int16 (non-VNNI lane kernel)
};

inline DecodeBuffers GetDecodeBuffers(int64_t cols_pad, int64_t nsub, int64_t cols, int sub) {
  thread_local kernels::ScratchBuffer buf;
  const size_t u_bytes = cols_pad, f_bytes = kernels::RoundUp(nsub * sizeof(float), 64);
  const size_t per_row = u_bytes + 2 * f_bytes;
  auto* base = static_cast<uint8_t*>(buf.Get(2 * kRowTile * per_row + 2 * kRowTile * u_bytes));
  DecodeBuffers b;
  const int64_t full = cols / sub;  // sub-blocks the decoders write; the rest is padding
  for (int r = 0; r < kRowTile; ++r) {
    uint8_t* p = base + r * per_row;
    b.u[r] = p;
    b.dsc[r] = reinterpret_cast<float*>(p + u_bytes);
    b.msc[r] = reinterpret_cast<float*>(p + u_bytes + f_bytes);
    // Padding decodes as q = 0 with zero scales.
    std::memset(b.u[r] + cols, 128, cols_pad - cols);
    for (int64_t s = full; s < nsub; ++s) b.dsc[r][s] = b.msc[r][s] = 0.f;
  }
  uint8_t* t = base + kRowTile * per_row;
  b.ut = t;
  b.dt = reinterpret_cast<float*>(t + kRowTile * u_bytes);
  b.mt = reinterpret_cast<float*>(t + kRowTile * (u_bytes + f_bytes));
  b.wt = reinterpret_cast<int16_t*>(base + 2 * kRowTile * per_row);
  std::memset(b.ut + full * kRowTile * sub, 128, (nsub - full) * kRowTile * sub);
  for (int64_t i = full * kRowTile; i < nsub * kRowTile; ++i) b.dt[i] = b.mt[i] = 0.f;
  return b;
}

inline void MatMulQuantImpl(const ops::WeightView& w, const float* x, int64_t m, float* y,
                            ThreadPool& pool) {
  const QuantTraits tt = TraitsOf(w.type);
  const int64_t cols = w.cols, rows = w.rows;
  const size_t row_bytes = RowBytes(w.type, cols);
  const bool use_lanes = (DSPARK_HAVE_VNNI || DSPARK_HAVE_LANES16) && m >= kLanesMinM;
  const bool use_natural_vnni = DSPARK_HAVE_VNNI && !use_lanes;

  // ---- activations (caller thread's scratch; workers only read it)
  thread_local kernels::ScratchBuffer act_buf;
  QuantActs qa;
  qa.m = m;
  qa.cols = cols;
  qa.cols_pad = kernels::RoundUp(cols, 64);
  qa.sub = tt.sub;
  qa.nsub = qa.cols_pad / tt.sub;
#if DSPARK_HAVE_VNNI
  qa.tile_rows = m <= 8 ? 8 : kTileRows;  // ymm tiles for up to 8 rows
  const size_t tq_elem = 1;
#elif DSPARK_HAVE_LANES16
  qa.tile_rows = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<int32_t>()));
  const size_t tq_elem = 2;
#else
  qa.tile_rows = 1;
  const size_t tq_elem = 1;
#endif
  qa.tiles = use_lanes ? (m + qa.tile_rows - 1) / qa.tile_rows : 0;
  {
    const size_t q_bytes = kernels::RoundUp(m * qa.cols_pad, 64);
    const size_t s_bytes = kernels::RoundUp(m * qa.nsub * sizeof(float), 64);
    const size_t lane_bytes = use_natural_vnni ? kernels::RoundUp(m * qa.cols_pad, 64) : 0;  // corr
    const size_t tq_bytes = qa.tiles * qa.cols_pad * qa.tile_rows * tq_elem;
    const size_t ts_bytes = kernels::RoundUp(qa.tiles * qa.nsub * qa.tile_rows * 4, 64);
    auto* p = static_cast<uint8_t*>(
        act_buf.Get(q_bytes + 2 * s_bytes + lane_bytes + tq_bytes + 3 * ts_bytes));
    qa.q = reinterpret_cast<int8_t*>(p);
    p += q_bytes;
    qa.da = reinterpret_cast<float*>(p);
    p += s_bytes;
    qa.asum = reinterpret_cast<float*>(p);
    p += s_bytes;
    qa.corr = reinterpret_cast<int32_t*>(p);
    p += lane_bytes;
    qa.tq = reinterpret_cast<int8_t*>(p);
    p += tq_bytes;
    qa.tcorr = reinterpret_cast<int32_t*>(p);
    p += ts_bytes;
    qa.tda = reinterpret_cast<float*>(p);
    p += ts_bytes;
    qa.tasum = reinterpret_cast<float*>(p);
  }
  if (use_lanes) {
    pool.ParallelFor(qa.tiles, [&](int64_t t, int) {
      for (int64_t j = t * qa.tile_rows; j < std::min(m, (t + 1) * qa.tile_rows); ++j)
        QuantizeActRow(x + j * cols, qa, tt.k_quant, j);
      if (DSPARK_HAVE_VNNI) {
        BuildTile(qa, t);
      } else {
        BuildTile16(qa, t);
      }
    });
  } else {
    for (int64_t j = 0; j < m; ++j) {
      QuantizeActRow(x + j * cols, qa, tt.k_quant, j);
      if (use_natural_vnni) BuildNaturalExtras(qa, j);
    }
  }

  // ---- weight rows over threads, kRowTile rows per task
  const int64_t row_tiles = (rows + kRowTile - 1) / kRowTile;
  pool.ParallelRange(row_tiles, 1, [&](int64_t tb, int64_t te, int) {
    DecodeBuffers db = GetDecodeBuffers(qa.cols_pad, qa.nsub, cols, tt.sub);
    for (int64_t rt = tb; rt < te; ++rt) {
      const int64_t r0 = rt * kRowTile;
      const int nr = static_cast<int>(std::min<int64_t>(kRowTile, rows - r0));
#if DSPARK_HAVE_VNNI
      if (!use_lanes && (w.type == DType::kQ4_0 || w.type == DType::kQ4_1 || w.type == DType::kQ5_0 ||
                         w.type == DType::kQ5_1 || w.type == DType::kQ8_0)) {
        // Fused row dot for the 32-element types, activation rows in pairs.
        for (int r = 0; r < nr; ++r) {
          const auto* row = static_cast<const uint8_t*>(w.data) + (r0 + r) * row_bytes;
          for (int64_t j = 0; j < m; j += 2) {
            const int8_t* a[2] = {qa.q + j * qa.cols_pad, qa.q + (j + 1) * qa.cols_pad};
            const float* da[2] = {qa.da + j * qa.nsub, qa.da + (j + 1) * qa.nsub};
            const float* as[2] = {qa.asum + j * qa.nsub, qa.asum + (j + 1) * qa.nsub};
            const int32_t* cr[2] = {qa.corr + j * (qa.cols_pad / 4), qa.corr + (j + 1) * (qa.cols_pad / 4)};
            float out[2];
            const bool two = j + 1 < m;
            const int64_t nb = cols / 32;
            // Block type, fifth bits, min, and offset of the signed types.
            const auto dot = [&](auto* blk_type, auto q5, auto has_min, auto offset) {
              using Block = std::remove_pointer_t<decltype(blk_type)>;
              const auto* blk = reinterpret_cast<const Block*>(row);
              constexpr bool kQ5 = decltype(q5)::value, kMin = decltype(has_min)::value;
              constexpr int kOff = decltype(offset)::value;
              if (two) {
                DotQ32Vnni<Block, kQ5, kMin, kOff, 2>(blk, nb, a, cr, da, as, out);
              } else {
                DotQ32Vnni<Block, kQ5, kMin, kOff, 1>(blk, nb, a, cr, da, as, out);
              }
            };
            using T = std::true_type;
            using F = std::false_type;
            switch (w.type) {
              case DType::kQ4_0:
                dot(static_cast<BlockQ4_0*>(nullptr), F(), F(), std::integral_constant<int, 8>());
                break;
              case DType::kQ4_1:
                dot(static_cast<BlockQ4_1*>(nullptr), F(), T(), std::integral_constant<int, 0>());
                break;
              case DType::kQ5_0:
                dot(static_cast<BlockQ5_0*>(nullptr), T(), F(), std::integral_constant<int, 16>());
                break;
              case DType::kQ8_0:  // q + 128 is unsigned; the 128 comes off in the accumulator
                dot(static_cast<BlockQ8_0*>(nullptr), F(), F(), std::integral_constant<int, 128>());
                break;
              default:
                dot(static_cast<BlockQ5_1*>(nullptr), T(), T(), std::integral_constant<int, 0>());
                break;
            }
            y[j * rows + r0 + r] = out[0];
            if (two) y[(j + 1) * rows + r0 + r] = out[1];
          }
        }
        continue;
      }
      if (!use_lanes && (w.type == DType::kQ4_K || w.type == DType::kQ5_K)) {
        // Fused row dot, no decode pass; activation rows in pairs so each unpack serves two.
        for (int r = 0; r < nr; ++r) {
          const auto* row = static_cast<const uint8_t*>(w.data) + (r0 + r) * row_bytes;
          for (int64_t j = 0; j < m; j += 2) {
            const int8_t* a[2] = {qa.q + j * qa.cols_pad, qa.q + (j + 1) * qa.cols_pad};
            const float* da[2] = {qa.da + j * qa.nsub, qa.da + (j + 1) * qa.nsub};
            const float* as[2] = {qa.asum + j * qa.nsub, qa.asum + (j + 1) * qa.nsub};
            float out[2];
            const bool two = j + 1 < m;
            if (w.type == DType::kQ4_K) {
              const auto* blk = reinterpret_cast<const BlockQ4_K*>(row);
              if (two) DotKVnni<BlockQ4_K, 2>(blk, cols / 256, a, da, as, out);
              else DotKVnni<BlockQ4_K, 1>(blk, cols / 256, a, da, as, out);
            } else {
              const auto* blk = reinterpret_cast<const BlockQ5_K*>(row);
              if (two) DotKVnni<BlockQ5_K, 2>(blk, cols / 256, a, da, as, out);
              else DotKVnni<BlockQ5_K, 1>(blk, cols / 256, a, da, as, out);
            }
            y[j * rows + r0 + r] = out[0];
            if (two) y[(j + 1) * rows + r0 + r] = out[1];
          }
        }
        continue;
      }
#endif
      for (int r = 0; r < nr; ++r) {
        const void* row = static_cast<const uint8_t*>(w.data) + (r0 + r) * row_bytes;
        const DecodedRow plain{db.u[r], db.dsc[r], db.msc[r], tt.sub, 1};
        const DecodedRow tiled{db.ut + r * tt.sub, db.dt + r, db.mt + r, kRowTile * tt.sub, kRowTile};
        tt.decode(row, cols, use_lanes ? tiled : plain);
      }
      // The next row tile, prefetched while this one computes.
      [[maybe_unused]] const uint8_t* pf =
          r0 + nr < rows ? static_cast<const uint8_t*>(w.data) + (r0 + nr) * row_bytes : nullptr;
      [[maybe_unused]] const int64_t pf_bytes =
          pf ? std::min<int64_t>(kRowTile, rows - r0 - nr) * static_cast<int64_t>(row_bytes) : 0;
#if DSPARK_HAVE_VNNI
      if (use_lanes) {
        const int64_t L = qa.tile_rows;
        HWY_ALIGN float out[kRowTile * kTileRows];
        for (int64_t t = 0; t < qa.tiles; ++t) {
          const ActTileView at{qa.tq + t * qa.cols_pad * L, qa.tcorr + t * qa.nsub * L,
                               qa.tda + t * qa.nsub * L, qa.tasum + t * qa.nsub * L};
          const int64_t mt = std::min(L, m - t * L);
          int r = 0;
          const auto run = [&](auto r_tag, auto lanes_tag) {
            constexpr int kR = decltype(r_tag)::value;
            constexpr int kL = decltype(lanes_tag)::value;
            // Prefetch once per row tile (during the first activation tile).
            const uint8_t* tpf = (kLanesPrefetch && t == 0 && r == 0) ? pf : nullptr;
            const uint8_t* ut = db.ut + r * tt.sub;
            // K-quants (Q8_K activations: one da per 256) use the grouped-da form.
            if (tt.sub == 16) {
              LanesTileVnni<kL, kR, kRowTile, 16, false, 16>(ut, db.dt + r, db.mt + r, at, qa.nsub, out, tpf, pf_bytes);
            } else if (tt.k_quant) {
              LanesTileVnni<kL, kR, kRowTile, 32, true, 8>(ut, db.dt + r, db.mt + r, at, qa.nsub, out, tpf, pf_bytes);
            } else if (tt.has_min) {
              LanesTileVnni<kL, kR, kRowTile, 32, true, 1>(ut, db.dt + r, db.mt + r, at, qa.nsub, out, tpf, pf_bytes);
            } else {
              LanesTileVnni<kL, kR, kRowTile, 32, false, 1>(ut, db.dt + r, db.mt + r, at, qa.nsub, out, tpf, pf_bytes);
            }
            // Transpose to y's layout: one contiguous kR-float store per activation row.
            for (int64_t l = 0; l < mt; ++l) {
              float* yl = y + (t * L + l) * rows + r0 + r;
              for (int rr = 0; rr < kR; ++rr) yl[rr] = out[rr * kL + l];
            }
            r += kR;
          };
          using R8 = std::integral_constant<int, kRowTile>;
          using R1 = std::integral_constant<int, 1>;
          if (L == 8) {
            using L8 = std::integral_constant<int, 8>;
            if (nr == kRowTile) run(R8(), L8());
            while (r < nr) run(R1(), L8());
          } else {
            using L16 = std::integral_constant<int, 16>;
            if (nr == kRowTile) run(R8(), L16());
            while (r < nr) run(R1(), L16());
          }
        }
        continue;
      }
#elif DSPARK_HAVE_LANES16
      if (use_lanes) {
        const int64_t N = qa.tile_rows;
        WidenTile(db.ut, qa.nsub * kRowTile * tt.sub, db.wt);
        HWY_ALIGN float out[kLanes16Rows * 16];
        for (int64_t t = 0; t < qa.tiles; ++t) {
          const Tile16View at{reinterpret_cast<const int16_t*>(qa.tq) + t * qa.cols_pad * N,
                              qa.tda + t * qa.nsub * N, qa.tasum + t * qa.nsub * N};
          const int64_t mt = std::min(N, m - t * N);
          int r = 0;
          const auto run = [&](auto r_tag) {
            constexpr int kR = decltype(r_tag)::value;
            const int16_t* wt = db.wt + r * tt.sub;
            if (tt.sub == 16) {
              LanesTile16<kR, kRowTile, 16, false>(wt, db.dt + r, db.mt + r, at, qa.nsub, out);
            } else if (tt.has_min) {
              LanesTile16<kR, kRowTile, 32, true>(wt, db.dt + r, db.mt + r, at, qa.nsub, out);
            } else {
              LanesTile16<kR, kRowTile, 32, false>(wt, db.dt + r, db.mt + r, at, qa.nsub, out);
            }
            for (int64_t l = 0; l < mt; ++l) {
              float* yl = y + (t * N + l) * rows + r0 + r;
              for (int rr = 0; rr < kR; ++rr) yl[rr] = out[rr * N + l];
            }
            r += kR;
          };
          while (r + kLanes16Rows <= nr) run(std::integral_constant<int, kLanes16Rows>());
          while (r < nr) run(std::integral_constant<int, 1>());
        }
        continue;
      }
#endif
      for (int r = 0; r < nr; ++r) {
        for (int64_t j = 0; j < m; ++j) {
          const int8_t* a = qa.q + j * qa.cols_pad;
          [[maybe_unused]] const float* da = qa.da + j * qa.nsub;
#if DSPARK_HAVE_VNNI
          const int32_t* corr = qa.corr + j * (qa.cols_pad / 4);
          // Spread the next tile's prefetch over this tile's rows (first activation row only).
          const int64_t share = (pf_bytes / nr + 63) & ~int64_t{63};
          const uint8_t* rpf = (kNaturalPrefetch && j == 0 && pf && r * share < pf_bytes) ? pf + r * share : nullptr;
          const int64_t rpf_bytes = rpf ? std::min(share, pf_bytes - r * share) : 0;
          float v = tt.sub == 16
                        ? DotNaturalVnni<16>(db.u[r], db.dsc[r], a, corr, da, qa.cols_pad, rpf, rpf_bytes)
                        : DotNaturalVnni<32>(db.u[r], db.dsc[r], a, corr, da, qa.cols_pad, rpf, rpf_bytes);
#else
          float v = DotNaturalGeneric(db.u[r], db.dsc[r], a, da, qa.nsub, tt.sub);
#endif
          if (tt.has_min) v += DotF32(db.msc[r], qa.asum + j * qa.nsub, qa.nsub);
          y[j * rows + r0 + r] = v;
        }
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
