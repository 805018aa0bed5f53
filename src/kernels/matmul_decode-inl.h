// Per-target weight-row decoders for the integer MatMul kernels. Every quantised type is brought
// to one form: u[i] = q[i] + 128 (unsigned bytes; q the signed integer factor of element i) with,
// per sub-block s of `sub` elements, a float scale dsc[s] and (types with a min/offset) an
// additive msc[s]:  x[i] = dsc[s] * q[i] + msc[s]. Decoding once per weight row and reusing the
// bytes for all activation rows is what makes m > 1 cheap. The loops are plain C++; compiled
// under each target's attributes they auto-vectorise.
#if defined(DSPARK_KERNELS_MATMUL_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_DECODE_INL_H_
#undef DSPARK_KERNELS_MATMUL_DECODE_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_DECODE_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/quant_blocks.h"
#include "util/dtype.h"
#include "util/fp16.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

inline float HalfToFloat(uint16_t h) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return _cvtsh_ss(h);  // F16C: exact, like the scalar F16ToF32
#else
  return F16ToF32(h);
#endif
}

// Byte-level unpacking helpers. On x86 targets with AVX2 they are written with intrinsics (GCC
// turns the plain loops into byte inserts and stack spills); elsewhere plain loops with restrict
// parameters (without them the compiler must assume the stores alias the block being read).
#undef DSPARK_DECODE_AVX2
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define DSPARK_DECODE_AVX2 1
#else
#define DSPARK_DECODE_AVX2 0
#endif

// lo[j] = (q[j] & 15) + add, hi[j] = (q[j] >> 4) + add, j < kN (16 or 32)
template <int kN>
HWY_INLINE void SplitNibbles(const uint8_t* HWY_RESTRICT q, uint8_t add, uint8_t* HWY_RESTRICT lo,
                             uint8_t* HWY_RESTRICT hi) {
#if DSPARK_DECODE_AVX2
  if constexpr (kN == 16) {
    const __m128i m4 = _mm_set1_epi8(0x0F), a = _mm_set1_epi8(static_cast<char>(add));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm_add_epi8(_mm_and_si128(v, m4), a));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi),
                     _mm_add_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m4), a));
    return;
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0F), a = _mm256_set1_epi8(static_cast<char>(add));
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm256_add_epi8(_mm256_and_si256(v, m4), a));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi),
                        _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), a));
    return;
  }
#endif
  for (int j = 0; j < kN; ++j) {
    lo[j] = static_cast<uint8_t>((q[j] & 0xF) + add);
    hi[j] = static_cast<uint8_t>((q[j] >> 4) + add);
  }
}

// u[j] = (((q[j] >> kQShift) & 15) | (((h[j] >> kHShift) & kHMask) << 4)) + add, j < 32;
// the first 16 bytes go to u0, the next 16 to u1 (different sub-blocks for 16-element types).
template <int kQShift, int kHShift, int kHMask>
HWY_INLINE void CombineBits32(const uint8_t* HWY_RESTRICT q, const uint8_t* HWY_RESTRICT h,
                              uint8_t add, uint8_t* HWY_RESTRICT u0, uint8_t* HWY_RESTRICT u1) {
#if DSPARK_DECODE_AVX2
  const __m256i m4 = _mm256_set1_epi8(0x0F), a = _mm256_set1_epi8(static_cast<char>(add));
  const __m256i hm = _mm256_set1_epi8(static_cast<char>(kHMask << 4));
  __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  if constexpr (kQShift) v = _mm256_srli_epi16(v, kQShift);
  v = _mm256_and_si256(v, m4);
  __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
  // bring bits kHShift.. to bit 4 (16-bit shifts; the mask drops bits crossing bytes)
  if constexpr (kHShift < 4) hv = _mm256_slli_epi16(hv, 4 - kHShift);
  if constexpr (kHShift > 4) hv = _mm256_srli_epi16(hv, kHShift - 4);
  const __m256i r = _mm256_add_epi8(_mm256_or_si256(v, _mm256_and_si256(hv, hm)), a);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(u0), _mm256_castsi256_si128(r));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(u1), _mm256_extracti128_si256(r, 1));
#else
  for (int j = 0; j < 32; ++j) {
    const uint8_t x = static_cast<uint8_t>(
        (((q[j] >> kQShift) & 0xF) | (((h[j] >> kHShift) & kHMask) << 4)) + add);
    (j < 16 ? u0[j] : u1[j - 16]) = x;
  }
#endif
}

