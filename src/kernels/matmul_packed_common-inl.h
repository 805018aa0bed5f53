// Shared driver of the packed-layout MatMul kernels (matmul_packed-inl.h: Q8_0;
// matmul_packed_k-inl.h: Q4_K, Q6_K): the group geometry, the quantised activations as the
// kernels read them, and the loop that splits 16-row weight groups over the pool and applies each
// column tile of a group to every chunk of activation rows while the tile sits in L1.
//
// A packed format is a struct with
//   kUnitCols, kUnitBytes: columns of one unit (a block or super-block) and its packed bytes in
//     one 16-row group (a multiple of 64 so every unit starts on a cache line)
//   kSub, kKQuant: activation sub-block and format (Q8_0 or Q8_K) of QuantizeActQ8_0/_K
//   kTileUnits: units per column tile (~8-10 KiB of packed bytes: L1 holds a tile for all chunks)
//   HeaderBytes(units): bytes in front of a group's units (Q8_0's scale region), a multiple of 64
//   PackGroup(w, layout, group, dst): writes one group (rows past w.rows as zeros)
//   PrepareActs(pa, j): fills pa.corr of activation row j from pa.q
//   Kernel<kM>(group, layout, u0, u1, pa, j0, f): kM (1..8) activation rows from j0 against
//     units [u0, u1) of one group, accumulating into f[kM][16]
#if defined(DSPARK_KERNELS_MATMUL_PACKED_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_PACKED_COMMON_INL_H_
#undef DSPARK_KERNELS_MATMUL_PACKED_COMMON_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_PACKED_COMMON_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matmul_act-inl.h"
#include "kernels/matmul_vnni-inl.h"  // DSPARK_HAVE_VNNI, DSPARK_VNNI_ATTR
#include "kernels/ops.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

// Weight rows per group: the 16 int32 lanes of a zmm.
inline constexpr int64_t kPackedRows = 16;

// Geometry of one packed matrix: `groups` groups of 16 rows, each `header_bytes` followed by
// `units` units of the format's kUnitBytes.
struct PackedLayout {
  int64_t groups = 0, units = 0, header_bytes = 0, group_bytes = 0;
  int64_t total() const { return groups * group_bytes; }
};

template <class Format>
inline PackedLayout PackedLayoutOf(int64_t rows, int64_t cols) {
  PackedLayout g;
  g.groups = (rows + kPackedRows - 1) / kPackedRows;
  g.units = cols / Format::kUnitCols;
  g.header_bytes = Format::HeaderBytes(g.units);
  g.group_bytes = g.header_bytes + g.units * Format::kUnitBytes;
  return g;
}

// Activations of one call: bytes and per-sub-block scale as QuantizeActQ8_0/_K produce them, plus
// the integers the format's kernel adds per sub-block (PrepareActs).
struct PackedActs {
  int64_t m = 0, cols = 0, nsub = 0;
  int8_t* q = nullptr;      // [m][cols]
  float* da = nullptr;      // [m][nsub] activation scale
  float* asum = nullptr;    // [m][nsub] da * Σ q
  int32_t* corr = nullptr;  // [m][nsub] per-format integers (Q8_0: -128 Σq; Q4_K: Σq pairs)
};

// Row pointers of activation rows j0 .. j0 + kM - 1, as every packed kernel reads them: the bytes
// as dwords (one vpdpbusd operand each), the per-sub-block scales and the per-format integers.
template <int kM>
struct ActRows {
  const int32_t* a[kM];
  const float* da[kM];
  const int32_t* corr[kM];
  ActRows(const PackedActs& pa, int64_t j0) {
    for (int j = 0; j < kM; ++j) {
      a[j] = reinterpret_cast<const int32_t*>(pa.q + (j0 + j) * pa.cols);
      da[j] = pa.da + (j0 + j) * pa.nsub;
      corr[j] = pa.corr + (j0 + j) * pa.nsub;
    }
  }
};

// corr[j][s] = -offset * (sum of row j's activation bytes over sub-block s of `sub` columns):
// starting sub-block s's accumulator there removes the weights' unsigned offset exactly in
// integers (Q8_0 stores q + 128, Q6_K stores q with its offset of 32).
inline void OffsetCorrection(const PackedActs& pa, int64_t j, int sub, int32_t offset) {
  const int8_t* q = pa.q + j * pa.cols;
  for (int64_t s = 0; s < pa.nsub; ++s) {
    int32_t sum = 0;
    for (int k = 0; k < sub; ++k) sum += q[sub * s + k];
    pa.corr[j * pa.nsub + s] = -offset * sum;
  }
}

// Prefetches cache lines [first, first + n) of a packed unit of kUnitBytes, kAhead bytes ahead of
// it (lines past the unit's end are left to the next unit's own prefetches).
template <int64_t kAhead, int64_t kUnitBytes>
HWY_INLINE void PrefetchUnitLines(const uint8_t* unit, int first, int n) {
  if constexpr (kAhead > 0) {
    for (int i = first; i < first + n && i < kUnitBytes / 64; ++i) __builtin_prefetch(unit + kAhead + 64 * i);
  }
}

