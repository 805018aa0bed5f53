// Packed-layout formats of the K-quants (Q4_K, Q5_K, Q6_K) for the driver in
// matmul_packed_common-inl.h (every m: decode, verification and prefill). As for Q8_0
// (matmul_packed-inl.h), 16 weight rows sit in 16 int32 lanes (one zmm with AVX-512 VNNI, two ymm
// with AVX2: matmul_packed_simd-inl.h), so one vpdpbusd multiplies 4 columns of 16 rows by one
// activation dword broadcast from memory, and scales are per-lane vectors instead of per-block
// shuffles.
//
// Q4_K (ggml block_q4_K: x = d*sc_s*q - dmin*m_s, q in [0, 15], 8 sub-blocks s of 32 columns),
// per 16-row group and 256-column super-block, 2368 bytes (the rows' 2304 plus 64):
//   [16 rows] fp16 d | [16] fp16 dmin | [8 sub-blocks][16 rows] u8 sc
//     | [4 sub-block pairs][16 rows][2] u8 m                                        (320 bytes)
//   [8 sub-blocks][4 quads][16 rows][4 bytes] q: low nibble of byte k = column 4*quad + k of the
//     sub-block, high nibble = column 16 + 4*quad + k                                (2048 bytes)
// Super-blocks follow each other with no header, so a group is one sequential stream.
//
// Q5_K (block_q5_K: Q4_K with q in [0, 31], the fifth bit in qh), 2880 bytes per group and
// super-block: Q4_K's 320 bytes of scales, then per sub-block its 256 bytes of nibbles followed by
// a 64-byte plane of fifth bits: bit i of byte b is the fifth bit of byte b of nibble operand i
// (the low nibbles of quads 0-3, then the high ones). One GFNI affine and an or per operand,
// shared by all activation rows, complete it; the rest is Q4_K's kernel.
//
// Per sub-block, shared by all activation rows: 4 loads give 8 unsigned operands (and; GFNI for
// the high nibbles: q needs no offset) and sc_s as a float vector. Per activation row: 8 vpdpbusd
// into an exact int32 Σ q·a, then g += cvt(Σ q·a) * sc_s. Per super-block and row: the min term
// Σ_s m_s * Σ_s a exactly in int32 (4 vpdpwssd on int16 pairs), and
//   f += da * (d * g - dmin * cvt(min sum))
// (Q8_K has one da per 256 columns, so d, dmin and da multiply once per super-block). That is ~10
// vector instructions per activation row for the 512 weights of a sub-block, plus ~10 shared by
// all rows; the row layout's fused dot (DotKVnni) spends ~70 per activation row on them.
//
// Q6_K (ggml block_q6_K: x = d*sc_s*(q - 32), q in [0, 63], 16 sub-blocks s of 16 columns, int8
// sc), per group: [super-blocks][16 rows] fp16 d (padded to 64 bytes), then per super-block
// 3328 bytes (the rows' 3360 less the d):
//   [16 sub-blocks][16 rows] int8 sc                                                  (256 bytes)
//   [16 sub-blocks][3 planes][16 rows][4 bytes]: byte k of plane i holds q of column 4i + k in
//     bits 0-5 and bits 2i, 2i+1 of q of column 12 + k in bits 6-7                   (3072 bytes)
// So three operands are one and each, the fourth is the planes' top bits gathered by 3 GFNI
// affines and one ternary or. The -32 is removed exactly in integers: each sub-block's
// accumulator starts at -32 * Σ a (as matmul_vnni-inl.h removes its offsets).
#if defined(DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_
#undef DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/matmul_packed_common-inl.h"
#include "kernels/matmul_packed_simd-inl.h"  // DSPARK_HAVE_PACKED_Q, PackedI, PackedF
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

#if DSPARK_HAVE_PACKED_Q

