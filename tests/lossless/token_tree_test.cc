// Token trees are lossless: greedy output equals plain decoding token for token with
// alternatives verified beside each draft token (--spec-branches) and with side chains after them
// (--spec-branch-tail), under fixed and adaptive schedules. Runs on tiny random-weight models.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "speculative/drafters/lookup_first.h"
#include "speculative/drafters/ngram.h"

#include "lossless_fixture.h"

namespace dspark {
namespace {

using lossless::Lossless;
using testing::ReferenceGreedy;

// Token trees (--spec-branches): each draft token's alternatives verified as leaves beside the
// chain, an accepted leaf's cell moved behind the chain's, under fixed and adaptive schedules.
TEST_F(Lossless, TokenTreesGreedyEqualPlain) {
  const int n = 40;
  int64_t leaves = 0, leaves_accepted = 0;
  for (int variant = 0; variant < 3; ++variant) {
    const auto prompt = Prompt(variant);
    const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n, 256);
    for (int branches : {1, 3}) {
      for (bool adaptive : {false, true}) {
        branches_ = branches;
        adaptive_ = adaptive;
        for (int n_max : {1, 3, 8}) {
          std::map<std::string, std::unique_ptr<Drafter>> drafters;
          drafters["draft-other"] = DraftModel(other_path_, 256);
          drafters["draft-q8"] = DraftModel(q8_path_, 256);
          drafters["ngram+draft"] = std::make_unique<LookupFirstDrafter>(NgramOptions{2, 3}, DraftModel(other_path_, 256));
          for (auto& [name, d] : drafters) {
            const GenerateResult r = Run(d.get(), prompt, n, n_max);
            ASSERT_EQ(r.ids, want) << name << " branches " << branches << (adaptive ? " adaptive" : "") << " n_max "
                                   << n_max << " prompt " << variant;
            EXPECT_LE(r.stats.num_target_calls, 1 + n) << name;
            if (!adaptive) {
              EXPECT_LE(r.stats.num_leaf_tokens, branches * r.stats.num_draft_tokens) << name;
            }
            EXPECT_LE(r.stats.num_leaf_accepted, r.stats.num_leaf_reached) << name;
            EXPECT_LE(r.stats.num_leaf_reached, r.stats.num_leaf_tokens) << name;
            leaves += r.stats.num_leaf_tokens;
            leaves_accepted += r.stats.num_leaf_accepted;
          }
        }
      }
    }
  }
  // The leaves were verified and often taken: the outputs above went through accepted leaves.
  EXPECT_GT(leaves, 0);
  EXPECT_GT(leaves_accepted, 20) << "of " << leaves << " leaves";
}

// Side chains (--spec-branch-tail): n-gram branches, each alternative followed by what followed
// it in its own match, verified in the same pass; an accepted alternative's cells and its tail's
// close up behind the chain's. Greedy output is plain decoding's under fixed and adaptive
// schedules.
TEST_F(Lossless, TokenTreeTailsGreedyEqualPlain) {
  const int n = 40;
  int64_t tails = 0, tails_accepted = 0;
  for (int variant = 0; variant < 3; ++variant) {
    // The prompt twice, then a part of it: earlier matches that continue differently.
    auto prompt = Prompt(variant);
    const std::vector<int32_t> once = prompt;
    prompt.insert(prompt.end(), once.begin() + 1, once.end());
    prompt.insert(prompt.end(), once.begin() + 1, once.begin() + once.size() / 2);
    const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n, 256);
    for (int tail : {1, 6}) {
      for (bool adaptive : {false, true}) {
        branches_ = 2;
        branch_tail_ = tail;
        adaptive_ = adaptive;
        for (int n_max : {2, 8}) {
          NgramDrafter ngram(NgramOptions{1, 3});
          const GenerateResult r = Run(&ngram, prompt, n, n_max);
          ASSERT_EQ(r.ids, want) << "tail " << tail << (adaptive ? " adaptive" : "") << " n_max " << n_max
                                 << " prompt " << variant;
          EXPECT_LE(r.stats.num_target_calls, 1 + n);
          EXPECT_LE(r.stats.num_tail_tokens, tail * r.stats.num_leaf_tokens);
          EXPECT_LE(r.stats.num_tail_accepted, r.stats.num_tail_tokens);
          tails += r.stats.num_tail_tokens;
          tails_accepted += r.stats.num_tail_accepted;
        }
      }
    }
  }
  // Tails were verified and taken: the outputs above went through accepted side chains.
  EXPECT_GT(tails, 0);
  EXPECT_GT(tails_accepted, 0) << "of " << tails << " tail tokens";
}

}  // namespace
}  // namespace dspark
