// ops::AttentionGroup on every attainable Highway target against the double-precision reference:
// group sizes 1..9 (one and several passes of 4 heads), head sizes that are and are not multiples of
// the vector width, scattered cells, attention sinks, and an empty context.
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/test_util.h"

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
    const auto sink_logits = kernels::RandomVector(c.n_q, 4 + c.n, 3.0f);
    const float* sinks = c.sinks ? sink_logits.data() : nullptr;
    std::vector<float> want(c.n_q * c.head_dim_v);
    ref::AttentionGroup(q.data(), c.n_q, c.head_dim, c.head_dim_v, k.data(), k_stride, v.data(), v_stride,
                        cells.data(), c.n, scale, sinks, want.data());
    kernels::ForEachTarget([&](const std::string& target) {
      std::vector<float> scores(c.n_q * c.n + 1), got(c.n_q * c.head_dim_v, -999.f);
      ops::AttentionGroup(q.data(), c.n_q, c.head_dim, c.head_dim_v, k.data(), k_stride, v.data(), v_stride,
                          cells.data(), c.n, scale, sinks, scores.data(), got.data());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-5 * std::max(1.0f, std::fabs(want[i])))
            << target << " n_q=" << c.n_q << " hd=" << c.head_dim << " n=" << c.n << " i=" << i;
    });
  }
}

TEST(AttentionGroup, EmptyContextGivesZeros) {
  const std::vector<float> q(2 * 16, 1.f), k(16), v(16);
  std::vector<float> scores(1), out(2 * 16, 5.f);
  ops::AttentionGroup(q.data(), 2, 16, 16, k.data(), 16, v.data(), 16, nullptr, 0, 0.25f, nullptr, scores.data(),
                      out.data());
  for (float x : out) EXPECT_EQ(x, 0.f);
}

}  // namespace
}  // namespace dspark
