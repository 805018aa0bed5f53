// MatMul over weights repacked at load time ("packed layout", ops::PackWeights), x86 SIMD: the
// 32-column block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and the dispatch over formats (Q4_K, Q5_K
// and Q6_K: matmul_packed_k-inl.h; the shared driver: matmul_packed_common-inl.h).
//
// Why: with weights in ggml's row layout, a decode step (m = 1) computes one row dot at a time and
// spends most of its instructions on per-block scale shuffles (each 32-byte block carries its own
// fp16 scale), so it ran well below the memory bandwidth one core can pull. In the packed layout
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
// Q4_0, Q4_1, Q5_0 and Q5_1 keep their nibbles (4 quads of 64 bytes per block, the Q5 types 64
// bytes of fifth bits more) and run the same kernel (PackedBlock32).
//
// AVX3_DL (vpdpbusd on zmm), AVX3 and AVX2 (two ymm, vpmaddubsw or AVX-VNNI) compile the kernels
// over the same layouts (matmul_packed_simd-inl.h); other targets report PackedBytes = 0 and MatMul
// keeps using the original rows, which every packed view still points to (ops::WeightView::data).
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
#include "kernels/matmul_packed_simd-inl.h"  // DSPARK_HAVE_PACKED_Q, PackedI, PackedF
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "util/thread_pool.h"


HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

#if DSPARK_HAVE_PACKED_Q

// The 32-column block formats: Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1. A group is the scale region,
// [nblocks][16] fp16 d and for Q4_1 / Q5_1 then [nblocks][16] fp16 m (padded to 64 bytes), then per
// block of 32 columns its operand quads, [quad][16 rows][4 bytes]:
//   Q8_0: 8 quads, u = q + 128 (the unsigned operand of vpdpbusd);
//   Q4_x / Q5_x: 4 quads of nibbles, byte k of quad i holding q of column 4i + k in its low nibble
//     and of column 16 + 4i + k in its high one (ggml's block order); Q5_x then a 64-byte plane of
//     fifth bits: bit i of byte b is the fifth bit of byte b of operand quad i (one GFNI affine
//     moves it to bit 4).
// Operand quad i < 8 is column quad i of the block either way (quads 4-7 are the high nibbles), so
// every format runs the same kernel. Offsets (Q8_0 128, Q4_0 8, Q5_0 16) are removed exactly in
// integers by starting each block's accumulator at -offset * Σ a; the min of Q4_1 / Q5_1 adds
// m * da * Σ a per block and row (PackedActs::asum), as ggml's q4_1 dot does with q8_1's s.
template <DType kType>
struct PackedBlock32 {
  static constexpr bool kNibbles = kType != DType::kQ8_0;
  static constexpr bool kHighBit = kType == DType::kQ5_0 || kType == DType::kQ5_1;
  static constexpr bool kMin = kType == DType::kQ4_1 || kType == DType::kQ5_1;
  static constexpr int32_t kOffset = kType == DType::kQ8_0 ? 128 : kType == DType::kQ4_0 ? 8 : kType == DType::kQ5_0 ? 16 : 0;
  using Block = std::conditional_t<
      kType == DType::kQ8_0, BlockQ8_0,
      std::conditional_t<kType == DType::kQ4_0, BlockQ4_0,
                         std::conditional_t<kType == DType::kQ4_1, BlockQ4_1,
                                            std::conditional_t<kType == DType::kQ5_0, BlockQ5_0, BlockQ5_1>>>>;
  static constexpr int64_t kUnitCols = 32;
  static constexpr int64_t kOperandBytes = kPackedRows * (kNibbles ? 16 : 32);
  static constexpr int64_t kUnitBytes = kOperandBytes + (kHighBit ? 64 : 0);
  static constexpr int kSub = 32;
  static constexpr bool kKQuant = false;
  static constexpr bool kInterleavedActs = false;  // reads ActRows::a (see Kernel)
  // ~8.5-10 KiB of blocks per column tile.
  static constexpr int64_t kTileUnits = kNibbles ? 32 : 16;

  static int64_t HeaderBytes(int64_t units) {
    return static_cast<int64_t>(kernels::RoundUp(static_cast<size_t>(units * kPackedRows * 2 * (kMin ? 2 : 1)), 64));
  }

  // q of the block's 32 columns in column order, unsigned (ggml's stored values, fifth bit included).
  static void Quants(const Block& b, uint8_t* q) {
    if constexpr (!kNibbles) {
      for (int c = 0; c < 32; ++c) q[c] = static_cast<uint8_t>(b.qs[c] + 128);
    } else {
      uint32_t qh = 0;
      if constexpr (kHighBit) std::memcpy(&qh, b.qh, 4);
      for (int c = 0; c < 16; ++c) {
        q[c] = static_cast<uint8_t>((b.qs[c] & 0xF) | (((qh >> c) & 1) << 4));
        q[c + 16] = static_cast<uint8_t>((b.qs[c] >> 4) | (((qh >> (c + 16)) & 1) << 4));
      }
    }
  }

