// The DSpark / DFlash drafter end to end on tiny random-weight models: greedy speculative output
// equals plain decoding token for token (every layout and head combination, many prompts,
// n-max 1..16), sampled output equals plain sampling in distribution (χ²), one drafter pass per
// step, the cost schedule, and every refusal of a crafted draft file.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "dspark/drafter_fixture.h"
#include "dspark/dspark_models.h"
#include "model/quantize.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/dspark_drafter.h"
#include "speculative/drafters/factory.h"
#include "model/testing/tiny_models.h"
#include "speculative/engine.h"
#include "speculative/planner.h"
#include "speculative/testing/sampling_check.h"

namespace dspark {
namespace {

using Loaded = testing::LoadedModel;
Loaded LoadTarget(const std::string& path) { return testing::LoadModelForTest(path); }

std::string Tmp(const std::string& name) { return testing::TempPath("dspark_test_" + name + ".gguf"); }

using testing::ReferenceGreedy;

class DSpark : public testing::TapDrafterTest {
 protected:
  static void SetUpTestSuite() {
    WriteTarget(Tmp("target"));
    auto f = gguf::File::Open(target_path_);
    ASSERT_TRUE(f.ok());
    const gguf::File& t = **f;
    testing::DflashSpec a;  // anchor-first DSpark with a confidence head, target's embedding and head
    ASSERT_TRUE(testing::WriteDflash(a, t, Tmp("anchor_first")).ok());
    testing::DflashSpec b;  // bonus-anchor, reduced vocabulary, own embedding, sinks, causal, scales, 2 layers
    b.sample_from_anchor = false;
    b.n_vocab_draft = 40;
    b.own_embd = true;
    b.attn_sinks = true;
    b.causal = true;
    b.fc_scale = true;
    b.markov_scale = true;
    b.confidence = false;
    b.n_layer = 2;
    b.block_size = 6;
    b.target_layers = {0, 3};
    b.seed = 202;
    ASSERT_TRUE(testing::WriteDflash(b, t, Tmp("bonus_d2t")).ok());
    testing::DflashSpec c;  // DFlash: no Markov head
    c.markov_rank = 0;
    c.confidence = false;
    c.block_size = 16;
    c.own_output = true;
    c.seed = 303;
    ASSERT_TRUE(testing::WriteDflash(c, t, Tmp("dflash")).ok());
    testing::DflashSpec d = a;  // long block, three taps
    d.block_size = 16;
    d.target_layers = {1, 2, 3};
    d.seed = 404;
    ASSERT_TRUE(testing::WriteDflash(d, t, Tmp("long_block")).ok());
  }
  Result<std::unique_ptr<Drafter>> Create(const std::string& name, const std::string& type = "draft-dspark",
                                          float p_min = 0.0f) {
    DrafterConfig cfg;
    cfg.type = type;
    cfg.draft_model = name.find('/') == std::string::npos ? Tmp(name) : name;
    cfg.p_min = p_min;
    return CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
  }

};

TEST_F(DSpark, GreedyEqualsPlainForEveryLayoutPromptAndDraftLength) {
  const int n = 24;
  for (const char* name : {"anchor_first", "bonus_d2t", "dflash", "long_block"}) {
    const std::string type = std::string(name) == "dflash" ? "draft-dflash" : "draft-dspark";
    for (int variant = 0; variant < 4; ++variant) {
      const auto prompt = Prompt(variant);
      const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n);
      ASSERT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 4u) << "target output too repetitive";
      for (int n_max : {1, 2, 3, 4, 5, 7, 8, 12, 16}) {
        auto d = Create(name, type);
        ASSERT_TRUE(d.ok()) << d.status().message();
        ScheduleOptions so;
        so.n_max = n_max;
        const GenerateResult r = Run(d->get(), prompt, n, so);
        ASSERT_EQ(r.ids, want) << name << " n_max " << n_max << " prompt " << variant;
        EXPECT_GT(r.stats.num_draft_tokens, 0) << name;
        EXPECT_EQ(r.stats.num_fallbacks, 0) << name;
        // One drafter pass per drafting step (injection and block together).
        EXPECT_EQ(r.stats.num_draft_calls, r.stats.num_drafts) << name;
        EXPECT_LE(r.stats.num_draft_tokens / std::max<int64_t>(r.stats.num_drafts, 1),
                  std::min(n_max, (*d)->Needs().max_draft));
      }
    }
  }
}

