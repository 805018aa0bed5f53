#include "spec/scheduler.h"

#include <algorithm>

namespace dspark {

namespace {
// Optimistic prior so a new drafter gets to show what it can do.
constexpr double kPriorAcceptance = 0.7;
// Weight of a new observation in the per-position acceptance and draft-cost averages.
constexpr double kEma = 0.1;
// Passes of one row count before its own average replaces the scaled profile, the weight of a new
// pass in those averages, and the largest row count tracked on its own.
constexpr int kMinObserved = 3;
constexpr double kCostEma = 0.05;
constexpr int kMaxObservedRows = 512;
// Decay of the calibration sums per observation (a memory of ~50 drafts).
constexpr double kCalibrationDecay = 0.02;
// The prior counts as this many observations: a drafter that misses from the start is dropped
// after a few steps (a short request cannot afford ten), one that hits keeps its long drafts.
constexpr double kPriorWeight = 2.0;
// Expected rate with drafting over the plain rate below which the scheduler does not draft.
constexpr double kDraftMargin = 1.03;
// Probes back off (DraftScheduler::kFirstProbeRatio) up to this ratio of plain time to probe cost:
// probing then costs under 1%, and a drafter that got unlucky for a while still gets re-measured
// (estimates only move when drafts are verified).
constexpr double kMaxProbeRatio = 256.0;
}  // namespace

CostModel::CostModel(const std::vector<double>& verify_ms) {
  for (size_t i = 0; i < verify_ms.size(); ++i) points_.emplace_back(static_cast<int>(i) + 1, verify_ms[i]);
}

double CostModel::VerifyMs(int rows) const {
  if (points_.empty()) return static_cast<double>(rows);
  if (rows < static_cast<int>(observed_.size()) && observed_[rows].count >= kMinObserved) return observed_[rows].ms;
  return ProfiledMs(rows) * scale_;
}

void CostModel::Observe(int rows, double ms) {
  if (points_.empty() || rows < 1 || rows > kMaxObservedRows || !(ms > 0)) return;
  if (rows >= static_cast<int>(observed_.size())) observed_.resize(rows + 1);
  Observed& o = observed_[rows];
  const double w = std::max(kCostEma, 1.0 / ++o.count);
  o.ms = (1 - w) * o.ms + w * ms;
  const double ws = std::max(kCostEma, 1.0 / ++scale_count_);
  scale_ = (1 - ws) * scale_ + ws * (ms / ProfiledMs(rows));
}

double CostModel::ProfiledMs(int rows) const {
  if (rows <= points_.front().first) return points_.front().second;
  for (size_t i = 1; i < points_.size(); ++i) {
    const auto [r1, m1] = points_[i];
    if (rows <= r1) {
      const auto [r0, m0] = points_[i - 1];
      return m0 + (m1 - m0) * (rows - r0) / static_cast<double>(r1 - r0);
    }
  }
  const size_t n = points_.size();
  const double slope = n >= 2 ? std::max(0.0, (points_[n - 1].second - points_[n - 2].second) /
                                                  (points_[n - 1].first - points_[n - 2].first))
                              : points_[0].second;
  return points_[n - 1].second + slope * (rows - points_[n - 1].first);
}

double DecodeShareMs(const CostModel& cost, int decode_rows, int prompt_rows, int extra_rows) {
  const int base = std::max(decode_rows, 1);
  if (prompt_rows <= 0) return cost.VerifyMs(base + extra_rows);
  if (extra_rows <= 0) return cost.VerifyMs(base);
  return cost.VerifyMs(base) + cost.VerifyMs(base + prompt_rows + extra_rows) - cost.VerifyMs(base + prompt_rows);
}

std::vector<int> AdmitDraftSlots(const std::vector<std::vector<double>>& survival, int base_rows,
                                 double base_tokens, const CostModel& cost, int prompt_rows) {
  struct Slot {
    double survival;
    int seq, index;
  };
  std::vector<Slot> slots;
  for (size_t s = 0; s < survival.size(); ++s)
    for (size_t i = 0; i < survival[s].size(); ++i) slots.push_back({survival[s][i], static_cast<int>(s), static_cast<int>(i)});
  // Highest survival first; within a sequence survival never rises, and a stable sort keeps slot order on ties,
  // so every prefix of this order is a set of per-sequence prefixes.
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.survival > b.survival; });
  double expected = base_tokens;
  double best_rate = expected / DecodeShareMs(cost, base_rows, prompt_rows, 0);
  size_t best_len = 0;
  for (size_t n = 1; n <= slots.size(); ++n) {
    expected += slots[n - 1].survival;
    const double rate = expected / DecodeShareMs(cost, base_rows, prompt_rows, static_cast<int>(n));
    if (rate > best_rate) {
      best_rate = rate;
      best_len = n;
    }
  }
  std::vector<int> k(survival.size(), 0);
  for (size_t n = 0; n < best_len; ++n) k[slots[n].seq] = std::max(k[slots[n].seq], slots[n].index + 1);
  return k;
}

