#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sampling/sampling.h"

namespace dspark {
namespace {

TEST(Sampling, GreedyIsArgmax) {
  const float logits[] = {0.1f, 3.0f, -1.0f, 2.9f};
  SamplingParams p;
  Rng rng(1);
  std::vector<float> scratch;
  EXPECT_EQ(SampleToken(logits, 4, p, rng, &scratch), 1);
  ComputeProbs(logits, 4, p, &scratch);
  EXPECT_EQ(scratch, (std::vector<float>{0, 1, 0, 0}));
}

TEST(Sampling, TemperatureSoftmax) {
  const float logits[] = {0.0f, std::log(3.0f)};
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> probs;
  ComputeProbs(logits, 2, p, &probs);
  EXPECT_NEAR(probs[0], 0.25, 1e-6);
  EXPECT_NEAR(probs[1], 0.75, 1e-6);
  p.temperature = 0.5f;  // squares the odds: 1:9
  ComputeProbs(logits, 2, p, &probs);
  EXPECT_NEAR(probs[1], 0.9, 1e-6);
}

TEST(Sampling, TopKTopPMinPCut) {
  // probabilities 0.5, 0.25, 0.125, 0.125
  const float logits[] = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> probs;
  p.top_k = 2;
  ComputeProbs(logits, 4, p, &probs);
  EXPECT_NEAR(probs[0], 2.0 / 3, 1e-6);
  EXPECT_EQ(probs[2], 0.0f);
  p.top_k = 0;
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: keeps two
  ComputeProbs(logits, 4, p, &probs);
  EXPECT_NEAR(probs[1], 1.0 / 3, 1e-6);
  EXPECT_EQ(probs[3], 0.0f);
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keeps p >= 0.15
  ComputeProbs(logits, 4, p, &probs);
  EXPECT_NEAR(probs[0], 2.0 / 3, 1e-6);
  EXPECT_EQ(probs[2], 0.0f);
}

TEST(Sampling, SeededRngIsReproducibleAndMatchesDistribution) {
  const float logits[] = {0.0f, std::log(3.0f)};
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> scratch;
  Rng a(42), b(42);
  int ones = 0;
  const int trials = 20000;
  for (int t = 0; t < trials; ++t) {
    const int x = SampleToken(logits, 2, p, a, &scratch);
    ASSERT_EQ(x, SampleToken(logits, 2, p, b, &scratch));
    ones += x;
  }
  // 0.75 ± 5 sigma (sigma = sqrt(.75*.25/20000) ≈ 0.003)
  EXPECT_NEAR(ones / static_cast<double>(trials), 0.75, 0.016);
}

// The whole chain against a reference written from the documented definitions, in double, for
// both orders, over random logits and every combination of the filters.
std::vector<double> ReferenceChain(const std::vector<float>& logits, const SamplingParams& sp) {
  const int n = static_cast<int>(logits.size());
  auto softmax = [&](double t) {
    std::vector<double> p(n);
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += (p[i] = std::exp((logits[i] - mx) / t));
    for (double& v : p) v /= sum;
    return p;
  };
  const bool last = sp.order == SamplerOrder::kTemperatureLast;
  const std::vector<double> p = softmax(last ? 1.0 : sp.temperature);  // what the filters read
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[i] = i;
  std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<bool> keep(n, false);
  const int k = sp.top_k > 0 ? std::min(sp.top_k, n) : n;
  double topk_mass = 0;
  for (int j = 0; j < k; ++j) topk_mass += p[rank[j]];
  double cum = 0;
  for (int j = 0; j < k; ++j) {
    keep[rank[j]] = true;
    cum += p[rank[j]];
    if (sp.top_p < 1 && cum >= sp.top_p * topk_mass) break;
  }
  for (int i = 0; i < n; ++i)
    if (p[i] < sp.min_p * p[rank[0]]) keep[i] = false;
  const std::vector<double> q = softmax(sp.temperature);  // what is sampled from
  std::vector<double> out(n, 0.0);
  double total = 0;
  for (int i = 0; i < n; ++i)
    if (keep[i]) total += (out[i] = q[i]);
  for (double& v : out) v /= total;
  return out;
}

TEST(Sampling, ChainMatchesTheReferenceInBothOrders) {
  Rng rng(7);
  std::vector<float> got;
  int orders_differ = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 2 + trial % 40;
    std::vector<float> logits(n);
    for (float& l : logits) l = static_cast<float>(rng.Uniform() * 8 - 4);
    SamplingParams sp;
    sp.temperature = static_cast<float>(0.3 + 1.7 * rng.Uniform());
    sp.top_k = trial % 3 == 0 ? 0 : 1 + static_cast<int>(rng.Uniform() * n);
    sp.top_p = trial % 4 == 0 ? 1.0f : static_cast<float>(0.3 + 0.69 * rng.Uniform());
    sp.min_p = trial % 5 == 0 ? 0.0f : static_cast<float>(0.2 * rng.Uniform());
    std::vector<std::vector<float>> by_order;
    for (SamplerOrder order : {SamplerOrder::kTemperatureFirst, SamplerOrder::kTemperatureLast}) {
      sp.order = order;
      ComputeProbs(logits.data(), n, sp, &got);
      const std::vector<double> want = ReferenceChain(logits, sp);
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5) << "trial " << trial << " token " << i << " order "
                                           << SamplerOrderName(order) << " T " << sp.temperature << " top-k "
                                           << sp.top_k << " top-p " << sp.top_p << " min-p " << sp.min_p;
      by_order.push_back(got);
    }
    orders_differ += by_order[0] != by_order[1];
  }
  EXPECT_GT(orders_differ, 100);  // the two orders are different chains
}

TEST(Sampling, TemperatureFirstIsTheDefaultAndOrdersParse) {
  // At temperature 2 the tempered distribution is flatter: top-p 0.5 keeps more tokens when the
  // temperature comes first than when it comes last.
  const float logits[] = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams sp{2.0f, 0, 0.5f, 0.0f, 0};
  EXPECT_EQ(sp.order, SamplerOrder::kTemperatureFirst);
  std::vector<float> first, last;
  ComputeProbs(logits, 4, sp, &first);
  sp.order = SamplerOrder::kTemperatureLast;
  ComputeProbs(logits, 4, sp, &last);
  EXPECT_GT(first[1], 0.0f);
  EXPECT_EQ(last[1], 0.0f);
  EXPECT_EQ(last[0], 1.0f);
  EXPECT_EQ(*ParseSamplerOrder("temp-last"), SamplerOrder::kTemperatureLast);
  EXPECT_EQ(*ParseSamplerOrder("temp-first"), SamplerOrder::kTemperatureFirst);
  EXPECT_FALSE(ParseSamplerOrder("vllm").ok());
}

TEST(Sampling, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(ValidateSamplingParams(p).message().find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0;
  EXPECT_NE(ValidateSamplingParams(p).message().find("top_p"), std::string::npos);
  p = {};
  p.min_p = 1;
  EXPECT_NE(ValidateSamplingParams(p).message().find("min_p"), std::string::npos);
  p = {};
  p.top_k = -3;
  EXPECT_NE(ValidateSamplingParams(p).message().find("top_k"), std::string::npos);
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
}

}  // namespace
}  // namespace dspark
