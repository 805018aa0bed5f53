// The OpenAI-compatible server end to end: a real httplib client (and raw sockets for
// disconnects) against servers started on free loopback ports over tiny random-weight models.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/server_fixture.h"
#include "model/testing/tiny_models.h"
#include "serve/openai_schema.h"
#include "sampling/sampling.h"
#include "spec/engine.h"
#include "template/chat_template.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The main server: API key, a real chat template, a draft-model drafter (a Q8 copy of the
    // target, so drafts are mostly accepted), 4 slots.
    TestServerConfig main;
    main.api_key = kKey;
    main.chat_template = ReadFile(std::string(DSPARK_SOURCE_DIR) + "/tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    main.draft = DraftKind::kQ8Copy;
    main.parallel = 4;
    main.max_queue = 32;
    main.max_body_bytes = 64 << 10;
    main_ = StartTestServer(main).release();
    // A plain server: no key, no chat template, one slot, one queue place, and a drafter that
    // sleeps 5 ms per step and proposes nothing, so generations are slow enough to observe.
    TestServerConfig slow;
    slow.draft = DraftKind::kSlowEmpty;
    slow.parallel = 1;
    slow.max_queue = 1;
    slow_ = StartTestServer(slow).release();
    // A server without a drafter: plain decoding, whose seeded samples the library reproduces.
    TestServerConfig plain;
    plain.draft = DraftKind::kNone;
    plain.parallel = 2;
    plain_ = StartTestServer(plain).release();
    // The reference: the same model file loaded once more, decoded outside every engine.
    auto m = Model::FromFile(main_->file);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ref_model_ = std::move(*m).release();
    ref_pool_ = new ThreadPool(1);
  }
  static void TearDownTestSuite() {
    delete main_;
    delete slow_;
    delete plain_;
    delete ref_model_;
    delete ref_pool_;
  }

  static constexpr const char* kKey = "sk-test-123";
  static TestServer* main_;
  static TestServer* slow_;
  static TestServer* plain_;
  static Model* ref_model_;
  static ThreadPool* ref_pool_;

  static httplib::Headers Auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

  static httplib::Result Post(TestServer* s, const std::string& path, const std::string& body,
                              const httplib::Headers& headers = Auth()) {
    httplib::Client c("127.0.0.1", s->port);
    c.set_read_timeout(60, 0);
    return c.Post(path.c_str(), headers, body, "application/json");
  }
  static httplib::Result Get(TestServer* s, const std::string& path, const httplib::Headers& headers = Auth()) {
    httplib::Client c("127.0.0.1", s->port);
    c.set_read_timeout(60, 0);
    return c.Get(path.c_str(), headers);
  }
};

TestServer* Server::main_ = nullptr;
TestServer* Server::slow_ = nullptr;
TestServer* Server::plain_ = nullptr;
Model* Server::ref_model_ = nullptr;
ThreadPool* Server::ref_pool_ = nullptr;

json Completion(const std::string& prompt, int max_tokens, bool stream = false) {
  return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"stream", stream}, {"dspark", {{"ignore_eos", true}}}};
}

TEST_F(Server, CompletionReturnsTextUsageAndSpecStats) {
  auto r = Post(main_, "/v1/completions", Completion("hello world", 12).dump());
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 12);
  const json& d = j["dspark"];
  for (const char* key : {"drafted", "accepted", "tau", "acceptance_per_position", "draft_ms", "verify_ms"})
    EXPECT_TRUE(d.contains(key)) << key;
  EXPECT_GT(d["drafted"].get<int>(), 0);
  EXPECT_GE(d["tau"].get<double>(), 1.0);
}

TEST_F(Server, StreamingMatchesNonStreamingAndColoursTokens) {
  auto plain = Post(main_, "/v1/completions", Completion("stream me", 24).dump());
  ASSERT_TRUE(plain && plain->status == 200);
  auto r = Post(main_, "/v1/completions", Completion("stream me", 24, true).dump());
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const SseStream s = ParseSse(r->body);
  ASSERT_TRUE(s.done) << r->body;
  ASSERT_FALSE(s.chunks.empty());
  std::string text;
  int draft = 0, target = 0;
  for (size_t i = 0; i + 1 < s.chunks.size(); ++i) {
    const json& c = s.chunks[i];
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
    (c["dspark_source"] == "draft" ? draft : target)++;
  }
  const json& last = s.chunks.back();
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["completion_tokens"], 24);
  EXPECT_TRUE(last.contains("dspark"));
  EXPECT_EQ(text, json::parse(plain->body)["choices"][0]["text"].get<std::string>());
  EXPECT_GT(draft, 0) << "no accepted draft token was streamed";
  EXPECT_GT(target, 0);
}