  static void PackGroup(const ops::WeightView& w, const PackedLayout& g, int64_t group, uint8_t* dst) {
    const size_t row_bytes = RowBytes(w.type, w.cols);
    auto* scales = reinterpret_cast<uint16_t*>(dst);
    uint8_t* quants = dst + g.header_bytes;
    std::memset(dst, 0, static_cast<size_t>(g.group_bytes));  // padding rows: d = m = 0, q = 0
    for (int64_t l = 0; l < kPackedRows && group * kPackedRows + l < w.rows; ++l) {
      const int64_t r = group * kPackedRows + l;
      const auto* blk = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + r * row_bytes);
      for (int64_t b = 0; b < g.units; ++b) {
        scales[b * kPackedRows + l] = blk[b].d;
        if constexpr (kMin) scales[(g.units + b) * kPackedRows + l] = blk[b].m;
        uint8_t q[32];
        Quants(blk[b], q);
        uint8_t* unit = quants + b * kUnitBytes;
        for (int quad = 0; quad < 8; ++quad)
          for (int k = 0; k < 4; ++k) {
            const int byte = 4 * static_cast<int>(l) + k;  // in the operand vector
            const uint8_t x = q[4 * quad + k];
            if constexpr (!kNibbles) {
              unit[quad * 64 + byte] = x;
            } else {
              // Quads 0-3 fill the low nibbles, 4-7 the high ones of the same bytes.
              unit[(quad & 3) * 64 + byte] |= static_cast<uint8_t>((x & 0xF) << (quad < 4 ? 0 : 4));
              if constexpr (kHighBit) unit[kOperandBytes + byte] |= static_cast<uint8_t>((x >> 4) << quad);
            }
          }
      }
    }
  }

  // corr = -offset * Σ a per block: removes the excess of the unsigned operands in the accumulator
  // (nothing to remove for Q4_1 / Q5_1, nor for Q8_0's signed operands on AVX2: StartSum starts
  // those at zero).
  static void PrepareActs(const PackedActs& pa, int64_t j) {
    if constexpr (kOffset != 0 && !kSignedDot) OffsetCorrection(pa, j, 32, kOffset);
  }

  // Q8_0 on targets whose byte products saturate past int16 (AVX2): signed operands q, no offset.
  static constexpr bool kSignedDot = kPackedSignedQ8 && kType == DType::kQ8_0;

  // Operand quad `quad` (0..7) of the block at q: for the nibble formats quads 0-3 are the low
  // nibbles of its 4 loads and 4-7 the high ones (the loads hit L1), plus the fifth bits from the
  // block's plane (Q5_x: bit `quad` of each plane byte moved to bit 4).
  DSPARK_PACKED_ATTR static HWY_INLINE PackedI Operand(const uint8_t* HWY_RESTRICT q, int quad) {
    if constexpr (kNibbles) {
      const PackedI v = LoadPI(q + 64 * (quad & 3));
      PackedI x = quad < 4 ? And(v, SetPI8(0x0F)) : HighNibbles(v);
      if constexpr (kHighBit) x = Or(x, BitTo4(LoadPI(q + kOperandBytes), quad));
      return x;
    } else if constexpr (kSignedDot) {
      return Xor(LoadPI(q + 64 * quad), SetPI8(static_cast<int8_t>(0x80)));  // q + 128 back to q
    } else {
      return LoadPI(q + 64 * quad);
    }
  }
  // The block's accumulator start (the offset correction) and one operand's products.
  DSPARK_PACKED_ATTR static HWY_INLINE PackedI StartSum(int32_t corr) {
    return kOffset == 0 || kSignedDot ? ZeroPI() : SetPI(corr);  // corr is only written for an offset
  }
  // Whether a block's 8 Dots of one row add up exactly as one short sum (ShortDots): Q4_0 / Q4_1's
  // q <= 15 do; Q5_x's q <= 31 and Q8_0's signed bytes do not.
  static constexpr bool kShort = kNibbles && !kHighBit && ShortDots(15) >= 8;
  template <bool kVex>
  DSPARK_PACKED_ATTR static HWY_INLINE void AddProducts(PackedI& acc, PackedI w, int32_t a) {
    if constexpr (kSignedDot) {
      DotSigned<kVex>(acc, w, a);
    } else if constexpr (kShort) {
      DotValueShort<kVex>(acc, w, a);
    } else {
      DotValue<kVex>(acc, w, a);
    }
  }
  // One software prefetch per 64 bytes of the block, kPackedPrefetch ahead.
  static HWY_INLINE void Prefetch(const uint8_t* q, int quad) {
    if constexpr (kPackedPrefetch > 0)
      if (quad < kUnitBytes / 64) _mm_prefetch(reinterpret_cast<const char*>(q + 64 * quad + kPackedPrefetch), _MM_HINT_T0);
  }
  // The rows' min term of block b (Q4_1 / Q5_1): f += m * da * Σ a.
  DSPARK_PACKED_ATTR static HWY_INLINE PackedF AddMin(const uint8_t* HWY_RESTRICT group, const PackedLayout& g, int64_t b,
                                                      float asum, PackedF f) {
    if constexpr (kMin) {
      return FmaPF(HalvesToPF(group + (g.units + b) * kPackedRows * 2), SetPF(asum), f);
    } else {
      return f;
    }
  }

  // With AVX-512, kM <= 2 splits each block's 8 vpdpbusd over two chains (one chain is 8 dependent
  // instructions); AVX2's 16 registers have no room for the second set.
  template <int kM, bool kVex>
  DSPARK_PACKED_ATTR static void Kernel(const uint8_t* HWY_RESTRICT group, const PackedLayout& g, int64_t b0,
                                        int64_t b1, const PackedActs& pa, int64_t j0, float* HWY_RESTRICT f_io) {
    constexpr bool kSplit = DSPARK_HAVE_VNNI && kM <= 2;
    const uint8_t* quants = group + g.header_bytes;
    const ActRows<kM> rows(pa, j0);
    const auto& da = rows.da;
    const auto& corr = rows.corr;
    PackedF f[kM];
    for (int j = 0; j < kM; ++j) f[j] = LoadPF(f_io + 16 * j);
    for (int64_t b = b0; b < b1; ++b) {
      const PackedF dw = HalvesToPF(group + b * kPackedRows * 2);
      const uint8_t* q = quants + b * kUnitBytes;
      // kSplit: two int32 chains; a short sum where the format allows (AddProducts; with
      // vpdpbusd, kSplit's targets, a short sum is the int32 chain itself).
      PackedI s0[kM], s1[kSplit ? kM : 1];
      for (int j = 0; j < kM; ++j) {
        s0[j] = kShort ? StartShort<kVex>(StartSum(corr[j][b])) : StartSum(corr[j][b]);
        if constexpr (kSplit) s1[j] = ZeroPI();
      }
      for (int quad = 0; quad < 8; ++quad) {
        // The stream is sequential (groups follow each other); a software prefetch this far ahead
        // still adds to what the hardware prefetcher alone sustains on one core.
        Prefetch(q, quad);
        const PackedI wq = Operand(q, quad);
        for (int j = 0; j < kM; ++j) {
          // The dword as a value (a separate broadcast): the interleaved rows and the embedded
          // broadcast that help the K-quant kernels make Q8_0 slower and do not help Q4_0.
          if constexpr (kSplit) {
            AddProducts<kVex>((quad & 1) ? s1[j] : s0[j], wq, rows.a[j][8 * b + quad]);
          } else {
            AddProducts<kVex>(s0[j], wq, rows.a[j][8 * b + quad]);
          }
        }
      }
      for (int j = 0; j < kM; ++j) {
        PackedI s = s0[j];
        if constexpr (kSplit) s = AddPI(s, s1[j]);
        if constexpr (kShort) s = FinishShort<kVex>(s, StartSum(corr[j][b]));
        f[j] = FmaPF(ToPF(s), MulPF(dw, SetPF(da[j][b])), f[j]);
        f[j] = AddMin(group, g, b, pa.asum[(j0 + j) * pa.nsub + b], f[j]);
      }
    }
    for (int j = 0; j < kM; ++j) StorePF(f[j], f_io + 16 * j);
  }

