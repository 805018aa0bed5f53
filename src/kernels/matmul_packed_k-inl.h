// Packed-layout formats of the K-quants for the driver in matmul_packed_common-inl.h (AVX-512 VNNI,
// decode and verification, m <= 16). As for Q8_0 (matmul_packed-inl.h), 16 weight rows sit in the
// 16 int32 lanes of a zmm, so one vpdpbusd multiplies 4 columns of 16 rows by one activation dword
// broadcast from memory, and scales are per-lane vectors instead of per-block shuffles.
//
// Q4_K (ggml block_q4_K: x = d*sc_s*q - dmin*m_s, q in [0, 15], 8 sub-blocks s of 32 columns),
// per 16-row group and 256-column super-block, 2368 bytes (the rows' 2304 plus 64):
//   [16 rows] fp16 d | [16] fp16 dmin | [8 sub-blocks][16 rows] u8 sc
//     | [4 sub-block pairs][16 rows][2] u8 m                                        (320 bytes)
//   [8 sub-blocks][4 quads][16 rows][4 bytes] q: low nibble of byte k = column 4*quad + k of the
//     sub-block, high nibble = column 16 + 4*quad + k                                (2048 bytes)
// Super-blocks follow each other with no header, so a group is one sequential stream.
//
// Per sub-block, shared by all activation rows: 4 loads give 8 unsigned operands (and; GFNI for
// the high nibbles: q needs no offset) and sc_s as a float vector. Per activation row: 8 vpdpbusd
// into an exact int32 Σ q·a, then g += cvt(Σ q·a) * sc_s. Per super-block and row: the min term
// Σ_s m_s * Σ_s a exactly in int32 (4 vpdpwssd on int16 pairs), and
//   f += da * (d * g - dmin * cvt(min sum))
// (Q8_K has one da per 256 columns, so d, dmin and da multiply once per super-block). That is
// ~10 vector instructions per row, sub-block and activation row plus ~10 shared, against ~18 per
// row for the row layout's fused dot (DotKVnni).
#if defined(DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_
#undef DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_PACKED_K_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matmul_packed_common-inl.h"
#include "kernels/matmul_vnni-inl.h"  // DSPARK_HAVE_VNNI, DSPARK_VNNI_ATTR, CvtI32
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

#if DSPARK_HAVE_VNNI

// GF2P8AFFINEQB (GFNI) moves each byte's high nibble to its low nibble in one instruction (shift
// and mask would be two). Every CPU with AVX3_DL (Ice Lake, Zen 4 and later) has GFNI, but Highway
// 1.0.3 does not check for it, so PackedBytes does (HasGfni).
#undef DSPARK_VNNI_GFNI_ATTR
#define DSPARK_VNNI_GFNI_ATTR \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,gfni,fma,f16c,avx2")))

inline bool HasGfni() { return __builtin_cpu_supports("gfni"); }

// Bits 4-7 of each byte to bits 0-3, zeros above: row i of the bit matrix (byte 7 - i) selects
// input bit i + 4.
DSPARK_VNNI_GFNI_ATTR HWY_INLINE __m512i HighNibbles(__m512i v) {
  return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000LL), 0);
}

struct PackedQ4_K {
  static constexpr int64_t kUnitCols = kQK_K;
  static constexpr int64_t kScaleBytes = 320;  // d, dmin, sc, m of 16 rows
  static constexpr int64_t kSubBytes = kPackedRows * 16;  // 32 columns of 16 rows at 4 bits
  static constexpr int64_t kUnitBytes = kScaleBytes + 8 * kSubBytes;
  static constexpr int kSub = 32;
  static constexpr bool kKQuant = true;
  // 4 super-blocks of 16 rows = 9.25 KiB.
  static constexpr int64_t kTileUnits = 4;
  static_assert(kUnitBytes % 64 == 0);
  // Software prefetch distance: at 1024 bytes (Q8_0's) cold m = 1 streamed ~8.5 GB/s of Q4_K
  // rows on one core, at 4096 ~11 GB/s (kernels_bench MatMulPacked/q4_K; 0-8192 tried).
  static constexpr int64_t kPrefetch = 4096;

  static int64_t HeaderBytes(int64_t) { return 0; }

