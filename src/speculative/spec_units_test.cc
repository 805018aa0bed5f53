// Unit tests of the pieces around verification: n-gram lookup, statistics arithmetic, scheduling.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "speculative/drafters/lookup_first.h"
#include "speculative/drafters/ngram.h"
#include "speculative/planner.h"
#include "speculative/prob_calibration.h"
#include "speculative/prompt_cache.h"
#include "speculative/scheduler.h"
#include "speculative/stats.h"
#include "util/fault_injection.h"

namespace dspark {
namespace {

TEST(Ngram, ProposesWhatFollowedTheMostRecentMatch) {
  const std::vector<int32_t> ctx = {1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3};
  // Suffix [1,2,3] last occurred at index 6, followed by 7, 8, 1.
  EXPECT_EQ(NgramLookup(ctx, 2, 3, 3), (std::vector<int32_t>{7, 8, 1}));
  EXPECT_EQ(NgramLookup(ctx, 2, 3, 1), (std::vector<int32_t>{7}));
  EXPECT_TRUE(NgramLookup(std::vector<int32_t>{1, 2, 3}, 2, 3, 4).empty());
  // Falls back to shorter n-grams.
  EXPECT_EQ(NgramLookup(std::vector<int32_t>{5, 6, 0, 6}, 1, 3, 2), (std::vector<int32_t>{0, 6}));
}

TEST(Ngram, BranchesComeFromTheOtherMatchesWhereTheyLeaveTheChain) {
  // Suffix [1, 2] occurs at 0, 4 and 8 before the end, followed by 3 4 5, 3 6 7 and 9 9.
  const std::vector<int32_t> ctx = {1, 2, 3, 4, 5, 0, 1, 2, 3, 6, 7, 0, 1, 2, 9, 9, 0, 1, 2};
  const std::vector<int32_t> chain = NgramLookup(ctx, 2, 2, 3);
  ASSERT_EQ(chain, (std::vector<int32_t>{9, 9, 0}));  // the most recent match
  const auto branches = NgramBranches(ctx, 2, 2, chain, 2, 2);
  ASSERT_EQ(branches.size(), 3u);
  // Both older matches leave the chain at once, with 3: one alternative, its tail from the more
  // recent of them, supported by two of the three matches.
  ASSERT_EQ(branches[0].size(), 1u);
  EXPECT_EQ(branches[0][0].token, 3);
  EXPECT_EQ(branches[0][0].tail, (std::vector<int32_t>{6, 7}));
  EXPECT_FLOAT_EQ(branches[0][0].prob, 2.0f / 3.0f);
  EXPECT_TRUE(branches[1].empty());
  EXPECT_TRUE(branches[2].empty());
  // No alternatives asked for, or none to give.
  EXPECT_TRUE(NgramBranches(ctx, 2, 2, chain, 0, 2)[0].empty());
  const std::vector<int32_t> once = {4, 1, 2, 8, 1, 2};
  EXPECT_TRUE(NgramBranches(once, 2, 2, NgramLookup(once, 2, 2, 2), 2, 2)[0].empty());
}

TEST(Planner, AdmitsATailOnlyBehindItsLeafAndOnlyWhileItPays) {
  // One sequence, no chain tokens; each row costs 1 ms on top of 10 ms.
  std::vector<double> ms;
  for (int r = 1; r <= 16; ++r) ms.push_back(10.0 + r);
  const CostModel cost(ms);
  const std::vector<std::vector<double>> surv = {{}};
  // Leaf 0 is worth 0.5, its tail 0.4 then 0.01; leaf 1 is worth 0.2. At 11 ms for 1 token a row
  // pays when it adds more than 1/11 of a token at the rate so far.
  const std::vector<std::vector<std::vector<double>>> value = {{{0.5, 0.4, 0.01}, {0.2}}};
  EXPECT_EQ(AdmitLeaves(surv, {0}, value, 1, 1.0, cost), (std::vector<std::vector<int>>{{2, 1}}));
  // A tail token worth more than its leaf still waits for it.
  const std::vector<std::vector<std::vector<double>>> dear = {{{0.05, 0.05}}};
  EXPECT_EQ(AdmitLeaves(surv, {0}, dear, 1, 1.0, cost), (std::vector<std::vector<int>>{{0}}));
}

TEST(SpecStats, ArithmeticOnScriptedSteps) {
  SpecStats s;
  s.RecordStep(4, 2, {0.9f, 0.8f, 0.5f, 0.2f});
  s.RecordStep(4, 4, {});
  s.RecordStep(0, 0, {});
  s.RecordStep(2, 0, {});
  EXPECT_EQ(s.num_steps, 4);
  EXPECT_EQ(s.num_drafts, 3);
  EXPECT_EQ(s.num_draft_tokens, 10);
  EXPECT_EQ(s.num_accepted_tokens, 6);
  EXPECT_DOUBLE_EQ(s.acceptance_rate(), 0.6);
  EXPECT_DOUBLE_EQ(s.tau(), 1.0 + 6.0 / 3.0);
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(s.drafted_per_pos, (std::vector<int64_t>{3, 3, 2, 2}));
  const auto per_pos = s.acceptance_per_position();
  EXPECT_DOUBLE_EQ(per_pos[0], 2.0 / 3.0);
  // Kept per position counts only the drafts that reached it: the 2-token draft is not among
  // position 3's.
  EXPECT_EQ(s.kept_per_position(), (std::vector<double>{2.0 / 3.0, 2.0 / 3.0, 1.0 / 2.0, 1.0 / 2.0}));
  EXPECT_DOUBLE_EQ(per_pos[2], 1.0 / 3.0);
  // Calibration counts only the one draft that carried predictions (lookup drafts carry none).
  const auto cal = s.calibration();
  ASSERT_EQ(cal.size(), 4u);
  EXPECT_EQ(cal[0].drafts, 1);
  EXPECT_NEAR(cal[0].predicted, 0.9, 1e-6);
  EXPECT_DOUBLE_EQ(cal[0].realised, 1.0);
  EXPECT_NEAR(cal[2].predicted, 0.5, 1e-6);
  EXPECT_DOUBLE_EQ(cal[2].realised, 0.0);
  SpecStats t;
  t.RecordStep(1, 1, {});
  s.Merge(t);
  EXPECT_EQ(s.num_drafts, 4);
  EXPECT_EQ(s.accepted_per_pos[0], 3);
  const auto j = s.ToJson();
  EXPECT_EQ(j["accepted"], 7);
  EXPECT_DOUBLE_EQ(j["tau"].get<double>(), 1.0 + 7.0 / 4.0);
  EXPECT_NEAR(j["predicted_survival_per_position"][1].get<double>(), 0.8, 1e-6);
  EXPECT_DOUBLE_EQ(j["realised_survival_per_position"][1].get<double>(), 1.0);
}

TEST(Scheduler, FixedModeCapsAndCutsOnConfidence) {
  ScheduleOptions o;
  o.n_max = 5;
  o.p_min = 0.5f;
  DraftScheduler s(o, CostModel());
  EXPECT_EQ(s.Budget(100), 5);
  EXPECT_EQ(s.Budget(3), 3);
  Draft d;
  d.tokens = {1, 2, 3, 4};
  d.survival = {0.9f, 0.81f, 0.3f, 0.2f};  // own confidences 0.9, 0.9, 0.37, 0.67
  EXPECT_EQ(s.Cut(d), 2);
  Draft by_prob;
  by_prob.tokens = {1, 2, 3};
  by_prob.probs = {0.6f, 0.4f, 0.9f};
  EXPECT_EQ(s.Cut(by_prob), 1);
  o.n_min = 3;
  DraftScheduler strict(o, CostModel());
  EXPECT_EQ(strict.Cut(d), 0);
}

TEST(Scheduler, AdaptivePicksLongDraftsWhenVerificationIsCheapAndNoneWhenAcceptanceIsZero) {
  ScheduleOptions o;
  o.n_max = 8;
  o.adaptive = true;
  // Verifying 9 rows costs barely more than 1 (weights read once per pass).
  DraftScheduler s(o, CostModel({10, 10.5, 11, 11.5, 12, 12.5, 13, 13.5, 14}));
  for (int i = 0; i < 50; ++i) s.Observe(8, 8, 8, 1.0);
  EXPECT_EQ(s.Budget(100), 8);
  // A drafter that is never right, with costly verification: plain decoding, with rare probes.
  DraftScheduler bad(o, CostModel({10, 20, 30, 40, 50, 60, 70, 80, 90}));
  for (int i = 0; i < 100; ++i) bad.Observe(2, 2, 0, 5.0);
  int drafted_steps = 0;
  for (int i = 0; i < 64; ++i) drafted_steps += bad.Budget(100) > 0;
  EXPECT_LE(drafted_steps, 8);
}

// Adaptive scheduling for a drafter that stops on survival (the draft model's), up to 8 tokens.
ScheduleOptions AdaptiveSurvivalStop() {
  ScheduleOptions o;
  o.n_max = 8;
  o.adaptive = true;
  o.survival_stop = true;
  return o;
}

TEST(Scheduler, AProbeIsVerifiedWholeWhateverTheEstimatesSay) {
  DraftScheduler s(AdaptiveSurvivalStop(), CostModel({1.0, 1.6, 2.2, 2.8, 3.4, 4.0, 4.6, 5.2, 5.8}));
  // A drafter that has missed for a while: drafting does not pay, its drafts look doubtful.
  for (int i = 0; i < 40; ++i) {
    Draft d;
    d.tokens = {1, 2};
    d.probs = {0.1f, 0.1f};
    s.Observe(d, 2, 0, 0.1);
  }
  Draft doubtful;
  doubtful.tokens = {1, 2};
  doubtful.probs = {0.1f, 0.1f};
  int budget = 0, steps = 0;
  for (; steps < 10000 && budget == 0; ++steps) {
    budget = s.Budget(100);
    if (budget == 0) {
      EXPECT_FALSE(s.probing());
      EXPECT_EQ(s.Cut(doubtful), 0) << "outside a probe, a doubtful draft is not worth verifying";
    }
  }
  ASSERT_EQ(budget, 2) << "a probe drafts two tokens (after " << steps << " plain steps)";
  EXPECT_TRUE(s.probing());
  // The probe is verified whole: no survival bar stops the drafter, and the cut keeps both tokens.
  EXPECT_DOUBLE_EQ(s.MinSurvival(), 0.0);
  EXPECT_EQ(s.Cut(doubtful), 2);
  s.Observe(doubtful, 2, 2, 0.1);
  // The next step is an ordinary one again.
  s.Budget(100);
  EXPECT_FALSE(s.probing());
}

TEST(Scheduler, DraftCostModelSeparatesFixedAndPerTokenCost) {
  DraftCostModel per_pass;  // a block drafter: 2 ms whatever the length
  DraftCostModel per_token; // a draft model: 0.5 ms per token
  for (int i = 0; i < 200; ++i) {
    const int k = 1 + i % 8;
    per_pass.Observe(k, 2.0);
    per_token.Observe(k, 0.5 * k);
  }
  EXPECT_NEAR(per_pass.fixed_ms(), 2.0, 1e-6);
  EXPECT_NEAR(per_pass.per_token_ms(), 0.0, 1e-6);
  EXPECT_NEAR(per_token.fixed_ms(), 0.0, 1e-6);
  EXPECT_NEAR(per_token.per_token_ms(), 0.5, 1e-6);
  EXPECT_DOUBLE_EQ(per_token.Ms(0), 0.0);
  // One proposal length only: all of it is charged per token.
  DraftCostModel fixed_len;
  for (int i = 0; i < 20; ++i) fixed_len.Observe(4, 2.0);
  EXPECT_NEAR(fixed_len.Ms(4), 2.0, 1e-9);
  EXPECT_NEAR(fixed_len.Ms(2), 1.0, 1e-9);
}

TEST(Scheduler, AdaptiveSkipsDraftingWhenTheDrafterCostsMoreThanItSaves) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  // Verification as cheap as decoding, acceptance 100%, but each draft token costs two decode steps.
  DraftScheduler s(o, CostModel({1, 1, 1, 1, 1}));
  for (int i = 0; i < 50; ++i) s.Observe(4, 4, 4, 8.0);
  int drafted_steps = 0;
  for (int i = 0; i < 64; ++i) drafted_steps += s.Budget(100) > 0;
  EXPECT_LE(drafted_steps, 8);
  // The same drafter at a tenth of the cost pays.
  DraftScheduler cheap(o, CostModel({1, 1, 1, 1, 1}));
  for (int i = 0; i < 50; ++i) cheap.Observe(4, 4, 4, 0.8);
  EXPECT_EQ(cheap.Budget(100), 4);
}

TEST(Scheduler, CostModeAsksForOneMoreThanThePayingLengthOnlyWhileDraftingPays) {
  ScheduleOptions o;
  o.n_max = 8;
  o.mode = ScheduleMode::kCost;
  o.adaptive = true;
  const CostModel verify({1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8});
  // A drafter whose first two tokens always survive and third never, at 0.05 ms per drafted row:
  // two tokens pay on average; cost mode asks for three, for Cut to trim by each draft's survival.
  DraftScheduler good(o, verify);
  for (int i = 0; i < 30; ++i) good.Observe(4, 3, 2, 0.2);
  EXPECT_EQ(good.Budget(100), 3);
  EXPECT_EQ(good.Budget(2), 2);  // never past the room left
  // A pass at 3 decode steps, with the first token rejected half the time: plain decoding.
  DraftScheduler bad(o, verify);
  for (int i = 0; i < 30; ++i) bad.Observe(2, 2, i % 2, 3.0);
  int drafted_steps = 0;
  for (int i = 0; i < 64; ++i) {
    const int b = bad.Budget(100);
    EXPECT_TRUE(b == 0 || b == 2) << b;  // a probe drafts two tokens
    drafted_steps += b > 0;
  }
  EXPECT_LE(drafted_steps, 8);
}

TEST(Scheduler, DraftingThatPaysAloneDoesNotPayInABusyComputeBoundPass) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  // Compute-bound target: 1 ms for one row, +0.25 ms per further row.
  std::vector<double> ms;
  for (int r = 1; r <= 64; ++r) ms.push_back(1.0 + 0.25 * (r - 1));
  DraftScheduler s(o, CostModel(ms));
  for (int i = 0; i < 30; ++i) s.Observe(4, 4, 3, 0.4);  // 75% acceptance, 0.1 ms per token
  EXPECT_GT(s.Budget(100), 0);                          // alone: drafting pays
  int drafted_steps = 0;                                // 31 other sequences share the pass
  for (int i = 0; i < 64; ++i) drafted_steps += s.Budget(100, SharedPass{31, 31, 0}) > 0;
  EXPECT_LE(drafted_steps, 8);
}

