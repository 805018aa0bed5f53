// The OpenAI-compatible server end to end, what it accepts and refuses: OpenAI errors naming the
// field for invalid, unknown and unsupported request fields, the fields it accepts (and those this
// repository's own clients send), /tokenize and /detokenize against the library tokenizer, and
// /v1/models. Servers on free loopback ports over tiny random-weight models (server_fixture.h).
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "e2e/server_fixture.h"
#include "serve/openai_schema.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;

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
      {c.c_str(), R"({"prompt": "x", "n": 9})", 400, "n"},
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
      {chat.c_str(), R"({"messages": [{"role": "user", "content": "hi"}], "n": 0})", 400, "n"},
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
      {"/v1/completions", with(completion, "mirostat", 2), "mirostat"},  // llama.cpp's, not implemented
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
      {false, "logprobs", 21, "out_of_range"},
      {false, "logprobs", -1, "out_of_range"},
      {true, "top_logprobs", 3, "invalid_value"},  // without logprobs: true
      {true, "response_format", "json", "invalid_type"},
      {true, "tool_choice", "required", "invalid_value"},  // without tools
      {true, "tool_choice", "sometimes", "invalid_value"},
      {false, "logit_bias", json::array({1, 2}), "invalid_type"},
      {false, "frequency_penalty", 2.5, "out_of_range"},
      {true, "presence_penalty", -3, "out_of_range"},
      {false, "repeat_penalty", 0, "out_of_range"},
      {false, "repeat_last_n", -2, "out_of_range"},
      {false, "suffix", "tail", "unsupported"},
      {false, "echo", true, "unsupported"},
      {false, "n", 9, "out_of_range"},
      {true, "n", 0, "out_of_range"},
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

// No field can make a request cost unbounded memory or time (openai_schema.h, kMax*): each limit
// is a 400 naming the field. On plain_, whose body limit (1 MiB) lets the oversized values through.
TEST_F(Server, LimitsAreEnforcedNamingTheField) {
  const json completion = {{"prompt", "x"}, {"max_tokens", 2}};
  json bias = json::object();
  for (int i = 0; i <= 1024; ++i) bias[std::to_string(i)] = 1;
  json deep_schema = {{"type", "string"}};
  for (int i = 0; i < 70; ++i) deep_schema = {{"type", "array"}, {"items", deep_schema}};
  std::string nested;
  for (int i = 0; i < 200000; ++i) nested += '[';
  nested += std::string(200000, ']');
  struct Case {
    json body;  // merged into `completion`
    std::string raw;  // or a raw body
    const char* param;
    const char* code;
  };
  const std::vector<Case> cases = {
      {{{"logit_bias", bias}}, "", "logit_bias", "out_of_range"},
      {{{"stop", std::string(257, 's')}}, "", "stop", "out_of_range"},
      {{{"stop", {"a", std::string(257, 's')}}}, "", "stop[1]", "out_of_range"},
      {{{"stop", std::vector<std::string>(17, "a")}}, "", "stop", "out_of_range"},
      {{{"grammar", "root ::= \"a\"" + std::string(64 << 10, ' ')}}, "", "grammar", "too_large"},
      {{{"json_schema", deep_schema}}, "", "json_schema", "too_large"},
      // Nested past kMaxJsonDepth: refused before parsing (200k levels would overflow the stack of
      // the recursive copy and print), also where brackets hide in strings.
      {nullptr, R"({"prompt": "x", "metadata": )" + nested + "}", "body", "too_deep"},
      {nullptr, R"({"prompt": "x", "metadata": )" + std::string(129, '[') + std::string(129, ']') + "}", "body", "too_deep"},
  };
  for (const Case& c : cases) {
    json body = completion;
    if (!c.body.is_null()) body.update(c.body);
    const std::string text = c.raw.empty() ? body.dump() : c.raw;
    auto r = Post(plain_, "/v1/completions", text, {});
    ASSERT_TRUE(r) << c.param;
    EXPECT_EQ(r->status, 400) << c.param << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], c.param) << r->body;
    EXPECT_EQ(e["code"], c.code) << r->body;
  }
  // At the limits (and brackets inside strings, which do not nest): accepted.
  json at = completion;
  at["stop"] = std::vector<std::string>(16, std::string(256, 's'));
  json ok_bias = json::object();
  for (int i = 0; i < 300; ++i) ok_bias[std::to_string(i)] = 0;  // the whole toy vocabulary
  at["logit_bias"] = ok_bias;
  at["metadata"] = {{"k", std::string(1000, '[')}};
  auto r = Post(plain_, "/v1/completions", at.dump(), {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // max_tokens beyond the context is clamped to the room the prompt leaves (n_ctx 512), not refused.
  json big = Completion("x", 100000);
  r = Post(plain_, "/v1/completions", big.dump(), {});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json done = json::parse(r->body);
  EXPECT_EQ(done["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(done["usage"]["prompt_tokens"].get<int>() + done["usage"]["completion_tokens"].get<int>(), 512);
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

}  // namespace
}  // namespace dspark::serve
