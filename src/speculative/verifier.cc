#include "speculative/verifier.h"

#include <algorithm>
#include <span>

#include "speculative/token_tree.h"

namespace dspark {

namespace {

// One position of the rejection rule: -1 if draft token x (drawn from q; null: deterministic) is
// accepted. Otherwise the residual r = norm(max(0, p - q)) meets each alternative in turn, a
// deterministic proposal accepted with probability r(b), after which r drops it (the residual of
// a one-hot proposal); the first accepted one is returned with *leaf its index, else a draw from
// what remains (*leaf = -1). Each stage is an exact rejection step, so the result is distributed
// as p whatever the alternatives are, as long as they were fixed before the draw.
int32_t AcceptOrResampleTree(const std::vector<float>& p, const std::vector<float>* q, int32_t x,
                             std::span<const TreeLeaf> alternatives, Rng& rng, int* leaf) {
  *leaf = -1;
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
  if (mass <= 1e-12) {
    residual.assign(p.begin(), p.end());
    mass = 0;
    for (float v : residual) mass += v;
  }
  for (size_t a = 0; a < alternatives.size(); ++a) {
    const int32_t b = alternatives[a].token;
    const double rb = residual[b];
    if (rb <= 0) continue;
    if (rng.Uniform() * mass < rb) {
      *leaf = static_cast<int>(a);
      return b;
    }
    mass -= rb;
    residual[b] = 0;
    if (mass <= 1e-12) break;  // the alternatives held all of it (rounding): nothing else to draw
  }
  if (mass <= 1e-12) return SampleFromWeights(p, rng);
  return SampleFromWeights(residual, rng);
}

// The alternatives beside draft position i.
std::span<const TreeLeaf> LeavesAt(const TreeLayout& tree, int i) {
  const auto [first, last] = tree.LeavesAt(i);
  return std::span<const TreeLeaf>(tree.leaves.data() + first, last - first);
}

// What the tree proposes after row `row`: its next token (the chain's, or the tail's after an
// alternative) with that token's row and draft distribution (null: deterministic), and the
// alternatives beside it. token < 0: nothing (the end of the chain or of a tail).
struct Children {
  int32_t token = -1;
  int row = -1;
  const std::vector<float>* q = nullptr;
  std::span<const TreeLeaf> alternatives;
};

Children ChildrenOf(const Draft& draft, const TreeLayout& tree, int row) {
  Children c;
  if (row < tree.k) {
    c.token = draft.tokens[row];
    c.row = row + 1;
    if (!draft.q.empty()) c.q = &draft.q[row];
    c.alternatives = LeavesAt(tree, row);
  } else if (row > tree.k) {
    const TreeLeaf& leaf = tree.LeafOfRow(row);
    const int j = row - leaf.row;
    if (j < static_cast<int>(leaf.tail.size())) {
      c.token = leaf.tail[j];
      c.row = row + 1;
    }
  }
  return c;
}

}  // namespace

int32_t AcceptOrResample(const std::vector<float>& p, const std::vector<float>* q, int32_t x, Rng& rng) {
  int leaf;
  return AcceptOrResampleTree(p, q, x, {}, rng, &leaf);
}

VerifyResult Verify(const Draft& draft, int k, const float* logits, int n_vocab, const SamplingParams& params,
                    Rng& rng) {
  VerifyResult r;
  r.tokens.reserve(k + 1);
  const TreeLayout tree = LayoutTree(draft, k);
  thread_local std::vector<float> p;
  const auto row_of = [&](int row) { return logits + static_cast<size_t>(row) * n_vocab; };
  int row = 0;  // the row of the last accepted token (the anchor's at first)
  for (;;) {
    const Children c = ChildrenOf(draft, tree, row);
    if (c.token < 0) break;
    int32_t t = -1;
    int leaf = -1;
    if (params.greedy()) {
      const int32_t best = Argmax(row_of(row), n_vocab);
      if (best != c.token) {
        t = best;
        for (size_t a = 0; a < c.alternatives.size() && leaf < 0; ++a)
          if (c.alternatives[a].token == best) leaf = static_cast<int>(a);
      }
    } else {
      ComputeProbs(row_of(row), n_vocab, params, &p);
      t = AcceptOrResampleTree(p, c.q, c.token, c.alternatives, rng, &leaf);
    }
    if (t < 0) {
      r.tokens.push_back(c.token);
      ++r.num_accepted;
      if (row > k) ++r.tail_accepted;
      row = c.row;
      continue;
    }
    r.tokens.push_back(t);
    if (leaf < 0) return r;
    // An alternative was accepted in place of the chain's token: the step goes on along its tail.
    ++r.num_accepted;
    r.leaf_row = row = c.alternatives[leaf].row;
  }
  std::vector<float> scratch;
  r.tokens.push_back(SampleToken(row_of(row), n_vocab, params, rng, &scratch));
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
  const TreeLayout tree = LayoutTree(draft, k);
  thread_local std::vector<float> scratch;
  int row = 0;  // the row the next token is drawn from
  for (int64_t i = 0;; ++i) {
    Rng rng = KeyedRng(params.seed, pos0 + i);
    const int32_t t = SampleToken(logits + static_cast<size_t>(row) * n_vocab, n_vocab, params, rng, &scratch);
    r.tokens.push_back(t);
    const Children c = ChildrenOf(draft, tree, row);
    if (c.token < 0) break;  // the bonus token
    if (t == c.token) {
      ++r.num_accepted;
      if (row > k) ++r.tail_accepted;
      row = c.row;
      continue;
    }
    row = -1;
    for (const TreeLeaf& leaf : c.alternatives)
      if (leaf.token == t) row = leaf.row;
    if (row < 0) break;
    ++r.num_accepted;
    r.leaf_row = row;
  }
  return r;
}

}  // namespace dspark
