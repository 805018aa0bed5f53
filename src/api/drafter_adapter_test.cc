// The adapter from a user's dspark::api::Drafter to the engine's Drafter: what the engine gets
// for a proposal (the budget and the stop rule applied, q kept only when sampling, invalid
// proposals and exceptions turned into a Status). The engine's planner trims drafts again, so
// these are visible only here.
#include "api/drafter_adapter.h"

#include "dspark/error.h"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>

namespace dspark::api::detail {
namespace {

constexpr int kVocab = 16;

class FnDrafter : public api::Drafter {
 public:
  explicit FnDrafter(std::function<DraftProposal(const DraftRequest&)> f) : f_(std::move(f)) {}
  std::string Name() const override { return "fn"; }
  DraftProposal Propose(const DraftRequest& r) override {
    last_budget = r.budget;
    last_context = r.context.ToVector();
    return f_(r);
  }
  int last_budget = 0;
  std::vector<int32_t> last_context;

 private:
  std::function<DraftProposal(const DraftRequest&)> f_;
};

// Keeps tokens with confidence >= 0.5; asks for more only while fewer than `more_below` are kept.
class TestStop : public DraftStop {
 public:
  explicit TestStop(size_t more_below = 100) : more_below_(more_below) {}
  bool Keep(float c) const override { return c >= 0.5f; }
  bool More(std::span<const float> kept) const override { return kept.size() < more_below_; }

 private:
  size_t more_below_;
};

DraftProposal Ten(const DraftRequest&) {
  DraftProposal p;
  for (int i = 0; i < 10; ++i) {
    p.tokens.push_back(i);
    p.probs.push_back(i == 5 ? 0.2f : 0.9f);
  }
  return p;
}

Result<Draft> ProposeWith(DrafterAdapter& a, int budget, const DraftStop* stop, float temperature = 0.0f) {
  const std::vector<int32_t> context = {3, 1, 4, 1, 5};
  DraftParams params;
  params.budget = budget;
  params.stop = stop;
  params.sampling.temperature = temperature;
  Rng rng(7);
  return a.Propose(0, context, params, rng);
}

TEST(DrafterAdapter, KeepsTheBudget) {
  auto user = std::make_shared<FnDrafter>(Ten);
  DrafterAdapter a(user, kVocab, 16);
  auto d = ProposeWith(a, 4, nullptr);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(d->probs.size(), 4u);
  EXPECT_EQ(user->last_budget, 4);
  EXPECT_EQ(user->last_context, (std::vector<int32_t>{3, 1, 4, 1, 5}));
  EXPECT_EQ(a.Name(), "fn");
  EXPECT_EQ(a.Needs().max_draft, 16);
}

TEST(DrafterAdapter, AppliesTheStopRuleToReportedConfidences) {
  DrafterAdapter a(std::make_shared<FnDrafter>(Ten), kVocab, 16);
  TestStop keep_confident;
  auto d = ProposeWith(a, 8, &keep_confident);  // token 5 has confidence 0.2: Keep says no
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(d->probs.size(), 5u);
  TestStop three(3);  // More says no once three are kept
  d = ProposeWith(a, 8, &three);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{0, 1, 2}));
  // Without confidences there is nothing to ask: the budget alone.
  DrafterAdapter plain(std::make_shared<FnDrafter>([](const DraftRequest&) {
                         DraftProposal p;
                         p.tokens = {1, 2, 3, 4, 5, 6};
                         return p;
                       }),
                       kVocab, 16);
  d = ProposeWith(plain, 5, &three);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens.size(), 5u);
  EXPECT_TRUE(d->probs.empty());
}

TEST(DrafterAdapter, KeepsQOnlyWhenSamplingAndChecksIt) {
  auto with_q = [](float own) {
    return std::make_shared<FnDrafter>([own](const DraftRequest& r) {
      DraftProposal p;
      for (int i = 0; i < 3; ++i) {
        const int32_t tok = static_cast<int32_t>(r.Uniform() * kVocab);
        p.tokens.push_back(tok);
        std::vector<float> q(kVocab, (1.0f - own) / (kVocab - 1));
        q[tok] = own;
        p.q.push_back(q);
      }
      return p;
    });
  };
  DrafterAdapter a(with_q(0.5f), kVocab, 16);
  auto greedy = ProposeWith(a, 2, nullptr);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(greedy->tokens.size(), 2u);
  EXPECT_TRUE(greedy->q.empty());
  auto sampled = ProposeWith(a, 2, nullptr, 0.8f);
  ASSERT_TRUE(sampled.ok());
  ASSERT_EQ(sampled->q.size(), 2u);
  EXPECT_EQ(sampled->q[0].size(), static_cast<size_t>(kVocab));
  EXPECT_EQ(sampled->tokens, greedy->tokens);  // the same seed: the same draws
  DrafterAdapter zero(with_q(0.0f), kVocab, 16);
  auto bad = ProposeWith(zero, 2, nullptr, 0.8f);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(zero.error().find("no probability"), std::string::npos) << zero.error();
}

TEST(DrafterAdapter, InvalidProposalsAndExceptionsBecomeAStatus) {
  const std::vector<std::function<DraftProposal(const DraftRequest&)>> cases = {
      [](const DraftRequest&) -> DraftProposal { throw std::runtime_error("bug in Propose"); },
      [](const DraftRequest&) {
        DraftProposal p;
        p.tokens = {1, kVocab};
        return p;
      },
      [](const DraftRequest&) {
        DraftProposal p;
        p.tokens = {1, -1};
        return p;
      },
      [](const DraftRequest&) {
        DraftProposal p;
        p.tokens = {1, 2};
        p.probs = {0.5f, 1.5f};
        return p;
      },
      [](const DraftRequest&) {
        DraftProposal p;
        p.tokens = {1, 2};
        p.q = {std::vector<float>(kVocab, 1.0f / kVocab)};
        return p;
      },
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    DrafterAdapter a(std::make_shared<FnDrafter>(cases[i]), kVocab, 16);
    auto d = ProposeWith(a, 4, nullptr, 0.8f);
    EXPECT_FALSE(d.ok()) << "case " << i;
    EXPECT_NE(a.error().find("drafter 'fn'"), std::string::npos) << a.error();
    a.ClearError();
    EXPECT_TRUE(a.error().empty());
  }
}

TEST(DrafterAdapter, UniformNeedsTheEnginesGenerator) {
  DraftRequest r;
  EXPECT_THROW(r.Uniform(), api::Error);
}

}  // namespace
}  // namespace dspark::api::detail
