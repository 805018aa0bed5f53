#include "speculative/draft_grammar.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sampling/sampling.h"

namespace dspark {

bool GrammarVocab::Mask(const grammar::Grammar& g, const grammar::GrammarState& state, float* row, int n_vocab,
                        bool lazy) const {
  if (lazy && Allows(g, state, Argmax(row, n_vocab))) return true;
  thread_local std::vector<uint8_t> allowed;
  masker.AllowedTokens(g, state, &allowed);
  const bool can_end = g.CanEnd(state);
  bool any = false;
  for (int id = 0; id < n_vocab; ++id) {
    const bool ok = tokenizer.IsEog(id) ? can_end : allowed[id] != 0;
    if (ok) any = true;
    else row[id] = -INFINITY;
  }
  return any;
}

bool DraftGrammar::Mask(float* logits, int n_vocab, bool greedy) {
  if (!greedy) return vocab_.Mask(g_, states_.back(), logits, n_vocab, false);
  // A greedy draft needs only the most probable allowed token, and a full mask costs as much as
  // a small draft pass: the drafter's few best candidates are tried in order, the more probable
  // forbidden ones are set to -inf (so the argmax is the allowed one), and when none of them is
  // allowed the draft ends (the drafter does not know what comes next).
  if (vocab_.Allows(g_, states_.back(), Argmax(logits, n_vocab))) return true;
  constexpr int kCandidates = 8;
  const int n = std::min(kCandidates, n_vocab);
  thread_local std::vector<int32_t> order;
  order.resize(n_vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int i = 0; i < n; ++i) {
    if (vocab_.Allows(g_, states_.back(), order[i])) return true;
    logits[order[i]] = -INFINITY;
  }
  return false;
}

void DraftGrammar::Push(int32_t token) {
  grammar::GrammarState next = states_.back();
  if (!vocab_.tokenizer.IsEog(token)) g_.Advance(&next, vocab_.bytes[token]);
  tokens_.push_back(token);
  states_.push_back(std::move(next));
}

}  // namespace dspark
