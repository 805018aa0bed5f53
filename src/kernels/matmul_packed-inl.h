// MatMul over weights repacked at load time ("packed layout", ops::PackWeights), AVX-512 VNNI:
// the Q8_0 and Q4_0 formats and the dispatch over formats (Q4_K, Q5_K and Q6_K:
// matmul_packed_k-inl.h; the shared driver: matmul_packed_common-inl.h).
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
// Q4_0 keeps its nibbles (4 quads of 64 bytes per block: 288 bytes per 16 rows x 32 columns with
// the scales) and runs the same kernel; its operands are the low and high nibbles of each load and
// its offset is 8. Before this layout it ran in the row layout: Qwen3-0.6B shape, 2 threads, decode
// 61-62 tok/s against 107-112 packed, a 4-row verification pass 34-36 ms against 14-15.
//
// Only AVX3_DL compiles the kernels; other targets report PackedBytes = 0 and MatMul keeps using
// the original rows, which every packed view still points to (ops::WeightView::data).
#if defined(DSPARK_KERNELS_MATMUL_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_PACKED_INL_H_
#undef DSPARK_KERNELS_MATMUL_PACKED_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_PACKED_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/matmul_packed_common-inl.h"
#include "kernels/matmul_packed_k-inl.h"
#include "kernels/matmul_quant-inl.h"  // MatMulQuantImpl (fallback)
#include "kernels/matmul_vnni-inl.h"  // DSPARK_HAVE_VNNI, DSPARK_VNNI_ATTR
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "util/thread_pool.h"


HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

#if DSPARK_HAVE_VNNI

// Q8_0 and Q4_0 (kNibbles): a group is the scale region [nblocks][16] fp16 d (padded to 64 bytes),
// then per block of 32 columns its operand quads, [quad][16 rows][4 bytes]:
//   Q8_0: 8 quads, u = q + 128 (the unsigned operand of vpdpbusd);
//   Q4_0: 4 quads of nibbles, byte k of quad i holding q of column 4i + k in its low nibble and of
//     column 16 + 4i + k in its high one (ggml's block order, q in [0, 15] for x = d * (q - 8)).
// Operand quad i < 8 is column quad i of the block either way (Q4_0: quads 4-7 are the high
// nibbles), so both formats run the same kernel; the offset (128 or 8) is removed exactly in
// integers by starting each block's accumulator at -offset * Σ a.
template <bool kNibbles>
struct PackedBlock32 {
  using Block = std::conditional_t<kNibbles, BlockQ4_0, BlockQ8_0>;
  static constexpr int64_t kUnitCols = 32;
  static constexpr int64_t kUnitBytes = kPackedRows * (kNibbles ? 16 : 32);
  static constexpr int32_t kOffset = kNibbles ? 8 : 128;
  static constexpr int kSub = 32;
  static constexpr bool kKQuant = false;
  static constexpr bool kInterleavedActs = false;  // reads ActRows::a (see Kernel)
  // 16 blocks of 16 rows = 8.5 KiB (Q4_0: 32 blocks, 9 KiB).
  static constexpr int64_t kTileUnits = kNibbles ? 32 : 16;

  static int64_t HeaderBytes(int64_t units) {
    return static_cast<int64_t>(kernels::RoundUp(static_cast<size_t>(units * kPackedRows * 2), 64));
  }