#if DSPARK_HAVE_VNNI
  // Kernel<1> over two groups at once (f_io: [2][16]): one activation row gives a group only two
  // chains of 4 dependent vpdpbusd per block, and a small matrix spends as much on the driver's
  // per-group work as on the blocks; two groups per pass halve both (a small draft model's LM
  // head is such a matrix). Each group's sums and float chain are Kernel<1>'s. (AVX2 has not the
  // registers for two groups.)
  DSPARK_PACKED_ATTR static void KernelPair(const uint8_t* HWY_RESTRICT group0, const PackedLayout& g, int64_t b0,
                                            int64_t b1, const PackedActs& pa, float* HWY_RESTRICT f_io) {
    const uint8_t* group1 = group0 + g.group_bytes;
    const uint8_t* quants0 = group0 + g.header_bytes;
    const uint8_t* quants1 = group1 + g.header_bytes;
    const ActRows<1> rows(pa, 0);
    PackedF f0 = LoadPF(f_io), f1 = LoadPF(f_io + 16);
    for (int64_t b = b0; b < b1; ++b) {
      const PackedF dw0 = HalvesToPF(group0 + b * kPackedRows * 2);
      const PackedF dw1 = HalvesToPF(group1 + b * kPackedRows * 2);
      const uint8_t* q0 = quants0 + b * kUnitBytes;
      const uint8_t* q1 = quants1 + b * kUnitBytes;
      PackedI s00 = StartSum(rows.corr[0][b]), s01 = ZeroPI();
      PackedI s10 = s00, s11 = ZeroPI();
      for (int quad = 0; quad < 8; ++quad) {
        Prefetch(q0, quad);
        Prefetch(q1, quad);
        const int32_t a = rows.a[0][8 * b + quad];
        const PackedI w0 = Operand(q0, quad), w1 = Operand(q1, quad);
        if (quad & 1) {
          AddProducts<false>(s01, w0, a);
          AddProducts<false>(s11, w1, a);
        } else {
          AddProducts<false>(s00, w0, a);
          AddProducts<false>(s10, w1, a);
        }
      }
      const PackedF da = SetPF(rows.da[0][b]);
      f0 = FmaPF(ToPF(AddPI(s00, s01)), MulPF(dw0, da), f0);
      f1 = FmaPF(ToPF(AddPI(s10, s11)), MulPF(dw1, da), f1);
      f0 = AddMin(group0, g, b, pa.asum[b], f0);
      f1 = AddMin(group1, g, b, pa.asum[b], f1);
    }
    StorePF(f0, f_io);
    StorePF(f1, f_io + 16);
  }
