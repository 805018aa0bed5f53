// AVX-512 VNNI kernels (HWY_AVX3_DL only) over decoded weight rows (matmul_decode-inl.h) and
// quantised activations (matmul_quant-inl.h). vpdpbusd multiplies unsigned by signed bytes, so
// weights are the unsigned operand (u = q + 128) and activations the signed one; the 128·Σa
// excess is removed exactly in integers by starting each accumulator at -128·Σa.
//
// Two shapes:
//  - DotNaturalVnni (m small): lanes run along the row, 64 elements per instruction; each lane's
//    int32 is scaled by its sub-block's weight and activation scales and summed into a float
//    accumulator that is reduced once per row.
//  - LanesTileVnni (m >= kLanesMinM): lane l of every vector is activation row l of a tile of 16.
//    A weight dword (4 bytes of one row) is broadcast and multiplied into all 16 rows at once, so a
//    weight byte costs the same work for m = 1..16: that is what makes speculative verification
//    nearly free. Activations are pre-interleaved per tile ([group of 4 columns][16 rows][4]).
#if defined(DSPARK_KERNELS_MATMUL_VNNI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_VNNI_INL_H_
#undef DSPARK_KERNELS_MATMUL_VNNI_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_VNNI_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/matmul_decode-inl.h"  // DecodeKScales
#include "kernels/quant_blocks.h"

#if HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

#undef DSPARK_HAVE_VNNI
#undef DSPARK_VNNI_ATTR
#if HWY_TARGET == HWY_AVX3_DL
#define DSPARK_HAVE_VNNI 1
// Highway 1.0.3's AVX3_DL attribute string lacks avx512vnni; add it for these functions only. The
// attribute names the target's whole string: clang replaces the enclosing target with a function's
// own (GCC adds to it), and these functions inline Highway ops compiled for all of it.
#define DSPARK_VNNI_ATTR \
  __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

// Zero-masking forms of these intrinsics: the plain ones start from _mm512_undefined_ps(), which
// GCC 12 reports as -Wuninitialized under -Werror.
DSPARK_VNNI_ATTR HWY_INLINE __m512 CvtI32(__m512i v) { return _mm512_maskz_cvtepi32_ps(0xFFFF, v); }
// acc += vpdpbusd(w, broadcast *a) with the broadcast embedded in the instruction ({1to16}): GCC
// emits a separate vpbroadcastd for _mm512_set1_epi32 of memory, twice the instructions in the
// kernels' inner loops.
DSPARK_VNNI_ATTR HWY_INLINE void DpbusdBcast(__m512i& acc, __m512i w, const int32_t* a) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
}
// acc += vpdpbusd(u, a) on ymm in its EVEX form (AVX-512 VNNI + VL). Highway 1.0.3's AVX3_DL
// target string names avxvnni as well, so compilers encode _mm256_dpbusd_epi32 there as the VEX
// form (AVX-VNNI), which AVX-512 VNNI CPUs without AVX-VNNI (Zen 4, Ice Lake) fault on. "vm" lets
// the compiler fold a load of `a` into the instruction, as it does for the intrinsic.
DSPARK_VNNI_ATTR HWY_INLINE __m256i Dpbusd256(__m256i acc, __m256i u, __m256i a) {
  __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "vm"(a));
  return acc;
}
DSPARK_VNNI_ATTR HWY_INLINE float ReduceAdd(__m512 v) {
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Per-lane scale vector for 64 elements from the per-sub-block scales of weight (dsc) and
// activation (da): 2 sub-blocks of 32 (8 lanes each) or 4 of 16 (4 lanes each).
template <int kSub>
DSPARK_VNNI_ATTR HWY_INLINE __m512 LaneScales(const float* dsc, const float* da) {
  if constexpr (kSub == 32) {
    const __m128 p = _mm_mul_ps(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dsc))),
                                _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(da))));
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_maskz_permutexvar_ps(0xFFFF, idx, _mm512_castps128_ps512(p));
  } else {
    const __m128 p = _mm_mul_ps(_mm_loadu_ps(dsc), _mm_loadu_ps(da));
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_maskz_permutexvar_ps(0xFFFF, idx, _mm512_castps128_ps512(p));
  }
}

