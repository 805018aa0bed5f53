// Structured output and tool calls end to end: response_format (json_object, json_schema) and
// llama.cpp's grammar field constrain the output with speculation on (and equal to it off), a
// required or named tool_choice is enforced by grammar and comes back as OpenAI tool_calls (whole
// and streamed), and schemas or grammars the server cannot honour are a 400 naming the field.
#include <string>

#include "e2e/server_fixture.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

httplib::Result PostJson(TestServer* s, const char* path, const std::string& body) {
  httplib::Client c("127.0.0.1", s->port);
  c.set_read_timeout(60, 0);
  return c.Post(path, {{"Authorization", "Bearer sk-test-123"}}, body, "application/json");
}

json Chat(const std::string& text, int max_tokens) {
  return {{"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", max_tokens}};
}

// A schema with nested objects, arrays, enums, booleans, bounded strings and integers.
const ojson kSchema = ojson::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b\"q", "c\\d"]}, "maxItems": 3},
    "pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "ok": {"type": "boolean"}},
            "required": ["kind", "ok"], "additionalProperties": false}
  },
  "required": ["name", "age", "tags", "pet"],
  "additionalProperties": false
})");

void ExpectMatchesSchema(const std::string& text) {
  json j;
  ASSERT_NO_THROW(j = json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j.size(), 4u) << text;
  EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 12 * 4) << text;
  EXPECT_TRUE(j["age"].is_number_integer()) << text;
  ASSERT_TRUE(j["tags"].is_array()) << text;
  EXPECT_LE(j["tags"].size(), 3u);
  for (const json& t : j["tags"]) EXPECT_TRUE(t == "a" || t == "b\"q" || t == "c\\d") << text;
  EXPECT_TRUE(j["pet"]["kind"] == "cat" || j["pet"]["kind"] == "dog") << text;
  EXPECT_TRUE(j["pet"]["ok"].is_boolean()) << text;
}

