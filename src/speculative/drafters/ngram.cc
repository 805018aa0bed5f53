#include "speculative/drafters/ngram.h"

#include <algorithm>

namespace dspark {

NgramDrafter::NgramDrafter(NgramOptions options) : options_(options) {}

std::vector<int32_t> NgramLookup(std::span<const int32_t> ctx, int n_min, int n_max, int budget) {
  const int len = static_cast<int>(ctx.size());
  for (int n = std::min(n_max, len - 1); n >= std::max(1, n_min); --n) {
    const int32_t* suffix = ctx.data() + len - n;
    // Most recent match first: recent text predicts the continuation best.
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, ctx.data() + start)) continue;
      const int from = start + n;
      const int count = std::min(budget, len - from);
      if (count <= 0) continue;
      return std::vector<int32_t>(ctx.begin() + from, ctx.begin() + from + count);
    }
  }
  return {};
}

Result<Draft> NgramDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  Draft d;
  d.tokens = NgramLookup(context, options_.n_min, options_.n_max, params.budget);
  return d;
}

}  // namespace dspark