// Σ_i dsc[s(i)]·da[s(i)]·q_i·a_i over one row (min terms are added by the caller).
//   u: [cols_pad] decoded weights (q + 128), 64-byte aligned; dsc: [cols_pad / kSub]
//   a: [cols_pad] activation bytes; corr: [cols_pad / 4] -128 * (sum of each dword of a)
//   da: [cols_pad / kSub] activation scale per sub-block
//   pf, pf_bytes: weight bytes to prefetch while computing (the next row), spread over the loop so
//   DRAM keeps streaming during compute instead of only while decoding.
template <int kSub>
DSPARK_VNNI_ATTR inline float DotNaturalVnni(const uint8_t* HWY_RESTRICT u,
                                             const float* HWY_RESTRICT dsc,
                                             const int8_t* HWY_RESTRICT a,
                                             const int32_t* HWY_RESTRICT corr,
                                             const float* HWY_RESTRICT da, int64_t cols_pad,
                                             const uint8_t* pf, int64_t pf_bytes) {
  constexpr int kSubsPer64 = 64 / kSub;
  __m512 f0 = _mm512_setzero_ps(), f1 = _mm512_setzero_ps();
  int64_t k = 0;
  const int64_t pf_step = pf ? (pf_bytes * 128 / cols_pad + 63) & ~int64_t{63} : 0;
  int64_t pf_off = 0;
  // Two independent chains per iteration: dpbusd latency is 5 cycles, cvt+fma another 8.
  for (; k + 128 <= cols_pad; k += 128) {
    for (int64_t e = pf_off + pf_step; pf_off < e && pf_off < pf_bytes; pf_off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + pf_off), _MM_HINT_T0);
    __m512i acc0 = _mm512_load_si512(corr + k / 4);
    __m512i acc1 = _mm512_load_si512(corr + k / 4 + 16);
    acc0 = _mm512_dpbusd_epi32(acc0, _mm512_load_si512(u + k), _mm512_load_si512(a + k));
    acc1 = _mm512_dpbusd_epi32(acc1, _mm512_load_si512(u + k + 64), _mm512_load_si512(a + k + 64));
    const int64_t s = k / kSub;
    f0 = _mm512_fmadd_ps(CvtI32(acc0), LaneScales<kSub>(dsc + s, da + s), f0);
    f1 = _mm512_fmadd_ps(CvtI32(acc1),
                         LaneScales<kSub>(dsc + s + kSubsPer64, da + s + kSubsPer64), f1);
  }
  if (k < cols_pad) {
    __m512i acc0 = _mm512_load_si512(corr + k / 4);
    acc0 = _mm512_dpbusd_epi32(acc0, _mm512_load_si512(u + k), _mm512_load_si512(a + k));
    const int64_t s = k / kSub;
    f0 = _mm512_fmadd_ps(CvtI32(acc0), LaneScales<kSub>(dsc + s, da + s), f0);
  }
  return ReduceAdd(_mm512_add_ps(f0, f1));
}

// Q4_K / Q5_K row dot without a decode pass (m < kLanesMinM): nibbles (and Q5_K's fifth bits)
// are unpacked in registers and used directly as the unsigned operand (q in [0, 31] needs no
// +128 offset, so no correction), scales are unpacked 8 at a time, and each unpacked vector is
// applied to kM activation rows. Per super-block and row: 4 x (dpbusd, cvt, fma) plus the
// shared unpack and one 8-wide min dot, about half the work of decode + DotNaturalVnni.
//   a[j]: [cols] activation bytes of row j; da[j], asum[j]: [cols / 32] (da constant per 256).
template <typename Block, int kM>
DSPARK_VNNI_ATTR inline void DotKVnni(const Block* HWY_RESTRICT b, int64_t nblocks,
                                      const int8_t* const* a, const float* const* da,
                                      const float* const* asum, float* out) {
  constexpr bool kQ5 = sizeof(Block) == sizeof(BlockQ5_K);
  const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const __m512i idx_lo = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 f[kM];
  __m256 fm[kM];
  for (int j = 0; j < kM; ++j) {
    f[j] = _mm512_setzero_ps();
    fm[j] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nblocks; ++i) {
    HWY_ALIGN float dsc[8], msc[8];
    DecodeKScales(b[i].d, b[i].dmin, b[i].scales, dsc, msc, 1);
    const __m256 vdsc = _mm256_load_ps(dsc), vmsc = _mm256_load_ps(msc);
    __m512 vd[kM];
    for (int j = 0; j < kM; ++j) {
      // scale per sub-block = d*sc * da (da is the super-block's activation scale); only
      // lanes 0-7 are indexed below (masked broadcast: GCC 12 warns on the unmasked forms)
      vd[j] = _mm512_maskz_broadcast_f32x8(0xFFFF, _mm256_mul_ps(vdsc, _mm256_set1_ps(da[j][8 * i])));
      fm[j] = _mm256_fmadd_ps(vmsc, _mm256_loadu_ps(asum[j] + 8 * i), fm[j]);
    }
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kQ5) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh));
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kQ5) {  // bit 2c of qh[l] -> element l, bit 2c+1 -> element l + 32
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m512i u = _mm512_mask_broadcast_i64x4(_mm512_maskz_broadcast_i64x4(0xFF, lo), 0xF0, hi);
      // lanes 0-7: sub-block 2c, lanes 8-15: 2c+1
      const __m512i idx = _mm512_add_epi32(idx_lo, _mm512_set1_epi32(2 * c));
      for (int j = 0; j < kM; ++j) {
        const __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
                                                _mm512_loadu_si512(a[j] + 256 * i + 64 * c));
        f[j] = _mm512_fmadd_ps(CvtI32(acc), _mm512_maskz_permutexvar_ps(0xFFFF, idx, vd[j]), f[j]);
      }
    }
  }
  for (int j = 0; j < kM; ++j) {
    const __m128 m4s = _mm_add_ps(_mm256_castps256_ps128(fm[j]), _mm256_extractf128_ps(fm[j], 1));
    const __m128 m2 = _mm_add_ps(m4s, _mm_movehl_ps(m4s, m4s));
    out[j] = ReduceAdd(f[j]) + _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
  }
}

