// How many tokens to draft and verify each step. Fixed mode: the cap (--spec-draft-n-max), a
// confidence cut (--spec-draft-p-min) and a minimum (--spec-draft-n-min). Adaptive mode: choose the
// k that maximises expected committed tokens per millisecond, from per-position acceptance
// measured so far (or the drafter's own survival estimates) and the target's cost of verifying
// k tokens, profiled once at start-up; k = 0 (plain decoding) when drafting does not pay.
#pragma once

#include <vector>

#include "spec/drafter.h"

namespace dspark {

struct ScheduleOptions {
  int n_max = 8;
  int n_min = 0;       // drafts shorter than this are dropped (verified as plain decoding)
  float p_min = 0.0f;  // confidence cut, passed to the drafter and applied to survival estimates
  bool adaptive = false;
};

// Milliseconds of one target pass over `rows` rows (rows = 1 + drafted tokens), measured.
class CostModel {
 public:
  CostModel() = default;
  explicit CostModel(std::vector<double> verify_ms) : verify_ms_(std::move(verify_ms)) {}
  bool empty() const { return verify_ms_.empty(); }
  // rows >= 1; beyond the profiled range the cost grows linearly with the last measured slope.
  double VerifyMs(int rows) const;

 private:
  std::vector<double> verify_ms_;  // [rows - 1]
};

class DraftScheduler {
 public:
  DraftScheduler(const ScheduleOptions& options, CostModel cost);

  // Tokens to ask the drafter for this step (0: skip drafting), given room left in the context.
  int Budget(int room);
  // How many of the proposed tokens to verify.
  int Cut(const Draft& draft) const;
  // Feedback after verification: `drafted` tokens verified, `accepted` kept, drafting took draft_ms.
  void Observe(int drafted, int accepted, double draft_ms);

  // Expected committed tokens per ms when verifying k tokens with survival probabilities `surv`
  // (surv[i] = P(first i+1 tokens accepted)) and drafting cost draft_ms_per_token.
  double Rate(const std::vector<double>& surv, int k, double draft_ms_per_token) const;

 private:
  ScheduleOptions options_;
  CostModel cost_;
  std::vector<double> accept_;  // conditional acceptance of position i given i-1 accepted (EMA)
  double draft_ms_per_token_ = 0.0;
  int skipped_ = 0;   // consecutive steps without drafting (adaptive)
  int probe_gap_ = 8; // steps between probes while drafting does not pay
};

}  // namespace dspark