// Several requests share one drafter (one draft context per sequence slot) in continuous
// batching, with the batch-wide cost schedule: each output still equals its plain decoding.
TEST_F(DSpark, QuantisedDraftReadsTheSharedHeadInItsTypeAndStaysLossless) {
  const std::string q8 = Tmp("anchor_first_q8");
  QuantizeReport report;
  ASSERT_TRUE(QuantizeFile(Tmp("anchor_first"), q8, DType::kQ8_0, &report).ok());
  EXPECT_GT(report.converted, 0);
  DflashLoadOptions lo;
  auto f16 = DflashModel::Load(Tmp("anchor_first"), *target_.model, lo);
  auto quant = DflashModel::Load(q8, *target_.model, lo);
  ASSERT_TRUE(f16.ok()) << f16.status().message();
  ASSERT_TRUE(quant.ok()) << quant.status().message();
  // The float drafter borrows the target's head as it is; the Q8_0 one re-encodes it, and keeps
  // its one-row confidence projection as a float vector.
  EXPECT_EQ((*f16)->weights().output.data, target_.model->weights().output.data);
  EXPECT_EQ((*quant)->weights().layers[0].wq.type, DType::kQ8_0);
  EXPECT_EQ((*quant)->weights().output.type, DType::kQ8_0);
  EXPECT_EQ((*quant)->weights().output.rows, target_.model->weights().output.rows);
  ASSERT_EQ((*quant)->weights().conf_w.size(), (*f16)->weights().conf_w.size());
  for (size_t i = 0; i < (*quant)->weights().conf_w.size(); ++i)
    EXPECT_EQ((*quant)->weights().conf_w[i], (*f16)->weights().conf_w[i]) << i;

  for (int variant = 0; variant < 3; ++variant) {
    const auto prompt = Prompt(variant);
    const auto want = ReferenceGreedy(*target_.model, pool_, prompt, 24);
    for (int n_max : {2, 4}) {
      auto d = Create(q8);
      ASSERT_TRUE(d.ok()) << d.status().message();
      ScheduleOptions so;
      so.n_max = n_max;
      const GenerateResult r = Run(d->get(), prompt, 24, so);
      ASSERT_EQ(r.ids, want) << "n_max " << n_max << " prompt " << variant;
      EXPECT_GT(r.stats.num_draft_tokens, 0);
    }
  }
}

TEST_F(DSpark, ConcurrentSequencesEachEqualPlain) {
  for (bool cost : {false, true}) {
    auto d = Create("anchor_first");
    ASSERT_TRUE(d.ok()) << d.status().message();
    BatchEngineOptions bo;
    bo.n_parallel = 3;
    bo.n_ctx = 128;
    bo.prefill_chunk = 5;  // prompts arrive in several chunks, interleaved with decoding
    bo.schedule.n_max = 4;
    bo.schedule.adaptive = cost;
    bo.schedule.mode = cost ? ScheduleMode::kCost : ScheduleMode::kCut;
    BatchEngine engine(*target_.model, *target_.tok, pool_, bo, d->get());
    std::vector<GenerateResult> results(5);
    for (int v = 0; v < 5; ++v) {
      GenerateOptions go;
      go.max_new_tokens = 16 + v;
      go.ignore_eos = true;
      auto id = engine.Submit(Prompt(v), go, nullptr, [&results, v](GenerateResult&& r) { results[v] = std::move(r); });
      ASSERT_TRUE(id.ok()) << id.status().message();
    }
    ASSERT_TRUE(engine.RunUntilIdle().ok());
    for (int v = 0; v < 5; ++v) {
      EXPECT_EQ(results[v].ids, ReferenceGreedy(*target_.model, pool_, Prompt(v), 16 + v)) << "request " << v;
      EXPECT_EQ(results[v].stats.num_fallbacks, 0) << results[v].error;
      if (!cost) {
        EXPECT_GT(results[v].stats.num_draft_tokens, 0) << "request " << v;
      }
    }
  }
}