// A compute-bound target (1 ms for one row, +0.25 ms per further row) and a drafter whose first
// token always survives and whose second never does, at 0.8 ms per drafted token: alone, drafting
// one token gives 2 tokens in 1.25 + 0.8 ms, worse than 1 token per ms of plain decoding.
DraftScheduler MarginalDrafter(const ScheduleOptions& o) {
  std::vector<double> ms;
  for (int r = 1; r <= 512; ++r) ms.push_back(1.0 + 0.25 * (r - 1));
  DraftScheduler s(o, CostModel(ms));
  for (int i = 0; i < 30; ++i) s.Observe(4, 4, 1, 3.2);
  return s;
}

TEST(Scheduler, PromptRowsInThePassDoNotMakeDraftingLookCheap) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  DraftScheduler s = MarginalDrafter(o);
  EXPECT_FALSE(s.Pays(SharedPass{}));
  // 256 prompt rows make the pass 65 ms long, but they commit nothing: a draft row still costs
  // its 0.25 ms on top, and that is what it must repay.
  EXPECT_FALSE(s.Pays(SharedPass{0, 0, 256}));
  int drafted_steps = 0;
  for (int i = 0; i < 64; ++i) drafted_steps += s.Budget(100, SharedPass{0, 0, 256}) > 0;
  EXPECT_LE(drafted_steps, 4);  // probes only
  // Batch admission agrees: a sure first draft token is worth its row only if it beats the rate.
  const std::vector<std::vector<double>> surv = {{1.0, 0.0}, {0.1, 0.01}};
  std::vector<double> ms;
  for (int r = 1; r <= 512; ++r) ms.push_back(1.0 + 0.25 * (r - 1));
  const CostModel cost(ms);
  EXPECT_EQ(AdmitDraftSlots(surv, 2, 2.0, cost, 256), AdmitDraftSlots(surv, 2, 2.0, cost, 0));
  EXPECT_EQ(AdmitDraftSlots(surv, 2, 2.0, cost, 256), (std::vector<int>{1, 0}));
  EXPECT_NEAR(DecodeShareMs(cost, 2, 256, 3), cost.VerifyMs(5), 1e-9);
}

