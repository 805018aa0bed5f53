// The one owner of draft length. Each step the engine asks the planner what to ask each sequence's
// drafter for (a budget and a stop rule, in terms every drafter can answer), hands it what the
// drafters proposed, and gets back how many tokens of each draft to verify; after verification it
// reports what survived. The decisions come from the target's cost model (speculative/cost_model.h) and
// each sequence's estimates of acceptance (speculative/scheduler.h): in fixed mode the cap, the p-min cut
// and n-min; adaptively the length with the best expected tokens per millisecond, drafting
// included, then batch-wide admission of draft slots by predicted survival (DSpark's production
// scheduler), so a busy engine degrades to plain decoding by itself. The planner is the only place
// that trims a draft; drafters only propose and the verifier only verifies.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "speculative/cost_model.h"
#include "speculative/drafter.h"
#include "speculative/scheduler.h"

namespace dspark {

// Batch-wide admission of draft slots (DSpark's production scheduler). survival[s][i] is the
// predicted probability that sequence s's first i+1 draft tokens are all accepted (non-increasing
// in i). `base_rows` decoding rows (anchors) are in the pass anyway and commit `base_tokens`
// tokens; `prompt_rows` prompt rows share the pass (DecodeShareMs). Returns, per sequence, how
// many draft tokens to verify: the prefix of all slots sorted by survival that maximises expected
// committed tokens per millisecond.
std::vector<int> AdmitDraftSlots(const std::vector<std::vector<double>>& survival, int base_rows,
                                 double base_tokens, const CostModel& cost, int prompt_rows = 0);

// Token trees: after AdmitDraftSlots chose the chains (k[s] tokens of sequence s), the leaves and
// tail tokens to verify beside them. leaf_value[s][j] holds, for leaf j of sequence s, the
// expected tokens its row adds (the probability that it is accepted) and then those of each
// token of its tail (the probability that the tail is accepted up to it): non-increasing. Rows
// are admitted, highest value first, while the expected committed tokens per millisecond of the
// whole pass rise; a tail token only after the rows before it. Returns, per sequence and leaf,
// how many of its rows are admitted (0: the leaf is dropped; 1 + t: the leaf and t tail tokens).
std::vector<std::vector<int>> AdmitLeaves(const std::vector<std::vector<double>>& survival, const std::vector<int>& k,
                                          const std::vector<std::vector<std::vector<double>>>& leaf_value,
                                          int base_rows, double base_tokens, const CostModel& cost,
                                          int prompt_rows = 0);

// The stop rule the planner gives a sequence's drafter: the p-min cut on each token's confidence,
// and, for drafters that ask before each token under an adaptive schedule, the survival bar: one
// more token only while the draft's predicted survival so far (the calibrated acceptances of its
// tokens' confidences) times the mean acceptance of a token not yet drafted stays at or above
// min_survival (DraftScheduler::MinSurvival).
class SurvivalStop final : public DraftStop {
 public:
  float p_min = 0.0f;
  float min_survival = 0.0f;
  const ProbCalibration* calibration = nullptr;  // null: no survival bar

  bool Keep(float confidence) const override;
  bool More(std::span<const float> confidences) const override;
};

// What the planner needs to know of a decoding sequence this step.
struct PlanSequence {
  int slot = 0;
  bool drafting = false;  // the request speculates and its drafter has not failed
  int room = 0;           // tokens the context can still take after the anchor
  int remaining = 0;      // tokens the request may still generate
  int rows_behind = 0;    // rows committed since its drafter last saw it (its catch-up)
};

// What to ask a sequence's drafter for; budget 0: no draft this step.
struct DraftAsk {
  int budget = 0;
  const DraftStop* stop = nullptr;
  int max_catch_up = 0;
  int branches = 0;  // alternatives per draft token (DraftParams::branches)
  int branch_tail = 0;  // tokens after each alternative (DraftParams::branch_tail)
};

class DraftPlanner {
 public:
  // `cost`: the target's cost model, which the engine keeps learning (it must outlive the planner).
  // `needs`: the drafter's, or null for plain decoding.
  DraftPlanner(const ScheduleOptions& options, const CostModel* cost, int n_slots, const DrafterNeeds* needs);
  ~DraftPlanner();

  // A new request on `slot` starts from what earlier requests taught (DraftScheduler::Seed).
  void Begin(int slot);

  // Propose phase: the ask for each of this step's decoding sequences, in order. `prompt_rows`
  // newcomers' prompt rows share the pass. Each sequence's draft competes with the rest of the
  // pass (the other anchors and the drafts decided before it), not with a lone decode step.
  std::vector<DraftAsk> Ask(std::span<const PlanSequence> decoding, int prompt_rows);

  // Plan phase: how many tokens of each draft to verify (drafts[i] null: none proposed). Drafts
  // longer than their budget are trimmed to it, and their alternatives (Draft::branches) to the
  // leaves the target verifies: beside the verified tokens only, and under adaptive scheduling
  // only those whose predicted acceptance pays for their rows.
  std::vector<int> Plan(std::span<const PlanSequence> decoding, std::span<Draft* const> drafts, int prompt_rows);

  // After verification: `verified` tokens of the draft went to the target and `accepted` survived;
  // drafting took draft_ms after `behind_rows` rows of catch-up. `leaf_rank`: the alternative
  // accepted beside draft token `accepted` (its rank there), -1 for none; `tail_verified` tokens of
  // its tail were verified and `tail_accepted` kept.
  void Observe(int slot, const Draft& draft, int verified, int accepted, double draft_ms, int behind_rows,
               int leaf_rank = -1, int tail_verified = 0, int tail_accepted = 0);

  // The survival the plan predicted for the first k tokens of a draft (statistics): a confidence
  // head's own, else the estimate from its draft probabilities; empty when it had neither.
  std::vector<float> PredictedSurvival(int slot, const Draft& draft, int k) const;

  // Whether drafting pays at all in a pass of `n_sequences` sequences (a drafter's prompt
  // ingestion is skipped when it does not).
  bool DraftingPays(int n_sequences) const;

 private:
  bool batch_scheduling() const { return options_.adaptive && drafting_; }
  // Trims each draft's alternatives to the leaves verified beside its k[i] tokens (Plan).
  void PlanLeaves(std::span<const PlanSequence> decoding, std::span<Draft* const> drafts, const std::vector<int>& k,
                  const std::vector<std::vector<double>>& survival, int prompt_rows);

  ScheduleOptions options_;
  const CostModel* cost_;
  bool drafting_;
  // Learns from every request's steps; new requests start from it.
  std::unique_ptr<DraftScheduler> learned_;
  std::vector<std::unique_ptr<DraftScheduler>> sequences_;  // [slot]
  std::vector<SurvivalStop> stops_;                         // [slot]
  std::vector<int> budget_;                                 // [slot] this step's ask
};

}  // namespace dspark
