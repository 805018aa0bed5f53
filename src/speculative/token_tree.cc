#include "speculative/token_tree.h"

#include <algorithm>
#include <cmath>

namespace dspark {

std::pair<int, int> TreeLayout::LeavesAt(int position) const {
  const auto first = std::lower_bound(leaves.begin(), leaves.end(), position,
                                      [](const TreeLeaf& l, int p) { return l.position < p; });
  auto last = first;
  while (last != leaves.end() && last->position == position) ++last;
  return {static_cast<int>(first - leaves.begin()), static_cast<int>(last - leaves.begin())};
}

const TreeLeaf& TreeLayout::LeafOfRow(int r) const {
  // Leaves are in row order: the last one that starts at or before r.
  const auto it = std::upper_bound(leaves.begin(), leaves.end(), r, [](int row, const TreeLeaf& l) { return row < l.row; });
  return *(it - 1);
}

int TreeLayout::Depth(int r) const {
  if (r <= k) return r;
  const TreeLeaf& leaf = LeafOfRow(r);
  return leaf.position + 1 + (r - leaf.row);
}

bool TreeLayout::Sees(int r, int c) const {
  if (r <= k) return c <= r;  // the chain is causal
  const TreeLeaf& leaf = LeafOfRow(r);
  return c <= leaf.position || (c >= leaf.row && c <= r);
}

int TreeLayout::tail_rows() const {
  int n = 0;
  for (const TreeLeaf& l : leaves) n += static_cast<int>(l.tail.size());
  return n;
}

TreeLayout LayoutTree(const Draft& draft, int k) {
  TreeLayout t;
  t.k = k;
  int row = k + 1;
  for (int i = 0; i < k && i < static_cast<int>(draft.branches.size()); ++i)
    for (const DraftBranch& b : draft.branches[i]) {
      t.leaves.push_back({i, row, b.token, b.prob, b.tail});
      row = t.leaves.back().last_row() + 1;
    }
  return t;
}

namespace {
// The n largest of `score` other than `chosen`, largest first.
template <typename Score>
std::vector<int32_t> TopOthers(int n_vocab, int32_t chosen, int n, Score score) {
  std::vector<int32_t> top;
  if (n <= 0) return top;
  for (int32_t v = 0; v < n_vocab; ++v) {
    if (v == chosen) continue;
    const float s = score(v);
    if (static_cast<int>(top.size()) == n && !(s > score(top.back()))) continue;
    auto at = std::find_if(top.begin(), top.end(), [&](int32_t t) { return s > score(t); });
    top.insert(at, v);
    if (static_cast<int>(top.size()) > n) top.pop_back();
  }
  return top;
}
}  // namespace

std::vector<DraftBranch> TopBranches(const float* logits, int n_vocab, int32_t chosen, int n) {
  std::vector<DraftBranch> out;
  const std::vector<int32_t> top = TopOthers(n_vocab, chosen, n, [&](int32_t v) { return logits[v]; });
  if (top.empty()) return out;
  const float max = *std::max_element(logits, logits + n_vocab);
  double sum = 0;
  for (int v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - max);
  for (int32_t t : top) {
    if (!std::isfinite(logits[t])) break;  // masked out (a grammar): not a token the target can take
    out.push_back({t, static_cast<float>(std::exp(static_cast<double>(logits[t]) - max) / sum)});
  }
  return out;
}

std::vector<DraftBranch> TopBranches(const std::vector<float>& probs, int32_t chosen, int n) {
  std::vector<DraftBranch> out;
  for (int32_t t : TopOthers(static_cast<int>(probs.size()), chosen, n, [&](int32_t v) { return probs[v]; }))
    if (probs[t] > 0) out.push_back({t, probs[t]});
  return out;
}

}  // namespace dspark
