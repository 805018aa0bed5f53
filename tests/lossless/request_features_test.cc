// Request features are exact under speculation: penalties and logit biases, keyed (seeded)
// sampling with its logprobs, grammar-constrained output and the prompt cache give plain
// decoding's output for every drafter. Runs on tiny random-weight models (lossless_fixture.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/lookup_first.h"
#include "speculative/drafters/ngram.h"
#include "speculative/drafters/synthetic.h"

#include "lossless_fixture.h"

namespace dspark {
namespace {

using lossless::Load;
using lossless::Loaded;
using lossless::Lossless;
using testing::ReferenceGreedy;

// Greedy decoding with penalties and logit biases: each row of a verification block counts the draft
// tokens before it, so the output is plain decoding's, token for token, for every drafter.
TEST_F(Lossless, GreedyWithPenaltiesAndBiasesEqualsPlainForEveryDrafter) {
  SamplingParams sp;
  sp.frequency_penalty = 0.5f;
  sp.presence_penalty = 0.3f;
  sp.repeat_penalty = 1.3f;
  sp.repeat_last_n = 8;
  for (int variant = 0; variant < 3; ++variant) {
    const auto prompt = Prompt(variant);
    const GenerateResult unadjusted = Run(nullptr, prompt, 40, 1);
    sp.logit_bias = {{unadjusted.ids[3], -100.0f}, {17, 0.5f}};
    const GenerateResult plain = Run(nullptr, prompt, 40, 1, 256, sp);
    ASSERT_NE(plain.ids, unadjusted.ids) << "the adjustments must change the output for the test to mean anything";
    EXPECT_EQ(std::count(plain.ids.begin(), plain.ids.end(), unadjusted.ids[3]), 0) << "a -100 bias bans the token";
    std::vector<int32_t> reference = prompt;
    reference.insert(reference.end(), plain.ids.begin(), plain.ids.end());
    std::map<std::string, std::unique_ptr<Drafter>> drafters;
    drafters["draft-same"] = DraftModel(target_path_, 256);
    drafters["draft-other"] = DraftModel(other_path_, 256);
    drafters["ngram"] = std::make_unique<NgramDrafter>(NgramOptions{1, 3});
    drafters["synthetic"] = std::make_unique<SyntheticDrafter>(reference, target_.model->config().n_vocab, 0.8);
    for (auto& [name, d] : drafters) {
      const GenerateResult r = Run(d.get(), prompt, 40, 6, 256, sp);
      EXPECT_EQ(r.ids, plain.ids) << name << " prompt " << variant;
      if (name == "synthetic") {
        EXPECT_GT(r.stats.num_accepted_tokens, 0);
      }
    }
  }
}

// Seeded (keyed) sampling: every drafter, with and without speculation, and a place in a loaded
// batch, gives byte-identical output for the same seed; the logprobs of accepted draft tokens are
// plain decoding's.
TEST_F(Lossless, KeyedSamplingIsIdenticalWithEveryDrafterAndUnderLoad) {
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_p = 0.95f;
  sp.keyed = true;
  const auto prompt = Prompt(2);
  for (uint64_t seed : {1u, 2u, 3u}) {
    sp.seed = seed;
    ScheduleOptions so;
    so.n_max = 6;
    SpeculativeEngine plain_engine(*target_.model, *target_.tok, pool_, 256, nullptr, so);
    GenerateOptions go;
    go.max_new_tokens = 40;
    go.sampling = sp;
    go.logprobs = 3;
    auto plain = plain_engine.GenerateFromIds(prompt, go);
    ASSERT_TRUE(plain.ok());
    ASSERT_EQ(plain->logprobs.size(), plain->ids.size());
    std::map<std::string, std::unique_ptr<Drafter>> drafters;
    drafters["draft-same"] = DraftModel(target_path_, 256);
    drafters["draft-other"] = DraftModel(other_path_, 256);
    drafters["ngram+draft"] = std::make_unique<LookupFirstDrafter>(NgramOptions{2, 3}, DraftModel(other_path_, 256));
    for (auto& [name, d] : drafters) {
      SpeculativeEngine engine(*target_.model, *target_.tok, pool_, 256, d.get(), so);
      auto r = engine.GenerateFromIds(prompt, go);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->ids, plain->ids) << name << " seed " << seed;
      EXPECT_EQ(r->text, plain->text) << name;
      ASSERT_EQ(r->logprobs.size(), plain->logprobs.size());
      for (size_t i = 0; i < r->logprobs.size(); ++i) {
        EXPECT_NEAR(r->logprobs[i].logprob, plain->logprobs[i].logprob, 1e-4) << name << " token " << i;
        ASSERT_EQ(r->logprobs[i].top.size(), 3u);
        for (size_t j = 0; j < 3; ++j) {
          EXPECT_EQ(r->logprobs[i].top[j].first, plain->logprobs[i].top[j].first) << name << " token " << i;
          EXPECT_NEAR(r->logprobs[i].top[j].second, plain->logprobs[i].top[j].second, 1e-4);
        }
      }
      // The same model as its own draft draws the very tokens the target does: coupled drafts
      // are accepted whole.
      if (name == "draft-same") {
        EXPECT_EQ(r->stats.num_accepted_tokens, r->stats.num_draft_tokens) << seed;
      }
    }
    // Under load: the seeded request among 11 others (keyed and not) on 4 slots, with a drafter.
    Loaded d = Load(other_path_);
    auto batched = DraftModelDrafter::Create(std::move(d.model), *d.tok, *target_.tok, pool_, 256, 16, 4);
    ASSERT_TRUE(batched.ok());
    BatchEngineOptions bo;
    bo.n_parallel = 4;
    bo.n_ctx = 256;
    bo.prefill_chunk = 5;
    bo.schedule.n_max = 6;
    BatchEngine engine(*target_.model, *target_.tok, pool_, bo, batched->get());
    std::vector<int32_t> loaded_ids;
    for (int r = 0; r < 12; ++r) {
      GenerateOptions other = go;
      if (r == 5) {
        ASSERT_TRUE(engine.Submit(prompt, go, nullptr, [&](GenerateResult&& res) { loaded_ids = res.ids; }).ok());
        continue;
      }
      other.sampling.keyed = r % 2 == 0;
      other.sampling.seed = 100 + r;
      std::vector<int32_t> p = {1};
      for (int i = 0; i < 3 + r % 7; ++i) p.push_back(3 + (r * 31 + i * 13) % 280);
      ASSERT_TRUE(engine.Submit(p, other, nullptr, nullptr).ok());
    }
    ASSERT_TRUE(engine.RunUntilIdle().ok());
    EXPECT_EQ(loaded_ids, plain->ids) << "seed " << seed << " under load";
  }
}

// Grammar-constrained decoding: speculative output equals plain constrained decoding token for
// token (greedy, and keyed sampling), draft tokens the grammar forbids end their drafts, and the
// output spells a sentence of the grammar.
TEST_F(Lossless, GrammarConstrainedOutputEqualsPlainAndFollowsTheGrammar) {
  // A grammar over a few of the vocabulary's own pieces: sequences of them, then a closing one.
  std::vector<std::string> words;
  for (int32_t id = 3; id < target_.model->config().n_vocab && words.size() < 6; ++id) {
    const std::string piece = target_.tok->TokenToPiece(id);
    if (piece.size() >= 2 && std::all_of(piece.begin(), piece.end(), [](char c) { return c >= ' ' && c < 127; }))
      words.push_back(piece);
  }
  ASSERT_GE(words.size(), 3u) << "the tiny vocabulary has too few printable pieces";
  std::string alt;
  for (size_t i = 0; i + 1 < words.size(); ++i) alt += (i ? " | " : "") + grammar::GbnfLiteral(words[i]);
  const std::string gbnf = "root ::= (" + alt + ")+ " + grammar::GbnfLiteral(words.back()) + "\n";
  auto grammar = grammar::Grammar::Compile(gbnf);
  ASSERT_TRUE(grammar.ok()) << grammar.status().message() << "\n" << gbnf;
  for (const bool keyed : {false, true}) {
    GenerateOptions go;
    go.max_new_tokens = 30;
    go.grammar = *grammar;
    if (keyed) {
      go.sampling.temperature = 0.9f;
      go.sampling.keyed = true;
      go.sampling.seed = 5;
    }
    const auto prompt = Prompt(2);
    ScheduleOptions so;
    so.n_max = 5;
    SpeculativeEngine plain_engine(*target_.model, *target_.tok, pool_, 256, nullptr, so);
    auto plain = plain_engine.GenerateFromIds(prompt, go);
    ASSERT_TRUE(plain.ok());
    ASSERT_NE(plain->stop_reason, "error") << plain->error;
    // Every prefix of the output is a prefix of a sentence of the grammar.
    grammar::GrammarState st = (*grammar)->Start();
    EXPECT_TRUE((*grammar)->Advance(&st, plain->text)) << plain->text;
    std::map<std::string, std::unique_ptr<Drafter>> drafters;
    drafters["draft-same"] = DraftModel(target_path_, 256);
    drafters["draft-other"] = DraftModel(other_path_, 256);
    drafters["ngram"] = std::make_unique<NgramDrafter>(NgramOptions{1, 3});
    // Drafts that mostly follow the constrained output, with forbidden tokens among them.
    std::vector<int32_t> reference = prompt;
    reference.insert(reference.end(), plain->ids.begin(), plain->ids.end());
    drafters["synthetic"] = std::make_unique<SyntheticDrafter>(reference, target_.model->config().n_vocab, 0.7);
    for (auto& [name, d] : drafters) {
      SpeculativeEngine engine(*target_.model, *target_.tok, pool_, 256, d.get(), so);
      auto r = engine.GenerateFromIds(prompt, go);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->ids, plain->ids) << name << (keyed ? " keyed" : " greedy");
      EXPECT_EQ(r->stop_reason, plain->stop_reason) << name;
      if (name == "synthetic") {
        EXPECT_GT(r->stats.num_accepted_tokens, 0) << name;
        EXPECT_LT(r->stats.num_draft_tokens, r->stats.num_steps * so.n_max) << "no draft was cut";
      }
    }
  }
}

