// ops::AttentionGroup on every attainable Highway target against the double-precision reference:
// group sizes 1..9 (one and several passes of 4 heads), head sizes that are and are not multiples of
// the vector width, scattered cells, attention sinks, F32 and F16 keys/values, and an empty context.
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/test_util.h"
#include "util/fp16.h"

namespace dspark {
namespace {

struct Case {
  int n_q, head_dim, head_dim_v, n;
  bool scattered;
  bool sinks = false;
};

TEST(AttentionGroup, MatchesReferenceOnEveryTarget) {
  const Case cases[] = {{1, 64, 64, 1, false},  {2, 128, 128, 37, false}, {3, 64, 64, 200, true},
                        {4, 16, 16, 5, false},   {5, 80, 80, 19, true},    {9, 24, 40, 33, false},
                        {2, 7, 9, 3, true},      {8, 128, 128, 513, false}, {6, 64, 64, 40, false, true},
                        {3, 16, 16, 1, false, true}};
  for (const Case& c : cases) {
    const int cells_total = c.n * 2 + 3;
    const int64_t k_stride = c.head_dim * 3 + 5, v_stride = c.head_dim_v * 2 + 1;  // rows of other heads in between
    const auto k = kernels::RandomVector(cells_total * k_stride, 1 + c.n);
    const auto v = kernels::RandomVector(cells_total * v_stride, 2 + c.n);
    const auto q = kernels::RandomVector(c.n_q * c.head_dim, 3 + c.n, 2.0f);  // sharp softmax: exercises max-subtraction
    std::vector<int32_t> cells(c.n);
    std::iota(cells.begin(), cells.end(), 0);
    if (c.scattered) {
      std::mt19937 rng(c.n);
      for (auto& x : cells) x = static_cast<int32_t>(rng() % cells_total);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    // F16 cache: the reference sees the same half-rounded values, so the tolerance stays tight.
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    std::vector<float> kr(k.size()), vr(v.size());
    for (size_t i = 0; i < k.size(); ++i) kr[i] = F16ToF32(k16[i] = F32ToF16(k[i]));
    for (size_t i = 0; i < v.size(); ++i) vr[i] = F16ToF32(v16[i] = F32ToF16(v[i]));
    const auto sink_logits = kernels::RandomVector(c.n_q, 4 + c.n, 3.0f);
    const float* sinks = c.sinks ? sink_logits.data() : nullptr;
    std::vector<float> want(c.n_q * c.head_dim_v), want16(c.n_q * c.head_dim_v);
    ref::AttentionGroup(q.data(), c.n_q, c.head_dim, c.head_dim_v, k.data(), k_stride, v.data(), v_stride,
                        cells.data(), c.n, scale, sinks, want.data());
    ref::AttentionGroup(q.data(), c.n_q, c.head_dim, c.head_dim_v, kr.data(), k_stride, vr.data(), v_stride,
                        cells.data(), c.n, scale, sinks, want16.data());
    kernels::ForEachTarget([&](const std::string& target) {
      for (const DType type : {DType::kF32, DType::kF16}) {
        const bool half = type == DType::kF16;
        std::vector<float> scores(c.n_q * c.n + 1), got(c.n_q * c.head_dim_v, -999.f);
        ops::AttentionGroup(q.data(), c.n_q, c.head_dim, c.head_dim_v, type,
                            half ? static_cast<const void*>(k16.data()) : k.data(), k_stride,
                            half ? static_cast<const void*>(v16.data()) : v.data(), v_stride, cells.data(), c.n, scale,
                            sinks, scores.data(), got.data());
        const std::vector<float>& w = half ? want16 : want;
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], w[i], 2e-5 * std::max(1.0f, std::fabs(w[i])))
              << target << " " << DTypeName(type) << " n_q=" << c.n_q << " hd=" << c.head_dim << " n=" << c.n
              << " i=" << i;
      }
    });
  }
}

TEST(AttentionGroup, EmptyContextGivesZeros) {
  const std::vector<float> q(2 * 16, 1.f), k(16), v(16);
  std::vector<float> scores(1), out(2 * 16, 5.f);
  ops::AttentionGroup(q.data(), 2, 16, 16, DType::kF32, k.data(), 16, v.data(), 16, nullptr, 0, 0.25f, nullptr,
                      scores.data(), out.data());
  for (float x : out) EXPECT_EQ(x, 0.f);
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// ops::ConvertToF16 rounds exactly like the scalar converter (round to nearest even), including
// the tail past the last full vector, subnormals, overflow to infinity and NaN.
TEST(ConvertToF16, MatchesScalarConversionOnEveryTarget) {
  std::vector<float> x = kernels::RandomVector(1031, 9, 3.0f);
  x[0] = 65520.f;   // rounds to infinity
  x[1] = 1e-7f;     // subnormal half
  x[2] = -0.0f;
  x[3] = std::nanf("");
  x[4] = 2049.f;    // ties to even
  kernels::ForEachTarget([&](const std::string& target) {
    for (int64_t n : {0, 1, 7, 16, 17, 1031}) {
      std::vector<uint16_t> got(n + 1, 0xBEEF);
      ops::ConvertToF16(x.data(), n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) {
          EXPECT_TRUE(std::isnan(F16ToF32(got[i]))) << target;
        } else {
          ASSERT_EQ(got[i], F32ToF16(x[i])) << target << " i=" << i << " x=" << x[i];
        }
      }
      EXPECT_EQ(got[n], 0xBEEF) << target << ": wrote past n=" << n;
    }
  });
}

}  // namespace
}  // namespace dspark
