// The sampling-distribution check every drafter's tests share: seeded plain and speculative runs
// from one prompt, joint counts of the tokens that come out of verification, a two-sample χ².
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "model/testing/chi_square.h"
#include "spec/engine.h"

namespace dspark::testing {

// Generates 3 tokens `trials` times with each engine (different seeds) and compares the joint
// distribution of tokens 2 and 3 (token 1 is sampled right after prefill, never verified).
// Also requires that drafts were both accepted and rejected, so the residual path ran.
inline void ExpectSpeculativeSamplingMatchesPlain(SpeculativeEngine& plain, SpeculativeEngine& spec,
                                                  const SamplingParams& base, int trials = 3000) {
  std::map<std::vector<int32_t>, int> a, b;
  GenerateOptions go;
  go.max_new_tokens = 3;
  go.ignore_eos = true;
  go.sampling = base;
  int64_t drafted = 0, accepted = 0;
  for (int t = 0; t < trials; ++t) {
    go.sampling.seed = 1000 + t;
    auto ra = plain.GenerateFromIds({1, 5, 9}, go);
    go.sampling.seed = 900000 + t;
    auto rb = spec.GenerateFromIds({1, 5, 9}, go);
    ASSERT_TRUE(ra.ok() && rb.ok());
    ++a[{ra->ids[1], ra->ids[2]}];
    ++b[{rb->ids[1], rb->ids[2]}];
    drafted += rb->stats.num_draft_tokens;
    accepted += rb->stats.num_accepted_tokens;
  }
  ASSERT_GT(drafted, 0);
  ASSERT_GT(accepted, 0);
  ASSERT_LT(accepted, drafted);  // rejections happened, so the residual path was exercised
  int dof = 0;
  const double chi = TwoSampleChi2(a, b, &dof);
  EXPECT_LT(chi, Chi2Critical999(dof)) << "dof " << dof << " temperature " << base.temperature;
}

}  // namespace dspark::testing
