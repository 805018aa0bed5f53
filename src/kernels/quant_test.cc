// Block formats: golden blocks with values derived by hand from ggml's formulas, quantiser
// rounding rules, and quantise -> dequantise error bounds per type.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/test_util.h"
#include "util/fp16.h"

namespace dspark {
namespace {

constexpr uint16_t kHalf0_5 = 0x3800, kHalf1 = 0x3C00, kHalf2 = 0x4000, kHalfMinus1 = 0xBC00;

std::vector<float> Dequant(DType t, const void* blocks, int64_t n) {
  std::vector<float> out(n);
  ops::DequantizeRow(t, blocks, out.data(), n);
  return out;
}

TEST(QuantBlocks, GoldenQ8_0) {
  BlockQ8_0 b;
  b.d = kHalf0_5;
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i * 9 - 128);  // -128 .. 151 wraps
  const auto y = Dequant(DType::kQ8_0, &b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.5f * static_cast<int8_t>(i * 9 - 128)) << i;  // x = d*q
}

TEST(QuantBlocks, GoldenQ4_0) {
  BlockQ4_0 b{};
  b.d = kHalf2;
  b.qs[0] = 0x1F;  // x0 = (15-8)*2 = 14, x16 = (1-8)*2 = -14
  b.qs[1] = 0x80;  // x1 = (0-8)*2 = -16, x17 = (8-8)*2 = 0
  const auto y = Dequant(DType::kQ4_0, &b, 32);
  EXPECT_EQ(y[0], 14.f);
  EXPECT_EQ(y[16], -14.f);
  EXPECT_EQ(y[1], -16.f);
  EXPECT_EQ(y[17], 0.f);
  EXPECT_EQ(y[2], -16.f);  // qs = 0: (0-8)*2
}

TEST(QuantBlocks, GoldenQ4_1) {
  BlockQ4_1 b{};
  b.d = kHalf1;
  b.m = kHalfMinus1;
  b.qs[0] = 0x3A;  // x0 = 10*1 - 1 = 9, x16 = 3*1 - 1 = 2
  const auto y = Dequant(DType::kQ4_1, &b, 32);
  EXPECT_EQ(y[0], 9.f);
  EXPECT_EQ(y[16], 2.f);
  EXPECT_EQ(y[5], -1.f);
}

TEST(QuantBlocks, GoldenQ5_0AndQ5_1) {
  BlockQ5_0 b{};
  b.d = kHalf1;
  const uint32_t qh = (1u << 0) | (1u << 16);  // fifth bit of x0 and x16
  std::memcpy(b.qh, &qh, 4);
  b.qs[0] = 0x21;  // x0 = (1|16)-16 = 1, x16 = (2|16)-16 = 2
  auto y = Dequant(DType::kQ5_0, &b, 32);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[16], 2.f);
  EXPECT_EQ(y[1], -16.f);  // (0|0)-16
  BlockQ5_1 c{};
  c.d = kHalf0_5;
  c.m = kHalf2;
  std::memcpy(c.qh, &qh, 4);
  c.qs[0] = 0x21;  // x0 = 17*0.5 + 2 = 10.5, x16 = 18*0.5 + 2 = 11
  y = Dequant(DType::kQ5_1, &c, 32);
  EXPECT_EQ(y[0], 10.5f);
  EXPECT_EQ(y[16], 11.f);
  EXPECT_EQ(y[1], 2.f);
}

// Scales sc = {1,2,3,4,17,5,6,63}, mins m = {0,1,2,3,33,4,5,63} packed by hand as ggml's
// get_scale_min_k4 reads them: bytes 0-3 = sc[0..3] | (sc[4..7] >> 4) << 6, bytes 4-7 = m[0..3] |
// (m[4..7] >> 4) << 6, bytes 8-11 = (sc[4..7] & 15) | (m[4..7] & 15) << 4.
constexpr uint8_t kKScales[12] = {65, 2, 3, 196, 128, 1, 2, 195, 17, 69, 86, 255};
constexpr int kSc[8] = {1, 2, 3, 4, 17, 5, 6, 63};
constexpr int kMin[8] = {0, 1, 2, 3, 33, 4, 5, 63};

