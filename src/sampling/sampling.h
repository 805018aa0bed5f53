// Turning target logits into a token: greedy, temperature, top-k, top-p, min-p, with a seeded RNG so
// the same seed gives the same output. The distribution after all transforms is exposed as a dense
// probability vector because exact speculative verification compares p and q token by token.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
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
  // Keyed draws: the draw for the token at generated position i uses KeyedRng(seed, i) instead of
  // the next number of one sequential stream. Which tokens a drafter proposed, how many survived,
  // and what else ran in the batch then cannot change the output: a seeded request is reproducible
  // with speculation on or off and under any load (verification is coupled: VerifyKeyed).
  bool keyed = false;

  // Logit adjustments, applied to a position's logits before the transforms above
  // (ApplyLogitAdjustments), from the tokens before that position.
  // OpenAI's penalties, over the generated tokens (as vLLM and SGLang count them):
  // logit -= frequency_penalty * count + presence_penalty * (count > 0). Each in [-2, 2].
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // llama.cpp's repetition penalty over the last repeat_last_n tokens of prompt and output
  // (-1: the whole context; 0: off): a positive logit is divided by it, a negative one multiplied.
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  // Added to a token's logit (OpenAI's logit_bias, in [-100, 100]; -100 in effect bans a token).
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return temperature <= 0.0f; }
  bool adjusts_logits() const {
    return frequency_penalty != 0.0f || presence_penalty != 0.0f || (repeat_penalty != 1.0f && repeat_last_n != 0) ||
           !logit_bias.empty();
  }
};

// "temp-first" / "temp-last" (flags and JSON fields name the orders so).
std::string_view SamplerOrderName(SamplerOrder order);
Result<SamplerOrder> ParseSamplerOrder(std::string_view name);

// Range checks with messages naming the field: temperature >= 0 and finite, top_k >= 0,
// top_p in (0, 1], min_p in [0, 1), penalties in [-2, 2], repeat_penalty > 0, repeat_last_n >= -1,
// logit_bias values in [-100, 100] (ids are checked against the vocabulary by the engine).
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

// The generator of the draw at generated position `position` of a keyed request.
Rng KeyedRng(uint64_t seed, int64_t position);

int32_t Argmax(const float* logits, int n_vocab);

// Applies params' logit adjustments to one position's logits in place. The tokens before the
// position are `committed` (prompt, then output) followed by `drafted` (draft tokens in front of
// it inside a verification block, so that each row counts the ones before it); the first
// `n_prompt` of `committed` are the prompt.
void ApplyLogitAdjustments(float* logits, int n_vocab, const SamplingParams& params,
                           std::span<const int32_t> committed, std::span<const int32_t> drafted, size_t n_prompt);

// A token's log-probability under the softmax of `logits` (temperature 1), and the `n` most
// probable tokens with theirs (ties to the lower id): OpenAI's logprobs.
struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprob ComputeLogprob(const float* logits, int n_vocab, int32_t id, int n_top);

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
