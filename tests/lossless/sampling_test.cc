// Speculative sampling is lossless in distribution: for every drafter, with and without the
// sampling filters, the joint distribution of sampled tokens equals plain sampling's exactly (χ²,
// speculative/testing/sampling_check.h), and every deliberately broken verifier fails the same check.
// Runs on tiny random-weight models.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <algorithm>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "model/testing/tiny_models.h"
#include "sampling/sampling.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/draft_model.h"
#include "speculative/drafters/lookup_first.h"
#include "speculative/drafters/ngram.h"
#include "speculative/drafters/synthetic.h"
#include "speculative/engine.h"
#include "speculative/testing/broken_verifiers.h"
#include "speculative/testing/sampling_check.h"
#include "speculative/verifier.h"

namespace dspark {
namespace {

using Loaded = testing::LoadedModel;
Loaded Load(const std::string& path) { return testing::LoadModelForTest(path); }

using testing::ReferenceGreedy;

// Speculative sampling against the exact distribution of plain sampling
// (speculative/testing/sampling_check.h), for every drafter with and without the sampling filters, and
// the negative controls: every deliberately broken verifier must fail the same check.
struct SamplingCase {
  std::string drafter;  // draft-model, ngram, ngram+draft-model, synthetic, unfiltered-q
  SamplingParams params;
  std::string label;
};
void PrintTo(const SamplingCase& c, std::ostream* os) { *os << c.drafter << "/" << c.label; }

const SamplingParams kUnfiltered = testing::Sampling(1.0f);
const SamplingParams kFiltered = testing::Sampling(0.8f, 6, 0.9f, 0.02f);
// OpenAI's and llama.cpp's penalties and a logit bias: inside a verification block each row counts
// the draft tokens before it.
const SamplingParams kPenalized = [] {
  SamplingParams p = kUnfiltered;
  p.frequency_penalty = 0.8f;
  p.presence_penalty = 0.4f;
  p.repeat_penalty = 1.5f;
  p.repeat_last_n = 4;
  p.logit_bias = {{3, 1.5f}, {7, -100.0f}};
  return p;
}();
// Keyed draws with coupled verification (seeded requests): plain decoding's own output, so its
// distribution is the target's.
const SamplingParams kKeyed = [] {
  SamplingParams p = kFiltered;
  p.keyed = true;
  return p;
}();

// A draft-model drafter with a bug where its draft meets the verifier: it samples its tokens from
// its distribution before top-k / top-p / min-p, but reports the filtered distribution as q.
class UnfilteredQDrafter final : public Drafter {
 public:
  explicit UnfilteredQDrafter(std::unique_ptr<Drafter> inner) : inner_(std::move(inner)) {}
  std::string_view Name() const override { return "unfiltered-q"; }
  DrafterNeeds Needs() const override { return inner_->Needs(); }
  Status Begin(int seq) override { return inner_->Begin(seq); }
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override {
    DraftParams unfiltered = params;
    unfiltered.sampling = testing::Sampling(params.sampling.temperature, 0, 1.0f, 0.0f, params.sampling.seed);
    DSPARK_ASSIGN_OR_RETURN(Draft d, inner_->Propose(seq, context, unfiltered, rng));
    // ComputeProbs over log q at temperature 1 applies the filters to the distribution itself.
    SamplingParams filters = params.sampling;
    filters.temperature = 1.0f;
    for (std::vector<float>& q : d.q) {
      std::vector<float> logq(q.size());
      for (size_t i = 0; i < q.size(); ++i) logq[i] = q[i] > 0 ? std::log(q[i]) : -1e30f;
      ComputeProbs(logq.data(), static_cast<int>(logq.size()), filters, &q);
    }
    return d;
  }

