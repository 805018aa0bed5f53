// Measured acceptance of draft positions: what the scheduler keeps for a drafter, and what a
// drafter that measures itself (LookupFirstDrafter's prompt lookup) keeps for its own proposals.
#pragma once

#include <vector>

namespace dspark {

// Conditional acceptance of draft position i given that positions < i were accepted: an EMA
// that starts at an optimistic prior and weighs the first observations more.
class PositionAcceptance {
 public:
  // Optimistic prior so a new drafter gets to show what it can do.
  static constexpr double kPrior = 0.7;
  // The prior counts as this many observations: a drafter that misses from the start is dropped
  // after a few steps (a short request cannot afford ten), one that hits keeps its long drafts.
  static constexpr double kPriorWeight = 2.0;

  explicit PositionAcceptance(int positions, double prior = kPrior);
  // A draft of which `verified` tokens were checked and the first `accepted` survived.
  void Observe(int verified, int accepted);
  // P(first i+1 tokens accepted) for i < k (0 past the tracked positions).
  std::vector<double> Survival(int k) const;
  // Conditional acceptance of position i (0 past the tracked positions).
  double Acceptance(int i) const { return i >= 0 && i < positions() ? accept_[i] : 0.0; }
  int positions() const { return static_cast<int>(accept_.size()); }
  // The same estimates, weighed as no more than the prior: the start of a new request, which
  // begins from what earlier requests measured and lets its own evidence take over within a
  // few drafts.
  PositionAcceptance Seed() const;

 private:
  std::vector<double> accept_;
  std::vector<int> observed_;
};

}  // namespace dspark