TEST_F(Server, JsonSchemaResponseFormatIsFollowedWithAndWithoutSpeculation) {
  ojson body = Chat("a person as JSON", 400);
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", kSchema}}}};
  for (const double temperature : {0.0, 0.9}) {
    body["temperature"] = temperature;
    body["seed"] = 11;
    auto r = PostJson(main_, "/v1/chat/completions", body.dump());
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << r->body;
    const std::string content = j["choices"][0]["message"]["content"].get<std::string>();
    ExpectMatchesSchema(content);
    ojson off = body;
    off["dspark"] = {{"speculate", false}};
    auto p = PostJson(main_, "/v1/chat/completions", off.dump());
    ASSERT_TRUE(p && p->status == 200);
    EXPECT_EQ(json::parse(p->body)["choices"][0]["message"]["content"], content) << "temperature " << temperature;
  }
  // json_object, and llama.cpp's json_schema and grammar fields on /v1/completions.
  ojson obj = Chat("any object", 300);
  obj["temperature"] = 0.7;
  obj["seed"] = 4;
  obj["response_format"] = {{"type", "json_object"}};
  auto r = PostJson(main_, "/v1/chat/completions", obj.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const json jo = json::parse(r->body);
  if (jo["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(jo["choices"][0]["message"]["content"].get<std::string>()).is_object());
  }
  ojson completion = {{"prompt", "x"}, {"max_tokens", 400}, {"temperature", 0.5}, {"seed", 8}, {"json_schema", kSchema}};
  r = PostJson(main_, "/v1/completions", completion.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  ExpectMatchesSchema(json::parse(r->body)["choices"][0]["text"].get<std::string>());
  ojson gbnf = {{"prompt", "x"}, {"max_tokens", 20}, {"temperature", 1.0},
                {"seed", 2}, {"grammar", "root ::= (\"yes\" | \"no\") \" \" [0-9] [0-9]?\n"}};
  r = PostJson(main_, "/v1/completions", gbnf.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
  const std::string text = json::parse(r->body)["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(text.rfind("yes ", 0) == 0 || text.rfind("no ", 0) == 0) << text;
}

TEST_F(Server, RequiredAndNamedToolChoicesAreEnforcedAndReturnedAsToolCalls) {
  // The Qwen template's tool instructions take over a thousand tokens of the toy vocabulary: a
  // server of its own with a longer context.
  TestServerConfig config;
  config.api_key = "sk-test-123";
  config.chat_template = ReadFile(std::string(DSPARK_SOURCE_DIR) + "/tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  config.draft = DraftKind::kQ8Copy;
  config.parallel = 1;
  config.n_ctx = 2048;
  std::unique_ptr<TestServer> server = StartTestServer(config);
  ASSERT_NE(server, nullptr);
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                     "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
  ])");
  for (const std::string choice : {"required", "add"}) {
    ojson body = Chat("weather in Paris?", 300);
    body["temperature"] = 0.8;
    body["seed"] = 3;
    body["tools"] = tools;
    if (choice == "required") body["tool_choice"] = "required";
    else body["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice}}}};
    auto r = PostJson(server.get(), "/v1/chat/completions", body.dump());
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
    const json j = json::parse(r->body);
    ASSERT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << r->body;
    const json& calls = j["choices"][0]["message"]["tool_calls"];
    ASSERT_GE(calls.size(), 1u);
    for (const json& call : calls) {
      EXPECT_EQ(call["type"], "function");
      EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
      const std::string name = call["function"]["name"];
      if (choice != "required") {
        EXPECT_EQ(name, choice);
      }
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      if (name == "get_weather") {
        EXPECT_TRUE(args["city"].is_string());
        EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f");
      } else {
        EXPECT_EQ(name, "add");
        EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << args.dump();
      }
    }
    // Streamed: the same calls as OpenAI deltas.
    body["stream"] = true;
    auto s = PostJson(server.get(), "/v1/chat/completions", body.dump());
    ASSERT_TRUE(s && s->status == 200);
    const SseStream sse = ParseSse(s->body);
    std::vector<json> streamed;
    std::string finish;
    for (const json& c : sse.chunks) {
      const json& ch = c["choices"][0];
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      if (!ch.contains("delta") || !ch["delta"].contains("tool_calls")) continue;
      for (const json& d : ch["delta"]["tool_calls"]) {
        const size_t index = d["index"].get<size_t>();
        if (index >= streamed.size()) streamed.resize(index + 1, json{{"name", ""}, {"arguments", ""}});
        if (d["function"].contains("name")) streamed[index]["name"] = d["function"]["name"];
        streamed[index]["arguments"] = streamed[index]["arguments"].get<std::string>() +
                                       d["function"]["arguments"].get<std::string>();
      }
    }
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_EQ(streamed.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(streamed[i]["name"], calls[i]["function"]["name"]);
      EXPECT_EQ(streamed[i]["arguments"], calls[i]["function"]["arguments"]);
    }
  }
}

TEST_F(Server, SchemasAndGrammarsTheServerCannotHonourAre400NamingTheField) {
  struct Case {
    ojson body;
    const char* param;
    const char* code;
  };
  ojson chat = Chat("x", 4);
  auto with = [](ojson b, const std::string& k, ojson v) {
    b[k] = std::move(v);
    return b;
  };
  const std::vector<Case> cases = {
      {with(chat, "response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"not", {{"type", "string"}}}}}}}}),
       "response_format.json_schema.schema", "unsupported"},
      {with(chat, "response_format", {{"type", "xml"}}), "response_format.type", "invalid_value"},
      {with(chat, "response_format", {{"type", "json_schema"}}), "response_format.json_schema", "missing_field"},
      {with(with(chat, "response_format", {{"type", "json_object"}}), "grammar", "root ::= \"a\""), "grammar",
       "invalid_value"},
      {with(chat, "grammar", "root ::= undefined_rule"), "grammar", "invalid_value"},
      {with(chat, "grammar", 5), "grammar", "invalid_type"},
      {with(chat, "json_schema", {{"type", "object"}, {"patternProperties", {{"^a", {{"type", "string"}}}}}}),
       "json_schema", "unsupported"},
  };
  for (const Case& c : cases) {
    auto r = PostJson(main_, "/v1/chat/completions", c.body.dump());
    ASSERT_TRUE(r) << c.body.dump();
    EXPECT_EQ(r->status, 400) << c.body.dump() << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], c.param) << r->body;
    EXPECT_EQ(e["code"], c.code) << r->body;
  }
}

}  // namespace
}  // namespace dspark::serve