// 32 bytes of unsigned q for one Q4_0/Q4_1 (nibbles) or Q5_0/Q5_1 (nibbles + bit j of qh)
// block, elements in order.
template <bool kQ5>
DSPARK_VNNI_ATTR HWY_INLINE __m256i UnpackQ32(const uint8_t* qs, const uint8_t* qh_bytes) {
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
  if constexpr (kQ5) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    const __m256i bits = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
    u = _mm256_or_si256(u, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bits), bits),
                                            _mm256_set1_epi8(0x10)));
  }
  return u;
}

template <typename Block>
HWY_INLINE const uint8_t* QhPtr(const Block& blk) {
  if constexpr (requires { blk.qh; }) {
    return blk.qh;
  } else {
    return nullptr;
  }
}

// The 32 unsigned bytes of one block as the row dot feeds them to dpbusd: nibbles (and fifth
// bits) for Q4/Q5, and for Q8_0 the signed bytes with the sign bit flipped (q + 128).
template <typename Block, bool kQ5>
DSPARK_VNNI_ATTR HWY_INLINE __m256i UnsignedQ32(const Block& blk) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)), _mm256_set1_epi8(0x80 - 256));
  } else {
    return UnpackQ32<kQ5>(blk.qs, QhPtr(blk));
  }
}

// Row dot for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 without a decode pass (m < kLanesMinM), two blocks per zmm.
// Unsigned q is used directly. The offset of the signed types (x = d*(q - kOffset), kOffset 8 or
// 16) is removed exactly in integers by starting each accumulator at -kOffset * (sum of the
// lane's 4 activation bytes) = corr >> (7 - log2 kOffset); a float correction would cancel
// catastrophically. The min of Q4_1/Q5_1 is a separate term m_b·asum_b, as in the reference.
//   corr[j]: [cols_pad / 4] -128 * (sum of each dword of a[j]) (BuildNaturalExtras)
template <typename Block, bool kQ5, bool kHasMin, int kOffset, int kM>
DSPARK_VNNI_ATTR inline void DotQ32Vnni(const Block* HWY_RESTRICT b, int64_t nblocks,
                                        const int8_t* const* a, const int32_t* const* corr,
                                        const float* const* da, const float* const* asum,
                                        float* out) {
  static_assert(kOffset == 0 || kOffset == 8 || kOffset == 16 || kOffset == 128, "offsets of Q4_0/Q5_0/Q8_0");
  constexpr int kShift = kOffset == 8 ? 4 : (kOffset == 16 ? 3 : 0);  // -128 * s >> kShift = -kOffset * s
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 f[kM];
  __m256 f8[kM];
  float fm[kM];
  for (int j = 0; j < kM; ++j) {
    f[j] = _mm512_setzero_ps();
    f8[j] = _mm256_setzero_ps();
    fm[j] = 0.f;
  }
  const auto block_min = [&](const Block& blk) {
    if constexpr (kHasMin) {
      return _cvtsh_ss(blk.m);
    } else {
      return 0.f;
    }
  };
  int64_t i = 0;
  for (; i + 2 <= nblocks; i += 2) {
    const float d0 = _cvtsh_ss(b[i].d), d1 = _cvtsh_ss(b[i + 1].d);
    const float m0 = block_min(b[i]), m1 = block_min(b[i + 1]);
    const __m256i u0 = UnsignedQ32<Block, kQ5>(b[i]);
    const __m256i u1 = UnsignedQ32<Block, kQ5>(b[i + 1]);
    const __m512i u = _mm512_mask_broadcast_i64x4(_mm512_maskz_broadcast_i64x4(0xFF, u0), 0xF0, u1);
    const __m128 dd = _mm_unpacklo_ps(_mm_set_ss(d0), _mm_set_ss(d1));
    for (int j = 0; j < kM; ++j) {
      __m512i init = _mm512_setzero_si512();
      if constexpr (kOffset != 0) init = _mm512_maskz_srai_epi32(0xFFFF, _mm512_loadu_si512(corr[j] + 8 * i), kShift);
      const __m512i acc = _mm512_dpbusd_epi32(init, u, _mm512_loadu_si512(a[j] + 32 * i));
      const __m128 sc = _mm_mul_ps(dd, _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(da[j] + i))));
      f[j] = _mm512_fmadd_ps(CvtI32(acc), _mm512_maskz_permutexvar_ps(0xFFFF, idx, _mm512_castps128_ps512(sc)), f[j]);
      if constexpr (kHasMin) fm[j] += m0 * asum[j][i] + m1 * asum[j][i + 1];
    }
  }
  if (i < nblocks) {  // odd block count: one ymm step
    const float d0 = _cvtsh_ss(b[i].d);
    const float m0 = block_min(b[i]);
    const __m256i u0 = UnsignedQ32<Block, kQ5>(b[i]);
    for (int j = 0; j < kM; ++j) {
      __m256i init = _mm256_setzero_si256();
      if constexpr (kOffset != 0)
        init = _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr[j] + 8 * i)), kShift);
      const __m256i acc =
          Dpbusd256(init, u0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j] + 32 * i)));
      f8[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(d0 * da[j][i]), f8[j]);
      if constexpr (kHasMin) fm[j] += m0 * asum[j][i];
    }
  }
  for (int j = 0; j < kM; ++j) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(f8[j]), _mm256_extractf128_ps(f8[j], 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    out[j] = ReduceAdd(f[j]) + _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2))) + fm[j];
  }
}

