// The vector operations of the packed-layout MatMul kernels (matmul_packed*-inl.h), on 16 int32 or
// float lanes: one per weight row of a 16-row group. AVX-512 VNNI (AVX3_DL) holds them in one zmm
// and multiplies with vpdpbusd; AVX2 (and AVX3 without VNNI) in two ymm, multiplying with
// vpmaddubsw + vpmaddwd. Both form the same exact integer sums, and the float steps are the same
// operations in the same order, so a matrix gives bitwise the same outputs on either (the packed
// layouts are shared: a group's 64-byte operand is rows 0-7 then 8-15 in the two ymm halves).
//
// vpmaddubsw adds two u8 x s8 products in int16 with saturation: exact for the unsigned operands
// of the nibble and 6-bit formats (at most 2 * 63 * 127), not for Q8_0's q + 128, which AVX2 takes
// as signed bytes instead (DotSigned: |w| times a with w's sign, as ggml's mul_sum_i8_pairs).
#if defined(DSPARK_KERNELS_MATMUL_PACKED_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_MATMUL_PACKED_SIMD_INL_H_
#undef DSPARK_KERNELS_MATMUL_PACKED_SIMD_INL_H_
#else
#define DSPARK_KERNELS_MATMUL_PACKED_SIMD_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matmul_vnni-inl.h"  // DSPARK_HAVE_VNNI, CvtI32, DpbusdBcast

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#include <cpuid.h>
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {

// Dots of unsigned operands up to q_max that a short sum (StartShort / DotShort / FinishShort below)
// adds exactly: each Dot adds two products of at most q_max * 127 to an int16 lane.
constexpr int ShortDots(int q_max) { return 32767 / (2 * 127 * q_max); }

#undef DSPARK_HAVE_PACKED_Q
#undef DSPARK_PACKED_ATTR
#if DSPARK_HAVE_VNNI
#define DSPARK_HAVE_PACKED_Q 1
// VNNI and GFNI (nibbles and bit planes): every AVX3_DL CPU has both; Highway 1.0.3 checks neither.
#define DSPARK_PACKED_ATTR \
  __attribute__((target(HWY_TARGET_STR ",avx512vnni,gfni")))
// Whether this target's packed kernels may run on this CPU.
inline bool PackedKernelsUsable() { return __builtin_cpu_supports("gfni"); }

using PackedI = __m512i;  // 16 int32 lanes (or 64 bytes)
using PackedF = __m512;   // 16 float lanes
inline constexpr bool kPackedSignedQ8 = false;

DSPARK_PACKED_ATTR HWY_INLINE PackedI LoadPI(const uint8_t* p) { return _mm512_load_si512(p); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI SetPI(int32_t x) { return _mm512_set1_epi32(x); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI SetPI8(int8_t x) { return _mm512_set1_epi8(x); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI ZeroPI() { return _mm512_setzero_si512(); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI And(PackedI a, PackedI b) { return _mm512_and_si512(a, b); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI Or(PackedI a, PackedI b) { return _mm512_or_si512(a, b); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI Or3(PackedI a, PackedI b, PackedI c) { return _mm512_ternarylogic_epi32(a, b, c, 0xFE); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI Xor(PackedI a, PackedI b) { return _mm512_xor_si512(a, b); }
DSPARK_PACKED_ATTR HWY_INLINE PackedI AddPI(PackedI a, PackedI b) { return _mm512_add_epi32(a, b); }
// Bits 4-7 of each byte to bits 0-3, zeros above (GF2P8AFFINEQB: row i of the bit matrix, byte
// 7 - i, selects input bit i + 4).
DSPARK_PACKED_ATTR HWY_INLINE PackedI HighNibbles(PackedI v) {
  return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000LL), 0);
}
// Bit `bit` of each byte to bit 4, zeros elsewhere (output bit 4 is row byte 3 of the matrix).
DSPARK_PACKED_ATTR HWY_INLINE PackedI BitTo4(PackedI v, int bit) {
  return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(static_cast<int64_t>(1u << bit) << 24), 0);
}
// Bits 6-7 of each byte to bits 2 * plane, 2 * plane + 1 (Q6_K's fourth operand), zeros elsewhere.
template <int kPlane>
DSPARK_PACKED_ATTR HWY_INLINE PackedI TopBitsTo(PackedI v) {
  constexpr int64_t kMatrix[3] = {0x4080000000000000LL, 0x0000408000000000LL, 0x0000000040800000LL};
  return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(kMatrix[kPlane]), 0);
}
inline bool HasAvxVnni() { return false; }  // AVX2's VEX form; AVX-512 has its own (kVex unused)
// acc += Σ_4 w (u8) * a (s8), a one dword broadcast from memory.
template <bool kVex>
DSPARK_PACKED_ATTR HWY_INLINE void Dot(PackedI& acc, PackedI w, const int32_t* a) {
  DpbusdBcast(acc, w, a);
}
// The same with the dword as a value (Q8_0's kernels, where a separate broadcast is faster).
template <bool kVex>
DSPARK_PACKED_ATTR HWY_INLINE void DotValue(PackedI& acc, PackedI w, int32_t a) {
  acc = _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(a));
}
// Short sums (see the AVX2 target): vpdpbusd sums in int32 anyway, so a short sum is the int32
// accumulator itself, started where the caller's sum starts.
template <bool kVex>
DSPARK_PACKED_ATTR HWY_INLINE PackedI StartShort(PackedI start) {
  return start;
}
template <bool kVex>
DSPARK_PACKED_ATTR HWY_INLINE void DotShort(PackedI& acc, PackedI w, const int32_t* a) {
  DpbusdBcast(acc, w, a);
}
template <bool kVex>
DSPARK_PACKED_ATTR HWY_INLINE void DotValueShort(PackedI& acc, PackedI w, int32_t a) {
  DotValue<kVex>(acc, w, a);
}
template <bool kVex>
DSPARK_PACKED_ATTR HWY_INLINE PackedI FinishShort(PackedI acc, PackedI /*start*/) {
  return acc;
}
// acc += Σ_2 m (u8 pairs widened from 32 bytes, one pair per row) * a (the int16 pair `pair`).
DSPARK_PACKED_ATTR HWY_INLINE void DotPairsU8(PackedI& acc, const uint8_t* m, int32_t pair) {
  const __m512i mp = _mm512_maskz_cvtepu8_epi16(~0u, _mm256_load_si256(reinterpret_cast<const __m256i*>(m)));
  acc = _mm512_dpwssd_epi32(acc, mp, _mm512_set1_epi32(pair));
}
// 16 bytes (one per row) as float lanes, unsigned or signed.
DSPARK_PACKED_ATTR HWY_INLINE PackedF U8ToPF(const uint8_t* p) {
  return CvtI32(_mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_load_si128(reinterpret_cast<const __m128i*>(p))));
}
DSPARK_PACKED_ATTR HWY_INLINE PackedF I8ToPF(const uint8_t* p) {
  return CvtI32(_mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_load_si128(reinterpret_cast<const __m128i*>(p))));
}
DSPARK_PACKED_ATTR HWY_INLINE PackedF ToPF(PackedI v) { return CvtI32(v); }
// 16 fp16 (32 bytes, aligned) as floats.
DSPARK_PACKED_ATTR HWY_INLINE PackedF HalvesToPF(const void* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(static_cast<const __m256i*>(p)));
}
DSPARK_PACKED_ATTR HWY_INLINE PackedF LoadPF(const float* p) { return _mm512_load_ps(p); }
DSPARK_PACKED_ATTR HWY_INLINE void StorePF(PackedF v, float* p) { _mm512_store_ps(p, v); }
DSPARK_PACKED_ATTR HWY_INLINE PackedF ZeroPF() { return _mm512_setzero_ps(); }
DSPARK_PACKED_ATTR HWY_INLINE PackedF SetPF(float x) { return _mm512_set1_ps(x); }
DSPARK_PACKED_ATTR HWY_INLINE PackedF MulPF(PackedF a, PackedF b) { return _mm512_mul_ps(a, b); }
DSPARK_PACKED_ATTR HWY_INLINE PackedF FmaPF(PackedF a, PackedF b, PackedF c) { return _mm512_fmadd_ps(a, b, c); }
DSPARK_PACKED_ATTR HWY_INLINE PackedF FnmaPF(PackedF a, PackedF b, PackedF c) { return _mm512_fnmadd_ps(a, b, c); }

