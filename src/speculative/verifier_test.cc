// The rejection rule on hand-made distributions: exactness (χ²), and a deliberately wrong rule
// that the same harness must reject.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "speculative/token_tree.h"
#include "speculative/verifier.h"

namespace dspark {
namespace {

// Pearson χ² of observed counts against expected probabilities.
double ChiSquare(const std::vector<int>& counts, const std::vector<float>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    if (e > 0) chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

// 99.9% quantile of χ² with 5 degrees of freedom.
constexpr double kChi2Crit5 = 20.52;

using Rule = std::function<int32_t(const std::vector<float>& p, const std::vector<float>& q, int32_t x, Rng&)>;

std::vector<int> Simulate(const std::vector<float>& p, const std::vector<float>& q, const Rule& rule, int n,
                          uint64_t seed) {
  Rng rng(seed);
  std::vector<int> counts(p.size(), 0);
  for (int t = 0; t < n; ++t) {
    const int32_t x = SampleFromWeights(q, rng);
    const int32_t r = rule(p, q, x, rng);
    ++counts[r < 0 ? x : r];
  }
  return counts;
}

const std::vector<float> kP = {0.30f, 0.25f, 0.20f, 0.15f, 0.07f, 0.03f};
const std::vector<float> kQ = {0.05f, 0.40f, 0.10f, 0.05f, 0.30f, 0.10f};

TEST(Verifier, RejectionSamplingReproducesTargetDistribution) {
  const int n = 200000;
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto counts = Simulate(kP, kQ, [](const auto& p, const auto& q, int32_t x, Rng& rng) {
      return AcceptOrResample(p, &q, x, rng);
    }, n, seed);
    EXPECT_LT(ChiSquare(counts, kP, n), kChi2Crit5) << "seed " << seed;
  }
}

TEST(Verifier, DeterministicDraftsAreAcceptedWithProbabilityP) {
  // q one-hot on token 1: accept with p(1), else draw from p without token 1.
  Rng rng(5);
  const int n = 100000;
  std::vector<int> counts(kP.size(), 0);
  for (int t = 0; t < n; ++t) {
    const int32_t r = AcceptOrResample(kP, nullptr, 1, rng);
    ++counts[r < 0 ? 1 : r];
  }
  EXPECT_LT(ChiSquare(counts, kP, n), kChi2Crit5);
}

TEST(Verifier, HarnessRejectsAWrongRule) {
  // Wrong: on rejection resample from p instead of the residual max(0, p - q).
  const int n = 200000;
  auto counts = Simulate(kP, kQ, [](const auto& p, const auto& q, int32_t x, Rng& rng) -> int32_t {
    if (rng.Uniform() * q[x] < p[x]) return -1;
    return SampleFromWeights(p, rng);
  }, n, 1);
  EXPECT_GT(ChiSquare(counts, kP, n), kChi2Crit5 * 10);
}

TEST(Verifier, ResidualMathOnHandMadeDistributions) {
  // p = (0.5, 0.5), q = (1, 0), x = 0: accept with 0.5; on rejection the residual is (0, 0.5) → 1.
  Rng rng(9);
  const std::vector<float> p = {0.5f, 0.5f}, q = {1.0f, 0.0f};
  int accepted = 0;
  for (int t = 0; t < 10000; ++t) {
    const int32_t r = AcceptOrResample(p, &q, 0, rng);
    if (r < 0) ++accepted;
    else ASSERT_EQ(r, 1);
  }
  EXPECT_NEAR(accepted / 10000.0, 0.5, 0.03);
  // p == q: always accepted.
  for (int t = 0; t < 1000; ++t) ASSERT_EQ(AcceptOrResample(p, &p, 1, rng), -1);
}

TEST(Verifier, GreedyAcceptsPrefixThenEmitsArgmax) {
  const int n_vocab = 4;
  // Row argmaxes: 2, 3, 1, 0.
  const std::vector<float> logits = {0, 0, 9, 0, /**/ 0, 0, 0, 9, /**/ 0, 9, 0, 0, /**/ 9, 0, 0, 0};
  Draft d;
  d.tokens = {2, 3, 0};
  Rng rng(1);
  VerifyResult r = Verify(d, 3, logits.data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 3, 1}));
  d.tokens = {2, 3, 1};
  r = Verify(d, 3, logits.data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 3);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 3, 1, 0}));  // bonus token from the last row
  r = Verify(d, 0, logits.data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2}));  // empty draft: plain decoding
}