// Q4_K and Q5_K (kHighBit): the same scales and nibbles; Q5_K adds each sub-block's plane of fifth
// bits (see the top of the file).
template <bool kHighBit>
struct PackedQ45_K {
  using Block = std::conditional_t<kHighBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int64_t kUnitCols = kQK_K;
  static constexpr int64_t kScaleBytes = 320;  // d, dmin, sc, m of 16 rows
  static constexpr int64_t kNibbleBytes = kPackedRows * 16;  // 32 columns of 16 rows at 4 bits
  static constexpr int64_t kPlaneBytes = kHighBit ? 64 : 0;  // Q5_K: the plane of fifth bits
  static constexpr int64_t kSubBytes = kNibbleBytes + kPlaneBytes;
  static constexpr int64_t kUnitBytes = kScaleBytes + 8 * kSubBytes;
  static constexpr int64_t kLinesPerSub = (kUnitBytes / 64 + 7) / 8;  // Q4_K 5 of 37, Q5_K 6 of 45
  static constexpr int kSub = 32;
  static constexpr bool kKQuant = true;
  static constexpr bool kInterleavedActs = true;  // reads ActRows::A
  // Rows per pass: past kPackedRowChunk the float outputs stay in memory (KernelOutputs: one load
  // and store per super-block and row, against ~80 instructions of sub-block work), so with
  // AVX-512 a 9-row verification block (n-max 8) unpacks each weight tile once. Q4_K without VNNI
  // (KernelHalves: per row one int16 and one float accumulator, then 6 shared registers) fits 5 rows
  // in the 16 ymm: a 5-row block is one pass instead of 3 + 2, a 9-row one 5 + 4 instead of 3 x 3
  // (6 rows spill, and gain nothing over 3 + 3).
  static constexpr int64_t kMaxChunkRows = DSPARK_HAVE_VNNI ? 12 : (!kHighBit ? 5 : kPackedRowChunk);
  // 4 super-blocks of 16 rows = 9.25 KiB (Q5_K 11.25).
  static constexpr int64_t kTileUnits = 4;
  static_assert(kUnitBytes % 64 == 0);
  // Software prefetch distance: 4096 bytes, farther than 1024, keeps one core's stream of Q4_K
  // rows closer to what the memory delivers (kernels_bench MatMulPacked/q4_K, cold m = 1).
  static constexpr int64_t kPrefetch = 4096;

  static int64_t HeaderBytes(int64_t) { return 0; }

