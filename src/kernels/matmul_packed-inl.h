// MatMul over weights repacked at load time ("packed layout", ops::PackWeights), AVX-512 VNNI.
//
// Why: with weights in ggml's row layout, a decode step (m = 1) computes one row dot at a time and
// spends most of its instructions on per-block scale shuffles (each 32-byte block carries its own
// fp16 scale), so it ran at ~45% of the memory bandwidth one core can pull. In the packed layout
// 16 weight rows sit in the 16 int32 lanes of a zmm register:
//
//   group of 16 rows (rows padded with zeros to a multiple of 16):
//     [nblocks][16] fp16 scales d (one per row and 32-column block), padded to 64 bytes
//     [nblocks][8 column quads][16 rows][4 bytes]  u = q + 128 (unsigned operand of vpdpbusd)
//
// One vpdpbusd multiplies 4 columns of 16 rows by one activation dword broadcast from memory, so a
// block of 16 rows x 32 columns is 8 vpdpbusd, one vcvtph2ps for the 16 row scales and one fma:
// ~12 vector instructions per 544 weight bytes, which keeps a core memory-bound for decode, and
// the same 544 bytes serve up to 8 activation rows per pass from L1 (verification of a draft
// block, prefill) at one vpdpbusd per 64 bytes and row.
//
// Exactness: the 128 excess of u is removed in integers by starting each block's accumulator at
// -128 * (sum of the block's 32 activation bytes), as in matmul_vnni-inl.h; per-block products are
// then scaled by d * da in float, like the reference.
//
// Only AVX3_DL compiles the kernel; other targets report PackedBytes = 0 and MatMul keeps using the
// original rows, which every packed view still points to (ops::WeightView::data).
#if defined(DSPARK_KERNELS_MATMUL_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_PACKED_INL_H_
#undef DSPARK_KERNELS_MATMUL_PACKED_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_PACKED_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matmul_act-inl.h"
#include "kernels/matmul_quant-inl.h"  // MatMulQuantImpl (fallback)
#include "kernels/matmul_vnni-inl.h"  // DSPARK_HAVE_VNNI, DSPARK_VNNI_ATTR
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

// Geometry of the packed Q8_0 layout (shared by the packer, the kernel and PackedBytes).
struct PackedQ8Geometry {
  static constexpr int64_t kRows = 16;        // weight rows per group (int32 lanes of a zmm)
  static constexpr int64_t kBlockBytes = 512;  // 16 rows x 32 bytes
  int64_t groups = 0, nblocks = 0, scale_bytes = 0, group_bytes = 0;
  PackedQ8Geometry(int64_t rows, int64_t cols)
      : groups((rows + kRows - 1) / kRows),
        nblocks(cols / 32),
        scale_bytes(static_cast<int64_t>(kernels::RoundUp(static_cast<size_t>(cols / 32) * kRows * 2, 64))),
        group_bytes(scale_bytes + cols / 32 * kBlockBytes) {}
  int64_t total() const { return groups * group_bytes; }
};

#if DSPARK_HAVE_VNNI

inline size_t PackedBytesImpl(DType type, int64_t rows, int64_t cols) {
  if (type != DType::kQ8_0 || cols % 32 != 0 || rows <= 0) return 0;
  return static_cast<size_t>(PackedQ8Geometry(rows, cols).total());
}

inline void PackQ8_0Group(const ops::WeightView& w, const PackedQ8Geometry& g, int64_t group, uint8_t* dst) {
  const size_t row_bytes = RowBytes(w.type, w.cols);
  auto* scales = reinterpret_cast<uint16_t*>(dst);
  uint8_t* quants = dst + g.scale_bytes;
  std::memset(dst, 0, static_cast<size_t>(g.scale_bytes));
  for (int64_t l = 0; l < PackedQ8Geometry::kRows; ++l) {
    const int64_t r = group * PackedQ8Geometry::kRows + l;
    const auto* blk = r < w.rows ? reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w.data) + r * row_bytes)
                                 : nullptr;
    for (int64_t b = 0; b < g.nblocks; ++b) {
      scales[b * PackedQ8Geometry::kRows + l] = blk ? blk[b].d : 0;  // padding rows: d = 0, q = 0
      uint8_t* q = quants + b * PackedQ8Geometry::kBlockBytes + l * 4;
      for (int quad = 0; quad < 8; ++quad)
        for (int k = 0; k < 4; ++k)
          q[quad * 64 + k] = static_cast<uint8_t>((blk ? blk[b].qs[quad * 4 + k] : 0) + 128);
    }
  }
}