// Token trees: draft [2, 3] with alternatives 1 and 0 beside token 0 (rows 3 and 4 after the
// chain's three).
Draft TreeDraft() {
  Draft d;
  d.tokens = {2, 3};
  d.branches = {{{1, 0.2f, {}}, {0, 0.1f, {}}}};
  return d;
}

std::vector<float> OneHotRows(const std::vector<int32_t>& argmax, int n_vocab) {
  std::vector<float> logits(argmax.size() * n_vocab, 0.0f);
  for (size_t r = 0; r < argmax.size(); ++r) logits[r * n_vocab + argmax[r]] = 9.0f;
  return logits;
}

TEST(TreeVerification, LayoutPutsLeavesAfterTheChainAndTheyHangFromTheirParent) {
  const TreeLayout t = LayoutTree(TreeDraft(), 2);
  ASSERT_EQ(t.rows(), 5);
  EXPECT_EQ(t.leaves[0].row, 3);
  EXPECT_EQ(t.leaves[1].row, 4);
  EXPECT_EQ(t.LeavesAt(0), std::make_pair(0, 2));
  EXPECT_EQ(t.LeavesAt(1), std::make_pair(2, 2));
  // A leaf beside token 0 sees the anchor and itself only; the chain never sees a leaf.
  EXPECT_TRUE(t.Sees(3, 0));
  EXPECT_TRUE(t.Sees(3, 3));
  EXPECT_FALSE(t.Sees(3, 1));
  EXPECT_FALSE(t.Sees(4, 3));
  EXPECT_FALSE(t.Sees(2, 3));
  EXPECT_TRUE(t.Sees(2, 1));
  // Alternatives beside unverified tokens are not laid out.
  EXPECT_TRUE(LayoutTree(TreeDraft(), 0).leaves.empty());
}

TEST(TreeVerification, GreedyTakesTheLeafThatIsTheArgmaxThenItsRowsBonus) {
  const int n_vocab = 4;
  Draft d = TreeDraft();
  Rng rng(1);
  // Row 0's argmax is 0: token 2 is rejected, leaf 0 (row 4) accepted, the bonus from row 4.
  VerifyResult r = Verify(d, 2, OneHotRows({0, 3, 1, 2, 3}, n_vocab).data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 1);
  EXPECT_EQ(r.leaf_row, 4);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(r.SourceRow(0), 0);
  EXPECT_EQ(r.SourceRow(1), 4);
  // No leaf matches the argmax 3: the target's token, as for a chain.
  r = Verify(d, 2, OneHotRows({3, 3, 1, 2, 0}, n_vocab).data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 0);
  EXPECT_EQ(r.leaf_row, -1);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{3}));
  // The chain accepted whole: leaves do not matter.
  r = Verify(d, 2, OneHotRows({2, 3, 1, 0, 0}, n_vocab).data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.num_accepted, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 3, 1}));
  EXPECT_EQ(r.SourceRow(2), 2);
}

TEST(TreeVerification, KeyedDrawsFollowALeafAsPlainDecodingWould) {
  const int n_vocab = 4;
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.keyed = true;
  sp.seed = 77;
  // Near one-hot rows: the keyed draw is the row's token whatever the key.
  std::vector<float> logits = OneHotRows({1, 3, 1, 2, 3}, n_vocab);
  for (float& v : logits) v *= 4.0f;
  const VerifyResult r = VerifyKeyed(TreeDraft(), 2, logits.data(), n_vocab, sp, 10);
  EXPECT_EQ(r.num_accepted, 1);
  EXPECT_EQ(r.leaf_row, 3);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 2}));  // leaf 1, then row 3's token
}