  // q of the super-block's elements in element order (ref::KBlock), unsigned: Q4_K's nibbles, and
  // for Q5_K bit (2c) / (2c + 1) of qh[i] on top of element i / i + 32 of 64-element chunk c.
  static void Quants(const Block& b, uint8_t* q) {
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 32; ++i) {
        q[64 * c + i] = b.qs[32 * c + i] & 0xF;
        q[64 * c + 32 + i] = b.qs[32 * c + i] >> 4;
        if constexpr (kHighBit) {
          q[64 * c + i] |= static_cast<uint8_t>(((b.qh[i] >> (2 * c)) & 1) << 4);
          q[64 * c + 32 + i] |= static_cast<uint8_t>(((b.qh[i] >> (2 * c + 1)) & 1) << 4);
        }
      }
    }
  }

  static void PackGroup(const ops::WeightView& w, const PackedLayout& g, int64_t group, uint8_t* dst) {
    const size_t row_bytes = RowBytes(w.type, w.cols);
    std::memset(dst, 0, static_cast<size_t>(g.group_bytes));  // padding rows: d = dmin = 0, q = 0
    for (int64_t l = 0; l < kPackedRows; ++l) {
      const int64_t r = group * kPackedRows + l;
      if (r >= w.rows) break;
      const auto* blk = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + r * row_bytes);
      for (int64_t u = 0; u < g.units; ++u) {
        uint8_t* sb = dst + g.header_bytes + u * kUnitBytes;
        std::memcpy(sb + 2 * l, &blk[u].d, 2);
        std::memcpy(sb + 32 + 2 * l, &blk[u].dmin, 2);
        for (int s = 0; s < 8; ++s) {  // m in pairs of sub-blocks: the int16 pairs of vpdpwssd
          GetScaleMinK4(s, blk[u].scales, &sb[64 + 16 * s + l], &sb[192 + 32 * (s / 2) + 2 * l + s % 2]);
        }
        uint8_t q[kQK_K];
        Quants(blk[u], q);
        for (int s = 0; s < 8; ++s) {
          uint8_t* sub = sb + kScaleBytes + s * kSubBytes;
          for (int quad = 0; quad < 4; ++quad)
            for (int k = 0; k < 4; ++k) {
              const uint8_t lo = q[32 * s + 4 * quad + k], hi = q[32 * s + 16 + 4 * quad + k];
              const int byte = quad * 64 + 4 * l + k;  // in the quad's operand vector
              sub[byte] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
              if constexpr (kHighBit) {
                // Bit `quad` of the byte in the fifth-bit plane for the low-nibble operand, bit
                // 4 + quad for the high-nibble one.
                uint8_t& plane = sub[kNibbleBytes + 4 * l + k];
                plane |= static_cast<uint8_t>(((lo >> 4) << quad) | ((hi >> 4) << (4 + quad)));
              }
            }
        }
      }
    }
  }

  // corr[p], p < nsub / 2: Σ a over sub-blocks 2p and 2p + 1 as an int16 pair (|Σ| <= 32 * 127),
  // the activation operand of the min term's vpdpwssd.
  static void PrepareActs(const PackedActs& pa, int64_t j) {
    const int8_t* q = pa.q + j * pa.cols;
    int32_t* pairs = pa.corr + j * pa.nsub;
    for (int64_t p = 0; p < pa.nsub / 2; ++p) {
      int32_t s0 = 0, s1 = 0;
      for (int k = 0; k < 32; ++k) {
        s0 += q[64 * p + k];
        s1 += q[64 * p + 32 + k];
      }
      pairs[p] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(s0)) |
                                      (static_cast<uint32_t>(static_cast<uint16_t>(s1)) << 16));
    }
  }

#if DSPARK_HAVE_VNNI
  // The unsigned operands of one quad of sub-block `sub`: the low and high nibbles, and for Q5_K
  // their fifth bits from the sub-block's plane (bits quad and 4 + quad of each byte to bit 4).
  // (Byte masks, kmov and a masked vpaddb, cost far more than the one affine per operand.)
  // Without VNNI, HalfOperands on 8 rows.
  DSPARK_PACKED_ATTR static HWY_INLINE void Operands(const uint8_t* HWY_RESTRICT sub, int quad, PackedI& lo,
                                                     PackedI& hi) {
    const PackedI v = LoadPI(sub + 64 * quad);
    lo = And(v, SetPI8(0x0F));
    hi = HighNibbles(v);
    if constexpr (kHighBit) {
      const PackedI plane = LoadPI(sub + kNibbleBytes);
      lo = Or(lo, BitTo4(plane, quad));
      hi = Or(hi, BitTo4(plane, 4 + quad));
    }
  }
#else
  // Operands on half h of the sub-block's 16 rows; `plane`: that half of its fifth-bit plane (Q5_K).
  static HWY_INLINE void HalfOperands(const uint8_t* HWY_RESTRICT sub, int quad, int h, HalfI plane, HalfI& lo,
                                      HalfI& hi) {
    const HalfI v = LoadHalf(sub + 64 * quad, h);
    lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    hi = HighNibbles(v);
    if constexpr (kHighBit) {
      lo = _mm256_or_si256(lo, BitTo4(plane, quad));
      hi = _mm256_or_si256(hi, BitTo4(plane, 4 + quad));
    }
  }
