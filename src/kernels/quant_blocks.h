// Block layouts of ggml's quantised types, byte for byte as ggml-common.h declares them, so a
// tensor read from a GGUF file can be reinterpreted as an array of these structs. Owns only the
// layouts and their constants; the (de)quantisers are in ref/quant_ref.h and the dot products in
// the matmul kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dspark {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;       // super-block size of the K-quants
inline constexpr int kKScaleBytes = 12;  // Q4_K/Q5_K: 8 six-bit scales + 8 six-bit mins

// Half-precision floats are stored as raw IEEE binary16 bits (util/fp16.h converts them).
using f16_bits = uint16_t;

// x[i] = d * qs[i]
struct BlockQ8_0 {
  f16_bits d;
  int8_t qs[kQK8_0];
};
// x[i] = d * qs[i]; s = d * sum(qs) (activation format of Q4_1/Q5_1 in ggml)
struct BlockQ8_1 {
  f16_bits d;
  f16_bits s;
  int8_t qs[kQK8_1];
};
// x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8), j < 16
struct BlockQ4_0 {
  f16_bits d;
  uint8_t qs[kQK4_0 / 2];
};
// x[j] = d * (qs[j] & 15) + m, x[j + 16] = d * (qs[j] >> 4) + m
struct BlockQ4_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qs[kQK4_1 / 2];
};
// As Q4_0 with a fifth bit: bit j of qh (little-endian uint32) is the high bit of x[j], and the
// value is offset by 16 instead of 8.
struct BlockQ5_0 {
  f16_bits d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
// As Q4_1 with the fifth bit in qh.
struct BlockQ5_1 {
  f16_bits d;
  f16_bits m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in [0, 15]; sc/m are 6-bit values
// packed in `scales` (see GetScaleMinK4). qs: for each 64-element chunk, 32 bytes whose low
// nibbles are the first 32 values and high nibbles the next 32.
struct BlockQ4_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
// As Q4_K with 5-bit q: bit (2c) / (2c+1) of qh[l] is the high bit of element l / l + 32 of
// 64-element chunk c.
struct BlockQ5_K {
  f16_bits d;
  f16_bits dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in [0, 63]: low 4 bits in ql, high 2
// bits in qh (layout in DequantizeQ6_K).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  f16_bits d;
};
// Activation format of the K-quants: x = d * qs; bsums[j] = sum of qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(alignof(BlockQ8_0) == 2 && alignof(BlockQ4_K) == 2 && alignof(BlockQ8_K) == 4);

// Sub-block j (0..7) of a Q4_K/Q5_K `scales` array: 6-bit scale and min (ggml's
// get_scale_min_k4). Bytes 0-3: sc[0..3] in bits 0-5, their high bits carry sc[4..7] bits 4-5;
// bytes 4-7 likewise for the mins; bytes 8-11: low nibbles sc[4..7], high nibbles m[4..7].
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

}  // namespace dspark
