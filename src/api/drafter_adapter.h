// A user-written dspark::api::Drafter behind the engine's Drafter interface (speculative/drafter.h).
#pragma once

#include <memory>
#include <string>

#include "dspark/drafter.h"
#include "speculative/drafter.h"

namespace dspark::api::detail {

class DrafterAdapter final : public ::dspark::Drafter {
 public:
  // n_vocab: the target's; max_draft: the schedule's longest draft.
  DrafterAdapter(std::shared_ptr<api::Drafter> user, int n_vocab, int max_draft);

  std::string_view Name() const override { return name_; }
  DrafterNeeds Needs() const override;
  Status Begin(int seq) override;
  // Calls the user's Propose, then keeps at most params.budget tokens and, when the user reported
  // probabilities, asks params.stop about each token's confidence as the engine's own drafters do
  // (Keep on each token, More before the next). Validates what it keeps: ids in the vocabulary,
  // probs and q of the draft's length, q rows of n_vocab with mass on their token.
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  void End(int seq) override;

  // The first failure since the last ClearError (what GenerateResult::drafter_error reports).
  const std::string& error() const { return error_; }
  void ClearError() { error_.clear(); }

 private:
  Status Fail(Status status);

  std::shared_ptr<api::Drafter> user_;
  std::string name_;
  int n_vocab_;
  int max_draft_;
  std::string error_;
};

}  // namespace dspark::api::detail
