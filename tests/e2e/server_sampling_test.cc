// The server's sampling controls end to end: logprobs in both endpoints' shapes (the target's,
// equal with and without speculation), seeds (a fresh one returned when none is sent; a seeded
// request identical with speculation on or off, on a server with a drafter or without, and under
// concurrent load), penalties and logit biases, and their errors.
#include <future>
#include <set>

#include "e2e/server_fixture.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;

json Body(bool chat, const std::string& text, int max_tokens) {
  json b = {{"max_tokens", max_tokens}, {"dspark", {{"ignore_eos", true}}}};
  if (chat) b["messages"] = {{{"role", "user"}, {"content", text}}};
  else b["prompt"] = text;
  return b;
}

const char* Path(bool chat) { return chat ? "/v1/chat/completions" : "/v1/completions"; }

json PostOk(TestServer* s, bool chat, const json& body) {
  auto r = httplib::Client("127.0.0.1", s->port).Post(Path(chat), {{"Authorization", "Bearer sk-test-123"}},
                                                      body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << body.dump() << " -> " << (r ? r->body : httplib::to_string(r.error()));
  return r && r->status == 200 ? json::parse(r->body) : json();
}

std::string Text(bool chat, const json& response) {
  const json& c = response["choices"][0];
  return chat ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
}

TEST_F(Server, LogprobsHaveOpenAisShapesAndAreTheTargetsWithAndWithoutSpeculation) {
  for (const bool chat : {false, true}) {
    json body = Body(chat, "logprobs please", 12);
    body["temperature"] = 0;
    if (chat) {
      body["logprobs"] = true;
      body["top_logprobs"] = 3;
    } else {
      body["logprobs"] = 3;
    }
    const json spec = PostOk(main_, chat, body);
    json plain_body = body;
    plain_body["dspark"]["speculate"] = false;
    const json plain = PostOk(main_, chat, plain_body);
    ASSERT_FALSE(spec.is_null() || plain.is_null());
    ASSERT_GT(spec["dspark"]["accepted"].get<int>(), 0) << "drafts must be accepted for the test to mean anything";
    EXPECT_EQ(Text(chat, spec), Text(chat, plain));
    const json& a = spec["choices"][0]["logprobs"];
    const json& b = plain["choices"][0]["logprobs"];
    const int n = spec["usage"]["completion_tokens"].get<int>();
    if (chat) {
      ASSERT_EQ(a["content"].size(), static_cast<size_t>(n)) << a.dump();
      for (size_t i = 0; i < a["content"].size(); ++i) {
        const json& t = a["content"][i];
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
        EXPECT_NEAR(t["logprob"].get<double>(), b["content"][i]["logprob"].get<double>(), 1e-4) << i;
        ASSERT_EQ(t["top_logprobs"].size(), 3u);
        // Greedy: the emitted token is the most probable one.
        EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
        EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["top_logprobs"][1]["logprob"].get<double>());
        EXPECT_FALSE(t["bytes"].empty());
      }
    } else {
      ASSERT_EQ(a["tokens"].size(), static_cast<size_t>(n)) << a.dump();
      ASSERT_EQ(a["token_logprobs"].size(), static_cast<size_t>(n));
      ASSERT_EQ(a["top_logprobs"].size(), static_cast<size_t>(n));
      // Offsets count the bytes of the pieces before (a byte token's piece is not valid text alone,
      // so the JSON string holds U+FFFD in its place).
      EXPECT_EQ(a["text_offset"][0].get<int64_t>(), 0);
      for (int i = 0; i < n; ++i) {
        if (i > 0) {
          EXPECT_GT(a["text_offset"][i].get<int64_t>(), a["text_offset"][i - 1].get<int64_t>());
        }
        EXPECT_NEAR(a["token_logprobs"][i].get<double>(), b["token_logprobs"][i].get<double>(), 1e-4) << i;
        // A dict by piece text: alternatives whose pieces render alike share one entry.
        EXPECT_GE(a["top_logprobs"][i].size(), 1u);
        EXPECT_LE(a["top_logprobs"][i].size(), 3u);
      }
    }
    // Streaming carries the same numbers, chunk by chunk.
    json stream_body = body;
    stream_body["stream"] = true;
    auto r = httplib::Client("127.0.0.1", main_->port)
                 .Post(Path(chat), {{"Authorization", "Bearer sk-test-123"}}, stream_body.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200);
    const SseStream sse = ParseSse(r->body);
    std::vector<double> streamed;
    for (const json& c : sse.chunks) {
      const json& lp = c["choices"][0]["logprobs"];
      if (lp.is_null()) continue;
      if (chat) {
        for (const json& t : lp["content"]) streamed.push_back(t["logprob"].get<double>());
      } else {
        for (const json& v : lp["token_logprobs"]) streamed.push_back(v.get<double>());
      }
    }
    ASSERT_EQ(streamed.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const double want = chat ? a["content"][i]["logprob"].get<double>() : a["token_logprobs"][i].get<double>();
      EXPECT_NEAR(streamed[i], want, 1e-4) << i;
    }
  }
}

TEST_F(Server, UnseededRequestsDrawAFreshSeedAndReturnIt) {
  json body = Body(false, "fresh seed", 8);
  body["temperature"] = 1.0;
  std::set<uint64_t> seeds;
  for (int i = 0; i < 3; ++i) {
    const json r = PostOk(main_, false, body);
    ASSERT_TRUE(r.contains("seed")) << r.dump();
    seeds.insert(r["seed"].get<uint64_t>());
    EXPECT_LT(r["seed"].get<uint64_t>(), uint64_t{1} << 53);  // exact in a JavaScript number
  }
  EXPECT_EQ(seeds.size(), 3u);
  body["seed"] = 77;
  EXPECT_EQ(PostOk(main_, false, body)["seed"], 77);
}