TEST(Scheduler, ADropInLoadDoesNotReleaseEveryProbeAtOnce) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  DraftScheduler s = MarginalDrafter(o);
  // 100 steps in a pass shared with 31 other sequences: at most a probe or so.
  int busy = 0;
  for (int i = 0; i < 100; ++i) busy += s.Budget(100, SharedPass{31, 31, 0}) > 0;
  EXPECT_LE(busy, 1);
  // The batch empties: the next step is not a probe just because the busy steps were many.
  EXPECT_EQ(s.Budget(100, SharedPass{}), 0);
  // Alone, probes come back, at a small fraction of the time: a probe here costs 2.1 ms (two draft
  // tokens at 0.8 ms, two rows at 0.25 ms) and 1 ms of plain decoding passes per step.
  int alone = 0;
  for (int i = 0; i < 256; ++i) alone += s.Budget(100, SharedPass{}) > 0;
  EXPECT_GE(alone, 1);
  EXPECT_LE(alone, 3);
}

TEST(Scheduler, CatchUpAfterAPauseIsLearntApartFromTheDraftingCost) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  DraftScheduler s(o, CostModel({1, 1.05, 1.1, 1.15, 1.2}));
  // In step: 0.1 ms per drafted token, the first three tokens accepted. After pauses: 0.02 ms per
  // row caught up on.
  for (int i = 0; i < 30; ++i) {
    s.Observe(4, 4, 3, 0.4);
    s.Observe(4, 4, 3, 0.4 + 0.02 * 50, {}, 50);
  }
  EXPECT_NEAR(s.draft_cost().Ms(4), 0.4, 1e-6);  // the catch-ups did not leak into the steady cost
  EXPECT_NEAR(s.draft_cost().CatchUpMs(50), 1.0, 1e-6);
  EXPECT_EQ(s.Budget(100), 3);
  // A short pause is worth resuming after; a catch-up of thousands of rows is not.
  EXPECT_GT(s.Budget(100, SharedPass{}, 20), 0);
  EXPECT_FALSE(s.Pays(SharedPass{}) && s.Budget(100, SharedPass{}, 5000) > 0);
}

