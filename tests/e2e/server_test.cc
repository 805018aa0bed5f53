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
