// The OpenAI-compatible server end to end, its core behaviour: completions and chat (plain and
// streamed), stop strings, seeded reproducibility, body and queue limits, the API key, parallel
// requests, client disconnects, a failing drafter and the metrics. A real httplib client (and raw
// sockets for disconnects) against servers started on free loopback ports over tiny random-weight
// models (server_fixture.h). Output against independent references: server_reference_test.cc;
// request-field validation, tokenize/detokenize and /v1/models: server_fields_test.cc.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/server_fixture.h"
#include "template/chat_template.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;

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

TEST_F(Server, PromptCacheServesAFollowUpTurnFromTheCachedPrefix) {
  json first = {{"messages", {{{"role", "system"}, {"content", std::string(120, 'x')}},
                              {{"role", "user"}, {"content", "first question"}}}},
                {"max_tokens", 8}, {"temperature", 0}};
  auto a = Post(main_, "/v1/chat/completions", first.dump());
  ASSERT_TRUE(a && a->status == 200) << (a ? a->body : "");
  const json ja = json::parse(a->body);
  json follow = first;
  follow["messages"].push_back({{"role", "assistant"}, {"content", ja["choices"][0]["message"]["content"]}});
  follow["messages"].push_back({{"role", "user"}, {"content", "and a second one"}});
  const double hits_before = MetricValue(Get(main_, "/metrics")->body, "dspark:prompt_cache_hit_tokens_total");
  auto b = Post(main_, "/v1/chat/completions", follow.dump());
  ASSERT_TRUE(b && b->status == 200) << (b ? b->body : "");
  const json jb = json::parse(b->body);
  const int cached = jb["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GE(cached, ja["usage"]["prompt_tokens"].get<int>() - 8) << jb["usage"].dump();
  EXPECT_LT(cached, jb["usage"]["prompt_tokens"].get<int>());
  EXPECT_GE(MetricValue(Get(main_, "/metrics")->body, "dspark:prompt_cache_hit_tokens_total"), hits_before + cached);
  // The same request again is served almost entirely from the cache, with the same answer.
  auto c = Post(main_, "/v1/chat/completions", follow.dump());
  ASSERT_TRUE(c && c->status == 200);
  const json jc = json::parse(c->body);
  EXPECT_EQ(jc["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), jc["usage"]["prompt_tokens"].get<int>() - 1);
  EXPECT_EQ(jc["choices"][0]["message"]["content"], jb["choices"][0]["message"]["content"]);
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
  ASSERT_EQ(Post(main_, "/v1/completions", R"({"prompt": "x", "n": 9})")->status, 400);
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