// The prompt cache with a drafter that learns from the target's taps: a follow-up turn reuses the
// slot's rows (the drafter keeps its context for them), another slot's rows are copied (and the
// drafter's context with them), and every output equals plain decoding of the full prompt.
TEST_F(DSpark, PromptCacheReusesTargetAndDrafterRowsAndStaysLossless) {
  auto d = Create("anchor_first");
  ASSERT_TRUE(d.ok()) << d.status().message();
  BatchEngineOptions bo;
  bo.n_parallel = 2;
  bo.n_ctx = 128;
  bo.prefill_chunk = 4;
  bo.schedule.n_max = 4;
  BatchEngine engine(*target_.model, *target_.tok, pool_, bo, d->get());
  auto run = [&](const std::vector<int32_t>& prompt, int n) {
    GenerateResult out;
    GenerateOptions go;
    go.max_new_tokens = n;
    go.ignore_eos = true;
    EXPECT_TRUE(engine.Submit(prompt, go, nullptr, [&out](GenerateResult&& r) { out = std::move(r); }).ok());
    EXPECT_TRUE(engine.RunUntilIdle().ok());
    return out;
  };
  std::vector<int32_t> chat = Prompt(3);
  for (int v = 0; v < 20; ++v) chat.push_back(3 + (v * 7) % 50);
  const GenerateResult first = run(chat, 12);
  EXPECT_EQ(first.ids, ReferenceGreedy(*target_.model, pool_, chat, 12));
  EXPECT_EQ(first.stats.prompt_cached_tokens, 0);
  for (int turn = 0; turn < 3; ++turn) {
    // The next turn: the history, the model's answer, a few new tokens.
    std::vector<int32_t> next = chat;
    const auto answer = ReferenceGreedy(*target_.model, pool_, chat, 12);
    next.insert(next.end(), answer.begin(), answer.end());
    next.insert(next.end(), {5, 9, static_cast<int32_t>(11 + turn)});
    const GenerateResult r = run(next, 12);
    EXPECT_EQ(r.ids, ReferenceGreedy(*target_.model, pool_, next, 12)) << "turn " << turn;
    EXPECT_GE(r.stats.prompt_cached_tokens, static_cast<int64_t>(chat.size())) << "turn " << turn;
    EXPECT_EQ(r.stats.num_fallbacks, 0) << r.error;
    EXPECT_GT(r.stats.num_draft_tokens, 0);
    chat = next;
  }
  // Two requests at once with the same long prefix: the second copies what the first has cached.
  std::vector<int32_t> shared = Prompt(1);
  for (int v = 0; v < 40; ++v) shared.push_back(3 + (v * 13) % 50);
  std::vector<GenerateResult> both(2);
  GenerateOptions go;
  go.max_new_tokens = 10;
  go.ignore_eos = true;
  ASSERT_TRUE(engine.Submit(shared, go, nullptr, [&](GenerateResult&& r) { both[0] = std::move(r); }).ok());
  for (int i = 0; i < 12 && engine.Step().ok(); ++i) {
  }
  std::vector<int32_t> other = shared;
  other.push_back(21);
  ASSERT_TRUE(engine.Submit(other, go, nullptr, [&](GenerateResult&& r) { both[1] = std::move(r); }).ok());
  ASSERT_TRUE(engine.RunUntilIdle().ok());
  EXPECT_EQ(both[0].ids, ReferenceGreedy(*target_.model, pool_, shared, 10));
  EXPECT_EQ(both[1].ids, ReferenceGreedy(*target_.model, pool_, other, 10));
  EXPECT_GE(both[1].stats.prompt_cached_tokens, 32);
  EXPECT_EQ(both[1].stats.num_fallbacks, 0) << both[1].error;
}