inline void PackWeightsImpl(const ops::WeightView& w, void* dst, ThreadPool& pool) {
  const PackedQ8Geometry g(w.rows, w.cols);
  auto* out = static_cast<uint8_t*>(dst);
  pool.ParallelRange(g.groups, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t grp = b; grp < e; ++grp) PackQ8_0Group(w, g, grp, out + grp * g.group_bytes);
  });
}

// Activations of one call in the form the kernel reads: bytes, per-block scale and the per-block
// integer correction -128 * Σ a.
struct PackedActs {
  int64_t m = 0, cols = 0, nblocks = 0;
  int8_t* q = nullptr;     // [m][cols]
  float* da = nullptr;     // [m][nblocks]
  int32_t* corr = nullptr; // [m][nblocks]
};

// Bytes ahead of the weight loads that the kernel prefetches.
inline constexpr int64_t kPackedPrefetch = 1024;

// kM activation rows (1..8) against one group over blocks [b0, b1); f: [kM][16] accumulators.
// kM <= 2 splits each block's 8 vpdpbusd over two chains: one chain is 8 dependent instructions.
template <int kM>
DSPARK_VNNI_ATTR inline void PackedQ8Kernel(const uint8_t* HWY_RESTRICT group, const PackedQ8Geometry& g,
                                            int64_t b0, int64_t b1, const PackedActs& pa, int64_t j0,
                                            float* HWY_RESTRICT f_io) {
  constexpr bool kSplit = kM <= 2;
  const auto* scales = reinterpret_cast<const __m256i*>(group);
  const uint8_t* quants = group + g.scale_bytes;
  const int32_t* a[kM];
  const float* da[kM];
  const int32_t* corr[kM];
  __m512 f[kM];
  for (int j = 0; j < kM; ++j) {
    a[j] = reinterpret_cast<const int32_t*>(pa.q + (j0 + j) * pa.cols);
    da[j] = pa.da + (j0 + j) * pa.nblocks;
    corr[j] = pa.corr + (j0 + j) * pa.nblocks;
    f[j] = _mm512_load_ps(f_io + 16 * j);
  }
  for (int64_t b = b0; b < b1; ++b) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(scales + b));
    const uint8_t* q = quants + b * PackedQ8Geometry::kBlockBytes;
    __m512i s0[kM], s1[kM];
    for (int j = 0; j < kM; ++j) {
      s0[j] = _mm512_set1_epi32(corr[j][b]);
      if constexpr (kSplit) s1[j] = _mm512_setzero_si512();
    }
    for (int quad = 0; quad < 8; ++quad) {
      // The stream is sequential (groups follow each other); a software prefetch this far ahead
      // adds ~15% to what the hardware prefetcher alone sustains on one core.
      if constexpr (kPackedPrefetch > 0) _mm_prefetch(reinterpret_cast<const char*>(q + 64 * quad + kPackedPrefetch), _MM_HINT_T0);
      const __m512i wq = _mm512_load_si512(q + 64 * quad);
      for (int j = 0; j < kM; ++j) {
        const __m512i av = _mm512_set1_epi32(a[j][8 * b + quad]);
        if (kSplit && (quad & 1)) {
          s1[j] = _mm512_dpbusd_epi32(s1[j], wq, av);
        } else {
          s0[j] = _mm512_dpbusd_epi32(s0[j], wq, av);
        }
      }
    }
    for (int j = 0; j < kM; ++j) {
      __m512i s = s0[j];
      if constexpr (kSplit) s = _mm512_add_epi32(s, s1[j]);
      f[j] = _mm512_fmadd_ps(CvtI32(s), _mm512_mul_ps(dw, _mm512_set1_ps(da[j][b])), f[j]);
    }
  }
  for (int j = 0; j < kM; ++j) _mm512_store_ps(f_io + 16 * j, f[j]);
}

// Column tile: blocks applied to every activation row chunk while they sit in L1 (16 blocks of
// 16 rows = 8.5 KiB). Activation rows per kernel pass: 8 (16 int32 + 8 float accumulators).
inline constexpr int64_t kPackedBlockTile = 16;
inline constexpr int64_t kPackedRowChunk = 8;