// Q5_0/Q5_1: bit j of qh is the fifth bit of element j.
HWY_INLINE void Q5Bits(const uint8_t* HWY_RESTRICT qs, uint32_t qh, uint8_t add,
                       uint8_t* HWY_RESTRICT u) {
#if DSPARK_DECODE_AVX2
  // Spread the 32 bits of qh over 32 bytes: byte j gets qh byte j/8, tested against bit j%8.
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  const __m256i bits = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  const __m256i hi_bit = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bits), bits),
                                          _mm256_set1_epi8(0x10));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
  const __m256i r = _mm256_add_epi8(_mm256_or_si256(nib, hi_bit), _mm256_set1_epi8(static_cast<char>(add)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), r);
#else
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) + add);
    u[j + 16] = static_cast<uint8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) + add);
  }
#endif
}

HWY_INLINE void FlipSign32(const int8_t* HWY_RESTRICT q, uint8_t* HWY_RESTRICT u) {
#if DSPARK_DECODE_AVX2
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))));
#else
  for (int j = 0; j < 32; ++j) u[j] = static_cast<uint8_t>(q[j]) ^ 0x80;
#endif
}

// Where a decoder writes one weight row. Sub-block s occupies u[s * ustride, + sub) and its
// scales dsc[s * sstride], msc[s * sstride]: ustride = sub, sstride = 1 for a plain row; the
// lane-tile kernel interleaves kRowTile rows per sub-block (ustride = kRowTile * sub,
// sstride = kRowTile) so all its addresses are one base pointer plus constant offsets.
struct DecodedRow {
  uint8_t* u;    // q + 128
  float* dsc;
  float* msc;    // written only by types with a min
  int64_t ustride;
  int64_t sstride;
};

inline void DecodeQ8_0(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i * o.sstride] = HalfToFloat(b[i].d);
    FlipSign32(b[i].qs, o.u + i * o.ustride);
  }
}

// q = nibble - 8  ->  u = nibble + 120
inline void DecodeQ4_0(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const BlockQ4_0*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i * o.sstride] = HalfToFloat(b[i].d);
    uint8_t* u = o.u + i * o.ustride;
    SplitNibbles<16>(b[i].qs, 120, u, u + 16);
  }
}

// q = nibble, msc = m
inline void DecodeQ4_1(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const BlockQ4_1*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i * o.sstride] = HalfToFloat(b[i].d);
    o.msc[i * o.sstride] = HalfToFloat(b[i].m);
    uint8_t* u = o.u + i * o.ustride;
    SplitNibbles<16>(b[i].qs, 128, u, u + 16);
  }
}

// Fifth bits: bit j of qh -> element j, bit j+16 -> element j+16. kOffset = 128 - 16 (Q5_0,
// signed) or 128 (Q5_1, with min).
template <typename Block, int kOffset, bool kHasMin>
inline void DecodeQ5(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const Block*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i * o.sstride] = HalfToFloat(b[i].d);
    if constexpr (kHasMin) o.msc[i * o.sstride] = HalfToFloat(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    Q5Bits(b[i].qs, qh, kOffset, o.u + i * o.ustride);
  }
}

// Sub-blocks of 32: dsc = d * sc, msc = -dmin * m. The 6-bit fields are unpacked with word
// masks (ggml's utmp trick) instead of eight calls to GetScaleMinK4.
inline void DecodeKScales(uint16_t d16, uint16_t dmin16, const uint8_t* scales, float* dsc,
                          float* msc, int64_t sstride) {
  uint32_t w[4];
  std::memcpy(w, scales, 12);
  constexpr uint32_t kMask6 = 0x3f3f3f3f, kMask4 = 0x0f0f0f0f, kMask2 = 0x03030303;
  const uint32_t sc_hi = (w[2] & kMask4) | (((w[0] >> 6) & kMask2) << 4);  // sc[4..7]
  const uint32_t m_hi = ((w[2] >> 4) & kMask4) | (((w[1] >> 6) & kMask2) << 4);  // m[4..7]
  const uint32_t sc_lo = w[0] & kMask6, m_lo = w[1] & kMask6;
  uint8_t sc[8], m[8];
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(m, &m_lo, 4);
  std::memcpy(m + 4, &m_hi, 4);
  const float d = HalfToFloat(d16), dmin = HalfToFloat(dmin16);
#if DSPARK_DECODE_AVX2
  if (sstride == 1) {  // plain row layout: 8 contiguous floats each
    const __m256 vs = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    const __m256 vm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
    _mm256_storeu_ps(dsc, _mm256_mul_ps(_mm256_set1_ps(d), vs));
    // -(dmin * m) == (-dmin) * m exactly (negation is exact)
    _mm256_storeu_ps(msc, _mm256_mul_ps(_mm256_set1_ps(-dmin), vm));
    return;
  }
#endif
  for (int s = 0; s < 8; ++s) {
    dsc[s * sstride] = d * sc[s];
    msc[s * sstride] = -(dmin * m[s]);
  }
}

