// The sampling-distribution check every drafter's tests share. Speculative sampling is lossless
// when the tokens it emits are distributed exactly as plain sampling's. The check computes that
// distribution exactly, by enumerating every path of the target on a tiny vocabulary, and runs
// many seeded speculative generations against it (a one-sample χ² over the joint outcomes of
// several verified positions, plus a hard failure on any outcome the target cannot produce).
// Comparing with exact probabilities rather than a second sample halves the noise, so 30,000
// trials reject an off-by-one draft distribution, a greedy bonus token, resampling from p instead
// of the residual or an unfiltered target (speculative/testing/broken_verifiers.h): the negative
// controls in tests/lossless prove it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/testing/chi_square.h"
#include "speculative/engine.h"

namespace dspark::testing {

using Outcome = std::vector<int32_t>;

// The exact probability of every outcome of the generated tokens [first, first + count) of plain
// sampling with `params` after `prompt`: the product of ComputeProbs along each path, enumerated
// depth first with one forward pass per prefix. Paths grow as n_vocab^(first + count), so this is
// for tiny vocabularies (top-k prunes them further).
// `mask`, when given, constrains each position further (a grammar): it receives the tokens sampled
// so far and the position's logits, and sets forbidden tokens to -inf.
using PathMask = std::function<void(const std::vector<int32_t>& path, float* logits)>;
inline std::map<Outcome, double> ExactJointDistribution(Model& model, ThreadPool& pool, const std::vector<int32_t>& prompt,
                                                        const SamplingParams& params, int first, int count,
                                                        const PathMask& mask = nullptr) {
  const int depth = first + count;
  const int n_vocab = model.config().n_vocab;
  const int n_prompt = static_cast<int>(prompt.size());
  KvCache cache(model.config(), 1, n_prompt + depth + 1);
  Batch b;
  for (int i = 0; i < n_prompt; ++i) b.Add(prompt[i], i, 0, i + 1 == n_prompt);
  auto out = model.Forward(b, cache, pool);
  EXPECT_TRUE(out.ok()) << out.status().message();
  std::map<Outcome, double> dist;
  if (!out.ok()) return dist;
  Outcome path;
  std::function<void(const float*, double)> visit = [&](const float* logits, double prob) {
    std::vector<float> p;
    // The request's logit adjustments (penalties, biases) count the tokens on the path so far.
    std::vector<float> adjusted(logits, logits + n_vocab);
    std::vector<int32_t> committed = prompt;
    committed.insert(committed.end(), path.begin(), path.end());
    ApplyLogitAdjustments(adjusted.data(), n_vocab, params, committed, {}, prompt.size());
    if (mask) mask(path, adjusted.data());
    ComputeProbs(adjusted.data(), n_vocab, params, &p);
    for (int32_t t = 0; t < n_vocab; ++t) {
      if (p[t] <= 0) continue;
      path.push_back(t);
      if (static_cast<int>(path.size()) == depth) {
        dist[Outcome(path.begin() + first, path.end())] += prob * p[t];
      } else {
        const int pos = n_prompt + static_cast<int>(path.size()) - 1;
        Batch one;
        one.Add(t, pos, 0, true);
        auto next = model.Forward(one, cache, pool);
        EXPECT_TRUE(next.ok()) << next.status().message();
        if (next.ok()) visit(next->logits.data(), prob * p[t]);
        EXPECT_TRUE(cache.Truncate(0, pos).ok());
      }
      path.pop_back();
    }
  };
  visit(out->logits.data(), 1.0);
  return dist;
}

// Whether this is a sanitizer build (make test-asan, make tsan), where a generation costs 10-20x.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
inline constexpr bool kSanitizedBuild = __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// The trials of a check that must pass. A sanitizer build looks for memory errors and undefined
// behaviour, which every generation's code path shows in the first thousand trials, so it runs a
// tenth of them; the critical value follows the count, so the check stays exact, and its full
// power to find a subtle bias is `make test`'s. Negative controls (checks that must fail) keep
// their full count in every build.
inline int PassingCheckTrials(int trials) { return kSanitizedBuild ? trials / 10 : trials; }

struct SamplingCheck {
  int trials = 0;
  int dof = 0;
  double chi2 = 0;
  double critical = 0;    // the χ² quantile at 99.9%
  int64_t impossible = 0;  // trials with an outcome the target gives probability 0
  SpecStats stats;         // summed over the trials
  bool passed() const { return impossible == 0 && chi2 < critical; }
  std::string Describe() const {
    return fmt::format("chi2 {:.1f} (critical {:.1f}, dof {}), {} impossible outcomes in {} trials; drafted {}, "
                       "accepted {}, whole drafts {}",
                       chi2, critical, dof, impossible, trials, stats.num_draft_tokens, stats.num_accepted_tokens,
                       stats.num_whole_drafts);
  }
};

// Runs `trials` generations of `go` (seeds seed0, seed0 + 1, ...) and tests the joint outcome of
// the generated tokens [first, first + count) against `exact`. Outcomes expected fewer than 5
// times are pooled into one cell, as a χ² test needs.
inline SamplingCheck CheckSampling(SpeculativeEngine& engine, const std::vector<int32_t>& prompt, GenerateOptions go,
                                   const std::map<Outcome, double>& exact, int first, int count, int trials,
                                   uint64_t seed0 = 1000) {
  SamplingCheck c;
  c.trials = trials;
  std::map<Outcome, int64_t> seen;
  go.ignore_eos = true;
  for (int t = 0; t < trials; ++t) {
    go.sampling.seed = seed0 + t;
    auto r = engine.GenerateFromIds(prompt, go);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return c;
    EXPECT_GE(static_cast<int>(r->ids.size()), first + count) << "stop " << r->stop_reason << " " << r->error;
    if (static_cast<int>(r->ids.size()) < first + count) return c;
    ++seen[Outcome(r->ids.begin() + first, r->ids.begin() + first + count)];
    c.stats.Merge(r->stats);
  }
  for (const auto& [o, n] : seen)
    if (!exact.contains(o)) c.impossible += n;
  double rare_expected = 0, rare_observed = 0;
  int cells = 0;
  for (const auto& [o, prob] : exact) {
    const double e = prob * trials;
    const auto it = seen.find(o);
    const double n = it == seen.end() ? 0.0 : static_cast<double>(it->second);
    if (e < 5) {
      rare_expected += e;
      rare_observed += n;
      continue;
    }
    c.chi2 += (n - e) * (n - e) / e;
    ++cells;
  }
  if (rare_expected > 0) {
    c.chi2 += (rare_observed - rare_expected) * (rare_observed - rare_expected) / rare_expected;
    ++cells;
  }
  c.dof = std::max(cells - 1, 1);
  c.critical = Chi2Critical999(c.dof);
  return c;
}

// The standard losslessness check for a speculative engine: the tokens at generated positions
// 1-3 (the first ones verification emits; position 0 is sampled right after prefill), in
// generations longer than the draft budget so that several rounds and bonus tokens occur, are
// distributed exactly as plain sampling's. Requires that drafts were accepted, rejected and
// accepted whole, so the acceptance test, the residual and the bonus token all ran.
inline void ExpectSpeculativeSamplingMatchesTarget(Model& target, ThreadPool& pool, SpeculativeEngine& spec,
                                                   const std::vector<int32_t>& prompt, const SamplingParams& params,
                                                   int max_new_tokens, int trials = 30000) {
  const auto exact = ExactJointDistribution(target, pool, prompt, params, 1, 3);
  GenerateOptions go;
  go.max_new_tokens = max_new_tokens;
  go.sampling = params;
  const SamplingCheck c = CheckSampling(spec, prompt, go, exact, 1, 3, PassingCheckTrials(trials));
  EXPECT_TRUE(c.passed()) << c.Describe() << "; temperature " << params.temperature << " top-k " << params.top_k
                          << " top-p " << params.top_p << " min-p " << params.min_p;
  EXPECT_GT(c.stats.num_accepted_tokens, 0) << c.Describe();
  EXPECT_LT(c.stats.num_accepted_tokens, c.stats.num_draft_tokens) << "no rejection: " << c.Describe();
  EXPECT_GT(c.stats.num_whole_drafts, 0) << "no bonus token: " << c.Describe();
}

// The truncation settings of a sampling test, the rest (penalties, bias, order) at their defaults.
inline SamplingParams Sampling(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f,
                               uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

// The check above for a drafter on a tiny target: two draft tokens per step (positions 1-3 hold
// them and the bonus token), plain sampling and a truncated, tempered distribution, prompt
// {1, 5, 9}.
inline void ExpectDrafterSamplingMatchesTarget(Model& target, const Tokenizer& tok, ThreadPool& pool, Drafter* drafter) {
  ScheduleOptions so;
  so.n_max = 2;
  SpeculativeEngine engine(target, tok, pool, 64, drafter, so);
  for (const SamplingParams& base : {Sampling(1.0f), Sampling(0.8f, 6, 0.9f, 0.02f)})
    ExpectSpeculativeSamplingMatchesTarget(target, pool, engine, {1, 5, 9}, base, so.n_max + 3);
}

}  // namespace dspark::testing