#elif HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define DSPARK_HAVE_PACKED_Q 1
#define DSPARK_PACKED_ATTR
inline bool PackedKernelsUsable() { return true; }

struct PackedI {
  __m256i lo, hi;  // rows 0-7, 8-15
};
struct PackedF {
  __m256 lo, hi;
};
inline constexpr bool kPackedSignedQ8 = true;

HWY_INLINE PackedI LoadPI(const uint8_t* p) {
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(p)), _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32))};
}
HWY_INLINE PackedI SetPI(int32_t x) { return {_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
HWY_INLINE PackedI SetPI8(int8_t x) { return {_mm256_set1_epi8(x), _mm256_set1_epi8(x)}; }
HWY_INLINE PackedI ZeroPI() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
HWY_INLINE PackedI And(PackedI a, PackedI b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
HWY_INLINE PackedI Or(PackedI a, PackedI b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
HWY_INLINE PackedI Or3(PackedI a, PackedI b, PackedI c) { return Or(Or(a, b), c); }
HWY_INLINE PackedI Xor(PackedI a, PackedI b) { return {_mm256_xor_si256(a.lo, b.lo), _mm256_xor_si256(a.hi, b.hi)}; }
HWY_INLINE PackedI AddPI(PackedI a, PackedI b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
HWY_INLINE __m256i HighNibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
HWY_INLINE PackedI HighNibbles(PackedI v) { return {HighNibbles(v.lo), HighNibbles(v.hi)}; }
// A 16-bit shift moves bit `bit` of both bytes of a lane to bit 4 of the same byte; what crosses
// into the other byte lands below bit 4 (left shifts) or above it (right shifts) and is masked off.
HWY_INLINE __m256i BitTo4(__m256i v, int bit) {
  const __m256i b4 = _mm256_set1_epi8(0x10);
  return _mm256_and_si256(bit <= 4 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(4 - bit))
                                   : _mm256_srl_epi16(v, _mm_cvtsi32_si128(bit - 4)),
                          b4);
}
HWY_INLINE PackedI BitTo4(PackedI v, int bit) { return {BitTo4(v.lo, bit), BitTo4(v.hi, bit)}; }
template <int kPlane>
HWY_INLINE PackedI TopBitsTo(PackedI v) {
  // Bits 6-7 to bits 2 * plane, 2 * plane + 1: a right shift by 6 - 2 * plane (masked as above).
  const __m256i mask = _mm256_set1_epi8(static_cast<char>(3 << (2 * kPlane)));
  constexpr int kShift = 6 - 2 * kPlane;
  return {_mm256_and_si256(_mm256_srli_epi16(v.lo, kShift), mask), _mm256_and_si256(_mm256_srli_epi16(v.hi, kShift), mask)};
}
// AVX-VNNI (VEX-encoded vpdpbusd on ymm: Intel Alder Lake and later, AMD Zen 5) does in one
// instruction what vpmaddubsw + vpmaddwd + vpaddd do, with the same exact sums. Highway 1.0.3's
// AVX2 target does not enable it, so it is emitted as assembly and the kernels run it (kVex) only
// where the CPU reports it.
// CPUID.(EAX=7, ECX=1):EAX bit 4; clang 14's __builtin_cpu_supports does not know "avxvnni".
inline bool HasAvxVnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1) != 0;
}
// acc += Σ_4 w (u8) * a (s8) in each int32 lane of one ymm: vpdpbusd, or pairs in int16 (exact
// while no pair passes 32767) and then pairs of pairs in int32.
template <bool kVex>
HWY_INLINE void DotHalf(__m256i& acc, __m256i w, __m256i a) {
  if constexpr (kVex) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(w), "x"(a));
  } else {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
  }
}
// acc += Σ_4 w (u8, at most 63) * a (s8).
template <bool kVex>
HWY_INLINE void DotValue(PackedI& acc, PackedI w, int32_t a) {
  const __m256i av = _mm256_set1_epi32(a);
  DotHalf<kVex>(acc.lo, w.lo, av);
  DotHalf<kVex>(acc.hi, w.hi, av);
}
template <bool kVex>
HWY_INLINE void Dot(PackedI& acc, PackedI w, const int32_t* a) {
  DotValue<kVex>(acc, w, *a);
}
// Short sums: Σ of several Dots kept in vpmaddubsw's int16 pair sums (vpaddw), widened to int32
// by one vpmaddwd at the end, instead of a vpmaddwd + vpaddd per Dot: 8 Dots of a Q4_K sub-block
// (2 x 8 ymm per activation row) take 8 multiplies + 7 adds + 1 multiply instead of 16 + 8 (the
// multiplies share two ports on Zen 3). Exact while no int16 lane passes 32767: at most
// ShortDots(q_max) Dots of unsigned operands up to q_max (with activations in [-127, 127], Q8_K's
// and Q8_0's range). With AVX-VNNI (kVex) a short sum is the int32 vpdpbusd chain.
// On one 8-row half (h = 0: rows 0-7, h = 1: rows 8-15) of a 16-row vector, which kernels that run
// a group as two halves use directly (their accumulators then fit the 16 ymm: PackedQ45_K::
// KernelHalves), and on both halves of a PackedI below. A half's short sum starts at zero.
using HalfI = __m256i;
using HalfF = __m256;
HWY_INLINE HalfI LoadHalf(const uint8_t* p, int h) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * h)); }
template <bool kVex>
HWY_INLINE void HalfDotShort(HalfI& acc, HalfI w, int32_t a) {
  const __m256i av = _mm256_set1_epi32(a);
  if constexpr (kVex) {
    DotHalf<true>(acc, w, av);
  } else {
    acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, av));
  }
}
template <bool kVex>
HWY_INLINE HalfI HalfFinishShort(HalfI acc) {
  if constexpr (kVex) return acc;
  return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
}
// Bytes 8h .. 8h + 7 of 16 (one per row) as float lanes.
HWY_INLINE HalfF HalfU8ToF(const uint8_t* p, int h) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h))));
}
// StartShort(start) / FinishShort(acc, start) on 16 rows: the accumulator to sum into, and the
// int32 sum start + Σ.
template <bool kVex>
HWY_INLINE PackedI StartShort(PackedI start) {
  if constexpr (kVex) return start;
  return ZeroPI();
}
template <bool kVex>
HWY_INLINE void DotValueShort(PackedI& acc, PackedI w, int32_t a) {
  HalfDotShort<kVex>(acc.lo, w.lo, a);
  HalfDotShort<kVex>(acc.hi, w.hi, a);
}
template <bool kVex>
HWY_INLINE void DotShort(PackedI& acc, PackedI w, const int32_t* a) {
  DotValueShort<kVex>(acc, w, *a);
}
template <bool kVex>
HWY_INLINE PackedI FinishShort(PackedI acc, PackedI start) {
  if constexpr (kVex) return acc;
  return AddPI(start, {HalfFinishShort<kVex>(acc.lo), HalfFinishShort<kVex>(acc.hi)});
}
// acc += Σ_4 w (s8) * a (s8): |w| times a with w's sign, so no pair exceeds int16.
template <bool kVex>
HWY_INLINE void DotSigned(PackedI& acc, PackedI w, int32_t a) {
  const __m256i av = _mm256_set1_epi32(a);
  DotHalf<kVex>(acc.lo, _mm256_sign_epi8(w.lo, w.lo), _mm256_sign_epi8(av, w.lo));
  DotHalf<kVex>(acc.hi, _mm256_sign_epi8(w.hi, w.hi), _mm256_sign_epi8(av, w.hi));
}
HWY_INLINE void DotPairsU8(PackedI& acc, const uint8_t* m, int32_t pair) {
  const __m256i av = _mm256_set1_epi32(pair);
  const __m256i lo = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(m)));
  const __m256i hi = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(m + 16)));
  acc.lo = _mm256_add_epi32(acc.lo, _mm256_madd_epi16(lo, av));
  acc.hi = _mm256_add_epi32(acc.hi, _mm256_madd_epi16(hi, av));
}
HWY_INLINE PackedF U8ToPF(const uint8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
}
HWY_INLINE PackedF I8ToPF(const uint8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
}
HWY_INLINE PackedF ToPF(PackedI v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
HWY_INLINE PackedF HalvesToPF(const void* p) {
  const auto* h = static_cast<const __m128i*>(p);
  return {_mm256_cvtph_ps(_mm_load_si128(h)), _mm256_cvtph_ps(_mm_load_si128(h + 1))};
}
HWY_INLINE PackedF LoadPF(const float* p) { return {_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
HWY_INLINE void StorePF(PackedF v, float* p) {
  _mm256_store_ps(p, v.lo);
  _mm256_store_ps(p + 8, v.hi);
}
HWY_INLINE PackedF ZeroPF() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
HWY_INLINE PackedF SetPF(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
HWY_INLINE PackedF MulPF(PackedF a, PackedF b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
HWY_INLINE PackedF FmaPF(PackedF a, PackedF b, PackedF c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
HWY_INLINE PackedF FnmaPF(PackedF a, PackedF b, PackedF c) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}

#else
#define DSPARK_HAVE_PACKED_Q 0
#endif

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
