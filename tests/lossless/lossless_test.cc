// Speculative decoding is lossless: greedy output equals plain decoding token for token for every
// drafter, draft length, prompt, a nearly full context, and EOS / stop strings inside a draft.
// (Sampled output equal to plain sampling in distribution: sampling_test.cc.) Runs on tiny
// random-weight models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "kernels/ops.h"
#include "kernels/test_hooks.h"
#include "model/synth.h"
#include "model/testing/tiny_models.h"
#include "speculative/drafters/draft_model.h"
#include "speculative/drafters/factory.h"
#include "speculative/drafters/lookup_first.h"
#include "speculative/drafters/ngram.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/synthetic.h"
#include "speculative/engine.h"
#include "speculative/planner.h"

#include "lossless_fixture.h"

namespace dspark {
namespace {

using lossless::Load;
using lossless::Loaded;
using lossless::Lossless;
using testing::ReferenceGreedy;

TEST_F(Lossless, GreedyEqualsPlainForEveryDrafterAndDraftLength) {
  const int n = 40;
  for (int variant = 0; variant < 3; ++variant) {
    const auto prompt = Prompt(variant);
    const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n, 256);
    // The test is only meaningful if the model does not just repeat one token.
    ASSERT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 5u);
    ASSERT_EQ(Run(nullptr, prompt, n, 1).ids, want) << "plain engine, prompt " << variant;
    std::vector<int32_t> reference = prompt;
    reference.insert(reference.end(), want.begin(), want.end());
    for (int n_max : {1, 2, 3, 5, 8, 16}) {
      std::map<std::string, std::unique_ptr<Drafter>> drafters;
      drafters["draft-same"] = DraftModel(target_path_, 256);
      drafters["draft-other"] = DraftModel(other_path_, 256);
      drafters["draft-q8"] = DraftModel(q8_path_, 256);
      drafters["ngram"] = std::make_unique<NgramDrafter>(NgramOptions{1, 3});
      drafters["ngram+draft"] = std::make_unique<LookupFirstDrafter>(NgramOptions{2, 3}, DraftModel(other_path_, 256));
      drafters["synthetic"] = std::make_unique<SyntheticDrafter>(reference, target_.model->config().n_vocab, 0.6);
      for (auto& [name, d] : drafters) {
        const GenerateResult r = Run(d.get(), prompt, n, n_max);
        ASSERT_EQ(r.ids, want) << name << " n_max " << n_max << " prompt " << variant;
        if (name == "draft-same") {
          EXPECT_EQ(r.stats.num_accepted_tokens, r.stats.num_draft_tokens) << n_max;
        }
        if (name.rfind("draft-", 0) == 0 && r.stats.num_drafts > 0) {
          // The scheduler's survival estimate from the draft probabilities is in the statistics.
          ASSERT_FALSE(r.stats.predicted_survival_sum.empty()) << name;
          EXPECT_GT(r.stats.predicted_survival_sum[0], 0) << name;
        }
        EXPECT_LE(r.stats.num_target_calls, 1 + n) << name << " n_max " << n_max;  // never more passes than plain
      }
    }
  }
}

// Mixture-of-experts targets (qwen3moe, llama with experts as Mixtral stores them, and deepseek2
// with its latent attention and shared experts): a verification block's rows choose their experts
// together in one pass, and the output is still plain decoding's, for every drafter.
TEST_F(Lossless, GreedyEqualsPlainOnMixtureOfExpertsTargets) {
  const int n = 32;
  for (const char* arch : {"qwen3moe", "llama", "deepseek2"}) {
    SynthSpec spec = testing::TinySpec(std::string(arch) == "deepseek2" ? "deepseek2" : "qwen3moe", DType::kQ8_0);
    spec.arch = arch;
    spec.seed = 31;
    spec.tied_embeddings = false;
    spec.embedding_gain = 2.0f;
    target_ = Load(testing::WriteTiny(spec, std::string("lossless_moe_") + arch));
    ASSERT_TRUE(target_.model->config().moe.enabled()) << arch;
    for (int variant = 0; variant < 3; ++variant) {
      const auto prompt = Prompt(variant);
      const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n, 256);
      ASSERT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 5u) << arch;
      std::vector<int32_t> reference = prompt;
      reference.insert(reference.end(), want.begin(), want.end());
      for (int n_max : {1, 3, 8}) {
        std::map<std::string, std::unique_ptr<Drafter>> drafters;
        drafters["draft-dense"] = DraftModel(other_path_, 256);
        drafters["ngram"] = std::make_unique<NgramDrafter>(NgramOptions{1, 3});
        drafters["ngram+draft"] = std::make_unique<LookupFirstDrafter>(NgramOptions{2, 3}, DraftModel(other_path_, 256));
        drafters["synthetic"] = std::make_unique<SyntheticDrafter>(reference, target_.model->config().n_vocab, 0.6);
        for (auto& [name, d] : drafters) {
          const GenerateResult r = Run(d.get(), prompt, n, n_max);
          ASSERT_EQ(r.ids, want) << arch << " " << name << " n_max " << n_max << " prompt " << variant;
          EXPECT_LE(r.stats.num_target_calls, 1 + n) << name;
        }
      }
    }
  }
}