#endif

  // Quads (2 Dots each: low and high nibbles) per short sum (ShortDots) in KernelHalves: a Q4_K
  // sub-block's 8 Dots (q <= 15) are one short sum, Q5_K's (q <= 31: 4 Dots at most) two.
  static constexpr int kQuadsPerShort = kHighBit ? 2 : 4;
  static_assert(ShortDots(kHighBit ? 31 : 15) >= 2 * kQuadsPerShort);

  // f += da * (d * Σ_s sc_s * cvt(Σ q·a) - dmin * cvt(Σ_s m_s * Σ a)) per super-block and
  // activation row (see the top of the file). kM <= 2 splits each sub-block's 8 vpdpbusd over two
  // chains (low and high nibbles): one chain is 8 dependent instructions. Without VNNI it is
  // KernelHalves.
  template <int kM, bool kVex>
  DSPARK_PACKED_ATTR static void Kernel(const uint8_t* HWY_RESTRICT group, const PackedLayout& g, int64_t u0,
                                        int64_t u1, const PackedActs& pa, int64_t j0, float* HWY_RESTRICT f_io) {
#if !DSPARK_HAVE_VNNI
    return KernelHalves<kM, kVex>(group, g, u0, u1, pa, j0, f_io);
#else
    constexpr bool kSplit = kM <= 2;
    const ActRows<kM> rows(pa, j0);
    const auto& da = rows.da;
    const auto& qpair = rows.corr;
    KernelOutputs<kM> f(f_io);
    for (int64_t u = u0; u < u1; ++u) {
      const uint8_t* sb = group + g.header_bytes + u * kUnitBytes;
      PackedF gs[kM];
      for (int j = 0; j < kM; ++j) gs[j] = ZeroPF();
      for (int s = 0; s < 8; ++s) {
        PrefetchUnitLines<kPrefetch, kUnitBytes>(sb, kLinesPerSub * s, kLinesPerSub);
        const PackedF sc = U8ToPF(sb + 64 + 16 * s);
        const uint8_t* sub = sb + kScaleBytes + s * kSubBytes;
        const int64_t aw = 64 * u + 8 * s;  // first activation dword of the sub-block
        if constexpr (kSplit) {
          PackedI lo[4], hi[4];
          for (int quad = 0; quad < 4; ++quad) Operands(sub, quad, lo[quad], hi[quad]);
          for (int j = 0; j < kM; ++j) {
            PackedI s0 = ZeroPI(), s1 = ZeroPI();
            for (int quad = 0; quad < 4; ++quad) {
              Dot<kVex>(s0, lo[quad], rows.A(aw + quad, j));
              Dot<kVex>(s1, hi[quad], rows.A(aw + 4 + quad, j));
            }
            gs[j] = FmaPF(ToPF(AddPI(s0, s1)), sc, gs[j]);
          }
        } else {
          // Quad-outer, row-inner: kM independent accumulator chains in program order (row-outer
          // made each row one chain of 8 dependent vpdpbusd, and with lo[4], hi[4] live next to
          // f, gs and mins Kernel<8> spilled), and only one quad's two operands live.
          PackedI acc[kM];
          for (int j = 0; j < kM; ++j) acc[j] = ZeroPI();
          for (int quad = 0; quad < 4; ++quad) {
            PackedI lo, hi;
            Operands(sub, quad, lo, hi);
            for (int j = 0; j < kM; ++j) Dot<kVex>(acc[j], lo, rows.A(aw + quad, j));
            for (int j = 0; j < kM; ++j) Dot<kVex>(acc[j], hi, rows.A(aw + 4 + quad, j));
          }
          for (int j = 0; j < kM; ++j) gs[j] = FmaPF(ToPF(acc[j]), sc, gs[j]);
        }
      }
      // The min term after the sub-blocks, so its accumulators are not live across them.
      PackedI mins[kM];
      for (int j = 0; j < kM; ++j) mins[j] = ZeroPI();
      for (int p = 0; p < 4; ++p)
        for (int j = 0; j < kM; ++j) DotPairsU8(mins[j], sb + 192 + 32 * p, qpair[j][4 * u + p]);
      const PackedF d = HalvesToPF(sb);
      const PackedF dmin = HalvesToPF(sb + 32);
      for (int j = 0; j < kM; ++j) f.Add(j, FnmaPF(ToPF(mins[j]), dmin, MulPF(gs[j], d)), da[j][8 * u]);
    }
    f.Store();
#endif
  }