 private:
  std::unique_ptr<Drafter> inner_;
};

class SamplingFixture : public ::testing::Test {
 protected:
  static constexpr int kNMax = 2;  // positions 1-3: two draft tokens and the bonus token
  static void SetUpTestSuite() {
    // A 16-token vocabulary keeps the joint outcomes of three tokens few enough to test exactly.
    SynthSpec spec = testing::TinySpec("qwen3", DType::kF32, 16);
    spec.embedding_gain = 1.0f;  // flat output distributions: many outcomes, many rejections
    spec.seed = 21;
    target_path_ = testing::WriteTiny(spec, "chi_target");
    spec.seed = 22;
    draft_path_ = testing::WriteTiny(spec, "chi_draft");
    SynthSpec moe = testing::TinySpec("qwen3moe", DType::kF32, 16);
    moe.embedding_gain = 1.0f;
    moe.seed = 23;
    moe_target_path_ = testing::WriteTiny(moe, "chi_moe_target");
    SynthSpec mla = testing::TinySpec("deepseek2", DType::kF32, 16);
    mla.embedding_gain = 1.0f;
    mla.seed = 24;
    mla_target_path_ = testing::WriteTiny(mla, "chi_mla_target");
  }
  void SetUp() override { target_ = Load(target_path_); }

  std::unique_ptr<Drafter> MakeDrafter(const std::string& name) {
    auto model = [&] {
      Loaded d = Load(draft_path_);
      auto dr = DraftModelDrafter::Create(std::move(d.model), *d.tok, *target_.tok, pool_, 64, 8);
      EXPECT_TRUE(dr.ok()) << dr.status().message();
      return std::unique_ptr<Drafter>(std::move(*dr));
    };
    if (name == "draft-model") return model();
    if (name == "unfiltered-q") return std::make_unique<UnfilteredQDrafter>(model());
    if (name == "ngram") return std::make_unique<NgramDrafter>(NgramOptions{1, 2});
    if (name == "ngram+draft-model") return std::make_unique<LookupFirstDrafter>(NgramOptions{1, 2}, model());
    if (name == "synthetic") {
      std::vector<int32_t> reference = kPrompt;
      const auto greedy = ReferenceGreedy(*target_.model, pool_, kPrompt, 8, 64);
      reference.insert(reference.end(), greedy.begin(), greedy.end());
      return std::make_unique<SyntheticDrafter>(reference, target_.model->config().n_vocab, 0.7);
    }
    ADD_FAILURE() << "unknown drafter " << name;
    return nullptr;
  }

  // The check on positions 1-3 of 5-token generations, with `verify` as the verification rule.
  // Negative controls pass kTrials: a check that must fail keeps its full power in every build.
  // `branches`: token-tree alternatives per draft token (ScheduleOptions::branches), each with up
  // to `branch_tail` tokens after it.
  testing::SamplingCheck Check(Drafter* drafter, const SamplingParams& params, VerifyFn verify = &Verify,
                               int trials = testing::PassingCheckTrials(kTrials), int branches = 0,
                               int branch_tail = 0) {
    BatchEngineOptions o;
    o.n_ctx = 64;
    o.schedule.n_max = kNMax;
    o.schedule.branches = branches;
    o.schedule.branch_tail = branch_tail;
    o.verify = verify;
    SpeculativeEngine engine(*target_.model, *target_.tok, pool_, o, drafter);
    const auto exact = testing::ExactJointDistribution(*target_.model, pool_, kPrompt, params, 1, 3);
    GenerateOptions go;
    go.max_new_tokens = kNMax + 3;
    go.sampling = params;
    return testing::CheckSampling(engine, kPrompt, go, exact, 1, 3, trials);
  }