TEST_F(Server, SeededRequestsAreIdenticalWithOrWithoutSpeculationAndUnderLoad) {
  for (const bool chat : {false, true}) {
    json body = Body(chat, "seeded output", 24);
    body["temperature"] = 0.9;
    body["top_p"] = 0.95;
    body["seed"] = 4242;
    json off = body;
    off["dspark"]["speculate"] = false;
    const std::string reference = Text(chat, PostOk(main_, chat, off));
    const json spec = PostOk(main_, chat, body);
    EXPECT_EQ(Text(chat, spec), reference);
    EXPECT_GT(spec["dspark"]["drafted"].get<int>(), 0);
    // A server without a drafter (the same model; it has no chat template).
    if (!chat) {
      EXPECT_EQ(Text(chat, PostOk(plain_, chat, body)), reference);
    }
    // Under load: the same request beside 8 concurrent others, unseeded and sampling.
    std::vector<std::future<json>> others;
    for (int i = 0; i < 8; ++i) {
      json o = Body(false, "load " + std::to_string(i), 20);
      o["temperature"] = 1.0;
      others.push_back(std::async(std::launch::async, [o] { return PostOk(main_, false, o); }));
    }
    const json loaded = PostOk(main_, chat, body);
    for (auto& f : others) f.get();
    EXPECT_EQ(Text(chat, loaded), reference);
  }
}

TEST_F(Server, PenaltiesAndLogitBiasChangeTheOutputAndSpeculationKeepsIt) {
  json body = Body(false, "penalties", 16);
  body["temperature"] = 0;
  // Ban the first generated token: another one comes first.
  json with_ids = body;
  with_ids["dspark"]["return_tokens"] = true;
  const int banned = PostOk(main_, false, with_ids)["choices"][0]["tokens"][0].get<int>();
  json ban = with_ids;
  ban["logit_bias"] = {{std::to_string(banned), -100}};
  const json banned_out = PostOk(main_, false, ban);
  for (const json& id : banned_out["choices"][0]["tokens"]) EXPECT_NE(id.get<int>(), banned);
  for (const char* field : {"frequency_penalty", "presence_penalty"}) {
    json p = body;
    p[field] = 2.0;
    json plain = p;
    plain["dspark"]["speculate"] = false;
    const std::string with_spec = Text(false, PostOk(main_, false, p));
    EXPECT_EQ(with_spec, Text(false, PostOk(main_, false, plain))) << field;
  }
  json rep = body;
  rep["repeat_penalty"] = 1.5;
  rep["repeat_last_n"] = 16;
  json rep_plain = rep;
  rep_plain["dspark"]["speculate"] = false;
  EXPECT_EQ(Text(false, PostOk(main_, false, rep)), Text(false, PostOk(main_, false, rep_plain)));
  // A token id outside the vocabulary is a 400 naming logit_bias.
  json bad = body;
  bad["logit_bias"] = {{"99999999", 1}};
  auto r = httplib::Client("127.0.0.1", main_->port)
               .Post("/v1/completions", {{"Authorization", "Bearer sk-test-123"}}, bad.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "logit_bias") << r->body;
}

}  // namespace
}  // namespace dspark::serve

namespace dspark::serve {
namespace {

TEST_F(Server, SeveralChoicesShareThePromptAndEachHasItsOwnStream) {
  json body = Body(false, std::string(60, 'n') + " choices", 12);
  body["temperature"] = 0.9;
  body["seed"] = 99;
  const json one = PostOk(main_, false, body);
  const double hits_before = MetricValue(Get(main_, "/metrics")->body, "dspark:prompt_cache_hit_tokens_total");
  body["n"] = 3;
  const json three = PostOk(main_, false, body);
  ASSERT_EQ(three["choices"].size(), 3u) << three.dump();
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three["choices"][i]["index"], i);
    texts.insert(three["choices"][i]["text"].get<std::string>());
  }
  EXPECT_EQ(three["choices"][0]["text"], one["choices"][0]["text"]) << "choice 0 draws with the request's seed";
  EXPECT_GE(texts.size(), 2u) << "the choices draw from streams of their own";
  EXPECT_EQ(three["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]) << "the prompt is counted once";
  EXPECT_EQ(three["usage"]["completion_tokens"].get<int>(), 36);
  // The other choices copied the prompt's rows instead of computing them again.
  const double hits = MetricValue(Get(main_, "/metrics")->body, "dspark:prompt_cache_hit_tokens_total") - hits_before;
  EXPECT_GE(hits, 2.0 * (one["usage"]["prompt_tokens"].get<int>() - 1));
  // Streamed: every choice's chunks carry its index and add up to the same texts.
  body["stream"] = true;
  auto r = httplib::Client("127.0.0.1", main_->port)
               .Post("/v1/completions", {{"Authorization", "Bearer sk-test-123"}}, body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200);
  const SseStream sse = ParseSse(r->body);
  EXPECT_TRUE(sse.done);
  std::vector<std::string> streamed(3);
  std::vector<std::string> finish(3);
  bool usage = false;
  for (const json& c : sse.chunks) {
    if (c["choices"].empty()) {
      usage = c["usage"]["completion_tokens"] == 36;
      continue;
    }
    const int i = c["choices"][0]["index"].get<int>();
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 3);
    streamed[i] += c["choices"][0]["text"].get<std::string>();
    if (c["choices"][0]["finish_reason"].is_string()) finish[i] = c["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(usage) << "a last chunk with the usage of all choices";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(streamed[i], three["choices"][i]["text"]) << i;
    EXPECT_EQ(finish[i], "length") << i;
  }
}

}  // namespace
}  // namespace dspark::serve
