// Prompt lookup / n-gram drafting: no extra model. Finds the most recent earlier occurrence of the
// last n tokens (n from n_max down to n_min) in the prompt and generated text and proposes the
// tokens that followed it. Deterministic (q one-hot). Strong on code edits and retrieval answers.
#pragma once

#include "speculative/drafter.h"

namespace dspark {

struct NgramOptions {
  int n_min = 2;
  int n_max = 4;
};

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(NgramOptions options);
  std::string_view Name() const override { return "ngram"; }
  Status Begin(int seq) override { return Status::Ok(); }
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;

 private:
  NgramOptions options_;
};

// The pure matching function behind the drafter (tested on its own): up to `budget` tokens that
// followed the most recent earlier match of the longest matching suffix of length n_max..n_min.
std::vector<int32_t> NgramLookup(std::span<const int32_t> context, int n_min, int n_max, int budget);

// N-gram branches (token trees): alternatives to `chain` (NgramLookup's draft) from the other
// earlier matches of the same suffix. Where a match's continuation first differs from the chain,
// its token there is an alternative, and up to `tail` of the tokens that followed it its tail.
// At each position at most `per_position` alternatives, the ones most matches continue with
// first (then the most recent); prob is the share of the matches that agree with the chain up to
// that position and continue with it.
std::vector<std::vector<DraftBranch>> NgramBranches(std::span<const int32_t> context, int n_min, int n_max,
                                                    std::span<const int32_t> chain, int per_position, int tail);

}  // namespace dspark