void DraftCostModel::Observe(int proposed, double ms) {
  if (proposed <= 0) return;
  const double k = proposed;
  w_ = (1 - kEma) * w_ + kEma;
  sk_ = (1 - kEma) * sk_ + kEma * k;
  skk_ = (1 - kEma) * skk_ + kEma * k * k;
  sy_ = (1 - kEma) * sy_ + kEma * ms;
  sky_ = (1 - kEma) * sky_ + kEma * k * ms;
  Refit();
}

void DraftCostModel::Refit() {
  const double mk = sk_ / w_, my = sy_ / w_;
  const double var = skk_ / w_ - mk * mk;
  // Proposals of (nearly) one length cannot separate the two terms: charge it all per token, the
  // cautious reading for shorter drafts.
  if (var < 0.25) {
    fixed_ = 0;
    per_token_ = my / mk;
    return;
  }
  per_token_ = std::max(0.0, (sky_ / w_ - mk * my) / var);
  fixed_ = my - per_token_ * mk;
  if (fixed_ < 0) {
    fixed_ = 0;
    per_token_ = my / mk;
  }
}

double DraftCostModel::Ms(int k) const { return k <= 0 ? 0.0 : fixed_ + per_token_ * k; }

void DraftCostModel::ObserveCatchUp(int proposed, int behind_rows, double ms) {
  if (proposed <= 0 || behind_rows <= 0) return;
  // Per row as a ratio of decayed sums, not a mean of ratios: a few rows ride along in the
  // proposal's first pass almost free, a long pause costs its rows, and the slope must come from
  // the long ones.
  excess_sum_ = (1 - kEma) * excess_sum_ + kEma * std::max(0.0, ms - Ms(proposed));
  behind_sum_ = (1 - kEma) * behind_sum_ + kEma * behind_rows;
  per_behind_row_ = excess_sum_ / behind_sum_;
}

DraftScheduler::DraftScheduler(const ScheduleOptions& options, CostModel cost)
    : options_(options), own_cost_(std::move(cost)), accept_(std::max(options.n_max, 1), kPriorAcceptance),
      lookup_accept_(std::max(options.n_max, 1), kPriorAcceptance), predicted_sum_(accept_.accept.size(), 0.0),
      realised_sum_(accept_.accept.size(), 0.0) {}

void DraftScheduler::PositionAcceptance::Observe(int verified, int accepted) {
  // Position i was tried iff positions < i were accepted; it succeeded iff i < accepted.
  for (int i = 0; i < verified && i <= accepted && i < static_cast<int>(accept.size()); ++i) {
    const double hit = i < accepted ? 1.0 : 0.0;
    const double weight = std::max(kEma, 1.0 / (++observed[i] + kPriorWeight));
    accept[i] = (1 - weight) * accept[i] + weight * hit;
  }
}

std::vector<double> DraftScheduler::PositionAcceptance::Survival(int k) const {
  std::vector<double> surv(std::max(k, 0), 0.0);
  double s = 1.0;
  for (int i = 0; i < k && i < static_cast<int>(accept.size()); ++i) surv[i] = (s *= accept[i]);
  return surv;
}

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
  // often drafts once and pauses again, so amortising it over later steps (tried: over 4) kept
  // such sequences drafting at a loss (concurrency 2: 0.93x). Probes, priced without it, are what
  // bring a paused sequence back in step.
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
  // can see further than the average: draft one token past the length that pays on average (a
  // drafter pays per drafted row, DSpark too: it runs only the block rows asked for; twice the
  // length measured slower on the bundled pair, 928 vs 1321 tok/s on one prompt).
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
    // run past the average length, doubtful ones stop short (bundled pair, held-out code: 1.73-
    // 1.76x against 1.60x with one length per step and 1.72x for the best fixed length).
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
  for (PositionAcceptance* a : {&s.accept_, &s.lookup_accept_})
    for (int& n : a->observed) n = std::min(n, static_cast<int>(kPriorWeight));
  s.probe_credit_ = 0;
  s.probe_ratio_ = kFirstProbeRatio;
  s.probing_ = false;
  return s;
}

std::vector<double> DraftScheduler::MeasuredSurvival(int k) const { return accept_.Survival(k); }

std::vector<double> DraftScheduler::SurvivalOf(const Draft& draft, int k) const {
  if (draft.lookup) return lookup_accept_.Survival(k);
  std::vector<double> surv = MeasuredSurvival(k);
  if (draft.survival.empty() && !draft.probs.empty()) {
    // Past the tokens with probabilities (none in practice), the measured conditional acceptance.
    double s = 1.0;
    for (int j = 0; j < k; ++j) {
      s *= j < static_cast<int>(draft.probs.size()) ? prob_cal_.Acceptance(draft.probs[j])
           : j < static_cast<int>(accept_.accept.size()) ? accept_.accept[j] : 0.0;
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
  if (draft.lookup) {
    // Free drafts: they teach nothing about the model drafter's cost or acceptance.
    lookup_accept_.Observe(verified, accepted);
    return;
  }
  // Token i was reached iff the tokens before it were accepted; it survived iff i < accepted.
  for (int i = 0; i < verified && i <= accepted && i < static_cast<int>(draft.probs.size()); ++i)
    prob_cal_.Observe(draft.probs[i], i < accepted);
  Observe(static_cast<int>(draft.tokens.size()), verified, accepted, draft_ms, draft.survival, behind_rows);
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
