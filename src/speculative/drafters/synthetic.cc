#include "speculative/drafters/synthetic.h"

#include <algorithm>

namespace dspark {

SyntheticDrafter::SyntheticDrafter(std::vector<int32_t> reference, int n_vocab, double accept_rate)
    : reference_(std::move(reference)), n_vocab_(n_vocab), accept_rate_(accept_rate) {}

Result<Draft> SyntheticDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params,
                                        Rng& rng) {
  Draft d;
  const size_t n = context.size();
  // Only a context that still follows the reference has a known continuation.
  if (n > reference_.size() || !std::equal(context.begin(), context.end(), reference_.begin())) return d;
  for (size_t i = n; i < reference_.size() && static_cast<int>(d.tokens.size()) < params.budget; ++i) {
    int32_t t = reference_[i];
    if (rng.Uniform() >= accept_rate_) t = static_cast<int32_t>((t + 1 + rng.Next() % (n_vocab_ - 1)) % n_vocab_);
    d.tokens.push_back(t);
  }
  return d;
}

}  // namespace dspark