TEST(Scheduler, ConfidenceIsRecalibratedByRealisedSurvival) {
  ScheduleOptions o;
  o.n_max = 4;
  o.mode = ScheduleMode::kCost;
  o.adaptive = true;
  DraftScheduler s(o, CostModel({1, 1.1, 1.2, 1.3, 1.4}));
  Draft d;
  d.tokens = {1, 2, 3, 4};
  d.survival = {0.4f, 0.2f, 0.1f, 0.05f};
  // Before any verification the head's own estimates stand.
  std::vector<double> raw = s.SurvivalOf(d, 4);
  EXPECT_NEAR(raw[0], 0.4, 1e-6);
  EXPECT_NEAR(raw[3], 0.05, 1e-6);
  // The head is pessimistic: the first two slots always survive, the third half the time.
  for (int i = 0; i < 200; ++i) s.Observe(4, 3, 2 + i % 2, 0.1, d.survival);
  const std::vector<double> cal = s.SurvivalOf(d, 4);
  // (the one pseudo-observation per side still pulls a little towards the head's own value)
  EXPECT_GT(cal[0], 0.9);
  EXPECT_GT(cal[1], 0.85);
  EXPECT_NEAR(cal[2], 0.5, 0.1);
  for (int j = 1; j < 4; ++j) EXPECT_LE(cal[j], cal[j - 1]);
  EXPECT_LE(cal[3], cal[2]);
}