TEST_F(Lossless, DraftModelIngestsThePromptBeforeItsFirstProposal) {
  // After Prefill the draft cache holds the prompt: the first proposal's first pass runs only the
  // last token (cold, that pass carries the whole prompt too), and the proposal is the same.
  const auto prompt = Prompt(1);
  std::vector<int32_t> context = prompt;
  context.push_back(7);  // the first sampled token, not yet processed by the target
  DraftParams dp;
  dp.budget = 4;
  Rng rng(1);
  auto warm = DraftModel(other_path_, 256);
  ASSERT_TRUE(warm->Begin(0).ok());
  ASSERT_TRUE(warm->Prefill(0, context).ok());
  auto a = warm->Propose(0, context, dp, rng);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->forward_passes, 4);
  auto cold = DraftModel(other_path_, 256);
  ASSERT_TRUE(cold->Begin(0).ok());
  auto b = cold->Propose(0, context, dp, rng);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->forward_passes, 4);
  EXPECT_EQ(a->tokens, b->tokens);
  // Proposing again on the same context reuses the cache and recomputes only the last token.
  auto c = warm->Propose(0, context, dp, rng);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tokens, a->tokens);
}

TEST_F(Lossless, DraftModelStopsWhereItsDraftsPredictedSurvivalFallsBelowTheBar) {
  // With a calibration that has no evidence yet a draft's predicted survival is the product of its
  // tokens' prior acceptances: the draft ends at the first token after which one more token's
  // expected survival (times the prior mean acceptance) is below the bar.
  const auto prompt = Prompt(2);
  ASSERT_GE(prompt.size(), 12u);
  auto d = DraftModel(other_path_, 256);
  ASSERT_TRUE(d->Needs().asks_before_each_token);
  const ProbCalibration prior;
  int stopped_early = 0;
  for (float bar : {0.9f, 0.5f, 0.2f, 0.05f}) {
    for (int cut = 4; cut <= 12; ++cut) {
      const std::vector<int32_t> context(prompt.begin(), prompt.begin() + cut);
      SurvivalStop stop;
      stop.min_survival = bar;
      stop.calibration = &prior;
      DraftParams dp;
      dp.budget = 8;
      dp.stop = &stop;
      Rng rng(1);
      ASSERT_TRUE(d->Begin(0).ok());
      auto draft = d->Propose(0, context, dp, rng);
      ASSERT_TRUE(draft.ok()) << draft.status().message();
      ASSERT_FALSE(draft->tokens.empty());
      double expected_next = 1.0;
      for (size_t i = 0; i < draft->probs.size(); ++i) {
        expected_next *= prior.Acceptance(draft->probs[i]);
        if (i + 1 < draft->probs.size()) {
          EXPECT_GE(expected_next * prior.MeanAcceptance(), bar) << "token " << i << " bar " << bar;
        }
      }
      expected_next *= prior.MeanAcceptance();
      if (draft->tokens.size() < 8) {
        EXPECT_LT(expected_next, bar) << "bar " << bar;
        ++stopped_early;
      }
      // Without the bar the same context drafts the full budget, starting with the same tokens.
      DraftParams full = dp;
      full.stop = nullptr;
      auto whole = d->Propose(0, context, full, rng);
      ASSERT_TRUE(whole.ok());
      ASSERT_EQ(whole->tokens.size(), 8u);
      EXPECT_TRUE(std::equal(draft->tokens.begin(), draft->tokens.end(), whole->tokens.begin()));
    }
  }
  EXPECT_GT(stopped_early, 0);  // the rule was exercised
}

TEST_F(Lossless, LookupFirstProposesRepeatsForFreeAndBatchesTheRestThroughTheModel) {
  LookupFirstDrafter d(NgramOptions{2, 3}, DraftModel(other_path_, 256));
  EXPECT_EQ(d.Name(), "ngram+draft-simple");
  const std::vector<int32_t> repeats = {1, 5, 6, 7, 8, 9, 5, 6};  // "5 6" occurred before: 7 8 9 follow
  const std::vector<int32_t> fresh = Prompt(0);                   // no repeated bigram
  ASSERT_TRUE(NgramLookup(fresh, 2, 3, 4).empty());
  for (int seq = 0; seq < 1; ++seq) ASSERT_TRUE(d.Begin(seq).ok());
  Rng rng(1);
  DraftParams dp;
  dp.budget = 3;
  auto hit = d.Propose(0, repeats, dp, rng);
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE(hit->survival_measured);  // judged by the composition itself
  EXPECT_EQ(hit->survival.size(), 3u);
  EXPECT_EQ(hit->tokens, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(hit->forward_passes, 0);
  auto miss = d.Propose(0, fresh, dp, rng);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->survival_measured);
  EXPECT_EQ(miss->tokens.size(), 3u);
  EXPECT_GT(miss->forward_passes, 0);
  EXPECT_EQ(miss->probs.size(), 3u);  // the model's draft, with its probabilities
}

