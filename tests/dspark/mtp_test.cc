// draft-mtp end to end on a tiny random-weight deepseek2 target with one multi-token-prediction
// block: the drafter's chains against chains built from Model::ForwardNextn by hand in llama.cpp's
// draft-mtp layout (row t: token t with the target's normed output at t-1, row 0 a zero state,
// each draft row fed the previous row's normed output); greedy speculative output equal to plain
// decoding; sampled output equal to plain sampling in distribution; batched proposals equal to
// single ones; concurrent sequences and the prompt cache; every refusal; DSpark and EAGLE-3 drafting
// for the same target. (The block's arithmetic against a double reference: NextnTest in
// src/model/arch_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>

#include "dspark/drafter_fixture.h"
#include "dspark/dspark_models.h"
#include "kernels/ops.h"
#include "model/testing/tiny_models.h"
#include "speculative/drafters/factory.h"
#include "speculative/engine.h"
#include "speculative/testing/sampling_check.h"

namespace dspark {
namespace {

using testing::ReferenceGreedy;

// The tiny V3-style deepseek2 (query LoRA, sigmoid gating) with one nextn block.
SynthSpec MtpSpec(int n_vocab) {
  SynthSpec s = testing::TinySpec("deepseek2", DType::kF32, n_vocab);
  s.q_lora_rank = 32;
  s.expert_gating = 2;
  s.expert_bias = true;
  s.expert_weights_norm = true;
  s.n_nextn = 1;
  return s;
}

class Mtp : public testing::TapDrafterTest {
 protected:
  static void SetUpTestSuite() { target_path_ = testing::WriteTiny(MtpSpec(64), "mtp_target"); }

  Result<std::unique_ptr<Drafter>> Create(int max_draft = 16, const std::string& md = "") {
    DrafterConfig cfg;
    cfg.type = "draft-mtp";
    cfg.draft_model = md;
    cfg.max_draft = max_draft;
    return CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
  }

  // The greedy chain of n tokens after `prompt`, from the block by hand.
  std::vector<int32_t> Chain(const std::vector<int32_t>& prompt, int n) {
    const Model& m = *target_.model;
    const ModelConfig& c = m.config();
    const int d = c.n_embd;
    const auto taps = Taps({c.n_layer}, prompt);
    std::vector<float> h(static_cast<size_t>(prompt.size()) * d, 0.0f);
    for (size_t t = 1; t < prompt.size(); ++t)
      ops::RmsNorm(taps[0].data() + (t - 1) * d, m.weights().output_norm.data(), c.rms_eps, d, h.data() + t * d);
    KvCache cache(m.NextnCacheConfig(), 1, 256, DType::kF32);
    Batch b;
    for (size_t t = 0; t < prompt.size(); ++t) b.Add(prompt[t], static_cast<int>(t), 0, t + 1 == prompt.size());
    auto out = m.ForwardNextn(b, h.data(), cache, pool_);
    EXPECT_TRUE(out.ok()) << out.status().message();
    std::vector<int32_t> chain;
    for (int i = 0; out.ok() && i < n; ++i) {
      const float* l = out->Logits(0, c.n_vocab);
      chain.push_back(static_cast<int32_t>(std::max_element(l, l + c.n_vocab) - l));
      const std::vector<float> state = out->hidden;
      Batch one;
      one.Add(chain.back(), static_cast<int>(prompt.size()) + i, 0, true);
      out = m.ForwardNextn(one, state.data(), cache, pool_);
    }
    return chain;
  }