// Acceptance that follows logit(a) = 1.4 logit(p) + 1.2 (close to the bundled draft model's).
double TrueAcceptance(double p) { return 1.0 / (1.0 + std::exp(-(1.4 * std::log(p / (1 - p)) + 1.2))); }

TEST(ProbCalibration, StartsAtItsPriorAndLearnsAMonotoneMapFromVerification) {
  ProbCalibration c;
  // The prior: logit(acceptance) = logit(p) + 1.
  EXPECT_NEAR(c.Acceptance(0.5), 1.0 / (1.0 + std::exp(-1.0)), 1e-9);
  EXPECT_GT(c.Acceptance(0.3), 0.3);
  EXPECT_LT(c.Acceptance(0.3), c.Acceptance(0.9));
  EXPECT_NEAR(c.MeanAcceptance(), 0.75, 1e-9);
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double true_mean = 0;
  for (int i = 0; i < 3000; ++i) {
    const double p = 0.02 + 0.96 * unit(gen);
    c.Observe(p, unit(gen) < TrueAcceptance(p));
    true_mean += TrueAcceptance(p) / 3000;
  }
  for (double p : {0.1, 0.3, 0.5, 0.7, 0.9}) EXPECT_NEAR(c.Acceptance(p), TrueAcceptance(p), 0.06) << "p = " << p;
  // The mean outcome follows the evidence (a memory of ~200 tokens: within a few points).
  EXPECT_NEAR(c.MeanAcceptance(), true_mean, 0.06);
  for (double p = 0.05; p < 0.95; p += 0.05) EXPECT_LT(c.Acceptance(p), c.Acceptance(p + 0.05));
  // One-sided evidence (every token accepted) moves the map up without running away.
  ProbCalibration sure;
  for (int i = 0; i < 50; ++i) sure.Observe(0.5, true);
  EXPECT_GT(sure.Acceptance(0.5), 0.9);
  EXPECT_GT(sure.MeanAcceptance(), 0.95);
  EXPECT_TRUE(std::isfinite(sure.Acceptance(0.01)));
  EXPECT_LT(sure.Acceptance(0.01), sure.Acceptance(0.5));
}