TEST_F(Lossless, NearlyFullContextStopsWhereReferenceStops) {
  const auto prompt = Prompt(1);
  const int n_ctx = static_cast<int>(prompt.size()) + 13;
  const auto want = ReferenceGreedy(*target_.model, pool_, prompt, 100, n_ctx);
  for (int n_max : {1, 4, 16}) {
    auto d = DraftModel(target_path_, n_ctx);
    const GenerateResult r = Run(d.get(), prompt, 100, n_max, n_ctx);
    EXPECT_EQ(r.ids, want) << n_max;
    EXPECT_EQ(r.stop_reason, "context");
  }
}

TEST_F(Lossless, StopStringInsideADraftEndsWhereReferenceEnds) {
  const auto prompt = Prompt(0);
  const GenerateResult plain = Run(nullptr, prompt, 30, 1);
  // A stop string made of the text of generated tokens 6 and 7.
  const std::string stop = target_.tok->TokenToPiece(plain.ids[6]) + target_.tok->TokenToPiece(plain.ids[7]);
  const GenerateResult p2 = Run(nullptr, prompt, 30, 1, 256, {}, {stop});
  ASSERT_EQ(p2.stop_reason, "stop");
  auto d = DraftModel(target_path_, 256);
  const GenerateResult r = Run(d.get(), prompt, 30, 16, 256, {}, {stop});
  EXPECT_EQ(r.stop_reason, "stop");
  EXPECT_EQ(r.text, p2.text);
  EXPECT_EQ(r.ids, p2.ids);
}

TEST_F(Lossless, EosInsideADraftEndsWhereReferenceEnds) {
  const auto prompt = Prompt(0);
  const GenerateResult plain = Run(nullptr, prompt, 30, 1);
  // Rewrite the target so that the 9th generated token is its end-of-sequence token.
  auto f = gguf::File::Open(target_path_);
  ASSERT_TRUE(f.ok());
  gguf::Writer w;
  w.CopyMetadataFrom(**f);
  w.SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(plain.ids[8]));
  for (const auto& t : (*f)->tensors())
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  const std::string eos_path = testing::TempPath("lossless_eos.gguf");
  ASSERT_TRUE(w.WriteFile(eos_path).ok());
  target_ = Load(eos_path);
  const GenerateResult p2 = Run(nullptr, prompt, 30, 1);
  ASSERT_EQ(p2.stop_reason, "eos");
  ASSERT_LE(p2.ids.size(), 8u);
  for (int n_max : {4, 16}) {
    auto d = DraftModel(eos_path, 256);
    const GenerateResult r = Run(d.get(), prompt, 30, n_max);
    EXPECT_EQ(r.stop_reason, "eos");
    EXPECT_EQ(r.ids, p2.ids);
  }
}

TEST_F(Lossless, ManySequencesInOneBatchEqualTheirSoloOutputs) {
  // 16 requests over 5 slots: newcomers join between steps, prefill chunks share passes with
  // other sequences' verification rows, and each output must equal its solo reference.
  // With token trees, leaf rows share passes with other sequences' chains and prompt chunks.
  for (const auto& [adaptive, branches] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 2}}) {
    Loaded d = Load(branches > 0 ? other_path_ : q8_path_);
    auto drafter = DraftModelDrafter::Create(std::move(d.model), *d.tok, *target_.tok, pool_, 256, 16, 5);
    ASSERT_TRUE(drafter.ok());
    BatchEngineOptions bo;
    bo.n_parallel = 5;
    bo.n_ctx = 256;
    bo.prefill_chunk = 7;
    bo.schedule.n_max = 6;
    bo.schedule.adaptive = adaptive;
    bo.schedule.branches = branches;
    BatchEngine engine(*target_.model, *target_.tok, pool_, bo, drafter->get());
    std::vector<std::vector<int32_t>> prompts, outputs(16);
    for (int r = 0; r < 16; ++r) {
      std::vector<int32_t> p = {1};
      for (int i = 0; i < 3 + r % 7; ++i) p.push_back(3 + (r * 31 + i * 13) % 280);
      prompts.push_back(p);
      GenerateOptions go;
      go.max_new_tokens = 12 + r % 9;
      go.ignore_eos = true;  // the reference loop knows no end-of-generation tokens
      go.speculate = r % 4 != 3;  // some requests opt out of speculation
      ASSERT_TRUE(engine.Submit(p, go, nullptr, [&outputs, r](GenerateResult&& res) { outputs[r] = res.ids; }).ok());
    }
    ASSERT_TRUE(engine.RunUntilIdle().ok());
    for (int r = 0; r < 16; ++r) {
      EXPECT_EQ(outputs[r], ReferenceGreedy(*target_.model, pool_, prompts[r], 12 + r % 9, 256))
          << "request " << r << (adaptive ? " adaptive" : "") << " branches " << branches;
    }
    // The Q8_0 copy's drafts are accepted; the other model's rarely, but its alternatives are.
    if (!adaptive && branches == 0) {
      EXPECT_GT(engine.cumulative_stats().num_accepted_tokens, 0);
    }
    if (branches > 0) {
      EXPECT_GT(engine.cumulative_stats().num_leaf_accepted, 0);
    }
  }
}