// The host prompt cache keeps the drafter's context rows with the target's: a prefix that left its
// slot comes back with both, and the drafter drafts from the restored rows.
TEST_F(DSpark, PromptCacheHostStoreKeepsTheDraftersRowsToo) {
  auto d = Create("anchor_first");
  ASSERT_TRUE(d.ok()) << d.status().message();
  BatchEngineOptions bo;
  bo.n_parallel = 1;
  bo.n_ctx = 128;
  bo.schedule.n_max = 4;
  bo.cache_ram_bytes = 32 << 20;
  BatchEngine engine(*target_.model, *target_.tok, pool_, bo, d->get());
  auto run = [&](const std::vector<int32_t>& prompt) {
    GenerateResult out;
    GenerateOptions go;
    go.max_new_tokens = 10;
    go.ignore_eos = true;
    EXPECT_TRUE(engine.Submit(prompt, go, nullptr, [&out](GenerateResult&& r) { out = std::move(r); }).ok());
    EXPECT_TRUE(engine.RunUntilIdle().ok());
    return out;
  };
  std::vector<int32_t> a = Prompt(2), b = Prompt(1);
  for (int v = 0; v < 40; ++v) {
    a.push_back(3 + (v * 11) % 50);
    b.push_back(4 + (v * 17) % 50);
  }
  run(a);
  run(b);  // a's rows move to the host store
  std::vector<int32_t> a2 = a;
  a2.push_back(9);
  const GenerateResult r = run(a2);
  EXPECT_EQ(r.ids, ReferenceGreedy(*target_.model, pool_, a2, 10));
  EXPECT_GE(r.stats.prompt_cached_tokens, static_cast<int64_t>(a.size()) - 4) << "the drafter's rows came back too";
  EXPECT_EQ(r.stats.num_fallbacks, 0) << r.error;
  EXPECT_GT(r.stats.num_draft_tokens, 0);
}

TEST_F(DSpark, CostScheduleAndConfidenceCutStayLossless) {
  const auto prompt = Prompt(2);
  const auto want = ReferenceGreedy(*target_.model, pool_, prompt, 30);
  auto d = Create("long_block", "draft-dspark", 0.5f);  // p_min > 0 at load: the confidence head is required
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE((*d)->Needs().confidence_head);
  const std::pair<ScheduleMode, float> runs[] = {
      {ScheduleMode::kCut, 0.0f}, {ScheduleMode::kCut, 0.3f}, {ScheduleMode::kCut, 0.6f}, {ScheduleMode::kCost, 0.0f},
      {ScheduleMode::kCost, 0.3f}};
  for (const auto& [mode, p_min] : runs) {
    {
      ScheduleOptions so;
      so.n_max = 16;
      so.mode = mode;
      so.adaptive = mode == ScheduleMode::kCost;
      so.p_min = p_min;
      SpeculativeEngine engine(*target_.model, *target_.tok, pool_, 256, d->get(), so);
      GenerateOptions go;
      go.max_new_tokens = 30;
      go.ignore_eos = true;
      auto r = engine.GenerateFromIds(prompt, go);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->ids, want) << "p_min " << p_min;
      // Survival estimates reach the statistics (calibration) for every verified slot.
      if (r->stats.num_drafts == 0) continue;
      const auto calibration = r->stats.calibration();
      ASSERT_FALSE(calibration.empty());
      for (size_t i = 0; i < calibration.size(); ++i) {
        EXPECT_EQ(calibration[i].drafts, r->stats.drafted_per_pos[i]) << "every verified slot carries a prediction";
        EXPECT_GT(calibration[i].predicted, 0.0);
        EXPECT_LE(calibration[i].predicted, 1.0);
      }
    }
  }
}