// Bytes ahead of the weight loads that the kernels prefetch.
inline constexpr int64_t kPackedPrefetch = 4096;
// Activation rows per kernel pass: 8 float accumulators plus the int32 ones and the unpacked
// weights fit the 32 zmm registers.
inline constexpr int64_t kPackedRowChunk = 8;

// Largest m the packed kernels take; bigger batches (prefill) run the row-layout lane-tile kernel,
// whose 16 activation rows per vector do more work per weight byte (kernels_bench: MatMulPacked vs
// MatMul at m = 16 and 512).
inline constexpr int64_t kPackedMaxM = 16;

#if DSPARK_HAVE_VNNI

template <class Format>
inline void PackGroups(const ops::WeightView& w, void* dst, ThreadPool& pool) {
  const PackedLayout g = PackedLayoutOf<Format>(w.rows, w.cols);
  auto* out = static_cast<uint8_t*>(dst);
  pool.ParallelRange(g.groups, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t grp = b; grp < e; ++grp) Format::PackGroup(w, g, grp, out + grp * g.group_bytes);
  });
}

template <class Format>
inline void PackedChunk(int64_t n, const uint8_t* group, const PackedLayout& g, int64_t u0, int64_t u1,
                        const PackedActs& pa, int64_t j0, float* f) {
  switch (n) {
    case 1: Format::template Kernel<1>(group, g, u0, u1, pa, j0, f); break;
    case 2: Format::template Kernel<2>(group, g, u0, u1, pa, j0, f); break;
    case 3: Format::template Kernel<3>(group, g, u0, u1, pa, j0, f); break;
    case 4: Format::template Kernel<4>(group, g, u0, u1, pa, j0, f); break;
    case 5: Format::template Kernel<5>(group, g, u0, u1, pa, j0, f); break;
    case 6: Format::template Kernel<6>(group, g, u0, u1, pa, j0, f); break;
    case 7: Format::template Kernel<7>(group, g, u0, u1, pa, j0, f); break;
    default: Format::template Kernel<8>(group, g, u0, u1, pa, j0, f); break;
  }
}

// y[m, rows] = x[m, cols] · wᵀ from w.packed in Format's layout (1 <= m <= kPackedMaxM).
template <class Format>
inline void MatMulPackedRun(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  const PackedLayout g = PackedLayoutOf<Format>(w.rows, w.cols);
  const int64_t cols = w.cols, rows = w.rows;

  thread_local kernels::ScratchBuffer act_buf;
  PackedActs pa;
  pa.m = m;
  pa.cols = cols;
  pa.nsub = cols / Format::kSub;
  {
    const size_t q_bytes = kernels::RoundUp(static_cast<size_t>(m * cols), 64);
    const size_t s_bytes = kernels::RoundUp(static_cast<size_t>(m * pa.nsub) * 4, 64);
    auto* p = static_cast<uint8_t*>(act_buf.Get(q_bytes + 3 * s_bytes));
    pa.q = reinterpret_cast<int8_t*>(p);
    pa.da = reinterpret_cast<float*>(p + q_bytes);
    pa.asum = reinterpret_cast<float*>(p + q_bytes + s_bytes);
    pa.corr = reinterpret_cast<int32_t*>(p + q_bytes + 2 * s_bytes);
    const auto quantize = [&](int64_t j) {
      int8_t* q = pa.q + j * cols;
      if constexpr (Format::kKQuant) {
        QuantizeActQ8_K(x + j * cols, cols, Format::kSub, q, pa.da + j * pa.nsub, pa.asum + j * pa.nsub);
      } else {
        QuantizeActQ8_0(x + j * cols, cols, q, pa.da + j * pa.nsub, pa.asum + j * pa.nsub);
      }
      Format::PrepareActs(pa, j);
    };
    if (m >= 16) {
      pool.ParallelRange(m, 8, [&](int64_t b, int64_t e, int) {
        for (int64_t j = b; j < e; ++j) quantize(j);
      });
    } else {
      for (int64_t j = 0; j < m; ++j) quantize(j);
    }
  }

  const auto* packed = static_cast<const uint8_t*>(w.packed);
  pool.ParallelRange(g.groups, 1, [&](int64_t gb, int64_t ge, int) {
    thread_local kernels::ScratchBuffer acc_buf;
    float* acc = acc_buf.Get<float>(static_cast<size_t>(m) * kPackedRows);
    for (int64_t grp = gb; grp < ge; ++grp) {
      const uint8_t* group = packed + grp * g.group_bytes;
      std::memset(acc, 0, static_cast<size_t>(m) * kPackedRows * sizeof(float));
      for (int64_t u0 = 0; u0 < g.units; u0 += Format::kTileUnits) {
        const int64_t u1 = std::min(g.units, u0 + Format::kTileUnits);
        for (int64_t j0 = 0; j0 < m; j0 += kPackedRowChunk)
          PackedChunk<Format>(std::min(kPackedRowChunk, m - j0), group, g, u0, u1, pa, j0,
                              acc + j0 * kPackedRows);
      }
      const int64_t r0 = grp * kPackedRows;
      const int64_t live = std::min<int64_t>(kPackedRows, rows - r0);
      for (int64_t j = 0; j < m; ++j)
        std::memcpy(y + j * rows + r0, acc + j * kPackedRows, static_cast<size_t>(live) * sizeof(float));
    }
  });
}

#endif  // DSPARK_HAVE_VNNI

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
