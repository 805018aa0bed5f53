// The OpenAI-compatible server end to end, its output against independent references: greedy
// output equals plain greedy decoding outside every engine, seeded samples equal a reference
// sampler's and the library's, seeds and temperature change the samples as they should. Servers
// on free loopback ports over tiny random-weight models (server_fixture.h).
#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "e2e/server_fixture.h"
#include "model/testing/tiny_models.h"
#include "sampling/sampling.h"
#include "speculative/engine.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;

// The prompt ids the server makes of a /v1/completions string prompt.
std::vector<int32_t> PromptIds(const TestServer& s, const std::string& prompt) {
  EncodeOptions eo;
  eo.add_eos = false;
  return s.tokenizer->Encode(prompt, eo);
}

// Plain sampled decoding written independently of the engines (as testing::ReferenceGreedy): one
// Forward per token over an F16 cache like the server's, a draw by SampleToken for the prompt's
// last row and then for each new token, never stopping at end-of-generation. Draws come from
// Rng(seed) in turn, or for a keyed request (what the server makes of a seeded one) from
// KeyedRng(seed, i) for the i-th generated token.
std::vector<int32_t> ReferenceSampled(Model& m, ThreadPool& pool, const std::vector<int32_t>& prompt, int n,
                                      const SamplingParams& params) {
  KvCache cache(m.config(), 1, 512);
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int>(i), 0, i + 1 == prompt.size());
  auto out = m.Forward(b, cache, pool);
  EXPECT_TRUE(out.ok()) << out.status().message();
  Rng rng(params.seed);
  std::vector<float> scratch;
  std::vector<int32_t> gen;
  int pos = static_cast<int>(prompt.size());
  while (out.ok() && static_cast<int>(gen.size()) < n) {
    Rng keyed = KeyedRng(params.seed, static_cast<int64_t>(gen.size()));
    const int32_t t = SampleToken(out->logits.data(), m.config().n_vocab, params, params.keyed ? keyed : rng, &scratch);
    gen.push_back(t);
    if (static_cast<int>(gen.size()) == n) break;
    Batch one;
    one.Add(t, pos++, 0, true);
    out = m.Forward(one, cache, pool);
    EXPECT_TRUE(out.ok()) << out.status().message();
  }
  return gen;
}

struct Generated {
  std::string text;
  std::vector<int32_t> ids;
  std::string finish;
  json dspark;  // the spec statistics (non-streaming: the body's; streaming: the last chunk's)
  std::string error;
};

// Posts a /v1/completions body with return_tokens and collects text and ids, streamed or not.
Generated Complete(TestServer* s, json body, bool stream, const httplib::Headers& headers) {
  body["stream"] = stream;
  body["dspark"]["return_tokens"] = true;
  httplib::Client c("127.0.0.1", s->port);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/completions", headers, body.dump(), "application/json");
  Generated g;
  if (!r || r->status != 200) {
    g.error = r ? std::to_string(r->status) + " " + r->body : httplib::to_string(r.error());
    return g;
  }
  if (!stream) {
    const json j = json::parse(r->body);
    g.text = j["choices"][0]["text"];
    g.ids = j["choices"][0]["tokens"].get<std::vector<int32_t>>();
    g.finish = j["choices"][0]["finish_reason"];
    g.dspark = j["dspark"];
    return g;
  }
  const SseStream sse = ParseSse(r->body);
  if (!sse.done) g.error = "stream without [DONE]: " + r->body;
  for (const json& chunk : sse.chunks) {
    const json& choice = chunk["choices"][0];
    g.text += choice["text"].get<std::string>();
    if (choice.contains("tokens"))
      for (const json& t : choice["tokens"]) g.ids.push_back(t.get<int32_t>());
    if (!choice["finish_reason"].is_null()) g.finish = choice["finish_reason"];
    if (chunk.contains("dspark")) g.dspark = chunk["dspark"];
  }
  return g;
}

