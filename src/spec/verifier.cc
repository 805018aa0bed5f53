#include "spec/verifier.h"

#include <algorithm>

namespace dspark {

int32_t AcceptOrResample(const std::vector<float>& p, const std::vector<float>* q, int32_t x, Rng& rng) {
  const double px = p[x];
  const double qx = q ? (*q)[x] : 1.0;
  if (qx > 0 && rng.Uniform() * qx < px) return -1;  // u < p/q without dividing
  thread_local std::vector<float> residual;
  residual.resize(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const float qi = q ? (*q)[i] : (static_cast<int32_t>(i) == x ? 1.0f : 0.0f);
    residual[i] = std::max(0.0f, p[i] - qi);
    mass += residual[i];
  }
  // p == q up to rounding: every token was acceptable; fall back to p itself.
  if (mass <= 1e-12) return SampleFromWeights(p, rng);
  return SampleFromWeights(residual, rng);
}

VerifyResult Verify(const Draft& draft, int k, const float* logits, int n_vocab, const SamplingParams& params,
                    Rng& rng) {
  VerifyResult r;
  r.tokens.reserve(k + 1);
  const bool sampled_draft = !draft.q.empty();
  thread_local std::vector<float> p;
  for (int i = 0; i < k; ++i) {
    const float* row = logits + static_cast<size_t>(i) * n_vocab;
    const int32_t x = draft.tokens[i];
    if (params.greedy()) {
      const int32_t t = Argmax(row, n_vocab);
      if (t != x) {
        r.tokens.push_back(t);
        return r;
      }
    } else {
      ComputeProbs(row, n_vocab, params, &p);
      const int32_t t = AcceptOrResample(p, sampled_draft ? &draft.q[i] : nullptr, x, rng);
      if (t >= 0) {
        r.tokens.push_back(t);
        return r;
      }
    }
    r.tokens.push_back(x);
    ++r.num_accepted;
  }
  std::vector<float> scratch;
  r.tokens.push_back(SampleToken(logits + static_cast<size_t>(k) * n_vocab, n_vocab, params, rng, &scratch));
  return r;
}

int32_t DrawDraftToken(const std::vector<float>& q, const SamplingParams& sampling, int64_t position, Rng& rng) {
  if (!sampling.keyed) return SampleFromWeights(q, rng);
  Rng keyed = KeyedRng(sampling.seed, position);
  return SampleFromWeights(q, keyed);
}

VerifyResult VerifyKeyed(const Draft& draft, int k, const float* logits, int n_vocab, const SamplingParams& params,
                         int64_t pos0) {
  VerifyResult r;
  r.tokens.reserve(k + 1);
  thread_local std::vector<float> scratch;
  for (int i = 0; i <= k; ++i) {
    Rng rng = KeyedRng(params.seed, pos0 + i);
    const int32_t t = SampleToken(logits + static_cast<size_t>(i) * n_vocab, n_vocab, params, rng, &scratch);
    r.tokens.push_back(t);
    if (i == k || t != draft.tokens[i]) break;
    ++r.num_accepted;
  }
  return r;
}

}  // namespace dspark
