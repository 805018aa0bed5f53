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

struct DecodedRow {
  uint8_t* u;  // [cols] q + 128
  float* dsc;  // [cols / sub]
  float* msc;  // [cols / sub], written only by types with a min
};

inline void DecodeQ8_0(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i] = HalfToFloat(b[i].d);
    uint8_t* u = o.u + 32 * i;
    for (int j = 0; j < 32; ++j) u[j] = static_cast<uint8_t>(b[i].qs[j]) ^ 0x80;
  }
}

// q = nibble - 8  ->  u = nibble + 120
inline void DecodeQ4_0(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const BlockQ4_0*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i] = HalfToFloat(b[i].d);
    uint8_t* u = o.u + 32 * i;
    for (int j = 0; j < 16; ++j) {
      u[j] = static_cast<uint8_t>((b[i].qs[j] & 0xF) + 120);
      u[j + 16] = static_cast<uint8_t>((b[i].qs[j] >> 4) + 120);
    }
  }
}

// q = nibble, msc = m
inline void DecodeQ4_1(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const BlockQ4_1*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i] = HalfToFloat(b[i].d);
    o.msc[i] = HalfToFloat(b[i].m);
    uint8_t* u = o.u + 32 * i;
    for (int j = 0; j < 16; ++j) {
      u[j] = static_cast<uint8_t>((b[i].qs[j] & 0xF) + 128);
      u[j + 16] = static_cast<uint8_t>((b[i].qs[j] >> 4) + 128);
    }
  }
}

// Fifth bits: bit j of qh -> element j, bit j+16 -> element j+16. kOffset = 128 - 16 (Q5_0,
// signed) or 128 (Q5_1, with min).
template <typename Block, int kOffset, bool kHasMin>
inline void DecodeQ5(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const Block*>(row);
  for (int64_t i = 0; i < n / 32; ++i) {
    o.dsc[i] = HalfToFloat(b[i].d);
    if constexpr (kHasMin) o.msc[i] = HalfToFloat(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    uint8_t* u = o.u + 32 * i;
    for (int j = 0; j < 16; ++j) {
      u[j] = static_cast<uint8_t>(((b[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) + kOffset);
      u[j + 16] = static_cast<uint8_t>(((b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) + kOffset);
    }
  }
}

// Sub-blocks of 32: dsc = d * sc, msc = -dmin * m.
inline void DecodeKScales(uint16_t d16, uint16_t dmin16, const uint8_t* scales, float* dsc, float* msc) {
  const float d = HalfToFloat(d16), dmin = HalfToFloat(dmin16);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    GetScaleMinK4(s, scales, &sc, &m);
    dsc[s] = d * sc;
    msc[s] = -(dmin * m);
  }
}

inline void DecodeQ4_K(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const BlockQ4_K*>(row);
  for (int64_t i = 0; i < n / 256; ++i) {
    DecodeKScales(b[i].d, b[i].dmin, b[i].scales, o.dsc + 8 * i, o.msc + 8 * i);
    uint8_t* u = o.u + 256 * i;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* qs = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        u[64 * c + l] = static_cast<uint8_t>((qs[l] & 0xF) + 128);
        u[64 * c + 32 + l] = static_cast<uint8_t>((qs[l] >> 4) + 128);
      }
    }
  }
}

inline void DecodeQ5_K(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const BlockQ5_K*>(row);
  for (int64_t i = 0; i < n / 256; ++i) {
    DecodeKScales(b[i].d, b[i].dmin, b[i].scales, o.dsc + 8 * i, o.msc + 8 * i);
    uint8_t* u = o.u + 256 * i;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* qs = b[i].qs + 32 * c;
      const uint8_t* qh = b[i].qh;
      for (int l = 0; l < 32; ++l) {
        u[64 * c + l] = static_cast<uint8_t>(((qs[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) + 128);
        u[64 * c + 32 + l] =
            static_cast<uint8_t>(((qs[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) + 128);
      }
    }
  }
}

// Sub-blocks of 16: q = q6 - 32 -> u = q6 + 96; dsc = d * scales[s] (signed 8-bit scales).
inline void DecodeQ6_K(const void* row, int64_t n, const DecodedRow& o) {
  const auto* b = static_cast<const BlockQ6_K*>(row);
  for (int64_t i = 0; i < n / 256; ++i) {
    const float d = HalfToFloat(b[i].d);
    for (int s = 0; s < 16; ++s) o.dsc[16 * i + s] = d * b[i].scales[s];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      uint8_t* u = o.u + 256 * i + 128 * half;
      for (int l = 0; l < 32; ++l) {
        u[l + 0] = static_cast<uint8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) + 96);
        u[l + 32] = static_cast<uint8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) + 96);
        u[l + 64] = static_cast<uint8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) + 96);
        u[l + 96] = static_cast<uint8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) + 96);
      }
    }
  }
}

using DecodeFn = void (*)(const void* row, int64_t n, const DecodedRow& o);

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
