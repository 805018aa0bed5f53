// Prompt lookup in front of a model drafter. When the context repeats (the last n tokens occurred
// before) the tokens that followed are proposed for free; otherwise the model drafts. Small
// targets and code both repeat themselves: where they do, n-gram lookup can be accepted as often
// as a draft model or more, at no drafting cost, while the draft model covers the text that does
// not repeat.
#pragma once

#include <memory>
#include <string>

#include "spec/drafter.h"
#include "spec/drafters/ngram.h"

namespace dspark {

class LookupFirstDrafter final : public Drafter {
 public:
  LookupFirstDrafter(NgramOptions lookup, std::unique_ptr<Drafter> model);
  std::string_view Name() const override { return name_; }
  DrafterNeeds Needs() const override { return model_->Needs(); }
  Status Begin(int seq) override { return model_->Begin(seq); }
  Status ObserveTaps(int seq, const TapRows& rows) override { return model_->ObserveTaps(seq, rows); }
  Status Prefill(int seq, std::span<const int32_t> context) override { return model_->Prefill(seq, context); }
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  // Sequences whose context repeats get their lookup; the model drafts the rest in one batch.
  std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) override;
  void End(int seq) override { model_->End(seq); }

 private:
  // The lookup's draft for a request, or an empty one.
  Draft Lookup(std::span<const int32_t> context, const DraftParams& params) const;

  NgramOptions lookup_;
  std::unique_ptr<Drafter> model_;
  std::string name_;
};

}  // namespace dspark
