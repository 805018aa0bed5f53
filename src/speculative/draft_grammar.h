// Grammar-constrained drafting: what a constrained request needs of the vocabulary, and the
// grammar walked along one draft (the DraftConstraint a drafter drafts under). BatchEngine masks
// the target's rows with GrammarVocab and hands each constrained drafting sequence a DraftGrammar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "speculative/drafter.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

// What a grammar-constrained request needs of the vocabulary: each token's bytes (control tokens'
// text; end-of-generation tokens empty, allowed by the grammar's completeness alone) and their trie.
struct GrammarVocab {
  const Tokenizer& tokenizer;
  const std::vector<std::string>& bytes;
  const grammar::TokenMasker& masker;

  bool Allows(const grammar::Grammar& g, const grammar::GrammarState& state, int32_t id) const {
    if (tokenizer.IsEog(id)) return g.CanEnd(state);
    return !bytes[id].empty() && g.Accepts(state, bytes[id]);
  }

  // Masks `row` to the tokens allowed in `state`. `lazy`: only the argmax will be read, so an allowed
  // argmax leaves the row as it is (the masked argmax is the same). False: nothing is allowed.
  bool Mask(const grammar::Grammar& g, const grammar::GrammarState& state, float* row, int n_vocab, bool lazy) const;
};

// The grammar walked along one draft: a grammar-constrained sequence's DraftConstraint.
class DraftGrammar final : public DraftConstraint {
 public:
  DraftGrammar(GrammarVocab vocab, const grammar::Grammar& g, grammar::GrammarState state)
      : vocab_(vocab), g_(g) {
    states_.push_back(std::move(state));
  }
  bool Mask(float* logits, int n_vocab, bool greedy) override;
  void Push(int32_t token) override;
  // The tokens drafted under the constraint and the state before each of them and after the last:
  // the engine's check of the draft reuses them instead of walking the grammar again.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  std::vector<grammar::GrammarState>& states() { return states_; }

 private:
  GrammarVocab vocab_;
  const grammar::Grammar& g_;
  std::vector<int32_t> tokens_;
  std::vector<grammar::GrammarState> states_;
};

}  // namespace dspark
