#include "spec/scheduler.h"

#include <algorithm>

namespace dspark {

double CostModel::VerifyMs(int rows) const {
  if (verify_ms_.empty()) return static_cast<double>(rows);
  const int n = static_cast<int>(verify_ms_.size());
  if (rows <= n) return verify_ms_[std::max(rows, 1) - 1];
  const double slope = n >= 2 ? std::max(0.0, verify_ms_[n - 1] - verify_ms_[n - 2]) : verify_ms_[0];
  return verify_ms_[n - 1] + slope * (rows - n);
}

namespace {
// Optimistic prior so a new drafter gets to show what it can do.
constexpr double kPriorAcceptance = 0.7;
// Weight of a new observation in the per-position acceptance average.
constexpr double kEma = 0.1;
}  // namespace

DraftScheduler::DraftScheduler(const ScheduleOptions& options, CostModel cost)
    : options_(options), cost_(std::move(cost)), accept_(std::max(options.n_max, 1), kPriorAcceptance) {}

double DraftScheduler::Rate(const std::vector<double>& surv, int k, double draft_ms_per_token) const {
  double expected = 1.0;
  for (int i = 0; i < k && i < static_cast<int>(surv.size()); ++i) expected += surv[i];
  return expected / (cost_.VerifyMs(k + 1) + draft_ms_per_token * k);
}

int DraftScheduler::Budget(int room) {
  const int cap = std::max(0, std::min(options_.n_max, room));
  if (!options_.adaptive) return cap;
  std::vector<double> surv(cap);
  double s = 1.0;
  for (int i = 0; i < cap; ++i) surv[i] = (s *= accept_[i]);
  int best_k = 0;
  double best = Rate(surv, 0, draft_ms_per_token_);
  for (int k = 1; k <= cap; ++k) {
    const double r = Rate(surv, k, draft_ms_per_token_);
    if (r > best) {
      best = r;
      best_k = k;
    }
  }
  if (best_k > 0) {
    skipped_ = 0;
    probe_gap_ = 8;
    return best_k;
  }
  // Drafting does not pay at the moment; probe now and then (with backoff) in case it does again.
  if (++skipped_ >= probe_gap_ && cap > 0) {
    skipped_ = 0;
    probe_gap_ = std::min(probe_gap_ * 2, 256);
    return std::min(cap, 2);
  }
  return 0;
}

int DraftScheduler::Cut(const Draft& draft) const {
  int k = std::min(static_cast<int>(draft.tokens.size()), options_.n_max);
  if (options_.p_min > 0 && !draft.survival.empty()) {
    // Hard cut at the first slot whose own confidence (survival ratio) is below p_min.
    double prev = 1.0;
    for (int i = 0; i < k && i < static_cast<int>(draft.survival.size()); ++i) {
      const double own = prev > 0 ? draft.survival[i] / prev : 0;
      if (own < options_.p_min) {
        k = i;
        break;
      }
      prev = draft.survival[i];
    }
  }
  if (options_.adaptive && !draft.survival.empty() && k > 0) {
    std::vector<double> surv(draft.survival.begin(), draft.survival.begin() + std::min<size_t>(k, draft.survival.size()));
    int best_k = 0;
    double best = Rate(surv, 0, 0.0);  // drafting is already paid for
    for (int j = 1; j <= static_cast<int>(surv.size()); ++j) {
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

void DraftScheduler::Observe(int drafted, int accepted, double draft_ms) {
  if (drafted <= 0) return;
  const double per_token = draft_ms / drafted;
  draft_ms_per_token_ = draft_ms_per_token_ == 0 ? per_token : (1 - kEma) * draft_ms_per_token_ + kEma * per_token;
  // Position i was tried iff positions < i were accepted; it succeeded iff i < accepted.
  for (int i = 0; i < drafted && i <= accepted && i < static_cast<int>(accept_.size()); ++i) {
    const double hit = i < accepted ? 1.0 : 0.0;
    accept_[i] = (1 - kEma) * accept_[i] + kEma * hit;
  }
}

}  // namespace dspark