TEST(Scheduler, DraftProbabilitiesGiveEachDraftItsOwnSurvivalAndLengthWhenTheDrafterStopsOnSurvival) {
  ScheduleOptions o = AdaptiveSurvivalStop();
  // Verifying costs 1 ms plus 0.1 ms per extra row; drafting 0.05 ms per token.
  DraftScheduler s(o, CostModel({1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8}));
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int step = 0; step < 400; ++step) {
    Draft d;
    for (int i = 0; i < 4; ++i) {
      d.tokens.push_back(i);
      d.probs.push_back(static_cast<float>(0.05 + 0.9 * unit(gen)));
    }
    int accepted = 0;
    while (accepted < 4 && unit(gen) < TrueAcceptance(d.probs[accepted])) ++accepted;
    s.Observe(d, 4, accepted, 0.2);
  }
  EXPECT_NEAR(s.prob_calibration().Acceptance(0.5), TrueAcceptance(0.5), 0.08);
  // Drafting pays: the budget is the cap (the drafter stops where its draft stops paying), while
  // the rest of a batched pass counts on the length that pays on average.
  EXPECT_EQ(s.Budget(100), 8);
  EXPECT_GT(s.planned(), 0);
  EXPECT_LT(s.planned(), 8);
  EXPECT_EQ(s.Budget(5), 5);  // never past the room left
  // The bar a slot's survival must clear: the rate (~2 tokens per ms here) times a row's marginal
  // cost (0.1 ms verifying + 0.05 ms drafting).
  const double bar = s.MinSurvival();
  EXPECT_GT(bar, 0.15);
  EXPECT_LT(bar, 0.6);
  // A confident draft keeps its slots, a doubtful one is cut where its survival drops.
  Draft sure, doubtful;
  sure.tokens = doubtful.tokens = {1, 2, 3, 4};
  sure.probs = {0.99f, 0.98f, 0.97f, 0.95f};
  doubtful.probs = {0.9f, 0.05f, 0.9f, 0.9f};
  const std::vector<double> surv = s.SurvivalOf(sure, 4);
  EXPECT_GT(surv[3], 0.9);
  EXPECT_LT(s.SurvivalOf(doubtful, 4)[1], 0.1);
  EXPECT_EQ(s.Cut(sure), 4);
  EXPECT_EQ(s.Cut(doubtful), 1);
  // Without survival stops (or not adaptive) the budget stays one length for every draft.
  o.survival_stop = false;
  DraftScheduler plain_budget(o, CostModel({1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8}));
  EXPECT_DOUBLE_EQ(plain_budget.MinSurvival(), 0.0);
}

