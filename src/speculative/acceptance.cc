#include "speculative/acceptance.h"

#include <algorithm>

namespace dspark {

namespace {
// Weight of a new observation once the first few have been averaged in.
constexpr double kEma = 0.1;
}  // namespace

PositionAcceptance::PositionAcceptance(int positions, double prior)
    : accept_(std::max(positions, 1), prior), observed_(accept_.size(), 0) {}

void PositionAcceptance::Observe(int verified, int accepted) {
  // Position i was tried iff positions < i were accepted; it succeeded iff i < accepted.
  for (int i = 0; i < verified && i <= accepted && i < positions(); ++i) {
    const double hit = i < accepted ? 1.0 : 0.0;
    const double weight = std::max(kEma, 1.0 / (++observed_[i] + kPriorWeight));
    accept_[i] = (1 - weight) * accept_[i] + weight * hit;
  }
}

std::vector<double> PositionAcceptance::Survival(int k) const {
  std::vector<double> surv(std::max(k, 0), 0.0);
  double s = 1.0;
  for (int i = 0; i < k && i < positions(); ++i) surv[i] = (s *= accept_[i]);
  return surv;
}

PositionAcceptance PositionAcceptance::Seed() const {
  PositionAcceptance s = *this;
  for (int& n : s.observed_) n = std::min(n, static_cast<int>(kPriorWeight));
  return s;
}

}  // namespace dspark