// A sequence whose prompt the draft model has not ingested (a busy server skips that) catches up
// on its first proposal; with the target as its own draft the draft is the target's continuation.
TEST_F(Lossless, DraftModelCatchesUpOnALongUnseenContext) {
  std::vector<int32_t> context = {1};
  for (int i = 0; i < 150; ++i) context.push_back(3 + (i * 37 + i / 7) % 280);
  const auto want = ReferenceGreedy(*target_.model, pool_, context, 6, 256);
  auto d = DraftModel(target_path_, 256);
  ASSERT_TRUE(d->Begin(0).ok());
  std::vector<int32_t> with_anchor = context;
  with_anchor.push_back(want[0]);
  DraftParams dp;
  dp.budget = 5;
  Rng rng(1);
  auto draft = d->Propose(0, with_anchor, dp, rng);
  ASSERT_TRUE(draft.ok()) << draft.status().message();
  EXPECT_EQ(draft->tokens, std::vector<int32_t>(want.begin() + 1, want.end()));
  // Forty more committed rows later (a pause), again.
  for (int i = 0; i < 40; ++i) with_anchor.push_back(3 + (i * 11) % 280);
  const auto want2 = ReferenceGreedy(*target_.model, pool_, with_anchor, 5, 256);
  auto draft2 = d->Propose(0, with_anchor, dp, rng);
  ASSERT_TRUE(draft2.ok());
  EXPECT_EQ(draft2->tokens, want2);
}

// A probe far behind the context (DraftParams::max_catch_up) reads only the last rows: the draft
// model's cache keeps what it had, skips the rest, and holds the last rows at their true positions.
// Its drafts are exactly those of the model run on that gapped context; later proposals compare
// the cells after the gap with the right context tokens, and a second long jump widens the gap.
TEST_F(Lossless, DraftModelSkipsOldRowsAtTheirTruePositions) {
  const ModelConfig& c = target_.model->config();
  constexpr int kWindow = 8;
  auto d = DraftModel(target_path_, 256);
  ASSERT_TRUE(d->Begin(0).ok());
  Rng rng(1);
  DraftParams dp;
  dp.budget = 1;
  std::vector<int32_t> context = {1};
  for (int i = 0; i < 20; ++i) context.push_back(3 + (i * 37 + i / 7) % 280);
  auto first = d->Propose(0, context, dp, rng);
  ASSERT_TRUE(first.ok()) << first.status().message();
  const size_t prefix = context.size();  // the cells the drafter keeps: its draft token is not taken
  context.push_back(3 + (first->tokens[0] + 1) % 280);
  for (int i = 0; i < 120; ++i) context.push_back(3 + (i * 11 + i / 5) % 280);

  // The model itself on [context[0, prefix), gap, the last kWindow tokens], then greedy steps.
  KvCache ref(c, 1, 256);
  const auto run = [&](const std::vector<std::pair<int32_t, int>>& rows) {
    Batch b;
    for (size_t i = 0; i < rows.size(); ++i) b.Add(rows[i].first, rows[i].second, 0, i + 1 == rows.size());
    auto out = target_.model->Forward(b, ref, pool_);
    EXPECT_TRUE(out.ok());
    return static_cast<int32_t>(ops::ArgMax(out->Logits(0, c.n_vocab), c.n_vocab));
  };
  const auto reference_draft = [&](std::vector<std::pair<int32_t, int>> rows, int n) {
    std::vector<int32_t> draft;
    int pos = static_cast<int>(context.size());
    for (int k = 0; k < n; ++k) {
      draft.push_back(run(rows));
      rows = {{draft.back(), pos++}};
    }
    return draft;  // the cache holds the context's rows and the first n - 1 draft tokens
  };
  std::vector<std::pair<int32_t, int>> rows;
  for (size_t t = 0; t < prefix; ++t) rows.push_back({context[t], static_cast<int>(t)});
  for (size_t t = context.size() - kWindow; t < context.size(); ++t) rows.push_back({context[t], static_cast<int>(t)});
  // The prefix goes in its own pass first, as the drafter ran it.
  run(std::vector<std::pair<int32_t, int>>(rows.begin(), rows.begin() + prefix));
  ASSERT_TRUE(ref.Truncate(0, static_cast<int>(prefix)).ok());
  dp.budget = 4;
  dp.max_catch_up = kWindow;
  auto gapped = d->Propose(0, context, dp, rng);
  ASSERT_TRUE(gapped.ok()) << gapped.status().message();
  EXPECT_EQ(gapped->tokens, reference_draft(std::vector<std::pair<int32_t, int>>(rows.begin() + prefix, rows.end()), 4));

  // Two of its tokens accepted and a bonus token: the cells after the gap still match.
  context.push_back(gapped->tokens[0]);
  context.push_back(gapped->tokens[1]);
  context.push_back(3 + (gapped->tokens[2] + 1) % 280);
  ASSERT_TRUE(ref.Truncate(0, static_cast<int>(prefix + kWindow + 2)).ok());
  auto next = d->Propose(0, context, dp, rng);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->tokens, reference_draft({{context.back(), static_cast<int>(context.size()) - 1}}, 4));

  // A second long jump: the older window goes and the gap widens; the prefix stays.
  for (int i = 0; i < 60; ++i) context.push_back(3 + (i * 17) % 280);
  ASSERT_TRUE(ref.Truncate(0, static_cast<int>(prefix)).ok());
  rows.clear();
  for (size_t t = context.size() - kWindow; t < context.size(); ++t) rows.push_back({context[t], static_cast<int>(t)});
  auto widened = d->Propose(0, context, dp, rng);
  ASSERT_TRUE(widened.ok());
  EXPECT_EQ(widened->tokens, reference_draft(rows, 4));

  // Without a limit, a proposal that starts inside the prefix catches up on everything again.
  DraftParams full;
  full.budget = 4;
  std::vector<int32_t> shorter(context.begin(), context.begin() + prefix + 1);
  const auto want = ReferenceGreedy(*target_.model, pool_, shorter, 4, 256);
  auto restarted = d->Propose(0, shorter, full, rng);
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ(restarted->tokens, want);
}