TEST(Scheduler, ADraftWithMeasuredSurvivalIsVerifiedByItAndTeachesNothing) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  DraftScheduler s(o, CostModel({1.0, 1.1, 1.2, 1.3, 1.4}));
  Draft lookup, model;
  lookup.tokens = model.tokens = {1, 2, 3, 4};
  lookup.survival = {0.05f, 0.02f, 0.01f, 0.0f};  // the drafter's record: such lookups usually fail
  lookup.survival_measured = true;
  for (int i = 0; i < 40; ++i) {
    s.Observe(lookup, 4, 0, 0.0);  // nothing learnt: the drafter counts its own outcomes
    s.Observe(model, 4, 4, 0.4);   // the model's drafts always survive
  }
  EXPECT_NEAR(s.SurvivalOf(lookup, 4)[0], 0.05, 1e-6);
  EXPECT_EQ(s.Cut(lookup), 0);  // not worth a verification row
  lookup.survival = {0.95f, 0.9f, 0.85f, 0.8f};
  EXPECT_EQ(s.Cut(lookup), 4);
  EXPECT_GT(s.ExpectedSurvival(3), 0.8);
  EXPECT_EQ(s.Cut(model), 4);
  // Free lookups do not make the model's drafting look cheaper: its cost stays its own.
  EXPECT_NEAR(s.draft_cost().Ms(4), 0.4, 1e-6);
}

// A model drafter that always proposes the same tokens (LookupFirstDrafter's fallback).
class FixedDrafter final : public Drafter {
 public:
  std::string_view Name() const override { return "fixed"; }
  DrafterNeeds Needs() const override { return {.max_draft = 4}; }
  Status Begin(int) override { return Status::Ok(); }
  Result<Draft> Propose(int, std::span<const int32_t>, const DraftParams&, Rng&) override {
    ++proposals;
    Draft d;
    d.tokens = {7, 7};
    d.forward_passes = 2;
    return d;
  }
  int proposals = 0;
};

TEST(LookupFirst, JudgesEachLookupByWhatTheTargetCommittedAfterIt) {
  auto owned = std::make_unique<FixedDrafter>();
  FixedDrafter* model = owned.get();
  LookupFirstDrafter drafter(NgramOptions{2, 2}, std::move(owned));
  ASSERT_TRUE(drafter.Begin(0).ok());
  Rng rng(1);
  DraftParams params;
  params.budget = 4;
  // "1 2 3 4 5 ... 1 2" repeats: the lookup proposes 3 4 5 6, with the prior as its survival.
  std::vector<int32_t> context = {1, 2, 3, 4, 5, 6, 9, 1, 2};
  Result<Draft> d = drafter.Propose(0, context, params, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_TRUE(d->survival_measured);
  ASSERT_EQ(d->survival.size(), 4u);
  EXPECT_NEAR(d->survival[0], PositionAcceptance::kPrior, 1e-6);
  EXPECT_EQ(model->proposals, 0);
  // The target committed 3 then 8: position 0 survived, position 1 failed, 2-3 were never tried.
  context.insert(context.end(), {3, 8});
  const double prior = PositionAcceptance::kPrior;
  d = drafter.Propose(0, context, params, rng);  // "3 8" never occurred: the model drafts
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{7, 7}));
  EXPECT_FALSE(d->survival_measured);
  EXPECT_EQ(model->proposals, 1);
  EXPECT_GT(drafter.LookupAcceptance(0, 0), prior);
  EXPECT_LT(drafter.LookupAcceptance(0, 1), prior);
  EXPECT_DOUBLE_EQ(drafter.LookupAcceptance(0, 2), prior);
  // Agreement up to the last committed token says nothing past it.
  context.insert(context.end(), {7, 1, 2});
  d = drafter.Propose(0, context, params, rng);  // proposes 3 8 7 1 (the latest match)
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{3, 8, 7, 1}));
  const double a0 = drafter.LookupAcceptance(0, 0), a1 = drafter.LookupAcceptance(0, 1);
  EXPECT_NEAR(d->survival[1], a0 * a1, 1e-6);
  context.push_back(3);
  d = drafter.Propose(0, context, params, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_GT(drafter.LookupAcceptance(0, 0), a0);
  EXPECT_DOUBLE_EQ(drafter.LookupAcceptance(0, 1), a1);
  // A new request starts from what the earlier ones measured, weighed as the prior.
  ASSERT_TRUE(drafter.Begin(1).ok());
  EXPECT_GT(drafter.LookupAcceptance(1, 0), prior);
  EXPECT_LT(drafter.LookupAcceptance(1, 1), prior);
}