// The prompt cache: follow-up requests reuse what a slot, another slot or the host store holds, and
// every output equals a cold run's, with and without a drafter.
TEST_F(Lossless, PromptCacheHitsEqualColdRuns) {
  for (const bool with_drafter : {false, true}) {
    Loaded d = Load(target_path_);  // the target as its own draft: drafts are accepted
    auto drafter = DraftModelDrafter::Create(std::move(d.model), *d.tok, *target_.tok, pool_, 256, 16, 1);
    ASSERT_TRUE(drafter.ok());
    BatchEngineOptions bo;
    bo.n_parallel = 1;  // one slot: a second prefix must go to the host store to survive
    bo.n_ctx = 256;
    bo.prefill_chunk = 16;
    bo.schedule.n_max = 4;
    bo.cache_ram_bytes = 64 << 20;
    BatchEngine engine(*target_.model, *target_.tok, pool_, bo, with_drafter ? drafter->get() : nullptr);
    auto run = [&](const std::vector<int32_t>& prompt) {
      GenerateResult out;
      GenerateOptions go;
      go.max_new_tokens = 16;
      go.ignore_eos = true;
      EXPECT_TRUE(engine.Submit(prompt, go, nullptr, [&out](GenerateResult&& r) { out = std::move(r); }).ok());
      EXPECT_TRUE(engine.RunUntilIdle().ok());
      return out;
    };
    std::vector<int32_t> a = Prompt(1), b = Prompt(0);
    for (int i = 0; i < 60; ++i) {
      a.push_back(3 + (i * 29) % 280);
      b.push_back(5 + (i * 41) % 270);
    }
    const GenerateResult ra = run(a);
    EXPECT_EQ(ra.stats.prompt_cached_tokens, 0);
    EXPECT_EQ(ra.ids, ReferenceGreedy(*target_.model, pool_, a, 16, 256));
    // A follow-up: the slot still holds a and its answer.
    std::vector<int32_t> a2 = a;
    a2.insert(a2.end(), ra.ids.begin(), ra.ids.end());
    a2.push_back(42);
    const GenerateResult ra2 = run(a2);
    EXPECT_EQ(ra2.ids, ReferenceGreedy(*target_.model, pool_, a2, 16, 256));
    EXPECT_EQ(ra2.stats.prompt_cached_tokens, static_cast<int64_t>(a.size() + ra.ids.size() - 1));
    // An unrelated prompt takes the slot; a's rows move to the host store ...
    const GenerateResult rb = run(b);
    EXPECT_EQ(rb.ids, ReferenceGreedy(*target_.model, pool_, b, 16, 256));
    EXPECT_LT(rb.stats.prompt_cached_tokens, 16);
    // ... and come back for the next request that starts with them.
    std::vector<int32_t> a3 = a;
    a3.push_back(7);
    const GenerateResult ra3 = run(a3);
    EXPECT_EQ(ra3.ids, ReferenceGreedy(*target_.model, pool_, a3, 16, 256)) << (with_drafter ? "drafter" : "plain");
    EXPECT_EQ(ra3.stats.prompt_cached_tokens, static_cast<int64_t>(a.size())) << (with_drafter ? "drafter" : "plain");
    if (with_drafter) {
      EXPECT_GT(ra3.stats.num_accepted_tokens, 0);
    }
  }
}

}  // namespace
}  // namespace dspark