// Activation tile of up to L = 16 (or 8) rows in lane-interleaved form.
struct ActTileView {
  const int8_t* q;      // [cols_pad / 4][L][4]
  const int32_t* corr;  // [nsub][L]  -128 * Σ_sub a
  const float* da;      // [nsub][L]  activation scale per sub-block
  const float* asum;    // [nsub][L]  da * Σ_sub a (for min terms)
};

// out[r][l] = Σ_s dsc[r][s]·da[s][l]·isum(r, l, s) (+ msc[r][s]·asum[s][l]) for R weight rows
// of a decoded tile in the interleaved layout (matmul_decode-inl.h): sub-block s of row r at
// ut[(s * kTile + r) * kSub], its scales at dt/mt[s * kTile + r]. One base pointer per array
// keeps the 8-row loop free of pointer spills (24 row pointers would exhaust the GPRs).
// Register budget: R int32 + R float accumulators + activation vector + broadcast temporaries;
// R = 8 uses ~18 of 32 zmm registers and amortises each activation load over 8 dpbusd.
// Vector types of the lane-tile kernel: 16 activation rows in zmm, or 8 in ymm. For m <= 8 the
// ymm form does the same useful work with half-width instructions, which issue on two ports
// (Intel) or are not double-pumped (Zen 4), so verification of <= 8 draft tokens costs less.
template <int kLanes>
struct LaneVec;
template <>
struct LaneVec<16> {
  using I = __m512i;
  using F = __m512;
  static DSPARK_VNNI_ATTR HWY_INLINE I LoadI(const void* p) { return _mm512_load_si512(p); }
  static DSPARK_VNNI_ATTR HWY_INLINE F LoadF(const float* p) { return _mm512_load_ps(p); }
  static DSPARK_VNNI_ATTR HWY_INLINE F ZeroF() { return _mm512_setzero_ps(); }
  static DSPARK_VNNI_ATTR HWY_INLINE F SetF(float x) { return _mm512_set1_ps(x); }
  static DSPARK_VNNI_ATTR HWY_INLINE I SetI(int32_t x) { return _mm512_set1_epi32(x); }
  static DSPARK_VNNI_ATTR HWY_INLINE I Dp(I acc, I u, I a) { return _mm512_dpbusd_epi32(acc, u, a); }
  static DSPARK_VNNI_ATTR HWY_INLINE F Cvt(I v) { return CvtI32(v); }
  static DSPARK_VNNI_ATTR HWY_INLINE F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static DSPARK_VNNI_ATTR HWY_INLINE F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static DSPARK_VNNI_ATTR HWY_INLINE void StoreF(F v, float* p) { _mm512_store_ps(p, v); }
};
template <>
struct LaneVec<8> {
  using I = __m256i;
  using F = __m256;
  static DSPARK_VNNI_ATTR HWY_INLINE I LoadI(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
  static DSPARK_VNNI_ATTR HWY_INLINE F LoadF(const float* p) { return _mm256_load_ps(p); }
  static DSPARK_VNNI_ATTR HWY_INLINE F ZeroF() { return _mm256_setzero_ps(); }
  static DSPARK_VNNI_ATTR HWY_INLINE F SetF(float x) { return _mm256_set1_ps(x); }
  static DSPARK_VNNI_ATTR HWY_INLINE I SetI(int32_t x) { return _mm256_set1_epi32(x); }
  static DSPARK_VNNI_ATTR HWY_INLINE I Dp(I acc, I u, I a) { return Dpbusd256(acc, u, a); }
  static DSPARK_VNNI_ATTR HWY_INLINE F Cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static DSPARK_VNNI_ATTR HWY_INLINE F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static DSPARK_VNNI_ATTR HWY_INLINE F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static DSPARK_VNNI_ATTR HWY_INLINE void StoreF(F v, float* p) { _mm256_store_ps(p, v); }
};

// kDaGroup: consecutive sub-blocks sharing one activation scale (1 for Q8_0 activations, 256/kSub
// for Q8_K): their weight-scaled sums are gathered first and multiplied by da once per group.
// kLanes: activation rows per tile (16 or 8); the ActTileView arrays use that many lanes.
template <int kLanes, int R, int kTile, int kSub, bool kMin, int kDaGroup>
DSPARK_VNNI_ATTR inline void LanesTileVnni(const uint8_t* HWY_RESTRICT ut,
                                           const float* HWY_RESTRICT dt,
                                           const float* HWY_RESTRICT mt, const ActTileView& at,
                                           int64_t nsub, float* HWY_RESTRICT out,
                                           const uint8_t* pf, int64_t pf_bytes) {
  using V = LaneVec<kLanes>;
  typename V::F f[R], g[R];
  for (int r = 0; r < R; ++r) f[r] = g[r] = V::ZeroF();
  const int64_t pf_step = pf ? (pf_bytes / nsub + 64) & ~int64_t{63} : 0;
  int64_t pf_off = 0;
  for (int64_t s = 0; s < nsub; ++s) {
    for (int64_t e = pf_off + pf_step; pf_off < e && pf_off < pf_bytes; pf_off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + pf_off), _MM_HINT_T0);
    const typename V::I init = V::LoadI(at.corr + kLanes * s);
    typename V::I acc[R];
    for (int r = 0; r < R; ++r) acc[r] = init;
    const int8_t* aq = at.q + s * kSub * kLanes;  // kSub / 4 groups of 4 * kLanes bytes
    const uint8_t* us = ut + s * kTile * kSub;
#pragma GCC unroll 8
    for (int g4 = 0; g4 < kSub / 4; ++g4) {
      const typename V::I av = V::LoadI(aq + 4 * kLanes * g4);
      for (int r = 0; r < R; ++r) {
        int32_t wd;
        std::memcpy(&wd, us + r * kSub + 4 * g4, 4);
        acc[r] = V::Dp(acc[r], V::SetI(wd), av);
      }
    }
    const float* ds = dt + s * kTile;
    if constexpr (kDaGroup == 1) {
      const typename V::F da = V::LoadF(at.da + kLanes * s);
      for (int r = 0; r < R; ++r) f[r] = V::Fma(V::Mul(V::Cvt(acc[r]), da), V::SetF(ds[r]), f[r]);
    } else {
      if (s % kDaGroup == 0)
        for (int r = 0; r < R; ++r) g[r] = V::ZeroF();
      for (int r = 0; r < R; ++r) g[r] = V::Fma(V::Cvt(acc[r]), V::SetF(ds[r]), g[r]);
      if (s % kDaGroup == kDaGroup - 1) {
        const typename V::F da = V::LoadF(at.da + kLanes * s);
        for (int r = 0; r < R; ++r) f[r] = V::Fma(g[r], da, f[r]);
      }
    }
    if constexpr (kMin) {
      const typename V::F as = V::LoadF(at.asum + kLanes * s);
      const float* ms = mt + s * kTile;
      for (int r = 0; r < R; ++r) f[r] = V::Fma(V::SetF(ms[r]), as, f[r]);
    }
  }
  for (int r = 0; r < R; ++r) V::StoreF(f[r], out + kLanes * r);
}

#else
#define DSPARK_HAVE_VNNI 0
#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
