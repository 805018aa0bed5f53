// The C++ API as a user sees it: public headers only (include/dspark), linked to libdspark.so.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dspark/dspark.h"

namespace ds = dspark::api;

namespace {

const std::string kModels = std::string(DSPARK_SOURCE_DIR) + "/models/";
const std::string kTarget = kModels + "ref-target.gguf";
const std::string kDraft = kModels + "ref-draft.gguf";
const std::string kDSpark = kModels + "ref-dspark.gguf";
const char* kPrompt = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n";

const ds::Model& Target() {
  static const ds::Model model = ds::Model::Load(kTarget);
  return model;
}

ds::GenerateOptions Greedy(int n) {
  ds::GenerateOptions o;
  o.max_new_tokens = n;
  return o;
}

ds::EngineOptions Threads(int n) {
  ds::EngineOptions o;
  o.threads = n;
  return o;
}

const ds::GenerateResult& Reference() {
  static const ds::GenerateResult r = [] {
    ds::Engine e(Target(), Threads(1));
    return e.Generate(kPrompt, Greedy(40));
  }();
  return r;
}

template <typename F>
ds::ErrorCode CodeOf(F&& f) {
  try {
    f();
  } catch (const ds::Error& e) {
    EXPECT_NE(std::string(e.what()), "");
    return e.code();
  }
  ADD_FAILURE() << "no dspark::api::Error thrown";
  return ds::ErrorCode::kInternal;
}

TEST(Api, ModelInfoAndTokenizer) {
  const ds::ModelInfo& info = Target().info();
  EXPECT_EQ(info.arch, "qwen3");
  EXPECT_GT(info.n_layer, 0);
  EXPECT_GT(info.n_ctx_train, 0);
  EXPECT_GT(info.n_params, 0);
  ds::Tokenizer tok = Target().tokenizer();
  EXPECT_EQ(tok.n_vocab(), info.n_vocab);
  const std::string text = "for i in range(10):\n    print(i)";
  const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok.Decode(ids), text);
  EXPECT_EQ(ds::Tokenizer::Load(kTarget).Encode(text, false), ids);
  EXPECT_FALSE(tok.eog_ids().empty());
  EXPECT_TRUE(tok.IsEog(tok.eog_ids().front()));
  EXPECT_STREQ(ds::Version(), DSPARK_VERSION_STRING);
  EXPECT_FALSE(ds::CpuTarget().empty());
}

TEST(Api, ErrorsAreExceptionsWithTheEnginesMessage) {
  EXPECT_EQ(CodeOf([] { ds::Model::Load(kModels + "no-such-file.gguf"); }), ds::ErrorCode::kNotFound);
  EXPECT_EQ(CodeOf([] { ds::Model::Load(kDSpark); }), ds::ErrorCode::kInvalidArgument);
  try {
    ds::Model::Load(kModels + "no-such-file.gguf");
  } catch (const std::runtime_error& e) {  // Error is a std::runtime_error
    EXPECT_NE(std::string(e.what()).find("no-such-file.gguf"), std::string::npos) << e.what();
  }
  ds::EngineOptions bad;
  bad.drafter.type = "no-such-drafter";
  EXPECT_EQ(CodeOf([&] { ds::Engine e(Target(), bad); }), ds::ErrorCode::kInvalidArgument);
  ds::EngineOptions mode;
  mode.schedule.mode = "fast";
  EXPECT_EQ(CodeOf([&] { ds::Engine e(Target(), mode); }), ds::ErrorCode::kInvalidArgument);
  ds::EngineOptions cache;
  cache.cache_type = "q4";
  EXPECT_EQ(CodeOf([&] { ds::Engine e(Target(), cache); }), ds::ErrorCode::kInvalidArgument);
  ds::EngineOptions tiny = Threads(1);
  tiny.n_ctx = 8;
  ds::Engine e(Target(), tiny);
  EXPECT_EQ(CodeOf([&] { e.Generate(std::string(200, 'x'), Greedy(4)); }), ds::ErrorCode::kOutOfRange);
  EXPECT_EQ(CodeOf([&] { e.GenerateFromIds({}, Greedy(4)); }), ds::ErrorCode::kInvalidArgument);
  ds::GenerateOptions hot = Greedy(4);
  hot.temperature = -1;
  EXPECT_EQ(CodeOf([&] { e.Generate("x", hot); }), ds::ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf([&] { e.GenerateFromIds({1 << 30}, Greedy(4)); }), ds::ErrorCode::kInvalidArgument);
}

