#include <gtest/gtest.h>

#include <cmath>

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