#if !DSPARK_HAVE_VNNI
  // Kernel without VNNI: each super-block runs as two halves of 8 weight rows (ymm), each over its
  // 8 sub-blocks, instead of 16 rows in ymm pairs. Kernel's accumulators for 4 activation rows
  // (2 ymm per row each for the int sums, the float sums and the outputs) did not fit 16 ymm:
  // GCC kept half the int sums on the stack, and each quad's adds went through a store and a
  // reload, a chain of store-forwarding latency per quad. A half needs 1 ymm per row for each,
  // the operands of one quad and the broadcast; it re-reads the super-block (from L1) and
  // broadcasts the activations once per half. The Dots add up in short sums (kQuadsPerShort
  // quads each, widened to int32 once). Every lane's integer sums are exact and its float steps
  // are Kernel's, in the same order: the same outputs bitwise.
  template <int kM, bool kVex>
  static void KernelHalves(const uint8_t* HWY_RESTRICT group, const PackedLayout& g, int64_t u0, int64_t u1,
                           const PackedActs& pa, int64_t j0, float* HWY_RESTRICT f_io) {
    const ActRows<kM> rows(pa, j0);
    KernelOutputs<kM> f(f_io);
    for (int64_t u = u0; u < u1; ++u) {
      const uint8_t* sb = group + g.header_bytes + u * kUnitBytes;
      HWY_ALIGN float gsum[kM][kPackedRows];  // Σ_s sc_s * cvt(Σ q·a), both halves
      for (int h = 0; h < 2; ++h) {
        HalfF gs[kM];
        for (int j = 0; j < kM; ++j) gs[j] = _mm256_setzero_ps();
        for (int s = 0; s < 8; ++s) {
          // The unit's lines spread over the 16 steps of both halves, as Kernel spreads them over
          // its 8 (all in the first half would leave the second without a stream when DRAM-bound).
          constexpr int kLinesPerStep = (kUnitBytes / 64 + 15) / 16;
          PrefetchUnitLines<kPrefetch, kUnitBytes>(sb, kLinesPerStep * (8 * h + s), kLinesPerStep);
          const HalfF sc = HalfU8ToF(sb + 64 + 16 * s, h);
          const uint8_t* sub = sb + kScaleBytes + s * kSubBytes;
          const int64_t aw = 64 * u + 8 * s;  // first activation dword of the sub-block
          const HalfI plane = kHighBit ? LoadHalf(sub + kNibbleBytes, h) : _mm256_setzero_si256();
          // acc: the short sum being built; sum: the int32 sum of the sub-block's earlier ones (Q5_K).
          HalfI acc[kM], sum[kM];
          for (int j = 0; j < kM; ++j) acc[j] = sum[j] = _mm256_setzero_si256();
          for (int quad = 0; quad < 4; ++quad) {
            if (quad > 0 && quad % kQuadsPerShort == 0) {
              for (int j = 0; j < kM; ++j) {
                sum[j] = _mm256_add_epi32(sum[j], HalfFinishShort<kVex>(acc[j]));
                acc[j] = _mm256_setzero_si256();
              }
            }
            HalfI lo, hi;
            HalfOperands(sub, quad, h, plane, lo, hi);
            for (int j = 0; j < kM; ++j) HalfDotShort<kVex>(acc[j], lo, *rows.A(aw + quad, j));
            for (int j = 0; j < kM; ++j) HalfDotShort<kVex>(acc[j], hi, *rows.A(aw + 4 + quad, j));
            // Each quad's sums in registers before the next quad: the adds are associative, and
            // GCC otherwise computed all 32 products of the unrolled sub-block first, spilling them.
            for (int j = 0; j < kM; ++j) asm("" : "+x"(acc[j]));
          }
          for (int j = 0; j < kM; ++j) {
            HalfI total = HalfFinishShort<kVex>(acc[j]);
            if constexpr (kQuadsPerShort < 4) total = _mm256_add_epi32(sum[j], total);
            gs[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), sc, gs[j]);
          }
        }
        for (int j = 0; j < kM; ++j) _mm256_store_ps(gsum[j] + 8 * h, gs[j]);
      }
      PackedI mins[kM];
      for (int j = 0; j < kM; ++j) mins[j] = ZeroPI();
      for (int p = 0; p < 4; ++p)
        for (int j = 0; j < kM; ++j) DotPairsU8(mins[j], sb + 192 + 32 * p, rows.corr[j][4 * u + p]);
      const PackedF d = HalvesToPF(sb);
      const PackedF dmin = HalvesToPF(sb + 32);
      for (int j = 0; j < kM; ++j)
        f.Add(j, FnmaPF(ToPF(mins[j]), dmin, MulPF(LoadPF(gsum[j]), d)), rows.da[j][8 * u]);
    }
    f.Store();
  }