// A server step drafts for all its sequences together (ProposeBatch: one forward pass per draft
// step, catch-up rows shared). Every sequence's draft must be exactly what it gets alone, greedy
// and sampled, over steps whose contexts grow by accepted tokens, bonus tokens and a long jump
// (a sequence that has not drafted for a while catches up on its own).
TEST_F(Lossless, DraftModelBatchedProposalsEqualProposalsOneAtATime) {
  for (const bool sample : {false, true}) {
    Loaded da = Load(other_path_), db = Load(other_path_);
    auto alone = DraftModelDrafter::Create(std::move(da.model), *da.tok, *target_.tok, pool_, 256, 16, 4);
    auto batched = DraftModelDrafter::Create(std::move(db.model), *db.tok, *target_.tok, pool_, 256, 16, 4);
    ASSERT_TRUE(alone.ok() && batched.ok());
    std::vector<std::vector<int32_t>> contexts;
    for (int seq = 0; seq < 4; ++seq) {
      contexts.push_back(Prompt(seq % 3));
      contexts.back().push_back(5 + seq);  // the first sampled token
      ASSERT_TRUE((*alone)->Begin(seq).ok() && (*batched)->Begin(seq).ok());
    }
    std::vector<Rng> alone_rng, batched_rng;
    for (int seq = 0; seq < 4; ++seq) {
      alone_rng.emplace_back(50 + seq);
      batched_rng.emplace_back(50 + seq);
    }
    for (int round = 0; round < 4; ++round) {
      std::vector<ProposeRequest> requests;
      for (int seq = 0; seq < 4; ++seq) {
        if (round == 1 && seq == 2) continue;  // this one skips a step
        ProposeRequest r;
        r.seq = seq;
        r.context = contexts[seq];
        r.params.budget = 1 + (seq + round) % 5;
        if (sample) r.params.sampling.temperature = 0.8f;
        r.rng = &batched_rng[seq];
        requests.push_back(r);
      }
      std::vector<Result<Draft>> got = (*batched)->ProposeBatch(requests);
      ASSERT_EQ(got.size(), requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        const int seq = requests[i].seq;
        auto want = (*alone)->Propose(seq, requests[i].context, requests[i].params, alone_rng[seq]);
        ASSERT_TRUE(want.ok() && got[i].ok()) << got[i].status().message();
        ASSERT_FALSE(want->tokens.empty());
        EXPECT_EQ(got[i]->tokens, want->tokens) << "round " << round << " seq " << seq << " sample " << sample;
        EXPECT_EQ(got[i]->probs, want->probs) << "round " << round << " seq " << seq;
        EXPECT_EQ(got[i]->q, want->q) << "round " << round << " seq " << seq;
        EXPECT_EQ(got[i]->forward_passes, want->forward_passes) << "round " << round << " seq " << seq;
        // The next context: the first half of the draft accepted, then a bonus token.
        std::vector<int32_t>& c = contexts[seq];
        c.insert(c.end(), want->tokens.begin(), want->tokens.begin() + want->tokens.size() / 2);
        c.push_back(3 + (round * 7 + seq) % 250);
      }
      if (round == 2)  // a long jump: more new rows than the shared first pass takes
        for (int t = 0; t < 80; ++t) contexts[3].push_back(3 + (t * 13) % 250);
    }
  }
}

// A drafter that fails on its third proposal: the request must finish with plain decoding and
// lose or duplicate no token.
class FailingDrafter final : public Drafter {
 public:
  explicit FailingDrafter(Drafter* inner) : inner_(inner) {}
  std::string_view Name() const override { return "failing"; }
  Status Begin(int seq) override { return inner_->Begin(seq); }
  Result<Draft> Propose(int seq, std::span<const int32_t> ctx, const DraftParams& p, Rng& rng) override {
    if (++calls_ == 3) return Status(StatusCode::kResourceExhausted, "drafter out of memory");
    return inner_->Propose(seq, ctx, p, rng);
  }