TEST_F(Server, ReturnTokensGivesTheGeneratedIdsThatMakeTheText) {
  json body = Completion("token ids", 20);
  body["dspark"]["return_tokens"] = true;
  auto r = Post(main_, "/v1/completions", body.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const json j = json::parse(r->body);
  const std::vector<int32_t> ids = j["choices"][0]["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 20u);
  // They are the ids the model produced: a greedy run from the prompt's ids plus the first ten
  // continues with the other ten.
  EncodeOptions eo;
  eo.add_eos = false;
  std::vector<int32_t> prefix = main_->tokenizer->Encode("token ids", eo);
  prefix.insert(prefix.end(), ids.begin(), ids.begin() + 10);
  json resume = Completion("", 10);
  resume["prompt"] = prefix;
  resume["dspark"]["return_tokens"] = true;
  auto rr = Post(main_, "/v1/completions", resume.dump());
  ASSERT_TRUE(rr && rr->status == 200) << (rr ? rr->body : "");
  EXPECT_EQ(json::parse(rr->body)["choices"][0]["tokens"].get<std::vector<int32_t>>(),
            std::vector<int32_t>(ids.begin() + 10, ids.end()));
  // Without the flag the field is absent (plain OpenAI shape).
  auto plain = Post(main_, "/v1/completions", Completion("token ids", 20).dump());
  ASSERT_TRUE(plain && plain->status == 200);
  EXPECT_FALSE(json::parse(plain->body)["choices"][0].contains("tokens"));

  // Streamed: one id per token chunk, the same ids in order.
  body["stream"] = true;
  auto rs = Post(main_, "/v1/completions", body.dump());
  ASSERT_TRUE(rs && rs->status == 200);
  const SseStream s = ParseSse(rs->body);
  ASSERT_TRUE(s.done);
  std::vector<int32_t> streamed;
  for (const json& c : s.chunks)
    if (c["choices"][0].contains("tokens"))
      for (const json& t : c["choices"][0]["tokens"]) streamed.push_back(t.get<int32_t>());
  EXPECT_EQ(streamed, ids);

  body["dspark"]["return_tokens"] = "yes";
  auto bad = Post(main_, "/v1/completions", body.dump());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "dspark.return_tokens");
}

TEST_F(Server, ChatCompletionRendersTheTemplate) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"max_tokens", 8}, {"temperature", 0}, {"dspark", {{"ignore_eos", true}}}};
  auto r = Post(main_, "/v1/chat/completions", body.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  // The prompt is the template's rendering of the conversation.
  auto t = ChatTemplate::Parse(main_->config.chat_template);
  ASSERT_TRUE(t.ok());
  auto rendered = t->Apply({{"user", "hi"}}, true, "", "");
  ASSERT_TRUE(rendered.ok());
  EXPECT_NE(rendered->find("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), std::string::npos);
  EncodeOptions eo;
  eo.add_eos = false;
  eo.parse_special = true;
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<size_t>(), main_->tokenizer->Encode(*rendered, eo).size());

  // Streaming chat: role in the first delta, [DONE] at the end.
  json sb = body;
  sb["stream"] = true;
  auto rs = Post(main_, "/v1/chat/completions", sb.dump());
  ASSERT_TRUE(rs && rs->status == 200);
  const SseStream s = ParseSse(rs->body);
  ASSERT_TRUE(s.done);
  ASSERT_GE(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks.back()["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "length");
  std::string text;
  for (const json& c : s.chunks)
    if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, j["choices"][0]["message"]["content"].get<std::string>());
  if (s.chunks.size() > 1) {
    EXPECT_EQ(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  }
}

TEST_F(Server, StopStringEndsTheCompletionBeforeIt) {
  auto full = Post(main_, "/v1/completions", Completion("stop test", 32).dump());
  ASSERT_TRUE(full && full->status == 200);
  const std::string text = json::parse(full->body)["choices"][0]["text"].get<std::string>();
  // A stop string from the middle of the greedy output (two ASCII letters or digits, e.g. "t2" of
  // the toy vocabulary's " t259" pieces).
  size_t at = std::string::npos;
  for (size_t i = text.size() / 3; i + 2 <= text.size(); ++i)
    if (std::isalnum(static_cast<unsigned char>(text[i])) && std::isalnum(static_cast<unsigned char>(text[i + 1]))) {
      at = i;
      break;
    }
  ASSERT_NE(at, std::string::npos) << "no alphanumeric pair in the tiny model's output: " << json(text).dump();
  const std::string stop = text.substr(at, 2);
  const size_t first = text.find(stop);
  for (const bool stream : {false, true}) {
    json body = Completion("stop test", 32, stream);
    body["stop"] = {"\x01never", stop};
    auto r = Post(main_, "/v1/completions", body.dump());
    ASSERT_TRUE(r && r->status == 200);
    std::string got;
    std::string finish;
    if (stream) {
      const SseStream s = ParseSse(r->body);
      for (const json& c : s.chunks) {
        got += c["choices"][0]["text"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
      }
    } else {
      const json j = json::parse(r->body);
      got = j["choices"][0]["text"].get<std::string>();
      finish = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish, "stop") << stream;
    EXPECT_EQ(got, text.substr(0, first)) << "stop '" << stop << "' stream " << stream;
  }
}

TEST_F(Server, SeededSamplingIsReproducible) {
  json body = Completion("sample", 16);
  body["temperature"] = 0.9;
  body["top_p"] = 0.95;
  body["seed"] = 1234;
  auto a = Post(main_, "/v1/completions", body.dump());
  auto b = Post(main_, "/v1/completions", body.dump());
  ASSERT_TRUE(a && b && a->status == 200 && b->status == 200);
  EXPECT_EQ(json::parse(a->body)["choices"][0]["text"], json::parse(b->body)["choices"][0]["text"]);
}

// --- Output against an independent reference ------------------------------------------------

// The prompt ids the server makes of a /v1/completions string prompt.
std::vector<int32_t> PromptIds(const TestServer& s, const std::string& prompt) {
  EncodeOptions eo;
  eo.add_eos = false;
  return s.tokenizer->Encode(prompt, eo);
}

// Plain sampled decoding written independently of the engines (as testing::ReferenceGreedy): one
// Forward per token over an F16 cache like the server's, a draw by SampleToken from Rng(seed) for
// the prompt's last row and then for each new token, never stopping at end-of-generation.
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
    const int32_t t = SampleToken(out->logits.data(), m.config().n_vocab, params, rng, &scratch);
    gen.push_back(t);
    if (static_cast<int>(gen.size()) == n) break;
    Batch one;
    one.Add(t, pos++, 0, true);
    out = m.Forward(one, cache, pool);
    EXPECT_TRUE(out.ok()) << out.status().message();
  }
  return gen;
}

// What a JSON string makes of raw text: the server writes JSON with invalid UTF-8 (single bytes
// of the toy byte-level vocabulary) replaced by U+FFFD.
std::string AsJsonText(const std::string& raw) {
  return json::parse(json(raw).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
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

TEST_F(Server, ChatWithoutTemplateIsAClientError) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}};
  auto r = Post(slow_, "/v1/chat/completions", body.dump(), {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "no_chat_template");
  EXPECT_NE(e["message"].get<std::string>().find("chat template"), std::string::npos);
}

struct BadCase {
  const char* path;
  std::string body;
  int status;
  const char* param;  // "" = null
};

TEST_F(Server, InvalidRequestsGetOpenAiErrorsNamingTheField) {
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "word ";
  const std::vector<BadCase> cases = {
      {c.c_str(), "{not json", 400, ""},
      {c.c_str(), "[1, 2]", 400, "body"},
      {c.c_str(), R"({"max_tokens": 4})", 400, "prompt"},
      {c.c_str(), R"({"prompt": 5})", 400, "prompt"},
      {c.c_str(), R"({"prompt": ["a", "b"]})", 400, "prompt"},
      {c.c_str(), R"({"prompt": "x", "temperature": "hot"})", 400, "temperature"},
      {c.c_str(), R"({"prompt": "x", "temperature": -0.5})", 400, "temperature"},
      {c.c_str(), R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {c.c_str(), R"({"prompt": "x", "top_p": 1.5})", 400, "top_p"},
      {c.c_str(), R"({"prompt": "x", "top_k": -1})", 400, "top_k"},
      {c.c_str(), R"({"prompt": "x", "min_p": 1})", 400, "min_p"},
      {c.c_str(), R"({"prompt": "x", "n": 2})", 400, "n"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": "5"})", 400, "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {c.c_str(), R"({"prompt": "x", "stop": 5})", 400, "stop"},
      {c.c_str(), R"({"prompt": "x", "stop": ["a", 1]})", 400, "stop[1]"},
      {c.c_str(), R"({"prompt": "x", "seed": "abc"})", 400, "seed"},
      {c.c_str(), R"({"prompt": [1, 2, 999999]})", 400, "prompt[2]"},
      {c.c_str(), json{{"prompt", long_prompt}}.dump(), 400, "prompt"},
      {chat.c_str(), R"({"messages": "hi"})", 400, "messages"},
      {chat.c_str(), R"({"messages": []})", 400, "messages"},
      {chat.c_str(), R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": "hi"}], "n": 3})", 400, "n"},
  };
  for (const BadCase& bc : cases) {
    auto r = Post(main_, bc.path, bc.body);
    ASSERT_TRUE(r) << bc.body;
    EXPECT_EQ(r->status, bc.status) << bc.body << " -> " << r->body;
    json j;
    ASSERT_NO_THROW(j = json::parse(r->body)) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    const json& e = j["error"];
    EXPECT_FALSE(e["message"].get<std::string>().empty());
    EXPECT_EQ(e["type"], "invalid_request_error") << bc.body;
    if (std::string(bc.param).empty()) {
      EXPECT_TRUE(e["param"].is_null()) << bc.body;
    } else {
      EXPECT_EQ(e["param"], bc.param) << bc.body << " -> " << r->body;
    }
    EXPECT_TRUE(e.contains("code"));
  }
  // The prompt-too-long error says so.
  auto r = Post(main_, c, json{{"prompt", long_prompt}}.dump());
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "context_length_exceeded");
}

TEST_F(Server, UnknownRequestFieldsAreRejectedByName) {
  const json completion = {{"prompt", "x"}, {"max_tokens", 2}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  struct Case {
    const char* path;
    json body;
    const char* param;
  };
  auto with = [](json b, const std::string& key, json v) {
    b[key] = std::move(v);
    return b;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", with(completion, "frobnicate", 1), "frobnicate"},
      {"/v1/completions", with(completion, "repeat_penalty", 1.1), "repeat_penalty"},  // llama.cpp's, not OpenAI's
      {"/v1/completions", with(completion, "messages", chat["messages"]), "messages"},
      {"/v1/completions", with(completion, "chat_template_kwargs", json::object()), "chat_template_kwargs"},
      {"/v1/chat/completions", with(chat, "prompt", "x"), "prompt"},
      {"/v1/chat/completions", with(chat, "best_of", 1), "best_of"},
      {"/v1/chat/completions", with(chat, "reasoning_effort", "low"), "reasoning_effort"},
      {"/v1/completions", with(completion, "dspark", {{"speculat", false}}), "dspark.speculat"},
      {"/v1/completions", with(completion, "stream_options", {{"include_usage", true}, {"x", 1}}), "stream_options.x"},
  };
  for (const Case& c : cases) {
    auto r = Post(main_, c.path, c.body.dump());
    ASSERT_TRUE(r) << c.body.dump();
    EXPECT_EQ(r->status, 400) << c.body.dump() << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], c.param) << r->body;
    EXPECT_EQ(e["code"], "unknown_parameter") << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(c.param), std::string::npos) << r->body;
  }
}

TEST_F(Server, UnsupportedFeaturesAre400NotIgnored) {
  const json completion = {{"prompt", "x"}, {"max_tokens", 2}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  struct Case {
    bool chat;
    const char* field;
    json value;
    const char* code;  // "unsupported", or "invalid_type" for a wrong type
  };
  const std::vector<Case> cases = {
      {false, "logprobs", 0, "unsupported"},
      {false, "logprobs", 5, "unsupported"},
      {true, "logprobs", true, "unsupported"},
      {true, "top_logprobs", 3, "unsupported"},
      {true, "response_format", {{"type", "json_object"}}, "unsupported"},
      {true, "response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}, "unsupported"},
      {true, "tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}, "unsupported"},
      {true, "tool_choice", "required", "unsupported"},
      {true, "tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}, "unsupported"},
      {false, "logit_bias", {{"50256", -100}}, "unsupported"},
      {true, "logit_bias", {{"1", 5}}, "unsupported"},
      {false, "frequency_penalty", 0.5, "unsupported"},
      {true, "presence_penalty", -1, "unsupported"},
      {false, "suffix", "tail", "unsupported"},
      {false, "echo", true, "unsupported"},
      {false, "n", 2, "out_of_range"},
      {true, "n", 4, "out_of_range"},
      {false, "best_of", 3, "out_of_range"},
      {false, "frequency_penalty", "0", "invalid_type"},
      {true, "logprobs", 1, "invalid_type"},
      {true, "tools", "f", "invalid_type"},
      {false, "user", 5, "invalid_type"},
      {true, "metadata", "m", "invalid_type"},
      {true, "store", "yes", "invalid_type"},
      {true, "parallel_tool_calls", 1, "invalid_type"},
  };
  for (const Case& c : cases) {
    json body = c.chat ? chat : completion;
    body[c.field] = c.value;
    auto r = Post(main_, c.chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
    ASSERT_TRUE(r) << body.dump();
    EXPECT_EQ(r->status, 400) << body.dump() << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], c.field) << body.dump() << " -> " << r->body;
    EXPECT_EQ(e["code"], c.code) << body.dump() << " -> " << r->body;
    if (std::string(c.code) == "unsupported") {
      EXPECT_NE(e["message"].get<std::string>().find("not supported"), std::string::npos) << r->body;
    }
  }
}

TEST_F(Server, AllowListedAndNeutralFieldsAreAccepted) {
  // Each harmless field, and each unimplemented feature at its neutral value, alone: 200 and the
  // same greedy text as without it.
  const json completion = {{"prompt", "allow list"}, {"max_tokens", 6}, {"temperature", 0},
                           {"dspark", {{"ignore_eos", true}}}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 6}, {"temperature", 0},
                     {"dspark", {{"ignore_eos", true}}}};
  const std::vector<std::pair<std::string, json>> common = {
      {"user", "u-42"},          {"metadata", {{"k", "v"}}},    {"store", false},
      {"store", true},           {"service_tier", "auto"},      {"n", 1},
      {"frequency_penalty", 0},  {"presence_penalty", 0.0},     {"logit_bias", json::object()},
      {"stream_options", {{"include_usage", true}}},             {"seed", 7},
      {"max_completion_tokens", 6}, {"top_k", 0},               {"min_p", 0.0},
      {"sampler_order", "temp-last"}, {"model", "anything"},    {"stop", json::array()},
      {"logit_bias", nullptr},   {"user", nullptr},
  };
  const std::vector<std::pair<std::string, json>> completion_only = {
      {"best_of", 1}, {"echo", false}, {"suffix", ""}, {"suffix", nullptr}, {"logprobs", nullptr}};
  const std::vector<std::pair<std::string, json>> chat_only = {
      {"logprobs", false},         {"top_logprobs", 0},           {"tools", json::array()},
      {"tool_choice", "none"},     {"tool_choice", "auto"},       {"parallel_tool_calls", false},
      {"response_format", {{"type", "text"}}}, {"chat_template_kwargs", json::object()}};
  for (const bool is_chat : {false, true}) {
    const json base = is_chat ? chat : completion;
    const std::string path = is_chat ? "/v1/chat/completions" : "/v1/completions";
    auto want = Post(main_, path, base.dump());
    ASSERT_TRUE(want && want->status == 200) << (want ? want->body : "");
    const json want_choice = json::parse(want->body)["choices"][0];
    std::vector<std::pair<std::string, json>> fields = common;
    for (const auto& f : is_chat ? chat_only : completion_only) fields.push_back(f);
    for (const auto& [key, value] : fields) {
      json body = base;
      body[key] = value;
      auto r = Post(main_, path, body.dump());
      ASSERT_TRUE(r) << body.dump();
      EXPECT_EQ(r->status, 200) << body.dump() << " -> " << r->body;
      if (r->status != 200 || key == "stop" || key == "sampler_order") continue;
      const json choice = json::parse(r->body)["choices"][0];
      EXPECT_EQ(is_chat ? choice["message"]["content"] : choice["text"],
                is_chat ? want_choice["message"]["content"] : want_choice["text"])
          << body.dump();
    }
  }
  // All of them together, as an SDK that fills every default sends them.
  json all = completion;
  for (const auto& [key, value] : common) all[key] = value;
  for (const auto& [key, value] : completion_only) all[key] = value;
  auto r = Post(main_, "/v1/completions", all.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << all.dump() << " -> " << r->body;
}

TEST_F(Server, ClientsOfThisRepositoryAreAccepted) {
  // The fields the load benchmark (cli/cmd_bench_serve.cc), the playground (src/serve/playground.cc)
  // and the training toolkit's data generator (tools/train/dspark_train/gen_target_data.py) send.
  const json bench = {{"prompt", "bench"}, {"max_tokens", 4}, {"temperature", 0}, {"stream", true},
                      {"dspark", {{"speculate", true}, {"ignore_eos", true}}}};
  const json playground_text = {{"max_tokens", 4}, {"temperature", 0}, {"top_p", 1}, {"stream", true},
                                {"dspark", {{"speculate", false}}}, {"prompt", "play"}};
  json playground_chat = playground_text;
  playground_chat.erase("prompt");
  playground_chat["messages"] = {{{"role", "user"}, {"content", "play"}}};
  const json gen_data = {{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0.8}, {"top_k", 20},
                         {"top_p", 0.95}, {"seed", 3},
                         {"dspark", {{"speculate", false}, {"ignore_eos", true}, {"return_tokens", true}}}};
  for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{{"/v1/completions", bench},
                                                                           {"/v1/completions", playground_text},
                                                                           {"/v1/chat/completions", playground_chat},
                                                                           {"/v1/completions", gen_data}}) {
    auto r = Post(main_, path, body.dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << body.dump() << " -> " << r->body;
  }
}

TEST_F(Server, TokenizeAndDetokenizeMatchTheLibraryTokenizer) {
  const Tokenizer& tok = *main_->tokenizer;
  // The toy SentencePiece vocabulary holds byte tokens and "▁t<id>" words that no merge reaches,
  // so text is encoded by byte fallback, whose escaped spaces ("▁" as three byte tokens) decode
  // as "▁", as in llama.cpp: the round trip is the library's Decode, not the input text.
  for (const std::string content : {"hello world", "The quick brown fox, 12 34!", "  spaces\tand\nnewlines ",
                                    "caf\xc3\xa9", ""}) {
    SCOPED_TRACE(json(content).dump());
    for (const bool add_special : {false, true}) {
      auto r = Post(main_, "/tokenize", json{{"content", content}, {"add_special", add_special}}.dump());
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      const std::vector<int32_t> ids = json::parse(r->body)["tokens"].get<std::vector<int32_t>>();
      EncodeOptions eo;
      eo.add_bos = add_special;
      eo.add_eos = add_special;
      eo.parse_special = true;
      EXPECT_EQ(ids, tok.Encode(content, eo)) << "add_special " << add_special;
      if (add_special) continue;
      // Round trip.
      auto d = Post(main_, "/detokenize", json{{"tokens", ids}}.dump());
      ASSERT_TRUE(d);
      ASSERT_EQ(d->status, 200) << d->body;
      EXPECT_EQ(json::parse(d->body)["content"], AsJsonText(tok.Decode(ids, true)));
      EXPECT_EQ(AsJsonText(tok.Decode(ids, true)), AsJsonText(tok.Decode(tok.Encode(content, eo), true)));
    }
  }
  // Word tokens decode to their words (the SentencePiece space prefix comes off the first), and
  // control tokens render as their text; add_special adds the vocabulary's BOS.
  auto words = Post(main_, "/detokenize", json{{"tokens", {259, 280, 1, 299}}}.dump());
  ASSERT_TRUE(words && words->status == 200) << (words ? words->body : "");
  EXPECT_EQ(json::parse(words->body)["content"], "t259 t280<s> t299");
  auto bos = Post(main_, "/tokenize", json{{"content", "x"}, {"add_special", true}}.dump());
  ASSERT_TRUE(bos && bos->status == 200);
  EXPECT_EQ(json::parse(bos->body)["tokens"][0], tok.bos_id());
  // add_special defaults to false: the default equals the explicit false.
  auto a = Post(main_, "/tokenize", json{{"content", "defaults"}}.dump());
  auto b = Post(main_, "/tokenize", json{{"content", "defaults"}, {"add_special", false}}.dump());
  ASSERT_TRUE(a && b && a->status == 200 && b->status == 200);
  EXPECT_EQ(json::parse(a->body)["tokens"], json::parse(b->body)["tokens"]);
  // Detokenizing generated ids gives the completion's text.
  json body = Completion("detok", 12);
  body["dspark"]["return_tokens"] = true;
  auto g = Post(main_, "/v1/completions", body.dump());
  ASSERT_TRUE(g && g->status == 200);
  const json choice = json::parse(g->body)["choices"][0];
  auto d = Post(main_, "/detokenize", json{{"tokens", choice["tokens"]}}.dump());
  ASSERT_TRUE(d && d->status == 200);
  EXPECT_EQ(json::parse(d->body)["content"], AsJsonText(tok.Decode(choice["tokens"].get<std::vector<int32_t>>(), true)));
}

TEST_F(Server, TokenizeWithPiecesGivesTextOrBytes) {
  const Tokenizer& tok = *main_->tokenizer;
  // ASCII and a multi-byte character (whose bytes the toy byte-level vocabulary may split).
  const std::string content = "hi there \xc3\xa9\xe2\x82\xac";
  auto r = Post(main_, "/tokenize", json{{"content", content}, {"with_pieces", true}}.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json tokens = json::parse(r->body)["tokens"];
  EncodeOptions eo;
  eo.add_bos = false;
  eo.add_eos = false;
  eo.parse_special = true;
  const std::vector<int32_t> want = tok.Encode(content, eo);
  ASSERT_EQ(tokens.size(), want.size());
  std::string joined;
  int text_pieces = 0, byte_pieces = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(tokens[i].is_object()) << tokens.dump();
    EXPECT_EQ(tokens[i]["id"], want[i]);
    const std::string piece = tok.TokenToPiece(want[i], true);
    const json& p = tokens[i]["piece"];
    if (IsValidUtf8(piece)) {
      ++text_pieces;
      EXPECT_EQ(p, piece);
    } else {
      ++byte_pieces;
      ASSERT_TRUE(p.is_array()) << p.dump();
      std::string bytes;
      for (const json& v : p) bytes += static_cast<char>(v.get<int>());
      EXPECT_EQ(bytes, piece);
    }
    joined += piece;
  }
  EXPECT_GT(text_pieces, 0);
  EXPECT_GT(byte_pieces, 0);  // the toy vocabulary splits "é" and "▁" into byte tokens
  EXPECT_EQ(joined, tok.Decode(want, true));
  SCOPED_TRACE(fmt::format("{} text pieces, {} byte pieces", text_pieces, byte_pieces));
  // The piece encoding itself.
  EXPECT_EQ(PieceJson("abc"), json("abc"));
  EXPECT_EQ(PieceJson("\xc3\xa9"), json("\xc3\xa9"));
  EXPECT_EQ(PieceJson("\xc3"), json::array({0xc3}));
  EXPECT_EQ(PieceJson("a\xe2\x82"), json::array({'a', 0xe2, 0x82}));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));   // U+1F600
}

TEST_F(Server, TokenizeErrorsNameTheFieldAndNeedTheKey) {
  const std::string n_vocab = std::to_string(main_->tokenizer->n_vocab());
  const std::vector<BadCase> cases = {
      {"/tokenize", "{not json", 400, ""},
      {"/tokenize", "[1]", 400, "body"},
      {"/tokenize", "{}", 400, "content"},
      {"/tokenize", R"({"content": 5})", 400, "content"},
      {"/tokenize", R"({"content": "x", "add_special": "yes"})", 400, "add_special"},
      {"/tokenize", R"({"content": "x", "with_pieces": 1})", 400, "with_pieces"},
      {"/tokenize", R"({"content": "x", "parse_special": null, "model": 3})", 400, "model"},
      {"/tokenize", R"({"content": "x", "text": "y"})", 400, "text"},
      {"/detokenize", "{}", 400, "tokens"},
      {"/detokenize", R"({"tokens": "1 2"})", 400, "tokens"},
      {"/detokenize", R"({"tokens": [1, "2"]})", 400, "tokens[1]"},
      {"/detokenize", R"({"tokens": [1, 2.5]})", 400, "tokens[1]"},
      {"/detokenize", R"({"tokens": [-1]})", 400, "tokens[0]"},
      {"/detokenize", R"({"tokens": [0, 1, )" + n_vocab + "]}", 400, "tokens[2]"},
      {"/detokenize", R"({"tokens": [18446744073709551615]})", 400, "tokens[0]"},
      {"/detokenize", R"({"tokens": [1], "content": "x"})", 400, "content"},
  };
  for (const BadCase& bc : cases) {
    auto r = Post(main_, bc.path, bc.body);
    ASSERT_TRUE(r) << bc.body;
    EXPECT_EQ(r->status, bc.status) << bc.path << " " << bc.body << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    if (std::string(bc.param).empty())
      EXPECT_TRUE(e["param"].is_null()) << r->body;
    else
      EXPECT_EQ(e["param"], bc.param) << bc.path << " " << bc.body << " -> " << r->body;
  }
  // The last valid id and the empty list are fine; "model" and parse_special are accepted.
  auto ok = Post(main_, "/detokenize", json{{"tokens", {main_->tokenizer->n_vocab() - 1}}, {"model", "tiny"}}.dump());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto empty = Post(main_, "/detokenize", R"({"tokens": []})");
  ASSERT_TRUE(empty && empty->status == 200);
  EXPECT_EQ(json::parse(empty->body)["content"], "");
  auto ps = Post(main_, "/tokenize", R"({"content": "x", "parse_special": false, "model": "tiny"})");
  ASSERT_TRUE(ps);
  EXPECT_EQ(ps->status, 200) << ps->body;
  // --api-key protects them like the /v1 routes; a server without a key does not ask for one.
  for (const char* path : {"/tokenize", "/detokenize"}) {
    const std::string body = std::string(path) == "/tokenize" ? R"({"content": "x"})" : R"({"tokens": [1]})";
    for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}}}) {
      auto r = Post(main_, path, body, h);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 401) << path;
      EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
    }
    EXPECT_EQ(Post(main_, path, body)->status, 200) << path;
    EXPECT_EQ(Post(plain_, path, body, {})->status, 200) << path;
  }
}