#endif
};
using PackedQ4_K = PackedQ45_K<false>;
using PackedQ5_K = PackedQ45_K<true>;

// Q6_K, laid out as the top of the file describes.
struct PackedQ6_K {
  static constexpr int64_t kUnitCols = kQK_K;
  static constexpr int64_t kScaleBytes = 16 * kPackedRows;  // int8 sc
  static constexpr int64_t kSubBytes = 3 * 64;               // 16 columns of 16 rows at 6 bits
  static constexpr int64_t kUnitBytes = kScaleBytes + 16 * kSubBytes;
  static constexpr int kSub = 16;
  static constexpr bool kKQuant = true;
  static constexpr bool kInterleavedActs = true;  // reads ActRows::A
  static constexpr int64_t kMaxChunkRows = DSPARK_HAVE_VNNI ? 12 : kPackedRowChunk;  // and f past kPackedRowChunk in memory
  // 3 super-blocks of 16 rows = 9.75 KiB.
  static constexpr int64_t kTileUnits = 3;
  static_assert(kUnitBytes % 64 == 0);
  static constexpr int64_t kPrefetch = PackedQ4_K::kPrefetch;

  // The d of all super-blocks: [units][16 rows] fp16.
  static int64_t HeaderBytes(int64_t units) {
    return static_cast<int64_t>(kernels::RoundUp(static_cast<size_t>(units * kPackedRows * 2), 64));
  }

