// Exact verification of a draft against the target's logits. Greedy: accept while the draft token
// is the target's argmax, then emit the argmax. Sampling: standard speculative sampling (Leviathan
// et al. 2023, Chen et al. 2023) — accept x with probability min(1, p(x)/q(x)), on rejection draw
// from norm(max(0, p - q)), and draw a bonus token from p when the whole draft survives — so the
// output is distributed exactly as the target sampling alone. Knows no drafter.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampling.h"
#include "speculative/drafter.h"

namespace dspark {

struct VerifyResult {
  int num_accepted = 0;
  std::vector<int32_t> tokens;  // the accepted draft tokens, then one token from the target
  // Token trees: the verification row of the alternative accepted in place of draft token
  // chain_accepted(); -1 when the accepted tokens are the chain's.
  int leaf_row = -1;
  int tail_accepted = 0;  // tokens of that alternative's tail accepted after it
  // Accepted tokens of the chain itself (before an accepted alternative).
  int chain_accepted() const { return leaf_row >= 0 ? num_accepted - 1 - tail_accepted : num_accepted; }
  // The verification row of accepted token j (j < num_accepted): 1 + j along the chain, then the
  // alternative's row and its tail's.
  int Row(int j) const { return j < chain_accepted() ? j + 1 : leaf_row + (j - chain_accepted()); }
  // The verification row whose logits token j was drawn from: its parent's.
  int SourceRow(int j) const { return j == 0 ? 0 : Row(j - 1); }
};

// `logits` holds the rows of LayoutTree(draft, k) (speculative/token_tree.h), n_vocab each: row i
// (i <= k) is the target's distribution for the token after the anchor and the first i draft
// tokens, then one row per verified alternative and tail token. Only the first k tokens of
// `draft` and the alternatives beside them are verified. Where draft token i is rejected, its
// alternatives are tried in order against what remains of the target's distribution (greedy: the
// argmax; sampling: each alternative is a deterministic proposal, accepted with its residual
// probability, after which the residual drops it); an accepted alternative's tail is then
// verified as a chain of deterministic proposals. The output is distributed exactly as the
// target's.
VerifyResult Verify(const Draft& draft, int k, const float* logits, int n_vocab, const SamplingParams& params,
                    Rng& rng);

// Coupled verification for keyed requests (SamplingParams::keyed). The token at generated position
// pos0 + i is the draw plain decoding makes there, SampleToken with KeyedRng(seed, pos0 + i); a draft
// token survives only where it equals that draw. The output is therefore plain decoding's, byte for
// byte, whatever was drafted (the alternatives of a token tree included): a drafter that samples with the same keyed draws (DrawDraftToken)
// agrees with it wherever its distribution is close to the target's.
VerifyResult VerifyKeyed(const Draft& draft, int k, const float* logits, int n_vocab, const SamplingParams& params,
                         int64_t pos0);

// One step of the rejection rule on explicit distributions (exposed for tests): returns -1 if
// draft token x is accepted, else the replacement token drawn from norm(max(0, p - q)).
// q == nullptr means a deterministic draft (q one-hot on x).
int32_t AcceptOrResample(const std::vector<float>& p, const std::vector<float>* q, int32_t x, Rng& rng);

// The verification rule an engine applies (BatchEngineOptions::verify). Production code always
// runs Verify; tests substitute deliberately broken rules (speculative/testing/broken_verifiers.h) to
// prove that the distribution checks reject them.
using VerifyFn = VerifyResult (*)(const Draft& draft, int k, const float* logits, int n_vocab,
                                  const SamplingParams& params, Rng& rng);

}  // namespace dspark