TEST_F(Server, ModelsReportContextAndDrafter) {
  auto m = Get(main_, "/v1/models");
  ASSERT_TRUE(m && m->status == 200);
  const json j = json::parse(m->body);
  ASSERT_EQ(j["data"].size(), 1u);
  const json& model = j["data"][0];
  // The OpenAI shape is intact.
  EXPECT_EQ(model["id"], "tiny");
  EXPECT_EQ(model["object"], "model");
  EXPECT_TRUE(model["created"].is_number_integer());
  EXPECT_EQ(model["owned_by"], "dspark");
  const json& d = model["dspark"];
  EXPECT_EQ(d["n_ctx"], main_->config.n_ctx);
  EXPECT_EQ(d["n_ctx_train"], main_->model->config().n_ctx_train);
  EXPECT_GT(d["n_ctx_train"].get<int>(), 0);
  EXPECT_EQ(d["n_vocab"], main_->tokenizer->n_vocab());
  EXPECT_EQ(d["parallel"], 4);
  EXPECT_EQ(d["chat_template"], true);
  EXPECT_EQ(d["drafter"]["spec_type"], "draft-simple");
  ASSERT_TRUE(d["drafter"]["draft_model"].is_string()) << d.dump();
  EXPECT_NE(d["drafter"]["draft_model"].get<std::string>().find("e2e_q8"), std::string::npos) << d.dump();
  // Without a drafter.
  auto p = Get(plain_, "/v1/models", {});
  ASSERT_TRUE(p && p->status == 200);
  const json plain_models = json::parse(p->body);
  const json& pd = plain_models["data"][0]["dspark"];
  EXPECT_EQ(pd["drafter"]["spec_type"], "none");
  EXPECT_TRUE(pd["drafter"]["draft_model"].is_null());
  EXPECT_EQ(pd["chat_template"], false);
  EXPECT_EQ(pd["parallel"], 2);
}

