// Benchmark-only drafter: proposes the target's true continuation (from a plain greedy run) and
// corrupts each position independently with probability 1 - accept_rate, so the whole system can
// be timed at a controlled acceptance rate on any model, including large random-weight ones.
#pragma once

#include "speculative/drafter.h"

namespace dspark {

class SyntheticDrafter final : public Drafter {
 public:
  // reference: prompt followed by the target's plain greedy output.
  SyntheticDrafter(std::vector<int32_t> reference, int n_vocab, double accept_rate);
  std::string_view Name() const override { return "synthetic"; }
  Status Begin(int seq) override { return Status::Ok(); }
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;

 private:
  std::vector<int32_t> reference_;
  int n_vocab_;
  double accept_rate_;
};

}  // namespace dspark