// Sampling through a tree: the first token is distributed as p whatever the alternatives, and the
// token after an accepted alternative as that alternative's own row.
const std::vector<std::vector<float>> kLeafRows = {{0.05f, 0.05f, 0.1f, 0.1f, 0.3f, 0.4f},
                                                   {0.4f, 0.3f, 0.1f, 0.1f, 0.05f, 0.05f}};

struct TreeCounts {
  std::vector<int> first;
  std::vector<std::vector<int>> after_leaf;  // per alternative's rank
  std::vector<int> leaf_taken;
};

using TreeRule = std::function<VerifyResult(const Draft&, const float* logits, Rng&)>;

// The tree simulations' trials and sampling (temperature 1, no filters: p is the row itself).
constexpr int kTreeTrials = 200000;
SamplingParams AtT1() {
  SamplingParams sp;
  sp.temperature = 1.0f;
  return sp;
}

// The verifier under test on a one-token draft over the 6-token vocabulary.
VerifyResult VerifyOne(const Draft& d, const float* logits, Rng& rng) { return Verify(d, 1, logits, 6, AtT1(), rng); }

// Drafts one token x ~ q with q's two next most likely tokens beside it, n times.
TreeCounts SimulateTree(const TreeRule& rule, int n, uint64_t seed) {
  // Rows: 0 = p (the anchor's), 1 = after the chain's token, 2 and 3 = after each alternative.
  std::vector<float> logits;
  for (const auto& r : {kP, kQ, kLeafRows[0], kLeafRows[1]})
    for (float v : r) logits.push_back(std::log(v));
  Rng rng(seed);
  TreeCounts c;
  c.first.assign(kP.size(), 0);
  c.after_leaf.assign(2, std::vector<int>(kP.size(), 0));
  c.leaf_taken.assign(2, 0);
  for (int t = 0; t < n; ++t) {
    Draft d;
    const int32_t x = SampleFromWeights(kQ, rng);
    d.tokens = {x};
    d.q = {kQ};
    d.branches = {TopBranches(kQ, x, 2)};
    const VerifyResult r = rule(d, logits.data(), rng);
    ++c.first[r.tokens[0]];
    if (r.leaf_row >= 2) {
      ++c.leaf_taken[r.leaf_row - 2];
      ++c.after_leaf[r.leaf_row - 2][r.tokens[1]];
    }
  }
  return c;
}

TEST(TreeVerification, SamplingThroughAlternativesReproducesTheTargetDistribution) {
  const int n = kTreeTrials;
  const TreeCounts c = SimulateTree(&VerifyOne, n, 4);
  EXPECT_LT(ChiSquare(c.first, kP, n), kChi2Crit5);
  ASSERT_GT(c.leaf_taken[0] + c.leaf_taken[1], n / 20);  // alternatives are accepted often enough to matter
  for (int rank = 0; rank < 2; ++rank) {
    if (c.leaf_taken[rank] > 1000) {
      EXPECT_LT(ChiSquare(c.after_leaf[rank], kLeafRows[rank], c.leaf_taken[rank]), kChi2Crit5) << "rank " << rank;
    }
  }
}

TEST(TreeVerification, HarnessRejectsAlternativesJudgedAgainstPInsteadOfTheResidual) {
  // Wrong: after rejecting the draft token, accept an alternative with its probability under p
  // (not under the residual), as if the rejected token's mass had not been taken out.
  const int n = kTreeTrials;
  const TreeCounts c = SimulateTree(
      [&](const Draft& d, const float* logits, Rng& rng) {
        VerifyResult r;
        const int32_t x = d.tokens[0];
        if (rng.Uniform() * kQ[x] < kP[x]) {
          r.tokens = {x, SampleFromWeights(kQ, rng)};
          r.num_accepted = 1;
          return r;
        }
        for (size_t a = 0; a < d.branches[0].size(); ++a) {
          const int32_t b = d.branches[0][a].token;
          if (rng.Uniform() < kP[b]) {
            r.tokens = {b, 0};
            r.num_accepted = 1;
            r.leaf_row = 2 + static_cast<int>(a);
            return r;
          }
        }
        std::vector<float> residual(kP.size());
        for (size_t i = 0; i < kP.size(); ++i) residual[i] = std::max(0.0f, kP[i] - kQ[i]);
        r.tokens = {SampleFromWeights(residual, rng)};
        (void)logits;
        return r;
      },
      n, 4);
  EXPECT_GT(ChiSquare(c.first, kP, n), kChi2Crit5 * 10);
}

