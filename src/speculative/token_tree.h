// Token trees: a draft chain with alternatives beside its tokens (Draft::branches), each
// optionally followed by a tail of its own (a side chain), all verified in one target pass. A
// drafter's second choice at a position where its first is rejected is often the target's token;
// verifying it costs one more row, which on a memory-bound target is nearly free, and commits one
// more token whenever it is accepted. Its tail lets the step go on past it: a side chain from
// another n-gram match, or the drafter's continuation after its second choice.
//
// A sequence's verification rows: row 0 the anchor, row 1 + i draft token i (i < k), then every
// verified alternative in order of position and rank, each followed by its tail's rows. Row r's
// logits are the target's distribution of the token after row r's. An alternative at position i
// hangs from row i (the anchor, or draft token i - 1): it sees rows 0..i and itself; tail token j
// sees those, the alternative and tail tokens 0..j; nothing sees another alternative's rows.
#pragma once

#include <cstdint>
#include <vector>

#include "speculative/drafter.h"

namespace dspark {

struct TreeLeaf {
  int position = 0;  // the draft position it is an alternative at
  int row = 0;       // its verification row; the rows of its tail follow it
  int32_t token = 0;
  float prob = 0.0f;  // the drafter's probability of it
  std::vector<int32_t> tail;  // the verified tokens of its tail (DraftBranch::tail)
  int last_row() const { return row + static_cast<int>(tail.size()); }
};

struct TreeLayout {
  int k = 0;                     // verified chain tokens
  std::vector<TreeLeaf> leaves;  // in row order
  int rows() const { return leaves.empty() ? 1 + k : leaves.back().last_row() + 1; }
  // The leaves at position i, as a range [first, last) of `leaves`.
  std::pair<int, int> LeavesAt(int position) const;
  // The leaf whose alternative or tail is row r (r > k).
  const TreeLeaf& LeafOfRow(int r) const;
  // Row r's token's offset from the anchor's position: its depth in the tree.
  int Depth(int r) const;
  // Whether row `r` may attend to row `c` (both rows of this sequence): its ancestors and itself.
  bool Sees(int r, int c) const;
  // Tail tokens verified, over all leaves.
  int tail_rows() const;
};

// The tree the target verifies for the first k tokens of `draft`: its chain and the alternatives
// (with their tails) beside those k tokens (the planner trims Draft::branches to the ones it admits).
TreeLayout LayoutTree(const Draft& draft, int k);

// The n most likely tokens under softmax(logits) other than `chosen`, most likely first, with their
// probabilities: a drafter's alternatives to the token it drafted.
std::vector<DraftBranch> TopBranches(const float* logits, int n_vocab, int32_t chosen, int n);
// The same from a probability vector (a sampled draft's q).
std::vector<DraftBranch> TopBranches(const std::vector<float>& probs, int32_t chosen, int n);

}  // namespace dspark