// Largest m the packed kernel takes; bigger batches (prefill) run the row-layout lane-tile kernel,
// whose 16 activation rows per vector do more work per weight byte (kernels_bench: MatMulPacked vs
// MatMul at m = 16 and 512).
inline constexpr int64_t kPackedMaxM = 16;

inline void MatMulPackedImpl(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  if (w.packed == nullptr || w.type != DType::kQ8_0 || m > kPackedMaxM) {
    MatMulQuantImpl(w, x, m, y, pool);
    return;
  }
  const PackedQ8Geometry g(w.rows, w.cols);
  const int64_t cols = w.cols, rows = w.rows;

  thread_local kernels::ScratchBuffer act_buf;
  PackedActs pa;
  pa.m = m;
  pa.cols = cols;
  pa.nblocks = g.nblocks;
  {
    const size_t q_bytes = kernels::RoundUp(static_cast<size_t>(m * cols), 64);
    const size_t s_bytes = kernels::RoundUp(static_cast<size_t>(m * g.nblocks) * 4, 64);
    auto* p = static_cast<uint8_t*>(act_buf.Get(q_bytes + 3 * s_bytes));
    pa.q = reinterpret_cast<int8_t*>(p);
    pa.da = reinterpret_cast<float*>(p + q_bytes);
    pa.corr = reinterpret_cast<int32_t*>(p + q_bytes + s_bytes);
    float* asum = reinterpret_cast<float*>(p + q_bytes + 2 * s_bytes);  // unused by this kernel
    const auto quantize = [&](int64_t j) {
      int8_t* q = pa.q + j * cols;
      QuantizeActQ8_0(x + j * cols, cols, q, pa.da + j * g.nblocks, asum + j * g.nblocks);
      for (int64_t b = 0; b < g.nblocks; ++b) {
        int32_t s = 0;
        for (int k = 0; k < 32; ++k) s += q[32 * b + k];
        pa.corr[j * g.nblocks + b] = -128 * s;
      }
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
    float* acc = acc_buf.Get<float>(static_cast<size_t>(m) * 16);
    for (int64_t grp = gb; grp < ge; ++grp) {
      const uint8_t* group = packed + grp * g.group_bytes;
      std::memset(acc, 0, static_cast<size_t>(m) * 16 * sizeof(float));
      for (int64_t b0 = 0; b0 < g.nblocks; b0 += kPackedBlockTile) {
        const int64_t b1 = std::min(g.nblocks, b0 + kPackedBlockTile);
        for (int64_t j0 = 0; j0 < m; j0 += kPackedRowChunk) {
          float* f = acc + j0 * 16;
          switch (std::min(kPackedRowChunk, m - j0)) {
            case 1: PackedQ8Kernel<1>(group, g, b0, b1, pa, j0, f); break;
            case 2: PackedQ8Kernel<2>(group, g, b0, b1, pa, j0, f); break;
            case 3: PackedQ8Kernel<3>(group, g, b0, b1, pa, j0, f); break;
            case 4: PackedQ8Kernel<4>(group, g, b0, b1, pa, j0, f); break;
            case 5: PackedQ8Kernel<5>(group, g, b0, b1, pa, j0, f); break;
            case 6: PackedQ8Kernel<6>(group, g, b0, b1, pa, j0, f); break;
            case 7: PackedQ8Kernel<7>(group, g, b0, b1, pa, j0, f); break;
            default: PackedQ8Kernel<8>(group, g, b0, b1, pa, j0, f); break;
          }
        }
      }
      const int64_t r0 = grp * PackedQ8Geometry::kRows;
      const int64_t live = std::min<int64_t>(PackedQ8Geometry::kRows, rows - r0);
      for (int64_t j = 0; j < m; ++j) std::memcpy(y + j * rows + r0, acc + j * 16, static_cast<size_t>(live) * sizeof(float));
    }
  });
}

#else  // !DSPARK_HAVE_VNNI: no packed kernel on this target; MatMul reads the original rows.

inline size_t PackedBytesImpl(DType, int64_t, int64_t) { return 0; }
inline void PackWeightsImpl(const ops::WeightView&, void*, ThreadPool&) {}
inline void MatMulPackedImpl(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  MatMulQuantImpl(w, x, m, y, pool);
}

#endif  // DSPARK_HAVE_VNNI

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
