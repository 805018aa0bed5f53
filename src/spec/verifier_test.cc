// The rejection rule on hand-made distributions: exactness (χ²), and a deliberately wrong rule
// that the same harness must reject.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "spec/verifier.h"

namespace dspark {
namespace {

// Pearson χ² of observed counts against expected probabilities.
double ChiSquare(const std::vector<int>& counts, const std::vector<float>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    if (e > 0) chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

// 99.9% quantile of χ² with 5 degrees of freedom.
constexpr double kChi2Crit5 = 20.52;

using Rule = std::function<int32_t(const std::vector<float>& p, const std::vector<float>& q, int32_t x, Rng&)>;

std::vector<int> Simulate(const std::vector<float>& p, const std::vector<float>& q, const Rule& rule, int n,
                          uint64_t seed) {
  Rng rng(seed);
  std::vector<int> counts(p.size(), 0);
  for (int t = 0; t < n; ++t) {
    const int32_t x = SampleFromWeights(q, rng);
    const int32_t r = rule(p, q, x, rng);
    ++counts[r < 0 ? x : r];
  }
  return counts;
}

const std::vector<float> kP = {0.30f, 0.25f, 0.20f, 0.15f, 0.07f, 0.03f};
const std::vector<float> kQ = {0.05f, 0.40f, 0.10f, 0.05f, 0.30f, 0.10f};

TEST(Verifier, RejectionSamplingReproducesTargetDistribution) {
  const int n = 200000;
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto counts = Simulate(kP, kQ, [](const auto& p, const auto& q, int32_t x, Rng& rng) {
      return AcceptOrResample(p, &q, x, rng);
    }, n, seed);
    EXPECT_LT(ChiSquare(counts, kP, n), kChi2Crit5) << "seed " << seed;
  }
}

TEST(Verifier, DeterministicDraftsAreAcceptedWithProbabilityP) {
  // q one-hot on token 1: accept with p(1), else draw from p without token 1.
  Rng rng(5);
  const int n = 100000;
  std::vector<int> counts(kP.size(), 0);
  for (int t = 0; t < n; ++t) {
    const int32_t r = AcceptOrResample(kP, nullptr, 1, rng);
    ++counts[r < 0 ? 1 : r];
  }
  EXPECT_LT(ChiSquare(counts, kP, n), kChi2Crit5);
}

TEST(Verifier, HarnessRejectsAWrongRule) {
  // Wrong: on rejection resample from p instead of the residual max(0, p - q).
  const int n = 200000;
  auto counts = Simulate(kP, kQ, [](const auto& p, const auto& q, int32_t x, Rng& rng) -> int32_t {
    if (rng.Uniform() * q[x] < p[x]) return -1;
    return SampleFromWeights(p, rng);
  }, n, 1);
  EXPECT_GT(ChiSquare(counts, kP, n), kChi2Crit5 * 10);
}

TEST(Verifier, ResidualMathOnHandMadeDistributions) {
  // p = (0.5, 0.5), q = (1, 0), x = 0: accept with 0.5; on rejection the residual is (0, 0.5) → 1.
  Rng rng(9);
  const std::vector<float> p = {0.5f, 0.5f}, q = {1.0f, 0.0f};
  int accepted = 0;
  for (int t = 0; t < 10000; ++t) {
    const int32_t r = AcceptOrResample(p, &q, 0, rng);
    if (r < 0) ++accepted;
    else ASSERT_EQ(r, 1);
  }
  EXPECT_NEAR(accepted / 10000.0, 0.5, 0.03);
  // p == q: always accepted.
  for (int t = 0; t < 1000; ++t) ASSERT_EQ(AcceptOrResample(p, &p, 1, rng), -1);
}

TEST(Verifier, GreedyAcceptsPrefixThenEmitsArgmax) {
  const int n_vocab = 4;
  // Row argmaxes: 2, 3, 1, 0.
  const std::vector<float> logits = {0, 0, 9, 0, /**/ 0, 0, 0, 9, /**/ 0, 9, 0, 0, /**/ 9, 0, 0, 0};
  Draft d;
  d.tokens = {2, 3, 0};
  Rng rng(1);
  VerifyResult r = Verify(d, 3, logits.data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 3, 1}));
  d.tokens = {2, 3, 1};
  r = Verify(d, 3, logits.data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 3);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 3, 1, 0}));  // bonus token from the last row
  r = Verify(d, 0, logits.data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2}));  // empty draft: plain decoding
}

}  // namespace
}  // namespace dspark