  void ExpectOtherDrafterLossless(const std::string& type);
};

TEST_F(Mtp, ChainsAreTheBlocksOwn) {
  for (int variant = 0; variant < 4; ++variant) {
    const auto prompt = Prompt(variant);
    auto d = Create();
    ASSERT_TRUE(d.ok()) << d.status().message();
    ExpectHeadChain(d->get(), prompt, Chain(prompt, 6), "prompt " + std::to_string(variant));
    // Three more committed rows arrive (as after a verification): the catch-up pass pairs each
    // with its own token, so the chain is what a fresh start on the longer context drafts.
    std::vector<int32_t> longer = prompt;
    longer.insert(longer.end(), {7, static_cast<int32_t>(11 + variant), 13});
    const auto taps = Taps((*d)->Needs().target_tap_layers, longer);
    const int n0 = static_cast<int>(prompt.size()) - 1, d_embd = target_.model->config().n_embd;
    TapRows rows;
    rows.pos0 = n0;
    rows.n_rows = 3;
    rows.n_embd = d_embd;
    rows.taps.push_back(taps[0].data() + static_cast<size_t>(n0) * d_embd);
    ASSERT_TRUE((*d)->ObserveTaps(0, rows).ok());
    Rng rng(1);
    DraftParams p;
    p.budget = 6;
    auto later = (*d)->Propose(0, longer, p, rng);
    ASSERT_TRUE(later.ok()) << later.status().message();
    EXPECT_EQ(later->tokens, Chain(longer, 6)) << "prompt " << variant << " after three more rows";
  }
}

TEST_F(Mtp, GreedyEqualsPlainForEveryPromptAndDraftLength) {
  const int n = 24;
  for (int variant = 0; variant < 4; ++variant) {
    const auto prompt = Prompt(variant);
    const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n);
    for (int n_max : {1, 2, 3, 5, 8}) {
      auto d = Create();
      ASSERT_TRUE(d.ok()) << d.status().message();
      ScheduleOptions so;
      so.n_max = n_max;
      const GenerateResult r = Run(d->get(), prompt, n, so);
      ASSERT_EQ(r.ids, want) << "n_max " << n_max << " prompt " << variant;
      EXPECT_GT(r.stats.num_draft_tokens, 0);
      EXPECT_EQ(r.stats.num_fallbacks, 0);
    }
    auto d = Create();
    ASSERT_TRUE(d.ok());
    ScheduleOptions so;
    so.n_max = 8;
    so.adaptive = true;
    so.branches = 2;
    EXPECT_EQ(Run(d->get(), prompt, n, so).ids, want) << "adaptive with branches";
  }
}

// The other tap drafters on the same deepseek2 target, as the comparison of MTP, EAGLE-3 and DSpark
// on one DeepSeek model runs them: greedy output equal to plain decoding at several lengths, sampled
// output equal to plain sampling in distribution. One test per drafter, so that the two (each
// minutes long under the sanitizers) run side by side.
void Mtp::ExpectOtherDrafterLossless(const std::string& type) {
  auto f = gguf::File::Open(target_path_);
  ASSERT_TRUE(f.ok());
  const std::string path = testing::TempPath("mtp_test_" + type + ".gguf");
  if (type == "draft-dspark") {
    ASSERT_TRUE(testing::WriteDflash(testing::DflashSpec{}, **f, path).ok());
  } else {
    ASSERT_TRUE(testing::WriteEagle3(testing::Eagle3Spec{}, **f, path).ok());
  }
  auto create = [&] {
    DrafterConfig cfg;
    cfg.type = type;
    cfg.draft_model = path;
    return CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
  };
  const int n = 24;
  for (int variant = 0; variant < 2; ++variant) {
    const auto prompt = Prompt(variant);
    const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n);
    for (int n_max : {1, 3, 8}) {
      auto d = create();
      ASSERT_TRUE(d.ok()) << type << ": " << d.status().message();
      ScheduleOptions so;
      so.n_max = n_max;
      const GenerateResult r = Run(d->get(), prompt, n, so);
      ASSERT_EQ(r.ids, want) << type << " n_max " << n_max << " prompt " << variant;
      EXPECT_GT(r.stats.num_draft_tokens, 0) << type;
      EXPECT_EQ(r.stats.num_fallbacks, 0) << type;
    }
  }
  auto d = create();
  ASSERT_TRUE(d.ok());
  SCOPED_TRACE(type);
  // At a high temperature: the random target is too sure of its tokens for a random head's
  // samples to be accepted at 1.
  ScheduleOptions so;
  so.n_max = 2;
  SpeculativeEngine engine(*target_.model, *target_.tok, pool_, 64, d->get(), so);
  testing::ExpectSpeculativeSamplingMatchesTarget(*target_.model, pool_, engine, {1, 5, 9}, testing::Sampling(3.0f),
                                                  so.n_max + 3);
}