TEST(Scheduler, NewRequestsStartFromWhatEarlierRequestsLearnt) {
  ScheduleOptions o;
  o.n_max = 4;
  o.adaptive = true;
  DraftScheduler engine_wide(o, CostModel({1, 1.2, 1.4, 1.6, 1.8}));
  // A fresh scheduler drafts on its optimistic prior.
  EXPECT_GT(DraftScheduler(o, CostModel({1, 1.2, 1.4, 1.6, 1.8})).Budget(100), 0);
  for (int i = 0; i < 40; ++i) engine_wide.Observe(4, 4, 0, 2.0);  // never accepted, costly
  DraftScheduler next = engine_wide.Seed();
  EXPECT_EQ(next.Budget(100), 0);
  EXPECT_LT(next.ExpectedSurvival(0), 0.1);
  // The request's own evidence still takes over within a few steps (a cheap, always-right drafter).
  for (int i = 0; i < 6; ++i) next.Observe(4, 4, 4, 0.1);
  EXPECT_GT(next.ExpectedSurvival(0), 0.5);
}

TEST(Scheduler, CostModelLearnsFromMeasuredPasses) {
  CostModel c({{1, 1.0}, {2, 1.2}, {4, 1.6}, {8, 2.4}});
  EXPECT_DOUBLE_EQ(c.VerifyMs(3), 1.4);
  // Real passes run 1.5x slower than the profile (deeper context, a busier machine).
  for (int i = 0; i < 20; ++i) c.Observe(2, 1.8);
  EXPECT_NEAR(c.VerifyMs(2), 1.8, 1e-9);   // its own average once observed often enough
  EXPECT_NEAR(c.VerifyMs(8), 3.6, 0.05);   // unobserved counts: the profile, scaled
  for (int i = 0; i < 2; ++i) c.Observe(8, 2.4);
  EXPECT_GT(c.VerifyMs(8), 2.4);           // two passes are not yet enough to replace it
  c.Observe(0, 5.0);                       // ignored
  c.Observe(3, -1.0);                      // ignored
  EXPECT_NEAR(c.VerifyMs(2), 1.8, 1e-9);
  CostModel empty;
  empty.Observe(2, 3.0);                   // no profile: rows stay unit cost
  EXPECT_DOUBLE_EQ(empty.VerifyMs(5), 5.0);
}

}  // namespace
TEST(PromptStore, WithoutMemoryEvictsTheOldestEntriesThenKeepsNothingAndNeverThrows) {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = c.n_head_kv = 1;
  c.head_dim = c.head_dim_v = 64;
  KvCache slot(c, 1, 64);
  slot.Advance(0, 40);
  PromptStore store(c, DType::kF16, size_t{1} << 30);
  const std::vector<int32_t> a(20, 1), b(20, 2), d(20, 3);
  ASSERT_TRUE(store.Save(a, slot, 0, nullptr).ok());
  ASSERT_TRUE(store.Save(b, slot, 0, nullptr).ok());
  // The first try finds no memory: the least recently used entry (a) goes, the second try fits.
  ArmFault(FaultPoint::kPromptCacheSave, 1);
  ASSERT_TRUE(store.Save(d, slot, 0, nullptr).ok());
  EXPECT_EQ(store.allocation_failures(), 1u);
  EXPECT_EQ(store.entries(), 2u);
  EXPECT_EQ(store.Find(a).rows, 0u);
  EXPECT_EQ(store.Find(b).rows, 20u);
  EXPECT_EQ(store.Find(d).rows, 20u);
  // No memory at all: everything goes, the rows are not kept, and the caller hears why.
  ArmFault(FaultPoint::kPromptCacheSave, 100);
  const Status st = store.Save(a, slot, 0, nullptr);
  DisarmFaults();
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.message();
  EXPECT_NE(st.message().find("no memory"), std::string::npos) << st.message();
  EXPECT_EQ(store.entries(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.allocation_failures(), 4u);
  ASSERT_TRUE(store.Save(a, slot, 0, nullptr).ok());
  EXPECT_EQ(store.Find(a).rows, 20u);
}

}  // namespace dspark
