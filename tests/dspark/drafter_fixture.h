// A fixture for drafters that read the target's hidden states (DSpark / DFlash, EAGLE-3, MTP): a
// tiny target, the target's taps for a prompt handed to a drafter as the engine would, a speculative
// run, and the prompts every such test uses.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dspark/dspark_models.h"
#include "model/testing/tiny_models.h"
#include "speculative/batch_engine.h"
#include "speculative/engine.h"

namespace dspark::testing {

class TapDrafterTest : public ::testing::Test {
 protected:
  // Writes the tiny target to `path` (SetUpTestSuite of the derived suite).
  static void WriteTarget(const std::string& path) {
    target_path_ = path;
    ASSERT_TRUE(WriteTinyTarget({}, target_path_).ok());
  }
  void SetUp() override { target_ = LoadModelForTest(target_path_); }

  // The target's taps of `layers` for the committed rows of `prompt` (all but its last token).
  std::vector<std::vector<float>> Taps(const std::vector<int>& layers, const std::vector<int32_t>& prompt) {
    KvCache cache(target_.model->config(), 1, 256);
    Batch b;
    for (size_t i = 0; i + 1 < prompt.size(); ++i) b.Add(prompt[i], static_cast<int>(i), 0, false);
    ForwardOptions fo;
    fo.tap_layers = layers;
    auto out = target_.model->Forward(b, cache, pool_, fo);
    EXPECT_TRUE(out.ok());
    return out.ok() ? out->taps : std::vector<std::vector<float>>{};
  }

  // Starts `seq` on the drafter and hands it the target features of the prompt's committed rows,
  // as the engine does.
  void FeedPrompt(Drafter* d, int seq, const std::vector<int32_t>& prompt) {
    const auto taps = Taps(d->Needs().target_tap_layers, prompt);
    TapRows rows;
    rows.n_rows = static_cast<int>(prompt.size()) - 1;
    rows.n_embd = target_.model->config().n_embd;
    for (auto& t : taps) rows.taps.push_back(t.data());
    ASSERT_TRUE(d->Begin(seq).ok());
    ASSERT_TRUE(d->ObserveTaps(seq, rows).ok());
  }

  GenerateResult Run(Drafter* drafter, const std::vector<int32_t>& prompt, int n, ScheduleOptions so,
                     SamplingParams sampling = {}) {
    SpeculativeEngine engine(*target_.model, *target_.tok, pool_, 256, drafter, so);
    GenerateOptions go;
    go.max_new_tokens = n;
    go.sampling = sampling;
    go.ignore_eos = true;
    auto r = engine.GenerateFromIds(prompt, go);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : GenerateResult{};
  }

  // ProposeBatch over four sequences of different lengths and budgets (budget(seq)) equals Propose
  // one at a time (greedy and sampled: tokens, survival, probabilities and q; `also` checks more
  // of each pair), and a sequence whose context disagrees with what the drafter saw fails alone.
  // `create` makes a fresh drafter.
  using DraftCheck = std::function<void(const Draft& got, const Draft& alone, int budget)>;
  void ExpectBatchedProposalsEqualSingle(const std::function<Result<std::unique_ptr<Drafter>>()>& create,
                                         const std::string& what, const std::function<int(int)>& budget,
                                         const DraftCheck& also) {
    for (const bool sample : {false, true}) {
      auto alone = create();
      auto batched = create();
      ASSERT_TRUE(alone.ok() && batched.ok());
      std::vector<ProposeRequest> requests;
      std::vector<std::vector<int32_t>> prompts;
      std::vector<Rng> rngs;
      for (int v = 0; v < 4; ++v) prompts.push_back(Prompt(v));
      rngs.reserve(4);
      for (int seq = 0; seq < 4; ++seq) {
        FeedPrompt(alone->get(), seq, prompts[seq]);
        FeedPrompt(batched->get(), seq, prompts[seq]);
        ProposeRequest r;
        r.seq = seq;
        r.context = prompts[seq];
        r.params.budget = budget(seq);
        if (sample) r.params.sampling.temperature = 0.9f;
        rngs.emplace_back(100 + seq);
        requests.push_back(r);
      }
      for (size_t i = 0; i < requests.size(); ++i) requests[i].rng = &rngs[i];
      std::vector<Result<Draft>> got = (*batched)->ProposeBatch(requests);
      ASSERT_EQ(got.size(), requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        Rng rng(100 + static_cast<uint64_t>(i));
        auto want = (*alone)->Propose(requests[i].seq, requests[i].context, requests[i].params, rng);
        ASSERT_TRUE(want.ok() && got[i].ok()) << what;
        EXPECT_FALSE(want->tokens.empty()) << what;
        EXPECT_EQ(got[i]->tokens, want->tokens) << what << " seq " << i << " sample " << sample;
        EXPECT_EQ(got[i]->survival, want->survival) << what << " seq " << i;
        EXPECT_EQ(got[i]->probs, want->probs) << what << " seq " << i;
        EXPECT_EQ(got[i]->q, want->q) << what << " seq " << i;
        also(*got[i], *want, requests[i].params.budget);
      }
      std::vector<int32_t> wrong = prompts[0];
      wrong.push_back(5);
      requests[0].context = wrong;
      for (int seq = 0; seq < 4; ++seq) {
        FeedPrompt(batched->get(), seq, prompts[seq]);
        rngs[seq] = Rng(100 + seq);
      }
      got = (*batched)->ProposeBatch(requests);
      EXPECT_FALSE(got[0].ok()) << what;
      for (size_t i = 1; i < requests.size(); ++i) EXPECT_TRUE(got[i].ok()) << what << " seq " << i;
    }
  }