TEST_F(Mtp, DSparkDraftsForTheDeepseekTargetLosslessly) { ExpectOtherDrafterLossless("draft-dspark"); }

TEST_F(Mtp, Eagle3DraftsForTheDeepseekTargetLosslessly) { ExpectOtherDrafterLossless("draft-eagle3"); }

TEST_F(Mtp, BatchedProposalsEqualProposalsOneAtATime) {
  ExpectBatchedProposalsEqualSingle([&] { return Create(); }, "draft-mtp", FullBudgets, ExpectFullBudget);
}

TEST_F(Mtp, ConcurrentSequencesAndThePromptCacheStayLossless) {
  auto d = Create();
  ASSERT_TRUE(d.ok()) << d.status().message();
  ExpectConcurrentSequencesAndPromptCacheLossless(d->get());
}

TEST_F(Mtp, NameTapsAndRefusals) {
  const auto types = DrafterTypes();
  EXPECT_NE(std::find(types.begin(), types.end(), "draft-mtp"), types.end());
  auto d = Create();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->Name(), "draft-mtp");
  EXPECT_EQ((*d)->Needs().target_tap_layers, std::vector<int>{target_.model->config().n_layer});
  // llama.cpp's way of naming the model again as -md is accepted; another file is not.
  EXPECT_TRUE(Create(16, target_path_).ok());
  const std::string other = testing::WriteTiny(testing::TinySpec("qwen3", DType::kF32, 64), "mtp_other");
  auto wrong = Create(16, other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not the target"), std::string::npos) << wrong.status().message();
  // A target without the block.
  testing::LoadedModel plain = testing::LoadModelForTest(other);
  DrafterConfig cfg;
  cfg.type = "draft-mtp";
  auto none = CreateDrafter(cfg, *plain.model, *plain.tok, pool_, 64);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("nextn_predict_layers"), std::string::npos) << none.status().message();
  // A block with a tensor missing names it.
  gguf::Writer w;
  auto f = gguf::File::Open(target_path_);
  ASSERT_TRUE(f.ok());
  w.CopyMetadataFrom(**f);
  for (const auto& t : (*f)->tensors()) {
    if (t.name.find("nextn.hnorm") == std::string::npos) {
      ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
    }
  }
  const std::string broken = testing::TempPath("mtp_broken.gguf");
  ASSERT_TRUE(w.WriteFile(broken).ok());
  auto m = Model::Load(broken);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("nextn.hnorm"), std::string::npos) << m.status().message();
}

TEST(MtpSampling, SampledChainMatchesPlainSamplingInDistribution) {
  SynthSpec spec = MtpSpec(16);
  spec.embedding_gain = 0.6f;  // flat distributions: many outcomes, many rejections
  const std::string path = testing::WriteTiny(spec, "mtp_chi");
  testing::LoadedModel target = testing::LoadModelForTest(path);
  ThreadPool pool(1);
  DrafterConfig cfg;
  cfg.type = "draft-mtp";
  auto drafter = CreateDrafter(cfg, *target.model, *target.tok, pool, 64);
  ASSERT_TRUE(drafter.ok()) << drafter.status().message();
  testing::ExpectDrafterSamplingMatchesTarget(*target.model, *target.tok, pool, drafter->get());
}

}  // namespace
}  // namespace dspark