inline void DecodeQ4_K(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const BlockQ4_K*>(row);
  for (int64_t i = 0; i < n / 256; ++i) {
    DecodeKScales(b[i].d, b[i].dmin, b[i].scales, o.dsc + 8 * i * o.sstride,
                  o.msc + 8 * i * o.sstride, o.sstride);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* qs = b[i].qs + 32 * c;
      uint8_t* lo = o.u + (8 * i + 2 * c) * o.ustride;
      SplitNibbles<32>(qs, 128, lo, lo + o.ustride);
    }
  }
}

inline void DecodeQ5_K(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const BlockQ5_K*>(row);
  for (int64_t i = 0; i < n / 256; ++i) {
    DecodeKScales(b[i].d, b[i].dmin, b[i].scales, o.dsc + 8 * i * o.sstride,
                  o.msc + 8 * i * o.sstride, o.sstride);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* qs = b[i].qs + 32 * c;
      const uint8_t* qh = b[i].qh;
      uint8_t* lo = o.u + (8 * i + 2 * c) * o.ustride;
      uint8_t* hi = lo + o.ustride;
      switch (c) {  // shifts as template arguments
        case 0: CombineBits32<0, 0, 1>(qs, qh, 128, lo, lo + 16); CombineBits32<4, 1, 1>(qs, qh, 128, hi, hi + 16); break;
        case 1: CombineBits32<0, 2, 1>(qs, qh, 128, lo, lo + 16); CombineBits32<4, 3, 1>(qs, qh, 128, hi, hi + 16); break;
        case 2: CombineBits32<0, 4, 1>(qs, qh, 128, lo, lo + 16); CombineBits32<4, 5, 1>(qs, qh, 128, hi, hi + 16); break;
        default: CombineBits32<0, 6, 1>(qs, qh, 128, lo, lo + 16); CombineBits32<4, 7, 1>(qs, qh, 128, hi, hi + 16); break;
      }
    }
  }
}

// Sub-blocks of 16: q = q6 - 32 -> u = q6 + 96; dsc = d * scales[s] (signed 8-bit scales).
// Element 128h + 32k + l (l < 32) lies in sub-block 8h + 2k + l/16.
inline void DecodeQ6_K(const void* row, int64_t n, DecodedRow o) {
  const auto* b = static_cast<const BlockQ6_K*>(row);
  for (int64_t i = 0; i < n / 256; ++i) {
    const float d = HalfToFloat(b[i].d);
    for (int s = 0; s < 16; ++s) o.dsc[(16 * i + s) * o.sstride] = d * b[i].scales[s];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      // Quarter k (elements 32k + l of this half) spans sub-blocks 8*half + 2k and 2k + 1.
      uint8_t* u = o.u + (16 * i + 8 * half) * o.ustride;
      const int64_t st = o.ustride;
      CombineBits32<0, 0, 3>(ql, qh, 96, u, u + st);
      CombineBits32<0, 2, 3>(ql + 32, qh, 96, u + 2 * st, u + 3 * st);
      CombineBits32<4, 4, 3>(ql, qh, 96, u + 4 * st, u + 5 * st);
      CombineBits32<4, 6, 3>(ql + 32, qh, 96, u + 6 * st, u + 7 * st);
    }
  }
}

using DecodeFn = void (*)(const void* row, int64_t n, DecodedRow o);

struct QuantTraits {
  DecodeFn decode = nullptr;
  int sub = 32;          // elements per scale
  bool has_min = false;  // msc is meaningful
  bool k_quant = false;  // activations in Q8_K (else Q8_0)
};

inline QuantTraits TraitsOf(DType t) {
  switch (t) {
    case DType::kQ8_0: return {DecodeQ8_0, 32, false, false};
    case DType::kQ4_0: return {DecodeQ4_0, 32, false, false};
    case DType::kQ4_1: return {DecodeQ4_1, 32, true, false};
    case DType::kQ5_0: return {DecodeQ5<BlockQ5_0, 112, false>, 32, false, false};
    case DType::kQ5_1: return {DecodeQ5<BlockQ5_1, 128, true>, 32, true, false};
    case DType::kQ4_K: return {DecodeQ4_K, 32, true, true};
    case DType::kQ5_K: return {DecodeQ5_K, 32, true, true};
    case DType::kQ6_K: return {DecodeQ6_K, 16, false, true};
    default: return {};
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
