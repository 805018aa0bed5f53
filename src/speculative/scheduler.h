// How many tokens to draft and verify each step. Fixed mode: the cap (--spec-draft-n-max), a
// confidence cut (--spec-draft-p-min) and a minimum (--spec-draft-n-min). Adaptive mode: choose the
// k that maximises expected committed tokens per millisecond, from per-position acceptance
// measured so far (or each draft's own survival: a confidence head's, or its draft probabilities
// mapped to acceptance by ProbCalibration) and the target's cost of verifying k tokens, profiled
// once at start-up; k = 0 (plain decoding) when drafting does not pay. A drafter that stops on
// survival (the draft model) is asked for up to the cap and ends each draft where it stops paying.
#pragma once

#include <vector>

#include "speculative/acceptance.h"
#include "speculative/cost_model.h"
#include "speculative/drafter.h"
#include "speculative/prob_calibration.h"

namespace dspark {

// How much of a proposed draft is verified (--spec-schedule).
enum class ScheduleMode {
  kCut,   // the draft up to the cap, the p_min cut and n_min (llama.cpp's behaviour)
  kCost,  // per step, the k maximising (1 + a_1 + ... + a_k) / t_verify(k + 1), with a_i the
          // draft's predicted survival (confidence head or draft probabilities) and t_verify the
          // profiled cost model; applied after the cut. The engine profiles the cost model when
          // `adaptive` is set, so cost mode sets it too (Budget then asks for one token more than
          // the length that pays on average, and Cut trims each draft by its own survival).
};

struct ScheduleOptions {
  int n_max = 8;
  int n_min = 0;       // drafts shorter than this are dropped (verified as plain decoding)
  float p_min = 0.0f;  // confidence cut, passed to the drafter and applied to survival estimates
  bool adaptive = false;
  ScheduleMode mode = ScheduleMode::kCut;
  // The drafter asks before each token whether to draft it (DrafterNeeds::asks_before_each_token;
  // the planner sets this): adaptive budgets then ask for up to the cap with a survival bar
  // (MinSurvival) instead of one length for every draft.
  bool survival_stop = false;
  // Token trees (--spec-branches): alternatives per draft token the drafter is asked for, which
  // the planner verifies as leaves beside the chain where they pay (speculative/token_tree.h).
  // 0: chains only.
  int branches = 0;
  // Tokens a drafter may propose after each alternative (--spec-branch-tail), verified as its
  // side chain where they pay. 0: alternatives are leaves.
  int branch_tail = 0;
};

class DraftScheduler {
 public:
  DraftScheduler(const ScheduleOptions& options, CostModel cost);
  // Reads the target's cost from `cost`, which the engine keeps learning (it must outlive this).
  DraftScheduler(const ScheduleOptions& options, const CostModel* cost);

  // Tokens to ask the drafter for this step (0: skip drafting), given room left in the context.
  // Adaptive: the length with the best expected tokens per ms, drafting cost included; cost mode
  // asks for one token more (Cut then trims by the draft's own survival estimates).
  // `pass`: what else shares the target pass. Under load a probe (a draft made although drafting
  // does not seem to pay, to re-measure acceptance) comes more rarely: it costs every sequence in
  // the pass. `behind_rows`: rows committed since the drafter last saw this sequence (0 when it
  // drafted the step before); drafting now costs their catch-up too.
  int Budget(int room, const SharedPass& pass = {}, int behind_rows = 0);
  // The draft length the last Budget expects to verify on average (Budget itself may ask for more
  // when the drafter stops on survival): what the rest of a batched pass should count on.
  int planned() const { return planned_; }
  // Whether the last Budget was a probe: a draft made although drafting does not seem to pay, to
  // re-measure acceptance. Its tokens are verified whatever the survival estimates say (Cut and
  // MinSurvival leave it whole, and the engine's batch admission does not trim it): estimates
  // move only when drafts are verified, so a probe cut to nothing costs its drafting and catch-up
  // and teaches nothing, and the next one comes twice as late.
  bool probing() const { return probing_; }
  // The predicted survival below which one more draft slot does not pay for its verification and
  // drafting: the expected rate (tokens per ms) at the length that pays on average times the
  // marginal cost of a row. 0 when the drafter does not stop on survival or drafting is not adaptive.
  double MinSurvival(const SharedPass& pass = {}) const;
  // Maps draft probabilities to acceptance (learnt in Observe from drafts that carry probs).
  const ProbCalibration& prob_calibration() const { return prob_cal_; }
  // Maps an alternative's draft probability to its acceptance where the draft token beside it was
  // rejected (token trees; learnt in ObserveBranches).
  const ProbCalibration& branch_calibration() const { return branch_cal_; }
  // Measured acceptance of an accepted alternative's tail, position by position (learnt in
  // ObserveBranches).
  const PositionAcceptance& tail_acceptance() const { return tail_accept_; }
  // The alternatives beside draft token `position`, reached because that token was rejected: the
  // one of rank `accepted_rank` was accepted (-1: none), the ones before it were not; of the
  // accepted one's tail `tail_verified` tokens were verified and the first `tail_accepted` kept.
  void ObserveBranches(const Draft& draft, int position, int accepted_rank, int tail_verified = 0,
                       int tail_accepted = 0);
  // Whether drafting pays at all in such a pass (no probes, no state change). The engine asks the
  // engine-wide scheduler before paying for a drafter's prompt ingestion.
  bool Pays(const SharedPass& pass) const;
  // How many of the proposed tokens to verify.
  int Cut(const Draft& draft) const;
  // Feedback after a step: the drafter proposed `proposed` tokens in draft_ms, `verified` of them
  // were verified and `accepted` kept (verified = 0: nothing was verified, only the cost is learnt).
  // `survival`: the drafter's own estimates for this draft (empty if it has none); they are compared
  // with what verification realised to recalibrate later estimates. `behind_rows` as for Budget:
  // the catch-up part of draft_ms is learnt apart from the steady per-proposal cost (mixed in, it
  // would make drafting look dearer the longer it paused, and pause it for good).
  void Observe(int proposed, int verified, int accepted, double draft_ms,
               const std::vector<float>& survival = {}, int behind_rows = 0);
  // The same for a whole draft: also calibrates acceptance against its draft probabilities.
  void Observe(const Draft& draft, int verified, int accepted, double draft_ms, int behind_rows = 0);