// Side chains: draft [2, 3]; beside token 0 alternative 1 with tail [3, 0], then alternative 0
// (a leaf). Rows: 0 anchor, 1-2 chain, 3 alternative 1, 4-5 its tail, 6 alternative 0.
Draft TailDraft() {
  Draft d;
  d.tokens = {2, 3};
  d.branches = {{{1, 0.2f, {3, 0}}, {0, 0.1f, {}}}};
  return d;
}

TEST(TreeVerification, TailsFollowTheirAlternativeAndSeeOnlyTheirAncestors) {
  const TreeLayout t = LayoutTree(TailDraft(), 2);
  ASSERT_EQ(t.rows(), 7);
  EXPECT_EQ(t.leaves[0].row, 3);
  EXPECT_EQ(t.leaves[0].last_row(), 5);
  EXPECT_EQ(t.leaves[1].row, 6);
  EXPECT_EQ(t.tail_rows(), 2);
  // Depths: the alternative stands where draft token 0 would, its tail after it.
  EXPECT_EQ(t.Depth(3), 1);
  EXPECT_EQ(t.Depth(4), 2);
  EXPECT_EQ(t.Depth(5), 3);
  EXPECT_EQ(t.Depth(6), 1);
  EXPECT_EQ(&t.LeafOfRow(5), &t.leaves[0]);
  EXPECT_EQ(&t.LeafOfRow(6), &t.leaves[1]);
  // Tail token 1 (row 5) sees the anchor, its alternative, tail token 0 and itself.
  for (int c = 0; c < 7; ++c) EXPECT_EQ(t.Sees(5, c), c == 0 || c == 3 || c == 4 || c == 5) << c;
  // The other alternative and the chain never see the tail.
  EXPECT_FALSE(t.Sees(6, 4));
  EXPECT_FALSE(t.Sees(2, 4));
  EXPECT_FALSE(t.Sees(4, 1));
}

TEST(TreeVerification, GreedyFollowsAnAcceptedAlternativesTail) {
  const int n_vocab = 4;
  const Draft d = TailDraft();
  Rng rng(1);
  // Row 0 wants 1 (the alternative), row 3 wants 3 (tail token 0), row 4 wants 2 (not tail token
  // 1): committed 1, 3, then row 4's 2.
  VerifyResult r = Verify(d, 2, OneHotRows({1, 0, 0, 3, 2, 0, 0}, n_vocab).data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 3, 2}));
  EXPECT_EQ(r.num_accepted, 2);
  EXPECT_EQ(r.leaf_row, 3);
  EXPECT_EQ(r.tail_accepted, 1);
  EXPECT_EQ(r.chain_accepted(), 0);
  EXPECT_EQ(r.Row(0), 3);
  EXPECT_EQ(r.Row(1), 4);
  EXPECT_EQ(r.SourceRow(0), 0);
  EXPECT_EQ(r.SourceRow(1), 3);
  EXPECT_EQ(r.SourceRow(2), 4);
  // The whole tail accepted: the bonus comes from its last row (5).
  r = Verify(d, 2, OneHotRows({1, 0, 0, 3, 0, 2, 0}, n_vocab).data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_EQ(r.tail_accepted, 2);
  EXPECT_EQ(r.SourceRow(3), 5);
  // The chain's first token accepted, then rejected without alternatives there: the tail is never
  // reached.
  r = Verify(d, 2, OneHotRows({2, 1, 0, 3, 0, 2, 0}, n_vocab).data(), n_vocab, SamplingParams{}, rng);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r.leaf_row, -1);
  EXPECT_EQ(r.Row(0), 1);
  // Keyed draws walk the same path.
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.keyed = true;
  sp.seed = 5;
  std::vector<float> logits = OneHotRows({1, 0, 0, 3, 0, 2, 0}, n_vocab);
  for (float& v : logits) v *= 4.0f;
  r = VerifyKeyed(d, 2, logits.data(), n_vocab, sp, 3);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_EQ(r.leaf_row, 3);
  EXPECT_EQ(r.tail_accepted, 2);
}

