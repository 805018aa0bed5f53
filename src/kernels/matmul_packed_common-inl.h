// Shared driver of the packed-layout MatMul kernels (matmul_packed-inl.h: Q8_0, Q4_0;
// matmul_packed_k-inl.h: Q4_K, Q5_K, Q6_K): the group geometry, the quantised activations as the
// kernels read them, and the loop that splits 16-row weight groups over the pool and applies each
// column tile of a group to every chunk of activation rows while the tile sits in L1.
//
// A packed format is a struct with
//   kUnitCols, kUnitBytes: columns of one unit (a block or super-block) and its packed bytes in
//     one 16-row group (a multiple of 64 so every unit starts on a cache line)
//   kSub, kKQuant: activation sub-block and format (Q8_0 or Q8_K) of QuantizeActQ8_0/_K
//   kInterleavedActs: the kernel reads PackedActs::inter (built only then)
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
#include "kernels/matmul_packed_simd-inl.h"  // DSPARK_HAVE_PACKED_Q, PackedI, PackedF
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "kernels/scratch.h"
#include "kernels/test_hooks.h"
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
  // The bytes again, row-interleaved per chunk (PackedChunkRows): dword w of row j0 + j of the
  // chunk starting at j0 (n = min(chunk, m - j0) rows) at inter[j0 * cols / 4 + w * n + j]. All
  // of a chunk's broadcast operands are then [one base register + constant displacement] instead
  // of 8 row pointers competing for general registers. The K-quant kernels read these; the
  // 32-column formats' kernel (Q8_0's) is slower with them, so it reads the rows.
  const int32_t* inter = nullptr;
  float* da = nullptr;      // [m][nsub] activation scale
  float* asum = nullptr;    // [m][nsub] da * Σ q
  int32_t* corr = nullptr;  // [m][nsub] per-format integers (Q8_0: -128 Σq; Q4_K: Σq pairs)
};