#endif
};
using PackedQ8_0 = PackedBlock32<DType::kQ8_0>;
using PackedQ4_0 = PackedBlock32<DType::kQ4_0>;
using PackedQ4_1 = PackedBlock32<DType::kQ4_1>;
using PackedQ5_0 = PackedBlock32<DType::kQ5_0>;
using PackedQ5_1 = PackedBlock32<DType::kQ5_1>;

inline size_t PackedBytesImpl(DType type, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const auto bytes = [&](auto format) -> size_t {
    using Format = decltype(format);
    if (cols % Format::kUnitCols != 0) return 0;
    return static_cast<size_t>(PackedLayoutOf<Format>(rows, cols).total());
  };
  if (!PackedKernelsUsable()) return 0;
  switch (type) {
    case DType::kQ8_0: return bytes(PackedQ8_0());
    case DType::kQ4_0: return bytes(PackedQ4_0());
    case DType::kQ4_1: return bytes(PackedQ4_1());
    case DType::kQ5_0: return bytes(PackedQ5_0());
    case DType::kQ5_1: return bytes(PackedQ5_1());
    case DType::kQ4_K: return bytes(PackedQ4_K());
    case DType::kQ5_K: return bytes(PackedQ5_K());
    case DType::kQ6_K: return bytes(PackedQ6_K());
    default: return 0;
  }
}

inline void PackWeightsImpl(const ops::WeightView& w, void* dst, ThreadPool& pool) {
  switch (w.type) {
    case DType::kQ8_0: PackGroups<PackedQ8_0>(w, dst, pool); break;
    case DType::kQ4_0: PackGroups<PackedQ4_0>(w, dst, pool); break;
    case DType::kQ4_1: PackGroups<PackedQ4_1>(w, dst, pool); break;
    case DType::kQ5_0: PackGroups<PackedQ5_0>(w, dst, pool); break;
    case DType::kQ5_1: PackGroups<PackedQ5_1>(w, dst, pool); break;
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
      case DType::kQ4_1: MatMulPackedRun<PackedQ4_1>(w, x, m, y, pool); return;
      case DType::kQ5_0: MatMulPackedRun<PackedQ5_0>(w, x, m, y, pool); return;
      case DType::kQ5_1: MatMulPackedRun<PackedQ5_1>(w, x, m, y, pool); return;
      case DType::kQ4_K: MatMulPackedRun<PackedQ4_K>(w, x, m, y, pool); return;
      case DType::kQ5_K: MatMulPackedRun<PackedQ5_K>(w, x, m, y, pool); return;
      case DType::kQ6_K: MatMulPackedRun<PackedQ6_K>(w, x, m, y, pool); return;
      default: break;
    }
  }
  MatMulQuantImpl(w, x, m, y, pool);
}

#else  // !DSPARK_HAVE_PACKED_Q: no packed kernel on this target; MatMul reads the original rows.

inline size_t PackedBytesImpl(DType, int64_t, int64_t) { return 0; }
inline void PackWeightsImpl(const ops::WeightView&, void*, ThreadPool&) {}
inline void MatMulPackedImpl(const ops::WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  MatMulQuantImpl(w, x, m, y, pool);
}

#endif  // DSPARK_HAVE_PACKED_Q

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
