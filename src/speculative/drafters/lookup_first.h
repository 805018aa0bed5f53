// Prompt lookup in front of a model drafter. When the context repeats (the last n tokens occurred
// before) the tokens that followed are proposed for free; otherwise the model drafts. Small
// targets and code both repeat themselves: where they do, n-gram lookup can be accepted as often
// as a draft model or more, at no drafting cost, while the draft model covers the text that does
// not repeat.
//
// The composition keeps its own statistics of the lookups: each context it is given shows which
// tokens the target committed after the last lookup, so it knows how far that lookup would have
// survived (under sampling too: a deterministic draft token is accepted with the probability the
// target samples it). It reports that record as the lookup's survival (Draft::survival_measured);
// the planner verifies by it and learns the model's cost and acceptance from the model's drafts
// alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "speculative/acceptance.h"
#include "speculative/drafter.h"
#include "speculative/drafters/ngram.h"

namespace dspark {

class LookupFirstDrafter final : public Drafter {
 public:
  LookupFirstDrafter(NgramOptions lookup, std::unique_ptr<Drafter> model);
  std::string_view Name() const override { return name_; }
  DrafterNeeds Needs() const override { return model_->Needs(); }
  Status Begin(int seq) override;
  Result<int> BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) override;
  std::unique_ptr<DrafterRows> SaveRows(int seq, int rows) override;
  Status ObserveTaps(int seq, const TapRows& rows) override { return model_->ObserveTaps(seq, rows); }
  Status Prefill(int seq, std::span<const int32_t> context) override { return model_->Prefill(seq, context); }
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  // Sequences whose context repeats get their lookup; the model drafts the rest in one batch.
  std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) override;
  void End(int seq) override;

  // The lookups' measured conditional acceptance at draft position i for `seq` (tests, statistics).
  double LookupAcceptance(int seq, int i) const;

 private:
  struct SequenceLookups {
    PositionAcceptance accept;
    std::vector<int32_t> pending;  // the last lookup, not yet judged
    size_t pending_at = 0;         // context length it continued
  };
  SequenceLookups& Sequence(int seq);
  // Judges the sequence's pending lookup against what the target committed after it.
  void Judge(SequenceLookups& s, std::span<const int32_t> context);
  // The lookup's draft for a request, or an empty one (the model drafts); judges the last one first.
  Draft Lookup(int seq, std::span<const int32_t> context, const DraftParams& params);

  NgramOptions lookup_;
  std::unique_ptr<Drafter> model_;
  std::string name_;
  int positions_;
  // Every sequence's lookups: a new request starts from it (PositionAcceptance::Seed).
  PositionAcceptance all_;
  std::vector<SequenceLookups> sequences_;
};

}  // namespace dspark
