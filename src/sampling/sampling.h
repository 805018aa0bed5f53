// Turning target logits into a token: greedy, temperature, top-k, top-p, min-p, with a seeded RNG so
// the same seed gives the same output. The distribution after all transforms is exposed as a dense
// probability vector because exact speculative verification compares p and q token by token.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace dspark {

// Where temperature sits in the chain of transforms. The filters (top-k, top-p, min-p) read
// probabilities, so with top-p or min-p on the order changes which tokens survive.
enum class SamplerOrder {
  // Temperature, then top-k, top-p, min-p on the tempered distribution: what the OpenAI API's
  // users get from vLLM and SGLang. The default.
  kTemperatureFirst,
  // top-k, top-p, min-p on the untempered (temperature 1) distribution, then temperature over the
  // survivors: llama.cpp's default sampler chain.
  kTemperatureLast,
};

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1); 0 = off
  uint64_t seed = 0;
  SamplerOrder order = SamplerOrder::kTemperatureFirst;

  bool greedy() const { return temperature <= 0.0f; }
};

// "temp-first" / "temp-last" (flags and JSON fields name the orders so).
std::string_view SamplerOrderName(SamplerOrder order);
Result<SamplerOrder> ParseSamplerOrder(std::string_view name);

// Range checks with messages naming the field: temperature >= 0 and finite, top_k >= 0,
// top_p in (0, 1], min_p in [0, 1).
Status ValidateSamplingParams(const SamplingParams& params);

// xoshiro256** seeded through splitmix64: fast, good quality, identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // [0, 1)

 private:
  uint64_t s_[4];
};

int32_t Argmax(const float* logits, int n_vocab);

// Dense sampling distribution over the vocabulary after the transforms. Filters: top-k keeps the k
// most probable tokens (ties to the lower id); top-p keeps the smallest prefix of those, by
// probability, whose mass reaches top_p of theirs; min-p keeps tokens with at least min_p times the
// top token's probability. Kept tokens are renormalised, cut ones have probability 0. Temperature
// comes first or last as params.order says. For greedy params the result is one-hot on the argmax.
// `probs` is resized to n_vocab.
void ComputeProbs(const float* logits, int n_vocab, const SamplingParams& params, std::vector<float>* probs);

// Draws a token from a (not necessarily normalised) non-negative weight vector.
int32_t SampleFromWeights(const std::vector<float>& weights, Rng& rng);

// Greedy: argmax; otherwise a draw from ComputeProbs.
int32_t SampleToken(const float* logits, int n_vocab, const SamplingParams& params, Rng& rng,
                    std::vector<float>* scratch);

}  // namespace dspark