json SampledCompletion(const std::string& prompt, int max_tokens, double temperature, uint64_t seed,
                       double top_p = 1.0, int top_k = 0) {
  json body = Completion(prompt, max_tokens);
  body["temperature"] = temperature;
  body["seed"] = seed;
  body["top_p"] = top_p;
  if (top_k > 0) body["top_k"] = top_k;
  return body;
}

TEST_F(Server, GreedyOutputEqualsPlainReferenceDecoding) {
  // Through the speculative server (a Q8 draft model, mostly accepted) and a plain one, streamed
  // and not: the ids of plain greedy decoding outside every engine, and the text they decode to.
  const int n = 24;
  int drafted = 0;
  for (const char* prompt : {"The quick brown fox", "greedy 12 34", "q: what? a:"}) {
    const std::vector<int32_t> want = testing::ReferenceGreedy(*ref_model_, *ref_pool_, PromptIds(*main_, prompt), n);
    ASSERT_EQ(want.size(), static_cast<size_t>(n));
    const std::string want_text = AsJsonText(main_->tokenizer->Decode(want));
    ASSERT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 8u) << "degenerate reference output";
    for (TestServer* s : {main_, plain_})
      for (const bool stream : {false, true}) {
        SCOPED_TRACE(std::string(prompt) + (s == main_ ? ", drafter" : ", no drafter") + (stream ? ", streamed" : ""));
        const Generated g = Complete(s, Completion(prompt, n), stream, s == main_ ? Auth() : httplib::Headers{});
        ASSERT_EQ(g.error, "");
        EXPECT_EQ(g.ids, want);
        EXPECT_EQ(g.text, want_text);
        EXPECT_EQ(g.finish, "length");
        if (s == main_) drafted += g.dspark["accepted"].get<int>();
      }
  }
  EXPECT_GT(drafted, 0) << "the drafter's tokens were never accepted: the speculative path went untested";
}

TEST_F(Server, SeededSamplingWithoutDrafterEqualsLibrarySampling) {
  // temperature, top_p, top_k and seed reach the sampler: the server's samples are exactly the
  // reference sampler's, and the library's own plain engine's, for the same parameters.
  struct Case {
    const char* prompt;
    double temperature;
    uint64_t seed;
    double top_p;
    int top_k;
  };
  const std::vector<Case> cases = {
      {"sample", 0.9, 1234, 0.95, 0},  {"sample", 0.9, 1235, 0.95, 0}, {"sample", 0.4, 1234, 1.0, 0},
      {"sample", 1.5, 1234, 1.0, 0},   {"sample", 1.5, 1234, 0.3, 0},  {"sample", 1.2, 77, 1.0, 5},
      {"another prompt", 1.0, 9, 0.8, 0},
  };
  SpeculativeEngine library(*ref_model_, *plain_->tokenizer, *ref_pool_, 512);
  const int n = 16;
  std::set<std::vector<int32_t>> distinct;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("'{}' T={} seed={} top_p={} top_k={}", c.prompt, c.temperature, c.seed, c.top_p, c.top_k));
    SamplingParams sp;
    sp.temperature = static_cast<float>(c.temperature);
    sp.seed = c.seed;
    sp.top_p = static_cast<float>(c.top_p);
    sp.top_k = c.top_k;
    sp.keyed = true;  // a request with a seed draws keyed
    const std::vector<int32_t> prompt = PromptIds(*plain_, c.prompt);
    const std::vector<int32_t> want = ReferenceSampled(*ref_model_, *ref_pool_, prompt, n, sp);
    GenerateOptions go;
    go.max_new_tokens = n;
    go.sampling = sp;
    go.ignore_eos = true;
    auto lib = library.GenerateFromIds(prompt, go);
    ASSERT_TRUE(lib.ok()) << lib.status().message();
    EXPECT_EQ(lib->ids, want) << "the library's plain engine differs from the reference sampler";
    for (const bool stream : {false, true}) {
      const Generated g =
          Complete(plain_, SampledCompletion(c.prompt, n, c.temperature, c.seed, c.top_p, c.top_k), stream, {});
      ASSERT_EQ(g.error, "");
      EXPECT_EQ(g.ids, want) << (stream ? "streamed" : "");
      EXPECT_EQ(g.text, AsJsonText(plain_->tokenizer->Decode(want))) << (stream ? "streamed" : "");
    }
    distinct.insert(want);
  }
  // The cases are not one output in disguise (each parameter above changes the sample).
  EXPECT_EQ(distinct.size(), cases.size());
}