TEST(Api, StreamsCancelsAndRethrowsCallbackExceptions) {
  ds::Engine e(Target(), Threads(1));
  std::string streamed;
  std::vector<int32_t> ids;
  const ds::GenerateResult r = e.Generate(kPrompt, Greedy(40), [&](int32_t id, std::string_view text, bool) {
    streamed += text;
    if (id >= 0) ids.push_back(id);
    return true;
  });
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(ids, r.ids);
  EXPECT_EQ(r.ids, Reference().ids);
  EXPECT_EQ(r.stop_reason, ds::StopReason::kLength);
  EXPECT_EQ(r.stats.generated_tokens, 40);

  int seen = 0;
  const ds::GenerateResult c = e.Generate(kPrompt, Greedy(40), [&](int32_t, std::string_view, bool) { return ++seen < 5; });
  EXPECT_EQ(c.stop_reason, ds::StopReason::kCancelled);
  EXPECT_EQ(c.ids.size(), 5u);

  EXPECT_THROW(e.Generate(kPrompt, Greedy(40), [](int32_t, std::string_view, bool) -> bool { throw std::logic_error("boom"); }),
               std::logic_error);
  // The engine is still usable after all that.
  EXPECT_EQ(e.Generate(kPrompt, Greedy(40)).ids, Reference().ids);
}

TEST(Api, BuiltInDraftersGiveThePlainOutput) {
  for (const std::string& spec : std::vector<std::string>{"ngram", "auto:" + kDraft, "auto:" + kDSpark, "draft-simple:" + kDraft}) {
    ds::EngineOptions o = Threads(1);
    const size_t colon = spec.find(':');
    o.drafter.type = spec.substr(0, colon);
    if (colon != std::string::npos) o.drafter.model = spec.substr(colon + 1);
    o.schedule.n_max = 4;
    o.schedule.mode = "cut";  // not the cost schedule: drafting must not depend on measured timings
    ds::Engine e(Target(), o);
    EXPECT_FALSE(e.drafter_name().empty());
    const ds::GenerateResult r = e.Generate(kPrompt, Greedy(40));
    EXPECT_EQ(r.ids, Reference().ids) << spec;
    EXPECT_GT(r.stats.drafted_tokens, 0) << spec;
    EXPECT_EQ(r.stats.drafter_fallbacks, 0) << spec;
  }
}

TEST(Api, TokenTreesGiveThePlainOutput) {
  ds::EngineOptions o = Threads(1);
  o.drafter.type = "draft-simple";
  o.drafter.model = kDraft;
  o.schedule.n_max = 3;
  o.schedule.mode = "cut";  // every alternative verified: no dependence on measured timings
  o.schedule.branches = 2;
  ds::Engine e(Target(), o);
  const ds::GenerateResult r = e.Generate(kPrompt, Greedy(40));
  EXPECT_EQ(r.ids, Reference().ids);
  EXPECT_GT(r.stats.leaves, 0);
  EXPECT_LE(r.stats.leaves_accepted, r.stats.leaves);
  o.schedule.branches = 9;
  EXPECT_EQ(CodeOf([&] { ds::Engine bad(Target(), o); }), ds::ErrorCode::kInvalidArgument);
}

// Proposes what its function returns, and records the requests it saw.
class ScriptedDrafter : public ds::Drafter {
 public:
  explicit ScriptedDrafter(std::function<ds::DraftProposal(const ds::DraftRequest&)> f) : f_(std::move(f)) {}
  std::string Name() const override { return "scripted"; }
  void Begin(int) override { ++begins; }
  ds::DraftProposal Propose(const ds::DraftRequest& r) override {
    ++calls;
    max_budget = std::max(max_budget, r.budget);
    return f_(r);
  }
  void End(int) override { ++ends; }
  int begins = 0, ends = 0, calls = 0, max_budget = 0;

