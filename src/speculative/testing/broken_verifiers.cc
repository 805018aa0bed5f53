#include "speculative/testing/broken_verifiers.h"

#include <algorithm>

#include "speculative/token_tree.h"

namespace dspark::testing {

namespace {

constexpr std::pair<VerifierBug, std::string_view> kNames[] = {
    {VerifierBug::kOffByOneQ, "off-by-one-q"},     {VerifierBug::kGreedyBonus, "greedy-bonus"},
    {VerifierBug::kResampleFromP, "resample-from-p"}, {VerifierBug::kUnfilteredP, "unfiltered-p"},
    {VerifierBug::kAcceptAll, "accept-all"},       {VerifierBug::kLeafAgainstP, "leaf-against-p"},
};

// The rule of Verify (speculative/verifier.cc) with one bug in it; the correct parts call the same
// functions Verify does, so the bug is the only difference.
template <VerifierBug kBug>
VerifyResult BrokenVerify(const Draft& draft, int k, const float* logits, int n_vocab, const SamplingParams& params,
                          Rng& rng) {
  VerifyResult r;
  SamplingParams target = params;
  if constexpr (kBug == VerifierBug::kUnfilteredP) target = {params.temperature, 0, 1.0f, 0.0f, params.seed};
  std::vector<float> p;
  for (int i = 0; i < k; ++i) {
    const float* row = logits + static_cast<size_t>(i) * n_vocab;
    const int32_t x = draft.tokens[i];
    int32_t replacement = -1;
    if constexpr (kBug != VerifierBug::kAcceptAll) {
      if (target.greedy()) {
        const int32_t t = Argmax(row, n_vocab);
        replacement = t == x ? -1 : t;
      } else {
        ComputeProbs(row, n_vocab, target, &p);
        const std::vector<float>* q = nullptr;
        if (!draft.q.empty()) q = &draft.q[kBug == VerifierBug::kOffByOneQ ? std::max(i - 1, 0) : i];
        if constexpr (kBug == VerifierBug::kResampleFromP) {
          const double qx = q ? (*q)[x] : 1.0;
          if (!(qx > 0 && rng.Uniform() * qx < p[x])) replacement = SampleFromWeights(p, rng);
        } else {
          replacement = AcceptOrResample(p, q, x, rng);
        }
      }
    }
    if constexpr (kBug == VerifierBug::kLeafAgainstP) {
      if (replacement >= 0 && !target.greedy()) {
        const TreeLayout tree = LayoutTree(draft, k);
        for (auto [a, end] = tree.LeavesAt(i); a < end; ++a) {
          if (rng.Uniform() < p[tree.leaves[a].token]) {
            r.tokens.push_back(tree.leaves[a].token);
            ++r.num_accepted;
            r.leaf_row = tree.leaves[a].row;
            std::vector<float> scratch;
            r.tokens.push_back(SampleToken(logits + static_cast<size_t>(r.leaf_row) * n_vocab, n_vocab, target, rng,
                                           &scratch));
            return r;
          }
        }
      }
    }
    if (replacement >= 0) {
      r.tokens.push_back(replacement);
      return r;
    }
    r.tokens.push_back(x);
    ++r.num_accepted;
  }
  const float* last = logits + static_cast<size_t>(k) * n_vocab;
  if constexpr (kBug == VerifierBug::kGreedyBonus) {
    r.tokens.push_back(Argmax(last, n_vocab));
  } else {
    std::vector<float> scratch;
    r.tokens.push_back(SampleToken(last, n_vocab, target, rng, &scratch));
  }
  return r;
}

}  // namespace

std::string_view VerifierBugName(VerifierBug bug) {
  for (const auto& [b, name] : kNames)
    if (b == bug) return name;
  return "?";
}

std::optional<VerifierBug> ParseVerifierBug(std::string_view name) {
  for (const auto& [b, n] : kNames)
    if (n == name) return b;
  return std::nullopt;
}

std::vector<VerifierBug> AllVerifierBugs() {
  std::vector<VerifierBug> out;
  for (const auto& [b, name] : kNames) out.push_back(b);
  return out;
}

VerifyFn BrokenVerifier(VerifierBug bug) {
  switch (bug) {
    case VerifierBug::kOffByOneQ: return &BrokenVerify<VerifierBug::kOffByOneQ>;
    case VerifierBug::kGreedyBonus: return &BrokenVerify<VerifierBug::kGreedyBonus>;
    case VerifierBug::kResampleFromP: return &BrokenVerify<VerifierBug::kResampleFromP>;
    case VerifierBug::kUnfilteredP: return &BrokenVerify<VerifierBug::kUnfilteredP>;
    case VerifierBug::kAcceptAll: return &BrokenVerify<VerifierBug::kAcceptAll>;
    case VerifierBug::kLeafAgainstP: return &BrokenVerify<VerifierBug::kLeafAgainstP>;
  }
  return &Verify;
}

}  // namespace dspark::testing