TEST_F(Server, DifferentSeedsGiveDifferentSamples) {
  // A server that ignored the seed (one fixed stream) or the temperature (greedy) would give one
  // text for all of them. With and without a drafter (speculative sampling draws differently).
  for (TestServer* s : {plain_, main_}) {
    SCOPED_TRACE(s == main_ ? "drafter" : "no drafter");
    std::set<std::string> texts;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      const Generated g =
          Complete(s, SampledCompletion("diverse", 16, 1.0, seed), false, s == main_ ? Auth() : httplib::Headers{});
      ASSERT_EQ(g.error, "");
      EXPECT_EQ(g.ids.size(), 16u);
      texts.insert(g.text);
    }
    EXPECT_GE(texts.size(), 6u);
  }
}

TEST_F(Server, TemperatureShapesTheDistribution) {
  // Nearly cold: every seed gives the greedy text (on this prompt's greedy path the top logit
  // leads the next by >= 0.48, so at T = 0.02 a step leaves it with probability < 300 e^-24).
  // Hot: no seed does. A server ignoring the temperature (sampling at 1) fails the first; one
  // decoding greedily, the second.
  const std::string prompt = "hello world";
  const std::vector<int32_t> greedy = testing::ReferenceGreedy(*ref_model_, *ref_pool_, PromptIds(*plain_, prompt), 16);
  int cold_greedy = 0, hot_greedy = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const Generated cold = Complete(plain_, SampledCompletion(prompt, 16, 0.02, seed), false, {});
    const Generated hot = Complete(plain_, SampledCompletion(prompt, 16, 1.5, seed), false, {});
    ASSERT_EQ(cold.error, "");
    ASSERT_EQ(hot.error, "");
    cold_greedy += cold.ids == greedy;
    hot_greedy += hot.ids == greedy;
  }
  EXPECT_EQ(cold_greedy, 8);
  EXPECT_EQ(hot_greedy, 0);
  // The first token over 32 seeds at three temperatures, on a prompt whose first top logit leads
  // by 1.6: the lower the temperature, the more often the greedy token is drawn and the fewer
  // distinct tokens appear. The bounds leave a wide margin around what these seeds draw (the
  // trace prints the counts).
  const std::string spread = "greedy 12 34";
  const int32_t top = testing::ReferenceGreedy(*ref_model_, *ref_pool_, PromptIds(*plain_, spread), 1)[0];
  auto first_tokens = [&](double temperature) {
    std::map<int32_t, int> counts;
    for (uint64_t seed = 100; seed < 132; ++seed) {
      const Generated g = Complete(plain_, SampledCompletion(spread, 1, temperature, seed), false, {});
      EXPECT_EQ(g.error, "");
      if (!g.ids.empty()) ++counts[g.ids[0]];
    }
    return counts;
  };
  const std::map<int32_t, int> t05 = first_tokens(0.5), t10 = first_tokens(1.0), t20 = first_tokens(2.0);
  auto on_top = [&](const std::map<int32_t, int>& m) {
    auto it = m.find(top);
    return it == m.end() ? 0 : it->second;
  };
  SCOPED_TRACE(fmt::format("greedy first token {} drawn {}/{}/{} times of 32; {}/{}/{} distinct tokens at T=0.5/1/2",
                           top, on_top(t05), on_top(t10), on_top(t20), t05.size(), t10.size(), t20.size()));
  EXPECT_GE(on_top(t05), 20);
  EXPECT_LE(on_top(t10), on_top(t05) - 10);
  EXPECT_LE(on_top(t20), on_top(t10));
  EXPECT_LE(t05.size(), 8u);
  EXPECT_GE(t10.size(), t05.size() + 10);
  EXPECT_GE(t20.size(), t10.size());
}

}  // namespace
}  // namespace dspark::serve