TEST(QuantBlocks, GoldenQ4_K) {
  BlockQ4_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  std::memcpy(b.scales, kKScales, 12);
  std::memset(b.qs, 0x53, sizeof(b.qs));  // low nibble 3 -> sub 2c, high nibble 5 -> sub 2c+1
  const auto y = Dequant(DType::kQ4_K, &b, 256);
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, q = (s % 2 == 0) ? 3 : 5;
    EXPECT_EQ(y[i], 1.0f * kSc[s] * q - 0.5f * kMin[s]) << i;  // x = d*sc*q - dmin*m
  }
  EXPECT_EQ(y[128], 34.5f);  // 17*3 - 16.5
  EXPECT_EQ(y[255], 283.5f);  // 63*5 - 31.5
}

TEST(QuantBlocks, GoldenQ5_K) {
  BlockQ5_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  std::memcpy(b.scales, kKScales, 12);
  std::memset(b.qs, 0x53, sizeof(b.qs));
  for (int l = 0; l < 32; ++l) b.qh[l] = (l % 2 == 0) ? 0x05 : 0x00;  // high bit for subs 0, 2
  const auto y = Dequant(DType::kQ5_K, &b, 256);
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, l = i % 32;
    const int q = ((s % 2 == 0) ? 3 : 5) + (((b.qh[l] >> s) & 1) ? 16 : 0);
    EXPECT_EQ(y[i], 1.0f * kSc[s] * q - 0.5f * kMin[s]) << i;
  }
  EXPECT_EQ(y[0], 19.f);  // 1*(3+16) - 0
  EXPECT_EQ(y[1], 3.f);
}

TEST(QuantBlocks, GoldenQ6_K) {
  BlockQ6_K b{};
  b.d = kHalf0_5;
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  std::memset(b.ql, 0x21, sizeof(b.ql));  // low nibble 1 (elements l, l+32), high 2 (l+64, l+96)
  std::memset(b.qh, 0xE4, sizeof(b.qh));  // 2-bit fields 0,1,2,3 for l, l+32, l+64, l+96
  // q6 - 32 per 32-element quarter of each 128 half: (1|0<<4)-32, (1|1<<4)-32, (2|2<<4)-32, (2|3<<4)-32
  constexpr int kQ[4] = {-31, -15, 2, 18};
  const auto y = Dequant(DType::kQ6_K, &b, 256);
  for (int i = 0; i < 256; ++i) {
    const float expect = 0.5f * static_cast<float>(i / 16 - 8) * kQ[(i % 128) / 32];  // d*sc*q
    EXPECT_EQ(y[i], expect) << i;
  }
}

TEST(QuantBlocks, GoldenQ8_K) {
  BlockQ8_K b{};
  b.d = 0.25f;
  for (int i = 0; i < 256; ++i) b.qs[i] = static_cast<int8_t>(i - 128);
  const auto y = Dequant(DType::kQ8_K, &b, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 0.25f * (i - 128));
}

// Q8_0 rounds half away from zero (roundf); Q8_K rounds half to even (nearest_int).
TEST(QuantBlocks, Q8RoundingRules) {
  std::vector<float> x(256, 0.f);
  x[0] = 127.f;  // Q8_0: d = 127/127 = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  BlockQ8_0 q0[8];
  ASSERT_TRUE(ops::QuantizeRow(DType::kQ8_0, x.data(), q0, 256));
  EXPECT_EQ(q0[0].d, kHalf1);
  EXPECT_EQ(q0[0].qs[1], 3);
  EXPECT_EQ(q0[0].qs[2], -3);
  EXPECT_EQ(q0[0].qs[3], 1);
  x[0] = -127.f;  // Q8_K: iscale = -127 / max = 1
  BlockQ8_K qk;
  ASSERT_TRUE(ops::QuantizeRow(DType::kQ8_K, x.data(), &qk, 256));
  EXPECT_EQ(qk.d, 1.f);
  EXPECT_EQ(qk.qs[0], -127);
  EXPECT_EQ(qk.qs[1], 2);
  EXPECT_EQ(qk.qs[2], -2);
  EXPECT_EQ(qk.qs[3], 0);
  EXPECT_EQ(qk.bsums[0], -127 + 2 - 2);
}