 private:
  Drafter* inner_;
  int calls_ = 0;
};

TEST_F(Lossless, FailingDrafterFallsBackToPlainWithoutLosingTokens) {
  const auto prompt = Prompt(1);
  const auto want = ReferenceGreedy(*target_.model, pool_, prompt, 30, 256);
  auto inner = DraftModel(other_path_, 256);
  FailingDrafter failing(inner.get());
  const GenerateResult r = Run(&failing, prompt, 30, 4);
  EXPECT_EQ(r.ids, want);
  EXPECT_EQ(r.stats.num_fallbacks, 1);
}

TEST_F(Lossless, DraftModelOnItsOwnThreadPoolDraftsTheSameTokens) {
  // --threads-draft: the factory gives the drafter a pool of its own (here 1 and 3 threads against
  // the target's 2); drafts, and so the output and every statistic, equal the shared pool's.
  const auto prompt = Prompt(0);
  const auto want = ReferenceGreedy(*target_.model, pool_, prompt, 40, 256);
  DrafterConfig cfg;
  cfg.type = "draft-simple";
  cfg.draft_model = other_path_;
  std::vector<GenerateResult> results;
  for (int threads : {0, 1, 3}) {
    cfg.threads = threads;
    auto d = CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
    ASSERT_TRUE(d.ok()) << d.status().message();
    results.push_back(Run(d->get(), prompt, 40, 4));
    EXPECT_EQ(results.back().ids, want) << threads;
    EXPECT_EQ(results.back().stats.num_accepted_tokens, results.front().stats.num_accepted_tokens) << threads;
    EXPECT_EQ(results.back().stats.num_draft_tokens, results.front().stats.num_draft_tokens) << threads;
  }
  EXPECT_GT(results.front().stats.num_draft_tokens, 0);
  cfg.threads = -1;
  auto bad = CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--threads-draft"), std::string::npos);
}

TEST_F(Lossless, VerifyCostProfileCoversTheGridMonotoneAndLeavesTheCacheAsItWas) {
  // The start-up profile the adaptive schedules price drafts with: warm-up passes, then rounds
  // over the row grid. Whatever the timings, it must cover every row count up to the maximum,
  // never let more rows look cheaper, and leave the sequence's cache exactly as it found it.
  const ModelConfig& c = target_.model->config();
  KvCache cache(c, 2, 256);
  const std::vector<int32_t> prompt = Prompt(1);
  ASSERT_TRUE(Prefill(*target_.model, cache, pool_, 1, prompt, 0, 64).ok());
  Batch probe;
  probe.Add(7, static_cast<int>(prompt.size()), 1, true);
  auto before = target_.model->Forward(probe, cache, pool_);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(cache.Truncate(1, static_cast<int>(prompt.size())).ok());
  auto cost = ProfileVerifyCost(*target_.model, cache, pool_, 1, 9);
  ASSERT_TRUE(cost.ok()) << cost.status().message();
  const auto& points = cost->points();
  std::vector<int> rows;
  for (const auto& [r, ms] : points) {
    rows.push_back(r);
    EXPECT_GT(ms, 0.0) << r;
  }
  EXPECT_EQ(rows, (std::vector<int>{1, 2, 3, 4, 5, 6, 8}));
  for (size_t i = 1; i < points.size(); ++i) EXPECT_GE(points[i].second, points[i - 1].second) << points[i].first;
  EXPECT_EQ(cache.Length(1), static_cast<int>(prompt.size()));
  EXPECT_EQ(cache.Length(0), 0);
  auto after = target_.model->Forward(probe, cache, pool_);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(0, std::memcmp(before->logits.data(), after->logits.data(), before->logits.size() * sizeof(float)));
}

TEST_F(Lossless, MismatchedVocabularyIsRefusedNamingTheToken) {
  SynthSpec spec = testing::TinySpec("qwen3", DType::kF32, 280);
  const std::string small = testing::WriteTiny(spec, "lossless_smallvocab");  // 20 tokens fewer: padding, accepted
  Loaded s = Load(small);
  EXPECT_TRUE(CheckVocabCompatible(*s.tok, *target_.tok).ok());
  // Same size, one token renamed.
  auto f = gguf::File::Open(target_path_);
  ASSERT_TRUE(f.ok());
  auto tokens = *(*f)->GetStringArray("tokenizer.ggml.tokens");
  tokens[77] = "renamed";
  gguf::Writer w;
  w.CopyMetadataFrom(**f);
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
  for (const auto& t : (*f)->tensors())
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  const std::string bad = testing::TempPath("lossless_badvocab.gguf");
  ASSERT_TRUE(w.WriteFile(bad).ok());
  Loaded b = Load(bad);
  Status st = CheckVocabCompatible(*b.tok, *target_.tok);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at id 77"), std::string::npos) << st.message();
  DrafterConfig cfg;
  cfg.type = "draft-simple";
  cfg.draft_model = bad;
  EXPECT_FALSE(CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256).ok());
  cfg.type = "tree-of-thought";
  auto unknown = CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
  EXPECT_NE(unknown.status().message().find("unknown --spec-type"), std::string::npos);
}