  static void PackGroup(const ops::WeightView& w, const PackedLayout& g, int64_t group, uint8_t* dst) {
    const size_t row_bytes = RowBytes(w.type, w.cols);
    std::memset(dst, 0, static_cast<size_t>(g.group_bytes));  // padding rows: d = dmin = 0, q = 0
    for (int64_t l = 0; l < kPackedRows; ++l) {
      const int64_t r = group * kPackedRows + l;
      if (r >= w.rows) break;
      const auto* blk =
          reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w.data) + r * row_bytes);
      for (int64_t u = 0; u < g.units; ++u) {
        uint8_t* sb = dst + g.header_bytes + u * kUnitBytes;
        std::memcpy(sb + 2 * l, &blk[u].d, 2);
        std::memcpy(sb + 32 + 2 * l, &blk[u].dmin, 2);
        for (int s = 0; s < 8; ++s) {  // m in pairs of sub-blocks: the int16 pairs of vpdpwssd
          GetScaleMinK4(s, blk[u].scales, &sb[64 + 16 * s + l], &sb[192 + 32 * (s / 2) + 2 * l + s % 2]);
        }
        uint8_t q[kQK_K];  // element order (ref::KBlock)
        for (int c = 0; c < 4; ++c) {
          for (int i = 0; i < 32; ++i) {
            q[64 * c + i] = blk[u].qs[32 * c + i] & 0xF;
            q[64 * c + 32 + i] = blk[u].qs[32 * c + i] >> 4;
          }
        }
        for (int s = 0; s < 8; ++s)
          for (int quad = 0; quad < 4; ++quad)
            for (int k = 0; k < 4; ++k)
              sb[kScaleBytes + s * kSubBytes + quad * 64 + 4 * l + k] =
                  static_cast<uint8_t>(q[32 * s + 4 * quad + k] | (q[32 * s + 16 + 4 * quad + k] << 4));
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

  // f += da * (d * Σ_s sc_s * cvt(Σ q·a) - dmin * cvt(Σ_s m_s * Σ a)) per super-block and
  // activation row (see the top of the file). kM <= 2 splits each sub-block's 8 vpdpbusd over two
  // chains (low and high nibbles): one chain is 8 dependent instructions.
  template <int kM>
  DSPARK_VNNI_GFNI_ATTR static void Kernel(const uint8_t* HWY_RESTRICT group, const PackedLayout& g,
                                           int64_t u0, int64_t u1, const PackedActs& pa, int64_t j0,
                                           float* HWY_RESTRICT f_io) {
    constexpr bool kSplit = kM <= 2;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int32_t* a[kM];
    const float* da[kM];
    const int32_t* qpair[kM];
    __m512 f[kM];
    for (int j = 0; j < kM; ++j) {
      a[j] = reinterpret_cast<const int32_t*>(pa.q + (j0 + j) * pa.cols);
      da[j] = pa.da + (j0 + j) * pa.nsub;
      qpair[j] = pa.corr + (j0 + j) * pa.nsub;
      f[j] = _mm512_load_ps(f_io + 16 * j);
    }
    for (int64_t u = u0; u < u1; ++u) {
      const uint8_t* sb = group + g.header_bytes + u * kUnitBytes;
      __m512 gs[kM];
      __m512i mins[kM];
      for (int j = 0; j < kM; ++j) {
        gs[j] = _mm512_setzero_ps();
        mins[j] = _mm512_setzero_si512();
      }
      for (int p = 0; p < 4; ++p) {
        const __m512i mp =
            _mm512_maskz_cvtepu8_epi16(~0u, _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + 192 + 32 * p)));
        for (int j = 0; j < kM; ++j)
          mins[j] = _mm512_dpwssd_epi32(mins[j], mp, _mm512_set1_epi32(qpair[j][4 * u + p]));
      }
      for (int s = 0; s < 8; ++s) {
        // 37 cache lines per super-block: 5 per sub-block, kPrefetch bytes ahead.
        if constexpr (kPrefetch > 0) {
          for (int i = 5 * s; i < 5 * s + 5 && i < kUnitBytes / 64; ++i)
            _mm_prefetch(reinterpret_cast<const char*>(sb + kPrefetch + 64 * i), _MM_HINT_T0);
        }
        const __m128i sc8 = _mm_load_si128(reinterpret_cast<const __m128i*>(sb + 64 + 16 * s));
        const __m512 sc = CvtI32(_mm512_maskz_cvtepu8_epi32(0xFFFF, sc8));
        const uint8_t* q = sb + kScaleBytes + s * kSubBytes;
        __m512i lo[4], hi[4];
        for (int quad = 0; quad < 4; ++quad) {
          const __m512i v = _mm512_load_si512(q + 64 * quad);
          lo[quad] = _mm512_and_si512(v, m4);
          hi[quad] = HighNibbles(v);
        }
        const int64_t aw = 64 * u + 8 * s;  // first activation dword of the sub-block
        for (int j = 0; j < kM; ++j) {
          __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
          for (int quad = 0; quad < 4; ++quad) {
            s0 = _mm512_dpbusd_epi32(s0, lo[quad], _mm512_set1_epi32(a[j][aw + quad]));
            if constexpr (kSplit) {
              s1 = _mm512_dpbusd_epi32(s1, hi[quad], _mm512_set1_epi32(a[j][aw + 4 + quad]));
            } else {
              s0 = _mm512_dpbusd_epi32(s0, hi[quad], _mm512_set1_epi32(a[j][aw + 4 + quad]));
            }
          }
          if constexpr (kSplit) s0 = _mm512_add_epi32(s0, s1);
          gs[j] = _mm512_fmadd_ps(CvtI32(s0), sc, gs[j]);
        }
      }
      const auto* dh = reinterpret_cast<const __m256i*>(sb);
      const __m512 d = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(dh));
      const __m512 dmin = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(dh + 1));
      for (int j = 0; j < kM; ++j) {
        const __m512 h = _mm512_fnmadd_ps(CvtI32(mins[j]), dmin, _mm512_mul_ps(gs[j], d));
        f[j] = _mm512_fmadd_ps(h, _mm512_set1_ps(da[j][8 * u]), f[j]);
      }
    }
    for (int j = 0; j < kM; ++j) _mm512_store_ps(f_io + 16 * j, f[j]);
  }
};

#endif  // DSPARK_HAVE_VNNI

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