// Activation rows j0 .. j0 + kM - 1 (one chunk), as every packed kernel reads them: the bytes as
// dwords (one vpdpbusd operand each), interleaved (A(w, j) is dword w of row j0 + j) or per row
// (a[j]), the per-sub-block scales and the per-format integers.
template <int kM>
struct ActRows {
  const int32_t* inter;
  const int32_t* a[kM];
  const float* da[kM];
  const int32_t* corr[kM];
  const int32_t* A(int64_t w, int j) const { return inter + w * kM + j; }
  ActRows(const PackedActs& pa, int64_t j0) : inter(pa.inter + j0 * (pa.cols / 4)) {
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
// Activation rows per kernel pass: with AVX-512, 8 float accumulators plus the int32 ones and the
// unpacked weights fit the 32 zmm registers. AVX2's 16 ymm hold two rows (two ymm per 16 lanes),
// but 4 rows with some accumulators spilled to L1 beat unpacking the weights twice as often. A
// format whose kernel keeps fewer accumulators in registers may take more (Format::kMaxChunkRows):
// every further chunk unpacks the weights again.
inline constexpr int64_t kPackedRowChunk = DSPARK_HAVE_VNNI ? 8 : 4;

template <class Format>
constexpr int64_t MaxChunkRows() {
  if constexpr (requires { Format::kMaxChunkRows; }) {
    return Format::kMaxChunkRows;
  } else {
    return kPackedRowChunk;
  }
}

// Rows per chunk for m activation rows: all of them up to max_rows (a verification block in one
// pass); up to twice that, two near-equal chunks (a 9-row block as 5 + 4 where 5 fit, not 3 x 3:
// each chunk unpacks the weights again); else near-equal chunks of at most kPackedRowChunk
// (prefill: with longer chunks the outputs' memory traffic outweighs the unpacking saved; and a
// lone last row would run the one-row kernel, built for streaming, over weights in L1).
inline int64_t PackedChunkRows(int64_t m, int64_t max_rows) {
  if (m <= max_rows) return std::max<int64_t>(m, 1);
  const int64_t per = m <= 2 * max_rows ? max_rows : kPackedRowChunk;
  const int64_t chunks = (m + per - 1) / per;
  return (m + chunks - 1) / chunks;
}
// Multiply-accumulates below which a MatMul is not split over threads (see MatMulPackedRun).
inline constexpr int64_t kMinTaskMacs = int64_t{1} << 16;


#if DSPARK_HAVE_PACKED_Q

// The float outputs f[j] += h · da of a kernel's kM activation rows (f_io: [kM][16]): in registers
// up to kPackedRowChunk rows, past that in f_io (the registers go to the rows' integer and scale
// accumulators: one load and store per super-block and row). The same operations in the same
// order either way, so a row's result does not depend on the chunk it is in.
template <int kM>
struct KernelOutputs {
  static constexpr bool kInRegs = kM <= kPackedRowChunk;
  float* f_io;
  PackedF f[kInRegs ? kM : 1];
  DSPARK_PACKED_ATTR HWY_INLINE explicit KernelOutputs(float* io) : f_io(io) {
    if constexpr (kInRegs)
      for (int j = 0; j < kM; ++j) f[j] = LoadPF(f_io + 16 * j);
  }
  DSPARK_PACKED_ATTR HWY_INLINE void Add(int j, PackedF h, float da) {
    if constexpr (kInRegs) {
      f[j] = FmaPF(h, SetPF(da), f[j]);
    } else {
      StorePF(FmaPF(h, SetPF(da), LoadPF(f_io + 16 * j)), f_io + 16 * j);
    }
  }
  DSPARK_PACKED_ATTR HWY_INLINE void Store() {
    if constexpr (kInRegs)
      for (int j = 0; j < kM; ++j) StorePF(f[j], f_io + 16 * j);
  }
};

// PackedActs::inter from PackedActs::q.
inline void InterleaveChunks(const PackedActs& pa, int64_t chunk, int32_t* inter) {
  const int64_t words = pa.cols / 4;
  for (int64_t j0 = 0; j0 < pa.m; j0 += chunk) {
    const int64_t n = std::min(chunk, pa.m - j0);
    int32_t* dst = inter + j0 * words;
    for (int64_t j = 0; j < n; ++j) {
      const auto* src = reinterpret_cast<const int32_t*>(pa.q + (j0 + j) * pa.cols);
      for (int64_t w = 0; w < words; ++w) dst[w * n + j] = src[w];
    }
  }
}

template <class Format>
inline void PackGroups(const ops::WeightView& w, void* dst, ThreadPool& pool) {
  const PackedLayout g = PackedLayoutOf<Format>(w.rows, w.cols);
  auto* out = static_cast<uint8_t*>(dst);
  pool.ParallelRange(g.groups, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t grp = b; grp < e; ++grp) Format::PackGroup(w, g, grp, out + grp * g.group_bytes);
  });
}

// Format's kernel for a chunk of n (1..kMax) activation rows: the row count is a template argument
// chosen at run time.
template <class Format, bool kVex, int kMax = static_cast<int>(MaxChunkRows<Format>())>
inline void PackedChunk(int64_t n, const uint8_t* group, const PackedLayout& g, int64_t u0, int64_t u1,
                        const PackedActs& pa, int64_t j0, float* f) {
  if constexpr (kMax > 1) {
    if (n < kMax) return PackedChunk<Format, kVex, kMax - 1>(n, group, g, u0, u1, pa, j0, f);
  }
  Format::template Kernel<kMax, kVex>(group, g, u0, u1, pa, j0, f);
}