// Exact speculation rests on the target's pass giving a row the same logits, bitwise, whether it
// is decoded alone or verified in a block, and greedy speculation then reproducing plain decoding.
// Checked for a loaded target and a KV cache type: 6- and 12-row verification blocks against rows
// decoded one by one (greedy ids alone would hide a last-bit difference that flips no argmax),
// then synthetic drafts of several lengths.
void ExpectVerifyEqualsDecodeAndGreedyLossless(Loaded& target, ThreadPool& pool, DType cache_type,
                                               const std::string& label) {
  const int n = 40;
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 11; ++i) prompt.push_back(3 + (i * 23 + 1) % 280);
  const ModelConfig& c = target.model->config();
  KvCache cache(c, 1, 256, cache_type);
  Batch pre;
  for (size_t i = 0; i < prompt.size(); ++i) pre.Add(prompt[i], static_cast<int>(i), 0, false);
  ASSERT_TRUE(target.model->Forward(pre, cache, pool).ok());
  const int base = static_cast<int>(prompt.size());
  // 6 rows, and 12 (24 query heads: one attention unit since blocks of up to 16 rows are one).
  for (const int k : {6, 12}) {
    Batch block;
    for (int i = 0; i < k; ++i) block.Add(3 + 37 * i % 250, base + i, 0, true);
    auto verified = target.model->Forward(block, cache, pool);
    ASSERT_TRUE(verified.ok());
    ASSERT_TRUE(cache.Truncate(0, base).ok());
    for (int i = 0; i < k; ++i) {
      Batch one;
      one.Add(3 + 37 * i % 250, base + i, 0, true);
      auto decoded = target.model->Forward(one, cache, pool);
      ASSERT_TRUE(decoded.ok());
      ASSERT_EQ(0, std::memcmp(decoded->Logits(0, c.n_vocab), verified->Logits(i, c.n_vocab), c.n_vocab * sizeof(float)))
          << label << " block of " << k << ", row " << i;
    }
    ASSERT_TRUE(cache.Truncate(0, base).ok());
  }
  // Plain decoding with this cache type (ReferenceGreedy uses the default cache).
  SpeculativeEngine plain(*target.model, *target.tok, pool, 256, nullptr, {}, cache_type);
  GenerateOptions go;
  go.max_new_tokens = n;
  auto plain_r = plain.GenerateFromIds(prompt, go);
  ASSERT_TRUE(plain_r.ok()) << plain_r.status().message();
  const std::vector<int32_t> want = plain_r->ids;
  if (cache_type == DType::kF16) {  // the engine's plain decoding against the model's own loop
    ASSERT_EQ(want, testing::ReferenceGreedy(*target.model, pool, prompt, n, 256)) << label;
  }
  ASSERT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 5u) << label;
  std::vector<int32_t> reference = prompt;
  reference.insert(reference.end(), want.begin(), want.end());
  for (int n_max : {1, 3, 8, 16}) {
    SyntheticDrafter drafter(reference, c.n_vocab, 0.7);
    ScheduleOptions so;
    so.n_max = n_max;
    SpeculativeEngine engine(*target.model, *target.tok, pool, 256, &drafter, so, cache_type);
    auto r = engine.GenerateFromIds(prompt, go);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->ids, want) << label << " n_max " << n_max;
    EXPECT_GT(r->stats.num_accepted_tokens, 0) << label;
  }
}

// Each weight type's kernels (BF16: vdpbf16ps on AMD CPUs with AVX-512 BF16, F32 FMAs elsewhere;
// the quantised types: packed VNNI layouts where the CPU has them, the row layout elsewhere), with
// both BF16 paths.
TEST(LosslessWeightTypes, GreedyEqualsPlainForEveryTargetWeightType) {
  ThreadPool pool(2);
  for (const DType type : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                           DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SynthSpec spec = testing::TinySpec("qwen3", type);
    spec.seed = 11;
    spec.tied_embeddings = false;
    spec.embedding_gain = 2.0f;
    Loaded target = Load(testing::WriteTiny(spec, "lossless_type_" + std::string(DTypeName(type))));
    for (const bool bf16_dot_off : {false, true}) {
      if (bf16_dot_off && type != DType::kBF16) continue;
      kernels::DisableBf16DotForTest(bf16_dot_off);
      ExpectVerifyEqualsDecodeAndGreedyLossless(
          target, pool, DType::kF16, std::string(DTypeName(type)) + (bf16_dot_off ? " bf16 dot off" : ""));
    }
    kernels::DisableBf16DotForTest(false);
  }
}