TEST_F(Server, OversizedBodyIs413) {
  std::string big = json{{"prompt", std::string(100 << 10, 'a')}}.dump();
  auto r = Post(main_, "/v1/completions", big);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 413);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "body_too_large");
}

TEST_F(Server, ApiKeyProtectsV1ButNotHealthOrPlayground) {
  for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}},
                                    httplib::Headers{{"Authorization", std::string(kKey)}}}) {
    auto r = Post(main_, "/v1/completions", Completion("x", 2).dump(), h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
    auto m = Get(main_, "/v1/models", h);
    EXPECT_EQ(m->status, 401);
  }
  auto m = Get(main_, "/v1/models");
  ASSERT_EQ(m->status, 200);
  const json j = json::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(Get(main_, "/health", {})->status, 200);
  auto page = Get(main_, "/", {});
  ASSERT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("dspark playground"), std::string::npos);
  EXPECT_EQ(page->body.find("src=\"http"), std::string::npos);  // no external assets
  EXPECT_EQ(Get(main_, "/etc/passwd", {})->status, 404);
  EXPECT_TRUE(BearerMatches("Bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abd", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerMatches("", "abc"));
}

TEST_F(Server, SixteenParallelGreedyRequestsEqualTheirSequentialOutputs) {
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i) {
    json b = Completion("prompt " + std::to_string(i * 7919) + " abc", 10 + i % 7, i % 2 == 1);
    bodies.push_back(b);
  }
  auto text_of = [](const httplib::Result& r, bool stream) {
    if (!r || r->status != 200) return std::string("<error>");
    if (!stream) return json::parse(r->body)["choices"][0]["text"].get<std::string>();
    std::string t;
    for (const json& c : ParseSse(r->body).chunks) t += c["choices"][0]["text"].get<std::string>();
    return t;
  };
  std::vector<std::string> sequential(16), parallel(16);
  for (int i = 0; i < 16; ++i) sequential[i] = text_of(Post(main_, "/v1/completions", bodies[i].dump()), i % 2 == 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] { parallel[i] = text_of(Post(main_, "/v1/completions", bodies[i].dump()), i % 2 == 1); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    EXPECT_NE(sequential[i], "<error>") << i;
    EXPECT_EQ(parallel[i], sequential[i]) << "request " << i;
  }
}