// Q4_0: d = max/-8 with max the signed value of largest magnitude; q = min(15, trunc(x/d + 8.5)).
TEST(QuantBlocks, Q4_0QuantiserRule) {
  std::vector<float> x(32, 0.f);
  x[0] = -16.f;  // d = 2
  x[1] = 3.f;    // 1.5 + 8.5 = 10
  x[2] = 15.f;   // 7.5 + 8.5 = 16 -> clamped to 15
  BlockQ4_0 b;
  ASSERT_TRUE(ops::QuantizeRow(DType::kQ4_0, x.data(), &b, 32));
  EXPECT_EQ(b.d, kHalf2);
  EXPECT_EQ(b.qs[0] & 0xF, 0);
  EXPECT_EQ(b.qs[1] & 0xF, 10);
  EXPECT_EQ(b.qs[2] & 0xF, 15);
  EXPECT_EQ(b.qs[3] & 0xF, 8);
}

struct RoundTripCase {
  DType type;
  double max_rel_rmse;  // rmse(dequant(quant(x)) - x) / rms(x) for unit Gaussian rows
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTrip, ErrorWithinBound) {
  const RoundTripCase c = GetParam();
  constexpr int64_t n = 4096;
  const auto x = kernels::RandomVector(n, 1234);
  std::vector<uint8_t> q(RowBytes(c.type, n));
  ASSERT_TRUE(ops::QuantizeRow(c.type, x.data(), q.data(), n));
  const auto y = Dequant(c.type, q.data(), n);
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (y[i] - x[i]) * (y[i] - x[i]);
    ref += x[i] * x[i];
  }
  const double rel = std::sqrt(err / ref);
  EXPECT_LT(rel, c.max_rel_rmse) << DTypeName(c.type);
  // Re-quantising the dequantised row is a fixed point for the round-to-nearest formats.
  std::vector<uint8_t> q2(q.size());
  ASSERT_TRUE(ops::QuantizeRow(c.type, y.data(), q2.data(), n));
  const auto y2 = Dequant(c.type, q2.data(), n);
  double drift = 0;
  for (int64_t i = 0; i < n; ++i) drift += (y2[i] - y[i]) * (y2[i] - y[i]);
  EXPECT_LT(std::sqrt(drift / ref), c.max_rel_rmse) << DTypeName(c.type);
}

// Bounds are ~1.3x the errors measured for these formats (bits per weight in parentheses).
INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantRoundTrip,
    ::testing::Values(RoundTripCase{DType::kF32, 1e-12}, RoundTripCase{DType::kF16, 5e-4},
                      RoundTripCase{DType::kBF16, 4e-3}, RoundTripCase{DType::kQ8_0, 0.01},
                      RoundTripCase{DType::kQ8_K, 0.01}, RoundTripCase{DType::kQ4_0, 0.15},
                      RoundTripCase{DType::kQ4_1, 0.12}, RoundTripCase{DType::kQ5_0, 0.075},
                      RoundTripCase{DType::kQ5_1, 0.06}, RoundTripCase{DType::kQ4_K, 0.11},
                      RoundTripCase{DType::kQ5_K, 0.055}, RoundTripCase{DType::kQ6_K, 0.03}),
    [](const auto& info) { return std::string(DTypeName(info.param.type)); });

TEST(QuantBlocks, ZeroRowsQuantiseToZero) {
  std::vector<float> x(256, 0.f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    std::vector<uint8_t> q(RowBytes(t, 256));
    ASSERT_TRUE(ops::QuantizeRow(t, x.data(), q.data(), 256));
    for (float v : Dequant(t, q.data(), 256)) EXPECT_EQ(v, 0.f) << DTypeName(t);
  }
  EXPECT_FALSE(ops::CanQuantize(DType::kQ2_K));
}

}  // namespace
}  // namespace dspark