 private:
  std::function<ds::DraftProposal(const ds::DraftRequest&)> f_;
};

// The reference continuation as a drafter's proposal: every draft is right.
ds::DraftProposal Oracle(const ds::DraftRequest& r, int prompt_len, int extra) {
  ds::DraftProposal p;
  const size_t done = r.context.size() - prompt_len;
  const auto& ref = Reference().ids;
  for (size_t i = done; i < ref.size() && static_cast<int>(p.tokens.size()) < r.budget + extra; ++i)
    p.tokens.push_back(ref[i]);
  return p;
}

int PromptLen() { return static_cast<int>(Target().tokenizer().Encode(kPrompt).size()); }

TEST(Api, CustomDrafterIsVerifiedAndItsBudgetHonoured) {
  const int prompt_len = PromptLen();
  auto d = std::make_shared<ScriptedDrafter>([&](const ds::DraftRequest& r) { return Oracle(r, prompt_len, 10); });
  ds::EngineOptions o = Threads(1);
  o.custom_drafter = d;
  o.schedule.n_max = 5;
  ds::Engine e(Target(), o);
  EXPECT_EQ(e.drafter_name(), "scripted");
  const ds::GenerateResult r = e.Generate(kPrompt, Greedy(40));
  EXPECT_EQ(r.ids, Reference().ids);
  EXPECT_TRUE(r.drafter_error.empty()) << r.drafter_error;
  EXPECT_EQ(d->begins, 1);
  EXPECT_EQ(d->ends, 1);
  EXPECT_LE(d->max_budget, 5);
  EXPECT_EQ(r.stats.accepted_tokens, r.stats.drafted_tokens);  // the oracle is always right
  EXPECT_LE(r.stats.drafted_tokens, 5 * r.stats.drafts);       // 10 extra tokens proposed, budget kept
  EXPECT_LT(r.stats.target_calls, 40 / 3);

  // A custom drafter replaces the built-in ones.
  ds::EngineOptions both = o;
  both.drafter.type = "ngram";
  EXPECT_EQ(CodeOf([&] { ds::Engine x(Target(), both); }), ds::ErrorCode::kInvalidArgument);

  // Prompt lookup in front of it.
  ds::EngineOptions lookup = o;
  lookup.drafter.ngram_first = true;
  ds::Engine l(Target(), lookup);
  EXPECT_EQ(l.drafter_name(), "ngram+scripted");
  EXPECT_EQ(l.Generate(kPrompt, Greedy(40)).ids, Reference().ids);

  // A wrong drafter is verified away.
  auto wrong = std::make_shared<ScriptedDrafter>([](const ds::DraftRequest& r) {
    ds::DraftProposal p;
    p.tokens.assign(r.budget, (r.context.back() + 7) % r.n_vocab);
    return p;
  });
  o.custom_drafter = wrong;
  ds::Engine w(Target(), o);
  EXPECT_EQ(w.Generate(kPrompt, Greedy(40)).ids, Reference().ids);
}

TEST(Api, CustomDrafterConfidencesDriveTheStopRule) {
  const int prompt_len = PromptLen();
  auto d = std::make_shared<ScriptedDrafter>([&](const ds::DraftRequest& r) {
    ds::DraftProposal p = Oracle(r, prompt_len, 0);
    // Confident in the first two tokens only.
    for (size_t i = 0; i < p.tokens.size(); ++i) p.probs.push_back(i < 2 ? 0.9f : 0.1f);
    return p;
  });
  ds::EngineOptions o = Threads(1);
  o.custom_drafter = d;
  o.schedule.n_max = 6;
  o.schedule.p_min = 0.5f;
  ds::Engine e(Target(), o);
  const ds::GenerateResult r = e.Generate(kPrompt, Greedy(40));
  EXPECT_EQ(r.ids, Reference().ids);
  EXPECT_GT(r.stats.drafts, 0);
  EXPECT_LE(r.stats.drafted_tokens, 2 * r.stats.drafts);  // cut at the first token below p_min
}