  // Plane i < 3 of sub-block s, byte k of row l: bits 0-5 = q of column 4i + k, bits 6-7 = bits
  // 2i, 2i + 1 of q of column 12 + k.
  static void PackGroup(const ops::WeightView& w, const PackedLayout& g, int64_t group, uint8_t* dst) {
    const size_t row_bytes = RowBytes(w.type, w.cols);
    std::memset(dst, 0, static_cast<size_t>(g.group_bytes));  // padding rows: d = 0, q = 0
    auto* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t l = 0; l < kPackedRows; ++l) {
      const int64_t r = group * kPackedRows + l;
      if (r >= w.rows) break;
      const auto* blk =
          reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w.data) + r * row_bytes);
      for (int64_t u = 0; u < g.units; ++u) {
        d[u * kPackedRows + l] = blk[u].d;
        uint8_t* sb = dst + g.header_bytes + u * kUnitBytes;
        for (int s = 0; s < 16; ++s) sb[kPackedRows * s + l] = static_cast<uint8_t>(blk[u].scales[s]);
        uint8_t q[kQK_K];  // element order, unsigned (ref::KBlock without the -32)
        for (int half = 0; half < 2; ++half) {
          const uint8_t* ql = blk[u].ql + 64 * half;
          const uint8_t* qh = blk[u].qh + 32 * half;
          uint8_t* qq = q + 128 * half;
          for (int i = 0; i < 32; ++i) {
            qq[i] = static_cast<uint8_t>((ql[i] & 0xF) | (((qh[i] >> 0) & 3) << 4));
            qq[i + 32] = static_cast<uint8_t>((ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4));
            qq[i + 64] = static_cast<uint8_t>((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4));
            qq[i + 96] = static_cast<uint8_t>((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4));
          }
        }
        for (int s = 0; s < 16; ++s) {
          uint8_t* planes = sb + kScaleBytes + s * kSubBytes;
          for (int i = 0; i < 3; ++i)
            for (int k = 0; k < 4; ++k)
              planes[64 * i + 4 * l + k] =
                  static_cast<uint8_t>(q[16 * s + 4 * i + k] | (((q[16 * s + 12 + k] >> (2 * i)) & 3) << 6));
        }
      }
    }
  }

  // corr = -32 * Σ a per sub-block: starting the accumulator there makes it Σ (q - 32) * a.
  static void PrepareActs(const PackedActs& pa, int64_t j) { OffsetCorrection(pa, j, 16, 32); }

  // Per sub-block, shared: the 4 unsigned operands (3 x and, and the fourth from the planes' top
  // bits: 3 GFNI affine + 1 ternary or) and sc as float. Per activation row: 4 vpdpbusd from the
  // offset correction, g += cvt(Σ (q - 32)·a) * sc_s. Per super-block and row: f += g * d * da.
  template <int kM, bool kVex>
  DSPARK_PACKED_ATTR static void Kernel(const uint8_t* HWY_RESTRICT group, const PackedLayout& g, int64_t u0,
                                        int64_t u1, const PackedActs& pa, int64_t j0, float* HWY_RESTRICT f_io) {
    const PackedI m6 = SetPI8(0x3F);
    const ActRows<kM> rows(pa, j0);
    const auto& da = rows.da;
    const auto& corr = rows.corr;
    KernelOutputs<kM> f(f_io);
    for (int64_t u = u0; u < u1; ++u) {
      const uint8_t* sb = group + g.header_bytes + u * kUnitBytes;
      PackedF gs[kM];
      for (int j = 0; j < kM; ++j) gs[j] = ZeroPF();
      for (int s = 0; s < 16; ++s) {
        // 52 cache lines per super-block: 4 per sub-block, kPrefetch bytes ahead.
        PrefetchUnitLines<kPrefetch, kUnitBytes>(sb, 4 * s, 4);
        const PackedF sc = I8ToPF(sb + kPackedRows * s);
        const uint8_t* planes = sb + kScaleBytes + s * kSubBytes;
        const PackedI p0 = LoadPI(planes), p1 = LoadPI(planes + 64), p2 = LoadPI(planes + 128);
        const PackedI x0 = And(p0, m6), x1 = And(p1, m6), x2 = And(p2, m6);
        const PackedI x3 = Or3(TopBitsTo<0>(p0), TopBitsTo<1>(p1), TopBitsTo<2>(p2));
        const int64_t aw = 64 * u + 4 * s;  // first activation dword of the sub-block
        for (int j = 0; j < kM; ++j) {
          // Two short sums of two Dots each (q <= 63: ShortDots(63) == 2).
          static_assert(ShortDots(63) >= 2);
          PackedI acc = SetPI(corr[j][16 * u + s]);
          PackedI pair = StartShort<kVex>(acc);
          DotShort<kVex>(pair, x0, rows.A(aw, j));
          DotShort<kVex>(pair, x1, rows.A(aw + 1, j));
          acc = FinishShort<kVex>(pair, acc);
          pair = StartShort<kVex>(acc);
          DotShort<kVex>(pair, x2, rows.A(aw + 2, j));
          DotShort<kVex>(pair, x3, rows.A(aw + 3, j));
          acc = FinishShort<kVex>(pair, acc);
          gs[j] = FmaPF(ToPF(acc), sc, gs[j]);
        }
      }
      const PackedF d = HalvesToPF(group + u * kPackedRows * 2);
      for (int j = 0; j < kM; ++j) f.Add(j, MulPF(gs[j], d), da[j][16 * u]);
    }
    f.Store();
  }
};

#endif  // DSPARK_HAVE_PACKED_Q

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
