#include "speculative/cost_model.h"

#include <algorithm>
#include <chrono>

namespace dspark {

namespace {
// Passes of one row count before its own average replaces the scaled profile, the weight of a new
// pass in those averages, and the largest row count tracked on its own.
constexpr int kMinObserved = 3;
constexpr double kCostEma = 0.05;
constexpr int kMaxObservedRows = 512;
// Weight of a new observation in the draft-cost averages.
constexpr double kEma = 0.1;
// Row counts at which the cost of a target pass is measured; others are interpolated.
constexpr int kCostGrid[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128};
// Warm-up before profiling (single-row passes, whichever limit comes first) and rounds over the grid.
constexpr int kCostWarmPasses = 16;
constexpr double kCostWarmMs = 200.0;
constexpr int kCostRounds = 3;
using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
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

Result<CostModel> ProfileVerifyCost(Model& model, KvCache& cache, ThreadPool& pool, int seq, int max_rows) {
  const int base = cache.Length(seq);
  const int prefix = std::min(32, cache.n_ctx() - base - max_rows);
  if (prefix < 0) return OutOfRange("profiling: no room in the context for {} rows", max_rows);
  const int n_vocab = model.config().n_vocab;
  auto token = [&](int i) { return static_cast<int32_t>((i * 7919 + 1) % n_vocab); };
  if (prefix > 0) {
    Batch warm;
    for (int i = 0; i < prefix; ++i) warm.Add(token(i), base + i, seq, false);
    DSPARK_TRY(model.Forward(warm, cache, pool).status());
  }
  auto pass_ms = [&](int rows) -> Result<double> {
    Batch b;
    for (int i = 0; i < rows; ++i) b.Add(token(prefix + i), base + prefix + i, seq, true);
    const auto t0 = Clock::now();
    DSPARK_TRY(model.Forward(b, cache, pool).status());
    const double ms = MsSince(t0);
    DSPARK_TRY(cache.Truncate(seq, base + prefix));
    return ms;
  };
  // The first passes after loading run markedly slower than later ones. Profiled cold, the
  // one-row point can come out as high as several rows; the monotone clamp below then flattens
  // the whole curve, and the scheduler sees verification rows as free and plain decoding as dearer
  // than it is, so it drafts every step at a loss. So: single-row passes first (16, or 200 ms on a
  // big model), then rounds over the whole grid, each row count keeping its fastest pass, so drift
  // hits every count alike.
  const auto warm_start = Clock::now();
  for (int i = 0; i < kCostWarmPasses && MsSince(warm_start) < kCostWarmMs; ++i) DSPARK_TRY(pass_ms(1).status());
  std::vector<std::pair<int, double>> points;
  for (int rows : kCostGrid)
    if (rows <= max_rows) points.emplace_back(rows, 1e300);
  for (int round = 0; round < kCostRounds; ++round)
    for (auto& [rows, best] : points) {
      DSPARK_ASSIGN_OR_RETURN(const double ms, pass_ms(rows));
      best = std::min(best, ms);
    }
  // Costs are monotone in reality; enforce it so noise cannot make more rows look free.
  for (size_t i = 1; i < points.size(); ++i) points[i].second = std::max(points[i].second, points[i - 1].second);
  DSPARK_TRY(cache.Truncate(seq, base));
  return CostModel(std::move(points));
}

}  // namespace dspark
