// What a target pass and a drafter's proposal cost: the target's verification cost by row count
// (profiled at start-up, corrected by the passes that run), the share of a batched pass charged to
// decoding, and a drafter's cost per proposal. The planner (speculative/planner.h) decides with them.
#pragma once

#include <utility>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {

// Milliseconds of one target pass over `rows` rows (all sequences' anchors and draft tokens):
// profiled at a few row counts at start-up and interpolated linearly between them, then corrected
// by the passes the engine actually runs. The start-up profile sees a short context on an idle
// cache; real passes run deeper in the context and on a machine whose load changes, so each row
// count that has been observed a few times uses its own running average, and the others scale
// the profile by the observed/profiled ratio.
class CostModel {
 public:
  CostModel() = default;
  // verify_ms[r - 1]: cost of r rows, r = 1..size.
  explicit CostModel(const std::vector<double>& verify_ms);
  // (rows, ms) points with increasing rows.
  explicit CostModel(std::vector<std::pair<int, double>> points) : points_(std::move(points)) {}
  bool empty() const { return points_.empty(); }
  // rows >= 1; beyond the profiled range the cost grows linearly with the last measured slope.
  // Without measurements every row costs 1.
  double VerifyMs(int rows) const;
  // A measured pass of `rows` rows that took `ms`.
  void Observe(int rows, double ms);
  const std::vector<std::pair<int, double>>& points() const { return points_; }

 private:
  double ProfiledMs(int rows) const;
  std::vector<std::pair<int, double>> points_;
  struct Observed {
    double ms = 0;
    int count = 0;
  };
  std::vector<Observed> observed_;  // [rows]
  double scale_ = 1.0;              // running observed / profiled ratio
  int scale_count_ = 0;
};

// Milliseconds charged to the decoding part of a batched pass: `decode_rows` rows (anchors and
// drafts) plus `extra_rows` more draft rows, in a pass that also holds `prompt_rows` rows of
// newcomers' prompts. Prompt rows commit nothing this step and must be processed anyway, so they
// are not charged to decoding; but draft rows land on top of them, where a compute-bound pass is
// already long, so their marginal cost is measured there:
//   cost(decode) + cost(decode + prompt + extra) - cost(decode + prompt).
// Without prompt rows this is simply cost(decode + extra).
double DecodeShareMs(const CostModel& cost, int decode_rows, int prompt_rows, int extra_rows);

// The rest of the batched pass a sequence's draft would join.
struct SharedPass {
  int decode_rows = 0;        // other sequences' anchors and already admitted draft rows
  double decode_tokens = 0;   // tokens those rows are expected to commit
  int prompt_rows = 0;        // newcomers' prompt rows (commit nothing this step)
};

// Milliseconds a drafter spends on a proposal of k tokens, learned online as a + b·k: a draft model
// pays per token (one pass each), a block drafter (DSpark) per pass whatever k is. A sequence that
// has not drafted for a while first catches up on the rows committed meanwhile (its drafter has
// not seen them): that costs c per row on top, learnt from the proposals that came after a pause.
// Observations are exponentially weighted so the model follows a machine whose load changes.
class DraftCostModel {
 public:
  // A proposal made in step (the sequence drafted the step before, or its prompt was ingested).
  void Observe(int proposed, double ms);
  // A proposal that first caught up on `behind_rows` rows committed while the sequence did not draft.
  void ObserveCatchUp(int proposed, int behind_rows, double ms);
  // Expected ms for a proposal of k >= 1 tokens made in step (0 before any observation).
  double Ms(int k) const;
  // Expected extra ms of catching up on `behind_rows` rows first.
  double CatchUpMs(int behind_rows) const { return behind_rows > 0 ? per_behind_row_ * behind_rows : 0.0; }
  double fixed_ms() const { return fixed_; }
  double per_token_ms() const { return per_token_; }

 private:
  void Refit();
  double w_ = 0, sk_ = 0, skk_ = 0, sy_ = 0, sky_ = 0;  // decayed sums of 1, k, k², ms, k·ms
  double fixed_ = 0, per_token_ = 0;
  // Decayed sums over catch-up proposals of the time beyond Ms(k) and of the rows caught up on.
  double excess_sum_ = 0, behind_sum_ = 0;
  double per_behind_row_ = 0;
};

// Measures one target pass over r rows (all returning logits) for r on a grid up to max_rows, on
// top of a short context in sequence `seq` (single-row warm-up passes first, then the fastest of
// several rounds over the grid), leaving the cache as it was.
Result<CostModel> ProfileVerifyCost(Model& model, KvCache& cache, ThreadPool& pool, int seq, int max_rows);

}  // namespace dspark