  // A head drafter fed `prompt` drafts `want` greedily (6 tokens: the committed rows' pass with
  // the first token, then one pass per token), and again the same from the same context (the
  // draft rows were rolled back; the committed rows are not run twice).
  void ExpectHeadChain(Drafter* d, const std::vector<int32_t>& prompt, const std::vector<int32_t>& want,
                       const std::string& what) {
    FeedPrompt(d, 0, prompt);
    Rng rng(1);
    DraftParams p;
    p.budget = 6;
    auto draft = d->Propose(0, prompt, p, rng);
    ASSERT_TRUE(draft.ok()) << draft.status().message();
    EXPECT_EQ(draft->tokens, want) << what;
    EXPECT_EQ(draft->forward_passes, 6) << what;
    auto again = d->Propose(0, prompt, p, rng);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->tokens, draft->tokens) << what;
    EXPECT_EQ(again->forward_passes, 5) << what;
  }

  // Budgets for drafters that always draft them in full (EAGLE-3, MTP: one head pass per token).
  static int FullBudgets(int seq) { return 2 + 3 * seq; }
  static void ExpectFullBudget(const Draft& got, const Draft&, int budget) {
    EXPECT_EQ(got.tokens.size(), static_cast<size_t>(budget));
  }

  // Five requests on three slots of a BatchEngine (prompts arriving in chunks, interleaved with
  // other sequences' drafting) equal plain greedy decoding, and follow-up chat turns reuse the
  // prompt cache's rows of the target and of the drafter, still lossless.
  void ExpectConcurrentSequencesAndPromptCacheLossless(Drafter* drafter) {
    BatchEngineOptions bo;
    bo.n_parallel = 3;
    bo.n_ctx = 128;
    bo.prefill_chunk = 5;
    bo.schedule.n_max = 4;
    bo.cache_ram_bytes = 16 << 20;
    BatchEngine engine(*target_.model, *target_.tok, pool_, bo, drafter);
    auto submit = [&](const std::vector<int32_t>& prompt, int n, GenerateResult* out) {
      GenerateOptions go;
      go.max_new_tokens = n;
      go.ignore_eos = true;
      ASSERT_TRUE(engine.Submit(prompt, go, nullptr, [out](GenerateResult&& r) { *out = std::move(r); }).ok());
    };
    std::vector<GenerateResult> results(5);
    for (int v = 0; v < 5; ++v) submit(Prompt(v), 16 + v, &results[v]);
    ASSERT_TRUE(engine.RunUntilIdle().ok());
    for (int v = 0; v < 5; ++v) {
      EXPECT_EQ(results[v].ids, ReferenceGreedy(*target_.model, pool_, Prompt(v), 16 + v)) << "request " << v;
      EXPECT_EQ(results[v].stats.num_fallbacks, 0) << results[v].error;
      EXPECT_GT(results[v].stats.num_draft_tokens, 0);
    }
    std::vector<int32_t> chat = Prompt(3);
    for (int v = 0; v < 20; ++v) chat.push_back(3 + (v * 7) % 50);
    for (int turn = 0; turn < 3; ++turn) {
      GenerateResult r;
      submit(chat, 12, &r);
      ASSERT_TRUE(engine.RunUntilIdle().ok());
      const auto want = ReferenceGreedy(*target_.model, pool_, chat, 12);
      EXPECT_EQ(r.ids, want) << "turn " << turn;
      if (turn > 0) {
        EXPECT_GT(r.stats.prompt_cached_tokens, 0) << "turn " << turn;
      }
      EXPECT_EQ(r.stats.num_fallbacks, 0) << r.error;
      chat.insert(chat.end(), want.begin(), want.end());
      chat.insert(chat.end(), {5, 9, static_cast<int32_t>(11 + turn)});
    }
  }

  static std::vector<int32_t> Prompt(int variant) {
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 3 + variant * 4; ++i) p.push_back(3 + (i * (11 + variant * 6) + variant) % 57);
    return p;
  }

  static inline std::string target_path_;
  LoadedModel target_;
  ThreadPool pool_{1};
};

}  // namespace dspark::testing