TEST_F(DSpark, ConfidenceCutStopsBeforeFirstLowConfidenceSlot) {
  auto d = Create("long_block");
  ASSERT_TRUE(d.ok());
  auto* ds = static_cast<DSparkDrafter*>(d->get());
  const auto prompt = Prompt(1);
  // Feed the prompt's target features as the engine would, then draft with and without a cut.
  Rng rng(1);
  DraftParams dp;
  dp.budget = 16;
  FeedPrompt(ds, 0, prompt);
  auto full = ds->Propose(0, prompt, dp, rng);
  ASSERT_TRUE(full.ok()) << full.status().message();
  ASSERT_EQ(full->tokens.size(), 16u);
  const std::vector<float> conf = ds->last_chain(0)->confidence;
  ASSERT_EQ(conf.size(), 16u);
  // Survival is the running product of the confidences.
  double a = 1;
  for (size_t i = 0; i < conf.size(); ++i) EXPECT_NEAR(full->survival[i], a *= conf[i], 1e-6);
  // A threshold between the confidences cuts before the first slot below it.
  std::vector<float> sorted = conf;
  std::sort(sorted.begin(), sorted.end());
  const float p_min = 0.5f * (sorted[7] + sorted[8]);
  size_t want = 0;
  while (want < conf.size() && conf[want] >= p_min) ++want;
  FeedPrompt(ds, 0, prompt);
  SurvivalStop stop;
  stop.p_min = p_min;
  dp.stop = &stop;
  auto cut = ds->Propose(0, prompt, dp, rng);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->tokens.size(), want);
  EXPECT_TRUE(std::equal(cut->tokens.begin(), cut->tokens.end(), full->tokens.begin()));
}

// A server step drafts for every sequence in one backbone pass and one chain (ProposeBatch): each
// sequence's draft must be exactly what it would get alone, tokens, survival, probabilities and
// sampled distributions alike, whatever the other sequences' context lengths.
TEST_F(DSpark, BatchedProposalsEqualProposalsOneAtATime) {
  for (const char* name : {"anchor_first", "bonus_d2t", "dflash", "long_block"}) {
    const std::string type = std::string(name) == "dflash" ? "draft-dflash" : "draft-dspark";
    ExpectBatchedProposalsEqualSingle(
        [&] { return Create(name, type); }, name, [](int seq) { return 3 + 4 * seq; },  // different lengths in one batch
        [](const Draft& got, const Draft&, int) { EXPECT_EQ(got.forward_passes, 1); });
  }
}

// Forwards to a drafter and records every proposal's context, budget and draft.
class RecordingDrafter final : public Drafter {
 public:
  struct Proposal {
    std::vector<int32_t> context, tokens;
    int budget = 0;
  };
  explicit RecordingDrafter(Drafter* inner) : inner_(inner) {}
  std::string_view Name() const override { return inner_->Name(); }
  DrafterNeeds Needs() const override { return inner_->Needs(); }
  Status Begin(int seq) override { return inner_->Begin(seq); }
  Status ObserveTaps(int seq, const TapRows& rows) override { return inner_->ObserveTaps(seq, rows); }
  Status Prefill(int seq, std::span<const int32_t> context) override { return inner_->Prefill(seq, context); }
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override {
    Result<Draft> d = inner_->Propose(seq, context, params, rng);
    if (d.ok()) proposals.push_back({{context.begin(), context.end()}, d->tokens, params.budget});
    return d;
  }
  void End(int seq) override { inner_->End(seq); }
  std::vector<Proposal> proposals;

 private:
  Drafter* inner_;
};

// Token trees: where a leaf is accepted, the drafter is handed the target features of the
// committed path (the chain's rows, then the leaf's and its accepted tail's), so every later
// proposal is the one a fresh drafter fed the same committed tokens makes; and the output is
// plain decoding's, with leaves alone and with tails chained from the block's later slots.
TEST_F(DSpark, TokenTreesStayLosslessAndFeedTheDrafterTheCommittedPath) {
  const int n = 24;
  int64_t leaves_accepted = 0, tails_verified = 0;
  for (const char* name : {"anchor_first", "bonus_d2t", "long_block"}) {
    for (int variant = 0; variant < 4; ++variant) {
      const auto prompt = Prompt(variant);
      const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n);
      for (const auto& [branches, tail] : {std::pair{1, 0}, std::pair{3, 0}, std::pair{2, 4}}) {
        auto d = Create(name);
        ASSERT_TRUE(d.ok()) << d.status().message();
        RecordingDrafter recording(d->get());
        ScheduleOptions so;
        so.n_max = 8;
        so.branches = branches;
        so.branch_tail = tail;
        const GenerateResult r = Run(&recording, prompt, n, so);
        ASSERT_EQ(r.ids, want) << name << " branches " << branches << " tail " << tail << " prompt " << variant;
        leaves_accepted += r.stats.num_leaf_accepted;
        tails_verified += r.stats.num_tail_tokens;
        if (tail == 0) EXPECT_EQ(r.stats.num_tail_tokens, 0);
        ASSERT_FALSE(recording.proposals.empty());
        for (const RecordingDrafter::Proposal& p : recording.proposals) {
          auto fresh = Create(name);
          ASSERT_TRUE(fresh.ok());
          FeedPrompt(fresh->get(), 0, p.context);
          DraftParams dp;
          dp.budget = p.budget;
          Rng rng(1);
          auto again = (*fresh)->Propose(0, p.context, dp, rng);
          ASSERT_TRUE(again.ok()) << again.status().message();
          EXPECT_EQ(again->tokens, p.tokens) << name << " after " << p.context.size() << " tokens, prompt " << variant;
        }
      }
    }
  }
  EXPECT_GT(leaves_accepted, 5);
  EXPECT_GT(tails_verified, 0);  // the block's later slots chained after the alternatives
}

