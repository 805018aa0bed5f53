#include "speculative/drafters/draft_step.h"

#include "kernels/ops.h"
#include "speculative/token_tree.h"

namespace dspark {

bool DraftNextToken(const float* logits, int n_vocab, const DraftParams& params, Rng& rng, Draft& d,
                    std::vector<float>& q) {
  if (params.constraint != nullptr) {
    // A grammar-constrained request: draw from the logits masked to what the grammar allows.
    thread_local std::vector<float> masked;
    masked.assign(logits, logits + n_vocab);
    if (!params.constraint->Mask(masked.data(), n_vocab, params.sampling.greedy())) return false;
    logits = masked.data();
  }
  float prob = 0;
  int32_t tok;
  if (params.sampling.greedy()) {
    // The argmax and its probability in two vectorised passes that write nothing.
    tok = static_cast<int32_t>(ops::ArgMax(logits, n_vocab, &prob));
  } else {
    ComputeProbs(logits, n_vocab, params.sampling, &q);
    tok = DrawDraftToken(q, params.sampling, params.position + static_cast<int64_t>(d.tokens.size()), rng);
    prob = q[tok];
  }
  if (params.stop != nullptr && !params.stop->Keep(prob)) return false;
  d.tokens.push_back(tok);
  if (params.constraint != nullptr) params.constraint->Push(tok);
  // The next most likely tokens, under the distribution the token was drawn from.
  if (params.branches > 0)
    d.branches.push_back(params.sampling.greedy() ? TopBranches(logits, n_vocab, tok, params.branches)
                                                  : TopBranches(q, tok, params.branches));
  if (!params.sampling.greedy()) d.q.push_back(q);
  d.probs.push_back(prob);
  return true;
}

}  // namespace dspark