// Each KV cache type (Q8_0 keys and values are rounded once, when written, so a row's attention
// must still not depend on the rows verified with it).
TEST(LosslessCacheTypes, GreedyEqualsPlainForEveryCacheType) {
  ThreadPool pool(2);
  SynthSpec spec = testing::TinySpec("qwen3", DType::kF32);
  spec.head_dim = 32;  // Q8_0 caches need multiples of 32
  spec.seed = 12;
  spec.tied_embeddings = false;
  spec.embedding_gain = 2.0f;
  Loaded target = Load(testing::WriteTiny(spec, "lossless_cache_types"));
  for (const DType type : {DType::kF32, DType::kF16, DType::kQ8_0})
    ExpectVerifyEqualsDecodeAndGreedyLossless(target, pool, type, std::string("cache ") + std::string(DTypeName(type)));
  // Continuous batching on a Q8_0 cache: 8 requests over 3 slots, prompt chunks sharing passes with
  // other sequences' verification rows (prompt lookup drafts the repeats); each output equals the
  // same request decoded alone on a Q8_0 cache.
  NgramDrafter lookup(NgramOptions{1, 3});
  BatchEngineOptions bo;
  bo.n_parallel = 3;
  bo.n_ctx = 256;
  bo.prefill_chunk = 7;
  bo.schedule.n_max = 6;
  bo.kv_type = DType::kQ8_0;
  BatchEngine engine(*target.model, *target.tok, pool, bo, &lookup);
  SpeculativeEngine solo(*target.model, *target.tok, pool, 256, nullptr, {}, DType::kQ8_0);
  std::vector<std::vector<int32_t>> prompts, outputs(8);
  GenerateOptions go;
  go.max_new_tokens = 24;
  go.ignore_eos = true;
  for (int r = 0; r < 8; ++r) {
    std::vector<int32_t> p = {1};
    for (int rep = 0; rep < 2; ++rep)  // a repeated phrase: something for the lookup to propose
      for (int i = 0; i < 4 + r % 5; ++i) p.push_back(3 + (r * 29 + i * 17) % 280);
    prompts.push_back(p);
    ASSERT_TRUE(engine.Submit(p, go, nullptr, [&outputs, r](GenerateResult&& res) { outputs[r] = res.ids; }).ok());
  }
  ASSERT_TRUE(engine.RunUntilIdle().ok());
  for (int r = 0; r < 8; ++r) {
    auto want = solo.GenerateFromIds(prompts[r], go);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(outputs[r], want->ids) << "request " << r;
  }
  EXPECT_GT(engine.cumulative_stats().num_draft_tokens, 0);
  // A model whose heads are not multiples of 32 is refused a Q8_0 cache with a reason.
  SynthSpec odd = testing::TinySpec("qwen3", DType::kF32);  // head_dim 16
  Loaded small = Load(testing::WriteTiny(odd, "lossless_cache_odd"));
  const Status st = KvCache::Supports(small.model->config(), DType::kQ8_0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("multiples of 32"), std::string::npos) << st.message();
  EXPECT_TRUE(KvCache::Supports(small.model->config(), DType::kF16).ok());
}

// Generated text continues its prompt: on a SentencePiece vocabulary with a space prefix (Llama
// 2's) the first generated piece keeps its leading space, as llama.cpp prints it ("    def", not
// "   def"), plain and speculative alike.
TEST(LosslessText, GeneratedTextIsEveryPieceWholeOnASentencePieceVocabulary) {
  auto vocab = gguf::File::Open(std::string(DSPARK_SOURCE_DIR) + "/tests/data/vocab/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  ThreadPool pool(2);
  // Random weights: the first seed whose model starts its continuation with a "▁" piece, so the
  // check below bites.
  Loaded m;
  std::vector<int32_t> prompt;
  for (uint64_t seed = 31; seed < 63 && prompt.empty(); ++seed) {
    SynthSpec spec = testing::TinySpec("llama", DType::kF32);
    spec.seed = seed;
    const std::string path = testing::TempPath("tiny_spm_text.gguf");
    ASSERT_TRUE(WriteSynthModel(spec, vocab->get(), path).ok());
    m = Load(path);
    ASSERT_TRUE(m.tok->add_space_prefix());
    EncodeOptions eo;
    eo.add_eos = false;
    const std::vector<int32_t> ids = m.tok->Encode("def parse(line):", eo);
    const auto first = testing::ReferenceGreedy(*m.model, pool, ids, 1, 64);
    if (!first.empty() && m.tok->TokenToPiece(first[0]).starts_with(' ')) prompt = ids;
  }
  ASSERT_FALSE(prompt.empty()) << "no seed gave a continuation starting with a space";
  NgramDrafter ngram(NgramOptions{1, 3});
  for (Drafter* drafter : {static_cast<Drafter*>(nullptr), static_cast<Drafter*>(&ngram)}) {
    SpeculativeEngine engine(*m.model, *m.tok, pool, 128, drafter);
    GenerateOptions go;
    go.max_new_tokens = 24;
    go.ignore_eos = true;
    auto r = engine.GenerateFromIds(prompt, go);
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::string pieces;
    for (int32_t id : r->ids) pieces += m.tok->TokenToPiece(id);
    ASSERT_EQ(pieces.substr(0, 1), " ");
    EXPECT_EQ(r->text, pieces) << (drafter ? "speculative" : "plain");
    EXPECT_NE(r->text, m.tok->Decode(r->ids));  // Decode reads a text from its start: it drops that space
  }
}

}  // namespace
}  // namespace dspark