  static constexpr int kTrials = 30000;
  // Repeats, so that prompt lookup finds continuations.
  static inline const std::vector<int32_t> kPrompt = {1, 5, 9, 5, 9, 7};
  static inline std::string target_path_, draft_path_, moe_target_path_, mla_target_path_;
  Loaded target_;
  ThreadPool pool_{1};
};

class LosslessSampling : public SamplingFixture, public ::testing::WithParamInterface<SamplingCase> {};
using LosslessSamplingControls = SamplingFixture;
class LosslessSamplingNegativeControls : public SamplingFixture, public ::testing::WithParamInterface<std::string> {};

TEST_P(LosslessSampling, SpeculativeSamplingMatchesTheExactPlainDistribution) {
  const SamplingCase& c = GetParam();
  auto drafter = MakeDrafter(c.drafter);
  ASSERT_NE(drafter, nullptr);
  BatchEngineOptions o;
  o.n_ctx = 64;
  o.schedule.n_max = kNMax;
  SpeculativeEngine engine(*target_.model, *target_.tok, pool_, o, drafter.get());
  testing::ExpectSpeculativeSamplingMatchesTarget(*target_.model, pool_, engine, kPrompt, c.params, kNMax + 3, kTrials);
}

// Mixture-of-experts targets (qwen3moe; deepseek2 with latent attention and shared experts): a
// verification block's rows share a pass whose experts they chose together, and sampled output
// still follows the target exactly.
TEST_F(LosslessSamplingControls, SpeculativeSamplingOnAMixtureOfExpertsTargetMatchesTheExactDistribution) {
  for (const std::string& path : {moe_target_path_, mla_target_path_}) {
    target_ = Load(path);
    ASSERT_TRUE(target_.model->config().moe.enabled());
    for (const SamplingParams& params : {kUnfiltered, kFiltered}) {
      auto drafter = MakeDrafter("ngram+draft-model");
      BatchEngineOptions o;
      o.n_ctx = 64;
      o.schedule.n_max = kNMax;
      SpeculativeEngine engine(*target_.model, *target_.tok, pool_, o, drafter.get());
      testing::ExpectSpeculativeSamplingMatchesTarget(*target_.model, pool_, engine, kPrompt, params, kNMax + 3, kTrials);
    }
  }
}

// Grammar-constrained sampling: verification samples from the masked target distribution (and the
// drafter drafts from its masked one), so the output follows plain constrained sampling exactly.
// The reference masks by checking every token against the grammar itself, apart from the engine's
// vocabulary trie.
TEST_F(LosslessSamplingControls, GrammarConstrainedSamplingMatchesTheExactMaskedDistribution) {
  const int n_vocab = target_.model->config().n_vocab;
  std::vector<std::string> words;
  for (int32_t id = 0; id < n_vocab && words.size() < 6; ++id) {
    const std::string piece = target_.tok->TokenToPiece(id, /*render_special=*/true);
    if (!piece.empty() && !target_.tok->IsEog(id) && std::find(words.begin(), words.end(), piece) == words.end())
      words.push_back(piece);
  }
  ASSERT_EQ(words.size(), 6u);
  const auto lit = [&](int i) { return grammar::GbnfLiteral(words[i]); };
  // Two alternating sets of three tokens each (of 16): many outcomes, and drafts that break it.
  const std::string gbnf = "root ::= (" + lit(0) + " | " + lit(1) + " | " + lit(2) + ") ((" + lit(3) + " | " + lit(4) +
                           " | " + lit(1) + ") (" + lit(0) + " | " + lit(5) + " | " + lit(2) + "))*\n";
  auto g = grammar::Grammar::Compile(gbnf);
  ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << gbnf;
  const grammar::Grammar& gram = **g;
  const testing::PathMask mask = [&](const std::vector<int32_t>& path, float* logits) {
    grammar::GrammarState st = gram.Start();
    for (int32_t t : path) {
      if (!target_.tok->IsEog(t)) {
        ASSERT_TRUE(gram.Advance(&st, target_.tok->TokenToPiece(t, true)));
      }
    }
    for (int32_t id = 0; id < n_vocab; ++id) {
      const std::string piece = target_.tok->TokenToPiece(id, true);
      const bool ok = target_.tok->IsEog(id) ? gram.CanEnd(st) : !piece.empty() && gram.Accepts(st, piece);
      if (!ok) logits[id] = -INFINITY;
    }
  };
  for (const SamplingParams& params : {kUnfiltered, kFiltered}) {
    auto drafter = MakeDrafter("draft-model");
    BatchEngineOptions o;
    o.n_ctx = 64;
    o.schedule.n_max = kNMax;
    SpeculativeEngine engine(*target_.model, *target_.tok, pool_, o, drafter.get());
    const auto exact = testing::ExactJointDistribution(*target_.model, pool_, kPrompt, params, 1, 3, mask);
    GenerateOptions go;
    go.max_new_tokens = kNMax + 3;
    go.sampling = params;
    go.grammar = *g;
    const testing::SamplingCheck c =
        testing::CheckSampling(engine, kPrompt, go, exact, 1, 3, testing::PassingCheckTrials(kTrials));
    EXPECT_TRUE(c.passed()) << c.Describe();
    EXPECT_GT(c.stats.num_accepted_tokens, 0) << c.Describe();
    EXPECT_LT(c.stats.num_accepted_tokens, c.stats.num_draft_tokens) << "no rejection: " << c.Describe();
  }
}

// Token trees (--spec-branches): alternatives verified beside each draft token, a leaf accepted
// where its draft token was rejected, and sampled output still follows the target exactly.
TEST_F(LosslessSamplingControls, TokenTreeSamplingMatchesTheExactPlainDistribution) {
  for (const SamplingParams& params : {kUnfiltered, kFiltered, kKeyed}) {
    auto drafter = MakeDrafter("draft-model");
    const testing::SamplingCheck c = Check(drafter.get(), params, &Verify, testing::PassingCheckTrials(kTrials), 2);
    EXPECT_TRUE(c.passed()) << c.Describe();
    // The leaves were verified, and accepted often: the check saw the tree's paths.
    EXPECT_GT(c.stats.num_leaf_tokens, 0);
    EXPECT_GT(c.stats.num_leaf_accepted, c.stats.num_drafts / 50) << c.Describe();
  }
}

// Side chains: n-gram branches with the tokens that followed each in its match, a tail verified
// after its accepted alternative in the same pass; sampled output still follows the target.
TEST_F(LosslessSamplingControls, TokenTreeTailSamplingMatchesTheExactPlainDistribution) {
  for (const SamplingParams& params : {kUnfiltered, kFiltered, kKeyed}) {
    auto drafter = MakeDrafter("ngram");
    const testing::SamplingCheck c = Check(drafter.get(), params, &Verify, testing::PassingCheckTrials(kTrials), 2, 3);
    EXPECT_TRUE(c.passed()) << c.Describe();
    EXPECT_GT(c.stats.num_leaf_accepted, 0) << c.Describe();
    EXPECT_GT(c.stats.num_tail_accepted, 0) << c.Describe();
  }
}

std::vector<SamplingCase> EveryDrafter() {
  std::vector<SamplingCase> out;
  for (const char* d : {"draft-model", "ngram", "ngram+draft-model", "synthetic"}) {
    out.push_back({d, kUnfiltered, "T1"});
    out.push_back({d, kFiltered, "T0.8_topk6_topp0.9_minp0.02"});
  }
  for (const char* d : {"draft-model", "ngram+draft-model"}) {
    out.push_back({d, kPenalized, "T1_penalties_bias"});
    out.push_back({d, kKeyed, "keyed_T0.8_topk6_topp0.9_minp0.02"});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(EveryDrafter, LosslessSampling, ::testing::ValuesIn(EveryDrafter()),
                         [](const auto& info) {
                           std::string n = info.param.drafter + "_" + info.param.label;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The check itself passes plain sampling (no drafter), so its failures below are the bugs'.
TEST_F(LosslessSamplingControls, PlainSamplingPassesTheCheck) {
  for (const SamplingParams& params : {kUnfiltered, kFiltered, kPenalized, kKeyed}) {
    const testing::SamplingCheck c = Check(nullptr, params);
    EXPECT_TRUE(c.passed()) << c.Describe();
  }
}

// Negative controls: each broken verification rule, and a drafter whose q is not the distribution
// it sampled from, must fail the check that the correct rule passes.
TEST_P(LosslessSamplingNegativeControls, BrokenSpeculativeSamplingFailsTheCheck) {
  const std::string& bug = GetParam();
  const auto broken = testing::ParseVerifierBug(bug);
  auto drafter = MakeDrafter(broken ? "draft-model" : bug);
  ASSERT_NE(drafter, nullptr);
  // A tree's bug shows only where alternatives are verified.
  const int branches = broken == testing::VerifierBug::kLeafAgainstP ? 2 : 0;
  const testing::SamplingCheck c =
      Check(drafter.get(), kFiltered, broken ? testing::BrokenVerifier(*broken) : &Verify, kTrials, branches);
  EXPECT_FALSE(c.passed()) << bug << " passed: " << c.Describe();
  EXPECT_GT(c.stats.num_draft_tokens, 0) << bug;
  std::printf("%s: %s\n", bug.c_str(), c.Describe().c_str());  // how clearly it fails
}

std::vector<std::string> EveryBug() {
  std::vector<std::string> out;
  for (testing::VerifierBug bug : testing::AllVerifierBugs()) out.emplace_back(testing::VerifierBugName(bug));
  out.push_back("unfiltered-q");
  return out;
}
INSTANTIATE_TEST_SUITE_P(EveryBug, LosslessSamplingNegativeControls, ::testing::ValuesIn(EveryBug()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace dspark