// y[m, rows] = x[m, cols] · wᵀ from w.packed in Format's layout, for every m: each output row is
// the same integer sums and float chain whatever m, so a row decoded alone equals the row inside
// a verification block or a batch of many sequences (the row layout's lane tiles would gain a
// little on Q4_K prefill and lose more on Q8_0's).
template <class Format, bool kVex>
inline void MatMulPackedRunWith(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  const PackedLayout g = PackedLayoutOf<Format>(w.rows, w.cols);
  const int64_t cols = w.cols, rows = w.rows;

  const int64_t chunk = PackedChunkRows(m, MaxChunkRows<Format>());
  thread_local kernels::ScratchBuffer act_buf;
  PackedActs pa;
  pa.m = m;
  pa.cols = cols;
  pa.nsub = cols / Format::kSub;
  {
    const size_t q_bytes = kernels::RoundUp(static_cast<size_t>(m * cols), 64);
    const size_t s_bytes = kernels::RoundUp(static_cast<size_t>(m * pa.nsub) * 4, 64);
    auto* p = static_cast<uint8_t*>(act_buf.Get(2 * q_bytes + 3 * s_bytes));
    pa.q = reinterpret_cast<int8_t*>(p);
    pa.da = reinterpret_cast<float*>(p + q_bytes);
    pa.asum = reinterpret_cast<float*>(p + q_bytes + s_bytes);
    pa.corr = reinterpret_cast<int32_t*>(p + q_bytes + 2 * s_bytes);
    auto* inter = reinterpret_cast<int32_t*>(p + q_bytes + 3 * s_bytes);
    pa.inter = m == 1 ? reinterpret_cast<const int32_t*>(pa.q) : inter;
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
    if (Format::kInterleavedActs && m > 1) InterleaveChunks(pa, chunk, inter);  // Q8_0 reads the rows
  }

  const auto* packed = static_cast<const uint8_t*>(w.packed);
  // Groups per task: at least kMinTaskMacs of work, so a small matrix (a draft model's 192 x 192
  // attention output) runs on the calling thread instead of paying a hand-off to the pool that
  // costs more than its share of the work.
  const int64_t group_macs = kPackedRows * cols * m;
  const int64_t grain = kernels::MatMulGrain(g.groups, 2, std::max<int64_t>(1, kMinTaskMacs / group_macs), m, pool);
  pool.ParallelRange(g.groups, grain, [&](int64_t gb, int64_t ge, int) {
    thread_local kernels::ScratchBuffer acc_buf;
    float* acc = acc_buf.Get<float>(static_cast<size_t>(std::max<int64_t>(m, 2)) * kPackedRows);
    // The m output rows of group grp, from accumulators laid out [m][kPackedRows].
    const auto store = [&](int64_t grp, const float* from) {
      const int64_t r0 = grp * kPackedRows;
      const int64_t live = std::min<int64_t>(kPackedRows, rows - r0);
      for (int64_t j = 0; j < m; ++j)
        std::memcpy(y + j * rows + r0, from + j * kPackedRows, static_cast<size_t>(live) * sizeof(float));
    };
    int64_t grp = gb;
    if constexpr (requires { &Format::KernelPair; }) {
      // One activation row: two groups per pass (Format::KernelPair), same sums as one at a time.
      for (; m == 1 && grp + 2 <= ge; grp += 2) {
        std::memset(acc, 0, 2 * kPackedRows * sizeof(float));
        for (int64_t u0 = 0; u0 < g.units; u0 += Format::kTileUnits)
          Format::KernelPair(packed + grp * g.group_bytes, g, u0, std::min(g.units, u0 + Format::kTileUnits), pa, acc);
        store(grp, acc);
        store(grp + 1, acc + kPackedRows);
      }
    }
    for (; grp < ge; ++grp) {
      const uint8_t* group = packed + grp * g.group_bytes;
      std::memset(acc, 0, static_cast<size_t>(m) * kPackedRows * sizeof(float));
      for (int64_t u0 = 0; u0 < g.units; u0 += Format::kTileUnits) {
        const int64_t u1 = std::min(g.units, u0 + Format::kTileUnits);
        for (int64_t j0 = 0; j0 < m; j0 += chunk)
          PackedChunk<Format, kVex>(std::min(chunk, m - j0), group, g, u0, u1, pa, j0, acc + j0 * kPackedRows);
      }
      store(grp, acc);
    }
  });
}

// MatMulPackedRunWith with AVX-VNNI where an AVX2 CPU has it (same sums, fewer instructions).
template <class Format>
inline void MatMulPackedRun(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  if constexpr (!DSPARK_HAVE_VNNI) {
    static const bool vex = HasAvxVnni();
    if (vex && !kernels::AvxVnniDisabledForTest()) return MatMulPackedRunWith<Format, true>(w, x, m, y, pool);
  }
  MatMulPackedRunWith<Format, false>(w, x, m, y, pool);
}

#endif  // DSPARK_HAVE_PACKED_Q

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