  // Survival estimates of the first k slots of `draft`: the drafter's own (a confidence head),
  // rescaled per slot by realised / predicted survival so far (a head trained on other text or at
  // another temperature is often off by a constant factor); else the product of its tokens'
  // calibrated acceptances (ProbCalibration) when it carries draft probabilities; else the
  // acceptance measured so far.
  // Non-increasing, within [0, 1].
  std::vector<double> SurvivalOf(const Draft& draft, int k) const;

  // A scheduler for a new request that starts from what this one has learnt (acceptance, drafter
  // cost, calibration) instead of the optimistic prior, with its observation counts capped so the
  // request's own evidence takes over quickly. An engine keeps one such running scheduler across
  // requests: a fresh prior on every short request would draft at a loss until it learnt again.
  DraftScheduler Seed() const;

  // Measured probability that the first i+1 draft tokens are all accepted.
  double ExpectedSurvival(int i) const;
  // ExpectedSurvival(0..k-1) in one pass.
  std::vector<double> MeasuredSurvival(int k) const;

  // Expected committed tokens per ms when verifying k tokens with survival probabilities `surv`
  // (surv[i] = P(first i+1 tokens accepted)) after drafting for draft_ms (0 once the draft exists:
  // its cost is spent).
  // `pass`: the rest of a batched pass (DecodeShareMs).
  double Rate(const std::vector<double>& surv, int k, double draft_ms, const SharedPass& pass = {}) const;
  const DraftCostModel& draft_cost() const { return draft_cost_; }

 private:
  const CostModel& cost() const { return shared_cost_ != nullptr ? *shared_cost_ : own_cost_; }
  // The draft length (up to cap) with the best expected rate; 0 if drafting does not pay.
  int BestLength(int cap, const SharedPass& pass, int behind_rows = 0) const;

  ScheduleOptions options_;
  CostModel own_cost_;
  const CostModel* shared_cost_ = nullptr;
  PositionAcceptance accept_;  // measured acceptance of the drafter's drafts
  // Decayed sums over verified slots of predicted survival and realised survival (0/1).
  std::vector<double> predicted_sum_, realised_sum_;
  ProbCalibration prob_cal_;
  ProbCalibration branch_cal_;
  PositionAcceptance tail_accept_;
  int planned_ = 0;
  bool probing_ = false;
  DraftCostModel draft_cost_;
  // This sequence's share (ms) of the plain passes since the last probe; a probe is due when it
  // reaches probe_ratio_ times the probe's cost. Accumulating per step (not counting steps against
  // the current batch size) keeps a drop in load from releasing every sequence's probe at once.
  // The first probe is due after 64 times its cost in plain decoding (probing then costs at most
  // 1/64 of the time; probing more often, many short requests at low concurrency lose a noticeable
  // share of their time to probes); each probe that does not pay doubles the ratio.
  static constexpr double kFirstProbeRatio = 64.0;
  double probe_credit_ = 0;
  double probe_ratio_ = kFirstProbeRatio;
};

}  // namespace dspark