TEST(DSparkSchedule, CostModeVerifiesThePrefixMaximisingTokensPerMs) {
  ScheduleOptions so;
  so.n_max = 8;
  so.mode = ScheduleMode::kCost;
  so.adaptive = true;
  // Each verified row costs 1 ms on top of 10 ms: a slot pays iff its survival > 1/11 of the rate.
  std::vector<double> ms;
  for (int r = 1; r <= 9; ++r) ms.push_back(10.0 + r);
  DraftScheduler s(so, CostModel(ms));
  // Before any observation (prior acceptance 0.7, free drafting) 4 tokens pay best; cost mode
  // drafts one more for Cut to choose from.
  EXPECT_EQ(s.Budget(100), 5);
  Draft d;  // (Cut takes whatever draft it is given)
  d.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  d.survival = {0.9f, 0.8f, 0.7f, 0.2f, 0.05f, 0.01f, 0.005f, 0.001f};
  int best = 0;
  double best_rate = 0;
  for (int k = 0; k <= 8; ++k) {
    double e = 1;
    for (int i = 0; i < k; ++i) e += d.survival[i];
    const double rate = e / ms[k];
    if (rate > best_rate) best_rate = rate, best = k;
  }
  EXPECT_EQ(s.Cut(d), best);
  EXPECT_GT(best, 0);
  EXPECT_LT(best, 8);
  so.mode = ScheduleMode::kCut;
  so.adaptive = false;
  EXPECT_EQ(DraftScheduler(so, CostModel(ms)).Cut(d), 8);
}

TEST(DSparkSampling, SampledChainMatchesPlainSamplingInDistribution) {
  testing::TinyTargetSpec ts;
  ts.n_vocab = 16;
  ts.embd_gain = 0.6f;  // flat distributions: many outcomes, many rejections
  const std::string tpath = Tmp("chi_target");
  ASSERT_TRUE(testing::WriteTinyTarget(ts, tpath).ok());
  Loaded target = LoadTarget(tpath);
  testing::DflashSpec dspark_spec;
  dspark_spec.mask_token_id = 15;
  dspark_spec.markov_rank = 4;
  testing::DflashSpec dflash_spec = dspark_spec;  // DFlash: no Markov head, no confidence head
  dflash_spec.markov_rank = 0;
  dflash_spec.confidence = false;
  ThreadPool pool(1);
  for (const auto& [type, spec] : {std::pair{"draft-dspark", dspark_spec}, std::pair{"draft-dflash", dflash_spec}}) {
    SCOPED_TRACE(type);
    const std::string dpath = Tmp(std::string("chi_") + type);
    ASSERT_TRUE(testing::WriteDflash(spec, *target.file, dpath).ok());
    DrafterConfig cfg;
    cfg.type = type;
    cfg.draft_model = dpath;
    auto drafter = CreateDrafter(cfg, *target.model, *target.tok, pool, 64);
    ASSERT_TRUE(drafter.ok()) << drafter.status().message();
    testing::ExpectDrafterSamplingMatchesTarget(*target.model, *target.tok, pool, drafter->get());
  }
}

