#include "speculative/prob_calibration.h"

#include <algorithm>
#include <cmath>

namespace dspark {
namespace {
double Logit(double p) {
  p = std::clamp(p, 1e-4, 1 - 1e-4);
  return std::log(p / (1 - p));
}
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// Gaussian prior on (slope - 1, bias - kPriorBias) with this precision: the prior map until the
// bins hold a few observations, and a fit that cannot run away on one-sided evidence (a bin of all
// hits).
constexpr double kPriorPrecision = 1.0;
}  // namespace

double ProbCalibration::Acceptance(double p) const { return Sigmoid(slope_ * Logit(p) + bias_); }

double ProbCalibration::MeanAcceptance() const {
  return (mean_hits_ + kPriorMean * kPriorMeanWeight) / (mean_tries_ + kPriorMeanWeight);
}

void ProbCalibration::Observe(double p, bool accepted) {
  const int b = std::clamp(static_cast<int>(p * kBins), 0, kBins - 1);
  hits_[b] = (1 - kDecay) * hits_[b] + (accepted ? 1.0 : 0.0);
  tries_[b] = (1 - kDecay) * tries_[b] + 1.0;
  mean_hits_ = (1 - kDecay) * mean_hits_ + (accepted ? 1.0 : 0.0);
  mean_tries_ = (1 - kDecay) * mean_tries_ + 1.0;
  total_ += 1;
  if (++since_fit_ >= kRefitEvery || total_ <= kRefitEvery) Refit();
}

void ProbCalibration::Refit() {
  since_fit_ = 0;
  // Maximum a posteriori logistic regression over the bins (their centres as inputs): Newton's
  // method on two parameters, warm-started from the last fit.
  double a = slope_, c = bias_;
  for (int iter = 0; iter < 8; ++iter) {
    double ga = kPriorPrecision * (a - 1.0), gc = kPriorPrecision * (c - kPriorBias);
    double haa = kPriorPrecision, hac = 0, hcc = kPriorPrecision;
    for (int b = 0; b < kBins; ++b) {
      if (tries_[b] <= 0) continue;
      const double x = Logit((b + 0.5) / kBins);
      const double q = Sigmoid(a * x + c);
      const double r = tries_[b] * q - hits_[b];  // d(-log likelihood)/d(logit)
      const double w = tries_[b] * q * (1 - q);
      ga += r * x;
      gc += r;
      haa += w * x * x;
      hac += w * x;
      hcc += w;
    }
    const double det = haa * hcc - hac * hac;
    if (!(det > 0)) break;
    const double da = (hcc * ga - hac * gc) / det, dc = (haa * gc - hac * ga) / det;
    a -= da;
    c -= dc;
    if (std::abs(da) + std::abs(dc) < 1e-6) break;
  }
  // A non-increasing map would rank a surer draft below a doubtful one: keep the slope positive.
  if (std::isfinite(a) && std::isfinite(c)) {
    slope_ = std::max(a, 0.05);
    bias_ = c;
  }
}

}  // namespace dspark