  static void PackGroup(const ops::WeightView& w, const PackedLayout& g, int64_t group, uint8_t* dst) {
    const size_t row_bytes = RowBytes(w.type, w.cols);
    auto* scales = reinterpret_cast<uint16_t*>(dst);
    uint8_t* quants = dst + g.header_bytes;
    std::memset(dst, 0, static_cast<size_t>(g.header_bytes));
    for (int64_t l = 0; l < kPackedRows; ++l) {
      const int64_t r = group * kPackedRows + l;
      const auto* blk = r < w.rows ? reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + r * row_bytes)
                                   : nullptr;
      for (int64_t b = 0; b < g.units; ++b) {
        scales[b * kPackedRows + l] = blk ? blk[b].d : 0;  // padding rows: d = 0
        uint8_t* q = quants + b * kUnitBytes + l * 4;
        for (int quad = 0; quad < kUnitBytes / 64; ++quad)
          for (int k = 0; k < 4; ++k) {
            if constexpr (kNibbles) {
              q[quad * 64 + k] = blk ? blk[b].qs[quad * 4 + k] : 0;
            } else {
              q[quad * 64 + k] = static_cast<uint8_t>((blk ? blk[b].qs[quad * 4 + k] : 0) + 128);
            }
          }
      }
    }
  }

  // corr = -offset * Σ a per block: removes the excess of the unsigned operands in the accumulator.
  static void PrepareActs(const PackedActs& pa, int64_t j) { OffsetCorrection(pa, j, 32, kOffset); }

  // Operand quad `quad` (0..7) of the block at q: Q4_0's quads 0-3 are the low nibbles of its 4
  // loads and 4-7 the high ones (a shift and a mask: no GFNI needed, and the loads hit L1).
  DSPARK_VNNI_ATTR static HWY_INLINE __m512i Operand(const uint8_t* HWY_RESTRICT q, int quad) {
    if constexpr (kNibbles) {
      const __m512i v = _mm512_load_si512(q + 64 * (quad & 3));
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      return quad < 4 ? _mm512_and_si512(v, m4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    } else {
      return _mm512_load_si512(q + 64 * quad);
    }
  }
  // One software prefetch per 64 bytes of the block (Q4_0: quads 0-3), kPackedPrefetch ahead.
  static HWY_INLINE void Prefetch(const uint8_t* q, int quad) {
    if constexpr (kPackedPrefetch > 0)
      if (quad < kUnitBytes / 64) _mm_prefetch(reinterpret_cast<const char*>(q + 64 * quad + kPackedPrefetch), _MM_HINT_T0);
  }

  // kM <= 2 splits each block's 8 vpdpbusd over two chains: one chain is 8 dependent instructions.
  template <int kM>
  DSPARK_VNNI_ATTR static void Kernel(const uint8_t* HWY_RESTRICT group, const PackedLayout& g, int64_t b0,
                                      int64_t b1, const PackedActs& pa, int64_t j0, float* HWY_RESTRICT f_io) {
    constexpr bool kSplit = kM <= 2;
    const auto* scales = reinterpret_cast<const __m256i*>(group);
    const uint8_t* quants = group + g.header_bytes;
    const ActRows<kM> rows(pa, j0);
    const auto& da = rows.da;
    const auto& corr = rows.corr;
    __m512 f[kM];
    for (int j = 0; j < kM; ++j) f[j] = _mm512_load_ps(f_io + 16 * j);
    for (int64_t b = b0; b < b1; ++b) {
      const __m512 dw = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(scales + b));
      const uint8_t* q = quants + b * kUnitBytes;
      __m512i s0[kM], s1[kM];
      for (int j = 0; j < kM; ++j) {
        s0[j] = _mm512_set1_epi32(corr[j][b]);
        if constexpr (kSplit) s1[j] = _mm512_setzero_si512();
      }
      for (int quad = 0; quad < 8; ++quad) {
        // The stream is sequential (groups follow each other); a software prefetch this far ahead
        // adds ~15% to what the hardware prefetcher alone sustains on one core.
        Prefetch(q, quad);
        const __m512i wq = Operand(q, quad);
        for (int j = 0; j < kM; ++j) {
          // Per-row pointers and _mm512_set1_epi32: the interleaved rows and the embedded
          // broadcast that help the K-quant kernels made Q8_0 slower (kernels_bench
          // MatMulPackedHot/q8_0 m=2 and m=8) and did not change Q4_0 beyond noise.
          const __m512i av = _mm512_set1_epi32(rows.a[j][8 * b + quad]);
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

  // Kernel<1> over two groups at once (f_io: [2][16]): one activation row gives a group only two
  // chains of 4 dependent vpdpbusd per block, and a small matrix spends as much on the driver's
  // per-group work as on the blocks; two groups per pass halve both (the bundled draft model's
  // 4096 x 192 head, kernels_bench MatMulPackedHot, 1 thread: 10.6 -> 8.9 us). Each group's sums
  // and float chain are Kernel<1>'s.
  DSPARK_VNNI_ATTR static void KernelPair(const uint8_t* HWY_RESTRICT group0, const PackedLayout& g, int64_t b0,
                                          int64_t b1, const PackedActs& pa, float* HWY_RESTRICT f_io) {
    const uint8_t* group1 = group0 + g.group_bytes;
    const auto* scales0 = reinterpret_cast<const __m256i*>(group0);
    const auto* scales1 = reinterpret_cast<const __m256i*>(group1);
    const uint8_t* quants0 = group0 + g.header_bytes;
    const uint8_t* quants1 = group1 + g.header_bytes;
    const ActRows<1> rows(pa, 0);
    __m512 f0 = _mm512_load_ps(f_io), f1 = _mm512_load_ps(f_io + 16);
    for (int64_t b = b0; b < b1; ++b) {
      const __m512 dw0 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(scales0 + b));
      const __m512 dw1 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(scales1 + b));
      const uint8_t* q0 = quants0 + b * kUnitBytes;
      const uint8_t* q1 = quants1 + b * kUnitBytes;
      __m512i s00 = _mm512_set1_epi32(rows.corr[0][b]), s01 = _mm512_setzero_si512();
      __m512i s10 = s00, s11 = _mm512_setzero_si512();
      for (int quad = 0; quad < 8; ++quad) {
        Prefetch(q0, quad);
        Prefetch(q1, quad);
        const __m512i av = _mm512_set1_epi32(rows.a[0][8 * b + quad]);
        const __m512i w0 = Operand(q0, quad), w1 = Operand(q1, quad);
        if (quad & 1) {
          s01 = _mm512_dpbusd_epi32(s01, w0, av);
          s11 = _mm512_dpbusd_epi32(s11, w1, av);
        } else {
          s00 = _mm512_dpbusd_epi32(s00, w0, av);
          s10 = _mm512_dpbusd_epi32(s10, w1, av);
        }
      }
      const __m512 da = _mm512_set1_ps(rows.da[0][b]);
      f0 = _mm512_fmadd_ps(CvtI32(_mm512_add_epi32(s00, s01)), _mm512_mul_ps(dw0, da), f0);
      f1 = _mm512_fmadd_ps(CvtI32(_mm512_add_epi32(s10, s11)), _mm512_mul_ps(dw1, da), f1);
    }
    _mm512_store_ps(f_io, f0);
    _mm512_store_ps(f_io + 16, f1);
  }
};
using PackedQ8_0 = PackedBlock32<false>;
using PackedQ4_0 = PackedBlock32<true>;

inline size_t PackedBytesImpl(DType type, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const auto bytes = [&](auto format) -> size_t {
    using Format = decltype(format);
    if (cols % Format::kUnitCols != 0) return 0;
    return static_cast<size_t>(PackedLayoutOf<Format>(rows, cols).total());
  };
  switch (type) {
    case DType::kQ8_0: return bytes(PackedQ8_0());
    case DType::kQ4_0: return bytes(PackedQ4_0());
    case DType::kQ4_K: return HasGfni() ? bytes(PackedQ4_K()) : 0;
    case DType::kQ5_K: return HasGfni() ? bytes(PackedQ5_K()) : 0;
    case DType::kQ6_K: return HasGfni() ? bytes(PackedQ6_K()) : 0;
    default: return 0;
  }
}

inline void PackWeightsImpl(const ops::WeightView& w, void* dst, ThreadPool& pool) {
  switch (w.type) {
    case DType::kQ8_0: PackGroups<PackedQ8_0>(w, dst, pool); break;
    case DType::kQ4_0: PackGroups<PackedQ4_0>(w, dst, pool); break;
    case DType::kQ4_K: PackGroups<PackedQ4_K>(w, dst, pool); break;
    case DType::kQ5_K: PackGroups<PackedQ5_K>(w, dst, pool); break;
    case DType::kQ6_K: PackGroups<PackedQ6_K>(w, dst, pool); break;
    default: break;
  }
}

inline void MatMulPackedImpl(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  if (w.packed != nullptr) {
    switch (w.type) {
      case DType::kQ8_0: MatMulPackedRun<PackedQ8_0>(w, x, m, y, pool); return;
      case DType::kQ4_0: MatMulPackedRun<PackedQ4_0>(w, x, m, y, pool); return;
      case DType::kQ4_K: MatMulPackedRun<PackedQ4_K>(w, x, m, y, pool); return;
      case DType::kQ5_K: MatMulPackedRun<PackedQ5_K>(w, x, m, y, pool); return;
      case DType::kQ6_K: MatMulPackedRun<PackedQ6_K>(w, x, m, y, pool); return;
      default: break;
    }
  }
  MatMulQuantImpl(w, x, m, y, pool);
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