TEST_F(Server, DisconnectMidStreamCancelsAndFreesTheSlot) {
  const std::string m0 = Get(slow_, "/metrics", {})->body;
  const double before = std::max(0.0, MetricValue(m0, "dspark:request_finished_total{finished_reason=\"cancelled\"}"));
  const double tokens_before = std::max(0.0, MetricValue(m0, "dspark:generation_tokens_total"));
  {
    RawStream s(slow_->port, "/v1/completions", Completion("cancel me", 400, true).dump(), "");
    ASSERT_TRUE(s.ReadUntil("data: ")) << s.received;
  }  // closes the socket
  ASSERT_TRUE(WaitFor([&] {
    const std::string m = Get(slow_, "/metrics", {})->body;
    return MetricValue(m, "dspark:request_finished_total{finished_reason=\"cancelled\"}") == before + 1 &&
           MetricValue(m, "dspark:num_requests_in_flight") == 0 && MetricValue(m, "dspark:slots_busy") == 0;
  })) << Get(slow_, "/metrics", {})->body;
  // The slot serves the next request.
  auto r = Post(slow_, "/v1/completions", Completion("next", 3).dump(), {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // Far fewer than the 400 requested tokens were generated by the cancelled request.
  EXPECT_LT(MetricValue(Get(slow_, "/metrics", {})->body, "dspark:generation_tokens_total") - tokens_before, 300);
}

TEST_F(Server, DisconnectDuringNonStreamingRequestCancelsAndFreesTheSlot) {
  // A non-streaming request writes nothing until it ends, so the server must notice the hang-up
  // by watching the connection. 400 tokens at >= 5 ms a step take >= 2 s if it does not.
  const std::string m0 = Get(slow_, "/metrics", {})->body;
  const double cancelled_before =
      std::max(0.0, MetricValue(m0, "dspark:request_finished_total{finished_reason=\"cancelled\"}"));
  const double closed_before = std::max(0.0, MetricValue(m0, "dspark:requests_total{status=\"499\"}"));
  const double tokens_before = std::max(0.0, MetricValue(m0, "dspark:generation_tokens_total"));
  {
    RawStream s(slow_->port, "/v1/completions", Completion("hang up on me", 400).dump(), "");
    ASSERT_TRUE(WaitFor([&] { return MetricValue(Get(slow_, "/metrics", {})->body, "dspark:slots_busy") == 1; }));
  }  // closes the socket before any byte of the response
  ASSERT_TRUE(WaitFor([&] {
    const std::string m = Get(slow_, "/metrics", {})->body;
    return MetricValue(m, "dspark:request_finished_total{finished_reason=\"cancelled\"}") == cancelled_before + 1 &&
           MetricValue(m, "dspark:requests_total{status=\"499\"}") == closed_before + 1 &&
           MetricValue(m, "dspark:num_requests_in_flight") == 0 && MetricValue(m, "dspark:slots_busy") == 0;
  })) << Get(slow_, "/metrics", {})->body;
  // Far fewer than the 400 requested tokens were generated.
  EXPECT_LT(MetricValue(Get(slow_, "/metrics", {})->body, "dspark:generation_tokens_total") - tokens_before, 300);
  // The slot serves the next request.
  auto r = Post(slow_, "/v1/completions", Completion("next", 3).dump(), {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(Server, FullQueueAnswers429) {
  // One slot + one queue place: two streams in flight fill the server.
  RawStream a(slow_->port, "/v1/completions", Completion("first", 400, true).dump(), "");
  ASSERT_TRUE(a.ReadUntil("\r\n\r\n"));
  RawStream b(slow_->port, "/v1/completions", Completion("second", 400, true).dump(), "");
  ASSERT_TRUE(b.ReadUntil("\r\n\r\n"));
  auto r = Post(slow_, "/v1/completions", Completion("third", 2).dump(), {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["type"], "rate_limit_error");
  EXPECT_EQ(e["code"], "server_busy");
  a.Close();
  b.Close();
  ASSERT_TRUE(WaitFor([&] { return MetricValue(Get(slow_, "/metrics", {})->body, "dspark:num_requests_in_flight") == 0; }));
  auto ok = Post(slow_, "/v1/completions", Completion("after", 2).dump(), {});
  EXPECT_EQ(ok->status, 200);
}

TEST_F(Server, FailingDrafterDegradesToPlainDecoding) {
  // The main server's drafter fails on prompts that start with "FAIL" (see server_fixture.cc).
  auto ok = Post(main_, "/v1/completions", Completion("FAIL please", 10).dump());
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  const json j = json::parse(ok->body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 10);
  EXPECT_GE(j["dspark"]["fallbacks"].get<int>(), 1);
}

TEST_F(Server, MetricsExposeRequestsLatencyAndSpecCounters) {
  ASSERT_EQ(Post(main_, "/v1/completions", Completion("metrics", 6).dump())->status, 200);
  auto r = Get(main_, "/metrics", {});
  ASSERT_EQ(r->status, 200);
  const std::string& m = r->body;
  for (const char* name :
       {"dspark:requests_total{status=\"200\"}", "dspark:prompt_tokens_total", "dspark:generation_tokens_total",
        "dspark:time_to_first_token_seconds_bucket", "dspark:inter_token_latency_seconds_bucket",
        "dspark:num_requests_waiting", "dspark:slots_busy", "dspark:spec_decode_num_drafts_total",
        "dspark:spec_decode_num_draft_tokens_total", "dspark:spec_decode_num_accepted_tokens_total",
        "dspark:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}"})
    EXPECT_NE(m.find(name), std::string::npos) << name;
  EXPECT_GT(MetricValue(m, "dspark:spec_decode_num_drafts_total"), 0);
  EXPECT_GT(MetricValue(m, "dspark:spec_decode_num_accepted_tokens_total"), 0);
  EXPECT_GT(MetricValue(m, "dspark:time_to_first_token_seconds_count"), 0);
  EXPECT_GE(MetricValue(m, "dspark:requests_total{status=\"200\"}"), 1);
  // A client error is counted under its status.
  const double before = std::max(0.0, MetricValue(m, "dspark:requests_total{status=\"400\"}"));
  ASSERT_EQ(Post(main_, "/v1/completions", R"({"prompt": "x", "n": 2})")->status, 400);
  EXPECT_EQ(MetricValue(Get(main_, "/metrics", {})->body, "dspark:requests_total{status=\"400\"}"), before + 1);
  // Accepted <= drafted, and the per-position counts sum to the accepted total.
  EXPECT_LE(MetricValue(m, "dspark:spec_decode_num_accepted_tokens_total"),
            MetricValue(m, "dspark:spec_decode_num_draft_tokens_total"));
  double per_pos = 0;
  for (int i = 0; i < 64; ++i)
    per_pos += std::max(0.0, MetricValue(m, "dspark:spec_decode_num_accepted_tokens_per_pos_total{position=\"" +
                                                std::to_string(i) + "\"}"));
  EXPECT_EQ(per_pos, MetricValue(m, "dspark:spec_decode_num_accepted_tokens_total"));
}

}  // namespace
}  // namespace dspark::serve