// Every refusal: a crafted file and the words the error must contain.
TEST_F(DSpark, RefusesMismatchedOrMalformedDrafts) {
  auto f = gguf::File::Open(target_path_);
  ASSERT_TRUE(f.ok());
  struct Case {
    std::string name;
    testing::DflashSpec spec;
    std::string type;
    float p_min;
    std::string expect;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, auto mutate, std::string type, float p_min, std::string expect) {
    testing::DflashSpec s;
    mutate(s);
    cases.push_back({std::move(name), s, std::move(type), p_min, std::move(expect)});
  };
  add("width", [](auto& s) { s.n_embd_override = 48; }, "draft-dspark", 0, "hidden size");
  add("layer_high", [](auto& s) { s.target_layers = {1, 4}; }, "draft-dspark", 0, "outside the target's layers");
  add("layer_neg", [](auto& s) { s.target_layers = {-1, 2}; }, "draft-dspark", 0, "outside the target's layers");
  add("no_layers", [](auto& s) { s.write_target_layers = false; }, "draft-dspark", 0, "dflash.target_layers");
  add("no_mask", [](auto& s) { s.mask_token_id = -1; }, "draft-dspark", 0, "mask token");
  add("mask_range", [](auto& s) { s.mask_token_id = 64; }, "draft-dspark", 0, "mask_token_id 64");
  add("tok_renamed", [](auto& s) { s.rename_token = 33; }, "draft-dspark", 0, "at id 33");
  add("no_tokenizer", [](auto& s) { s.write_tokenizer = false; }, "draft-dspark", 0, "has no tokenizer");
  add("dflash_as_dspark", [](auto& s) { s.markov_rank = 0; s.confidence = false; }, "draft-dspark", 0,
      "use --spec-type draft-dflash");
  add("dspark_as_dflash", [](auto&) {}, "draft-dflash", 0, "use --spec-type draft-dspark");
  add("no_conf_pmin", [](auto& s) { s.confidence = false; }, "draft-dspark", 0.5f, "no confidence head");
  add("conf_key_no_tensor", [](auto& s) { s.confidence = false; s.write_has_conf_key = false; }, "draft-dspark", 0,
      "");  // no key, no tensor: fine
  add("qwen3_as_dspark", [](auto& s) { s.arch = "qwen3"; }, "draft-dspark", 0, "general.architecture is 'qwen3'");
  for (const Case& c : cases) {
    const std::string path = Tmp("bad_" + c.name);
    ASSERT_TRUE(testing::WriteDflash(c.spec, **f, path).ok()) << c.name;
    auto d = Create(path, c.type, c.p_min);
    if (c.expect.empty()) {
      EXPECT_TRUE(d.ok()) << c.name << ": " << d.status().message();
      continue;
    }
    ASSERT_FALSE(d.ok()) << c.name;
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos) << c.name << ": " << d.status().message();
    EXPECT_NE(d.status().message().find(path), std::string::npos) << c.name << ": error must name the file";
  }
  // The target itself (a qwen3 file) given as a DSpark draft.
  auto q = Create(target_path_, "draft-dspark");
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("needs a dflash draft"), std::string::npos) << q.status().message();
  // has_confidence_head = true without conf_proj.
  testing::DflashSpec s;
  s.confidence = false;
  const std::string p = Tmp("bad_conf_key");
  ASSERT_TRUE(testing::WriteDflash(s, **f, p).ok());
  // WriteDflash writes has_confidence_head = spec.confidence (false): rewrite the key to true.
  auto pf = gguf::File::Open(p);
  ASSERT_TRUE(pf.ok());
  gguf::Writer w;
  w.CopyMetadataFrom(**pf);
  w.SetBool("dflash.has_confidence_head", true);
  for (const auto& t : (*pf)->tensors())
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  const std::string p2 = Tmp("bad_conf_key2");
  ASSERT_TRUE(w.WriteFile(p2).ok());
  auto ck = Create(p2);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("conf_proj.weight"), std::string::npos) << ck.status().message();
  // A missing -md.
  DrafterConfig cfg;
  cfg.type = "draft-dspark";
  EXPECT_FALSE(CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256).ok());
}

}  // namespace
}  // namespace dspark
