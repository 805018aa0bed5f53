#include "speculative/scheduler.h"

#include <algorithm>

namespace dspark {

namespace {
// Decay of the calibration sums per observation (a memory of ~50 drafts).
constexpr double kCalibrationDecay = 0.02;
// Expected rate with drafting over the plain rate below which the scheduler does not draft.
constexpr double kDraftMargin = 1.03;
// Probes back off (DraftScheduler::kFirstProbeRatio) up to this ratio of plain time to probe cost:
// probing then costs under 1%, and a drafter that got unlucky for a while still gets re-measured
// (estimates only move when drafts are verified).
constexpr double kMaxProbeRatio = 256.0;
}  // namespace

DraftScheduler::DraftScheduler(const ScheduleOptions& options, CostModel cost)
    : options_(options), own_cost_(std::move(cost)), accept_(std::max(options.n_max, 1)),
      predicted_sum_(accept_.positions(), 0.0), realised_sum_(accept_.positions(), 0.0),
      tail_accept_(accept_.positions()) {}

DraftScheduler::DraftScheduler(const ScheduleOptions& options, const CostModel* cost)
    : DraftScheduler(options, CostModel()) {
  shared_cost_ = cost;
}

double DraftScheduler::Rate(const std::vector<double>& surv, int k, double draft_ms, const SharedPass& pass) const {
  double expected = 1.0 + pass.decode_tokens;
  for (int i = 0; i < k && i < static_cast<int>(surv.size()); ++i) expected += surv[i];
  return expected / (DecodeShareMs(cost(), pass.decode_rows + 1, pass.prompt_rows, k) + draft_ms);
}

double DraftScheduler::ExpectedSurvival(int i) const {
  const std::vector<double> surv = accept_.Survival(i + 1);
  return i >= 0 && i < static_cast<int>(surv.size()) ? surv[i] : 0.0;
}

int DraftScheduler::BestLength(int cap, const SharedPass& pass, int behind_rows) const {
  const std::vector<double> surv = MeasuredSurvival(cap);
  // Resuming after a pause pays the catch-up now, in full: in a busy batch a sequence that resumes
  // often drafts once and pauses again, so amortising it over later steps would keep such
  // sequences drafting at a loss. Probes, priced without it, are what bring a paused sequence back
  // in step.
  const double catch_up = draft_cost_.CatchUpMs(behind_rows);
  // Drafting must beat plain decoding by a margin: the estimates are noisy, and a draft that only
  // breaks even on paper loses to the per-step work the model does not see.
  int best_k = 0;
  double best = Rate(surv, 0, 0.0, pass) * kDraftMargin;
  for (int k = 1; k <= cap; ++k) {
    const double r = Rate(surv, k, draft_cost_.Ms(k) + catch_up, pass);
    if (r > best) {
      best = r;
      best_k = k;
    }
  }
  // Cost mode lets Cut choose the verified prefix from each draft's own survival estimates, which
  // can see further than the average: draft one token past the length that pays on average, and
  // no more (a drafter pays per drafted row, DSpark too: it runs only the block rows asked for).
  return options_.mode == ScheduleMode::kCost && best_k > 0 ? std::min(cap, best_k + 1) : best_k;
}

bool DraftScheduler::Pays(const SharedPass& pass) const { return BestLength(std::max(options_.n_max, 0), pass) > 0; }

int DraftScheduler::Budget(int room, const SharedPass& pass, int behind_rows) {
  const int cap = std::max(0, std::min(options_.n_max, room));
  planned_ = cap;
  probing_ = false;
  if (!options_.adaptive) return cap;
  const int best = BestLength(cap, pass, behind_rows);
  planned_ = best;
  if (best > 0) {
    probe_credit_ = 0;
    probe_ratio_ = kFirstProbeRatio;
    // A drafter that stops on survival ends each draft where it stops paying: confident drafts
    // run past the average length, doubtful ones stop short, which beats one length for every
    // draft of a step.
    return options_.survival_stop ? cap : best;
  }
  // Drafting does not pay at the moment; probe now and then in case it does again (this text may
  // suit the drafter better than the estimates say). A probe costs the drafting plus its rows in
  // the shared pass, which every sequence there waits for; it is due once this sequence's share of
  // the plain steps since the last one is probe_ratio_ times that cost, so probes never take more
  // than 1/probe_ratio_ of the time, under any load. Each probe that does not pay doubles the ratio.
  const int probe_k = std::min(cap, 2);
  if (probe_k <= 0) return 0;
  const int rows = pass.decode_rows + 1;
  const double plain_ms = DecodeShareMs(cost(), rows, pass.prompt_rows, 0);
  probe_credit_ += plain_ms / rows;
  // The catch-up a probe pays is added to the credit it needs, not multiplied by the ratio: it
  // grows with the pause, and multiplied it would grow as fast as the credit does.
  const double probe_ms = draft_cost_.Ms(probe_k) + DecodeShareMs(cost(), rows, pass.prompt_rows, probe_k) - plain_ms;
  if (probe_credit_ >= probe_ratio_ * probe_ms + draft_cost_.CatchUpMs(behind_rows)) {
    probe_credit_ = 0;
    probe_ratio_ = std::min(probe_ratio_ * 2, kMaxProbeRatio);
    planned_ = probe_k;
    probing_ = true;
    return probe_k;
  }
  return 0;
}

double DraftScheduler::MinSurvival(const SharedPass& pass) const {
  if (!options_.adaptive || !options_.survival_stop || planned_ <= 0 || probing_) return 0.0;
  const int k = planned_;
  const double rate = Rate(MeasuredSurvival(k), k, draft_cost_.Ms(k), pass);
  // Marginal cost of a row: the verification cost of the cap's rows over plain, per row (a pass's
  // cost is not smooth in its rows, an average over the range is), plus drafting one token.
  const int cap = std::max(1, options_.n_max);
  const int rows = pass.decode_rows + 1;
  const double per_row = (DecodeShareMs(cost(), rows, pass.prompt_rows, cap) - DecodeShareMs(cost(), rows, pass.prompt_rows, 0)) / cap;
  return rate * (per_row + draft_cost_.per_token_ms());
}

int DraftScheduler::Cut(const Draft& draft) const {
  int k = std::min(static_cast<int>(draft.tokens.size()), options_.n_max);
  if (options_.p_min > 0) {
    // Hard cut before the first slot whose own confidence is below p_min: the draft probability,
    // or for a confidence head the ratio of consecutive survivals (= that slot's confidence).
    double prev = 1.0;
    for (int i = 0; i < k; ++i) {
      double own = 1.0;
      if (i < static_cast<int>(draft.probs.size())) {
        own = draft.probs[i];
      } else if (i < static_cast<int>(draft.survival.size())) {
        own = prev > 0 ? draft.survival[i] / prev : 0;
        prev = draft.survival[i];
      }
      if (own < options_.p_min) {
        k = i;
        break;
      }
    }
  }
  if (probing_) {
    k = std::min(k, planned_);  // a probe is verified whole (probing())
  } else if (options_.adaptive && k > 0) {
    // Drafting is already paid for: verify the prefix with the best expected tokens per ms.
    const std::vector<double> surv = SurvivalOf(draft, k);
    int best_k = 0;
    double best = Rate(surv, 0, 0.0);
    for (int j = 1; j <= k; ++j) {
      const double r = Rate(surv, j, 0.0);
      if (r > best) {
        best = r;
        best_k = j;
      }
    }
    k = best_k;
  }
  if (k < options_.n_min) k = 0;
  return k;
}

DraftScheduler DraftScheduler::Seed() const {
  DraftScheduler s = *this;
  s.accept_ = accept_.Seed();
  s.tail_accept_ = tail_accept_.Seed();
  s.probe_credit_ = 0;
  s.probe_ratio_ = kFirstProbeRatio;
  s.probing_ = false;
  return s;
}

std::vector<double> DraftScheduler::MeasuredSurvival(int k) const { return accept_.Survival(k); }

std::vector<double> DraftScheduler::SurvivalOf(const Draft& draft, int k) const {
  if (draft.survival_measured) {
    // The drafter's own record of how such drafts fared: taken as it is.
    std::vector<double> surv(std::max(k, 0), 0.0);
    for (int j = 0; j < k && j < static_cast<int>(draft.survival.size()); ++j) surv[j] = draft.survival[j];
    return surv;
  }
  std::vector<double> surv = MeasuredSurvival(k);
  if (draft.survival.empty() && !draft.probs.empty()) {
    // Past the tokens with probabilities (none in practice), the measured conditional acceptance.
    double s = 1.0;
    for (int j = 0; j < k; ++j) {
      s *= j < static_cast<int>(draft.probs.size()) ? prob_cal_.Acceptance(draft.probs[j])
                                                      : accept_.Acceptance(j);
      surv[j] = s;
    }
    return surv;
  }
  double prev = 1.0;
  for (int j = 0; j < k; ++j) {
    double a = surv[j];
    if (j < static_cast<int>(draft.survival.size())) {
      const bool tracked = j < static_cast<int>(predicted_sum_.size());
      // One pseudo-observation on each side: no correction until verification has spoken.
      const double ratio = tracked ? (realised_sum_[j] + 1.0) / (predicted_sum_[j] + 1.0) : 1.0;
      a = draft.survival[j] * ratio;
    }
    surv[j] = prev = std::clamp(a, 0.0, prev);
  }
  return surv;
}

void DraftScheduler::Observe(const Draft& draft, int verified, int accepted, double draft_ms, int behind_rows) {
  // The drafter counts the outcome itself; its free proposals say nothing of the cost or the
  // acceptance of what it drafts otherwise.
  if (draft.survival_measured) return;
  // Token i was reached iff the tokens before it were accepted; it survived iff i < accepted.
  for (int i = 0; i < verified && i <= accepted && i < static_cast<int>(draft.probs.size()); ++i)
    prob_cal_.Observe(draft.probs[i], i < accepted);
  Observe(static_cast<int>(draft.tokens.size()), verified, accepted, draft_ms, draft.survival, behind_rows);
}

void DraftScheduler::ObserveBranches(const Draft& draft, int position, int accepted_rank, int tail_verified,
                                     int tail_accepted) {
  if (position < 0 || position >= static_cast<int>(draft.branches.size())) return;
  const std::vector<DraftBranch>& alternatives = draft.branches[position];
  for (int r = 0; r < static_cast<int>(alternatives.size()) && (accepted_rank < 0 || r <= accepted_rank); ++r)
    branch_cal_.Observe(alternatives[r].prob, r == accepted_rank);
  if (accepted_rank >= 0 && tail_verified > 0) tail_accept_.Observe(tail_verified, tail_accepted);
}

void DraftScheduler::Observe(int proposed, int verified, int accepted, double draft_ms,
                             const std::vector<float>& survival, int behind_rows) {
  if (behind_rows > 0) {
    draft_cost_.ObserveCatchUp(proposed, behind_rows, draft_ms);
  } else {
    draft_cost_.Observe(proposed, draft_ms);
  }
  // A draft verified in full is evidence that drafting works again: probe at the first rate.
  if (verified > 0 && accepted == verified) probe_ratio_ = kFirstProbeRatio;
  // Slot i of a verified draft survived iff i < accepted.
  for (int i = 0; i < verified && i < static_cast<int>(survival.size()) && i < static_cast<int>(predicted_sum_.size());
       ++i) {
    predicted_sum_[i] = (1 - kCalibrationDecay) * predicted_sum_[i] + survival[i];
    realised_sum_[i] = (1 - kCalibrationDecay) * realised_sum_[i] + (i < accepted ? 1.0 : 0.0);
  }
  accept_.Observe(verified, accepted);
}

}  // namespace dspark