TEST(Api, BrokenCustomDrafterFallsBackToPlainDecoding) {
  const std::vector<std::function<ds::DraftProposal(const ds::DraftRequest&)>> broken = {
      [](const ds::DraftRequest& r) {
        ds::DraftProposal p;
        p.tokens = {r.n_vocab + 5};
        return p;
      },
      [](const ds::DraftRequest&) -> ds::DraftProposal { throw std::runtime_error("drafter bug"); },
      [](const ds::DraftRequest&) {
        ds::DraftProposal p;
        p.tokens = {1, 2};
        p.probs = {0.5f};  // one short
        return p;
      },
  };
  for (const auto& f : broken) {
    ds::EngineOptions o = Threads(1);
    o.custom_drafter = std::make_shared<ScriptedDrafter>(f);
    ds::Engine e(Target(), o);
    const ds::GenerateResult r = e.Generate(kPrompt, Greedy(40));
    EXPECT_EQ(r.ids, Reference().ids);
    EXPECT_EQ(r.stats.drafter_fallbacks, 1);
    EXPECT_NE(r.drafter_error.find("scripted"), std::string::npos) << r.drafter_error;
    // The next request starts with the drafter again, and the error is its own.
    const ds::GenerateResult again = e.Generate(kPrompt, Greedy(40));
    EXPECT_EQ(again.stats.drafter_fallbacks, 1);
  }
}

TEST(Api, SampledCustomDrafterWithQIsReproducible) {
  // Samples uniformly from the vocabulary and says so in q: exact, if rarely accepted.
  auto make = [] {
    return std::make_shared<ScriptedDrafter>([](const ds::DraftRequest& r) {
      ds::DraftProposal p;
      std::vector<float> uniform(r.n_vocab, 1.0f / r.n_vocab);
      for (int i = 0; i < r.budget; ++i) {
        p.tokens.push_back(std::min(r.n_vocab - 1, static_cast<int>(r.Uniform() * r.n_vocab)));
        p.q.push_back(uniform);
      }
      return p;
    });
  };
  ds::GenerateOptions go = Greedy(32);
  go.temperature = 0.8f;
  go.top_k = 40;
  go.seed = 11;
  go.ignore_eos = true;
  std::vector<std::vector<int32_t>> outs;
  for (int i = 0; i < 2; ++i) {
    ds::EngineOptions o = Threads(1);
    o.custom_drafter = make();
    o.schedule.n_max = 3;
    ds::Engine e(Target(), o);
    const ds::GenerateResult r = e.Generate(kPrompt, go);
    EXPECT_TRUE(r.drafter_error.empty()) << r.drafter_error;
    EXPECT_GT(r.stats.drafted_tokens, 0);
    outs.push_back(r.ids);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0].size(), 32u);

  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f};
  ds::SamplingConfig sc;
  sc.temperature = 1.0f;
  const std::vector<float> p = ds::SamplingDistribution(logits.data(), 4, sc);
  double sum = 0;
  for (float x : p) sum += x;
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_GT(p[2], p[1]);
  sc.temperature = 0;
  EXPECT_EQ(ds::SamplingDistribution(logits.data(), 4, sc), (std::vector<float>{0, 0, 1, 0}));
}

TEST(Api, EnginesShareAModelAcrossThreadsAndSerialiseCalls) {
  ds::Engine shared(Target(), Threads(1));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      ds::Engine own(Target(), Threads(1));
      if (own.Generate(kPrompt, Greedy(40)).ids != Reference().ids) ++failures;
    });
    threads.emplace_back([&] {
      if (shared.Generate(kPrompt, Greedy(40)).ids != Reference().ids) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(shared.cumulative_stats().generated_tokens, 80);
}

}  // namespace
