#include "speculative/drafters/ngram.h"

#include <algorithm>

namespace dspark {

NgramDrafter::NgramDrafter(NgramOptions options) : options_(options) {}

namespace {

// Where the continuations of the longest suffix (n_max..n_min) that occurred before start, most
// recent match first; *n is that suffix's length. Empty when none has a continuation.
std::vector<int> MatchContinuations(std::span<const int32_t> ctx, int n_min, int n_max, int* n_found) {
  const int len = static_cast<int>(ctx.size());
  std::vector<int> from;
  for (int n = std::min(n_max, len - 1); n >= std::max(1, n_min); --n) {
    const int32_t* suffix = ctx.data() + len - n;
    for (int start = len - n - 1; start >= 0; --start)
      if (std::equal(suffix, suffix + n, ctx.data() + start) && start + n < len) from.push_back(start + n);
    if (!from.empty()) {
      *n_found = n;
      return from;
    }
  }
  return from;
}

}  // namespace

std::vector<int32_t> NgramLookup(std::span<const int32_t> ctx, int n_min, int n_max, int budget) {
  int n = 0;
  const std::vector<int> from = MatchContinuations(ctx, n_min, n_max, &n);
  // Most recent match first: recent text predicts the continuation best.
  if (from.empty() || budget <= 0) return {};
  const int count = std::min(budget, static_cast<int>(ctx.size()) - from.front());
  return std::vector<int32_t>(ctx.begin() + from.front(), ctx.begin() + from.front() + count);
}

std::vector<std::vector<DraftBranch>> NgramBranches(std::span<const int32_t> ctx, int n_min, int n_max,
                                                    std::span<const int32_t> chain, int per_position, int tail) {
  std::vector<std::vector<DraftBranch>> branches(chain.size());
  if (chain.empty() || per_position <= 0) return branches;
  int n = 0;
  const std::vector<int> from = MatchContinuations(ctx, n_min, n_max, &n);
  const int len = static_cast<int>(ctx.size());
  struct Candidate {
    int32_t token;
    int count;
    std::vector<int32_t> tail;
  };
  std::vector<std::vector<Candidate>> at(chain.size());
  std::vector<int> reached(chain.size(), 0);  // matches that agree with the chain before position p
  for (int f : from) {
    int p = 0;
    while (p < static_cast<int>(chain.size()) && f + p < len && ctx[f + p] == chain[p]) ++reached[p++];
    if (p == static_cast<int>(chain.size()) || f + p >= len) continue;
    ++reached[p];
    std::vector<Candidate>& c = at[p];
    auto it = std::find_if(c.begin(), c.end(), [&](const Candidate& x) { return x.token == ctx[f + p]; });
    if (it != c.end()) {
      ++it->count;
      continue;
    }
    const int end = std::min(len, f + p + 1 + tail);
    c.push_back({ctx[f + p], 1, std::vector<int32_t>(ctx.begin() + f + p + 1, ctx.begin() + end)});
  }
  for (size_t p = 0; p < chain.size(); ++p) {
    std::vector<Candidate>& c = at[p];
    // Most supported first; the stable sort keeps the most recent first among equals.
    std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.count > b.count; });
    for (size_t j = 0; j < c.size() && static_cast<int>(j) < per_position; ++j)
      branches[p].push_back({c[j].token, static_cast<float>(c[j].count) / static_cast<float>(reached[p]), c[j].tail});
  }
  return branches;
}

Result<Draft> NgramDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  Draft d;
  d.tokens = NgramLookup(context, options_.n_min, options_.n_max, params.budget);
  if (params.branches > 0)
    d.branches = NgramBranches(context, options_.n_min, options_.n_max, d.tokens, params.branches, params.branch_tail);
  return d;
}

}  // namespace dspark