// Sampling through a side chain: x ~ q drafted, an alternative b beside it with tail
// [y]. Rows: 0 = p, 1 = after x, 2 = after b, 3 = after b y. Whatever was drafted, the first token
// must follow p, the token after b row 2, and the token after b y row 3.
const std::vector<float> kAfterB = {0.1f, 0.2f, 0.3f, 0.2f, 0.1f, 0.1f};
const std::vector<float> kAfterBY = {0.3f, 0.05f, 0.05f, 0.2f, 0.2f, 0.2f};

struct TailCounts {
  std::vector<int> first, after_b, after_by;
  int n_b = 0, n_by = 0;  // alternative b taken; b and then its tail token y taken
};

TailCounts SimulateTail(const TreeRule& rule, int n, uint64_t seed) {
  std::vector<float> logits;
  for (const auto& r : {kP, kQ, kAfterB, kAfterBY})
    for (float v : r) logits.push_back(std::log(v));
  Rng rng(seed);
  TailCounts c;
  c.first.assign(kP.size(), 0);
  c.after_b.assign(kP.size(), 0);
  c.after_by.assign(kP.size(), 0);
  for (int t = 0; t < n; ++t) {
    Draft d;
    const int32_t x = SampleFromWeights(kQ, rng);
    d.tokens = {x};
    d.q = {kQ};
    // The alternative: the target's likeliest token where q leaves it room (p > q), any token
    // fixed before the draw would do.
    const int32_t b = x == 0 ? 2 : 0;
    const int32_t y = (b + 2) % static_cast<int32_t>(kP.size());  // likely after b (kAfterB)
    d.branches = {{DraftBranch{b, kQ[b], {y}}}};
    const VerifyResult r = rule(d, logits.data(), rng);
    ++c.first[r.tokens[0]];
    if (r.tokens[0] != b || r.leaf_row != 2) continue;
    ++c.n_b;
    ++c.after_b[r.tokens[1]];
    if (r.tokens[1] != y) continue;
    ++c.n_by;
    ++c.after_by[r.tokens[2]];
  }
  return c;
}

TEST(TreeVerification, SamplingThroughATailReproducesTheTargetDistribution) {
  const int n = kTreeTrials;
  const TailCounts c = SimulateTail(&VerifyOne, n, 9);
  EXPECT_LT(ChiSquare(c.first, kP, n), kChi2Crit5);
  ASSERT_GT(c.n_b, n / 20);
  EXPECT_LT(ChiSquare(c.after_b, kAfterB, c.n_b), kChi2Crit5);
  ASSERT_GT(c.n_by, c.n_b / 10);  // the tail is accepted often enough to matter
  EXPECT_LT(ChiSquare(c.after_by, kAfterBY, c.n_by), kChi2Crit5);
}

TEST(TreeVerification, HarnessRejectsATailAcceptedWithoutItsRejectionStep) {
  // Wrong: once the alternative is taken, its tail is committed without checking it against the
  // alternative's row.
  const SamplingParams sp = AtT1();
  const int n = kTreeTrials;
  const TailCounts c = SimulateTail(
      [&](const Draft& d, const float* logits, Rng& rng) {
        Draft leaf_only = d;
        leaf_only.branches[0][0].tail.clear();
        VerifyResult r = Verify(leaf_only, 1, logits, 6, sp, rng);
        if (r.leaf_row == 2) {
          r.tokens.back() = d.branches[0][0].tail[0];
          std::vector<float> scratch;
          r.tokens.push_back(SampleToken(logits + 3 * 6, 6, sp, rng, &scratch));
          ++r.num_accepted;
          r.tail_accepted = 1;
        }
        return r;
      },
      n, 9);
  EXPECT_LT(ChiSquare(c.first, kP, n), kChi2Crit5);  // the bug is after the first token
  EXPECT_GT(ChiSquare(c.after_b, kAfterB, c.n_b), kChi2Crit5 * 10);
}

}  // namespace
}  // namespace dspark
