// Tool-call parsing for every format, whole and streamed, plus the tools/tool_choice checks and
// format detection from the real chat templates in tests/data/templates.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace dspark::serve {
namespace {

using json = nlohmann::json;
using Kind = ToolStreamEvent::Kind;

constexpr uint64_t kSeed = 42;

const json& Tools() {
  static const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time"}}
  ])");
  return tools;
}

ParsedAssistant Parse(ToolFormat format, std::string_view text) {
  return ParseToolCalls(format, text, Tools(), kSeed);
}

// Rebuilds a message from stream events the way a client does, checking the event shapes on
// the way: a call's start comes first, indices count up from 0, and every delta serialises
// (which fails on a content event that splits a UTF-8 character).
ParsedAssistant Accumulate(const std::vector<ToolStreamEvent>& events) {
  ParsedAssistant out;
  for (const ToolStreamEvent& e : events) {
    EXPECT_NO_THROW((void)ToOpenAiDelta(e).dump());
    switch (e.kind) {
      case Kind::kContent:
        EXPECT_FALSE(e.text.empty());
        out.content += e.text;
        break;
      case Kind::kToolCallStart:
        EXPECT_EQ(e.index, out.tool_calls.size());
        out.tool_calls.push_back(ToolCall{.id = e.id, .name = e.name, .arguments = ""});
        break;
      case Kind::kToolCallArgs:
        EXPECT_LT(e.index, out.tool_calls.size());
        if (e.index < out.tool_calls.size()) out.tool_calls[e.index].arguments += e.text;
        break;
    }
  }
  return out;
}

// Feeds `text` cut at `cuts` (sorted byte offsets), then finishes.
ParsedAssistant Stream(ToolFormat format, std::string_view text, const std::vector<size_t>& cuts) {
  ToolCallStreamParser parser(format, Tools(), kSeed);
  std::vector<ToolStreamEvent> events;
  size_t prev = 0;
  for (size_t cut : cuts) {
    for (auto& e : parser.Feed(text.substr(prev, cut - prev))) events.push_back(std::move(e));
    prev = cut;
  }
  for (auto& e : parser.Feed(text.substr(prev))) events.push_back(std::move(e));
  for (auto& e : parser.Finish()) events.push_back(std::move(e));
  return Accumulate(events);
}

void ExpectSame(const ParsedAssistant& got, const ParsedAssistant& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << where;
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].id, want.tool_calls[i].id) << where;
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << where;
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << where;
  }
}

void ExpectCall(const ParsedAssistant& p, size_t i, std::string_view name, std::string_view arguments) {
  ASSERT_LT(i, p.tool_calls.size());
  EXPECT_EQ(p.tool_calls[i].name, name);
  EXPECT_EQ(p.tool_calls[i].arguments, arguments);
}

// ---------------------------------------------------------------- detection

#ifdef DSPARK_SOURCE_DIR
std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(DSPARK_SOURCE_DIR) + "/tests/data/templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
#endif

TEST(ToolFormat, DetectedFromRealTemplates) {
#ifndef DSPARK_SOURCE_DIR
  GTEST_SKIP() << "DSPARK_SOURCE_DIR is not defined";
#else
  const struct {
    const char* file;
    ToolFormat format;
  } cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::kHermes},
      {"Qwen3-Coder.jinja", ToolFormat::kHermes},  // XML bodies; see DetectToolFormat
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::kMistral},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolFormat::kDeepSeekV3},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolFormat::kDeepSeekV3},
      {"HuggingFaceTB-SmolLM3-3B.jinja", ToolFormat::kNone},
      {"google-gemma-2-2b-it.jinja", ToolFormat::kNone},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolFormat::kNone},
  };
  for (const auto& c : cases) {
    const std::string src = ReadTemplate(c.file);
    ASSERT_FALSE(src.empty()) << c.file;
    EXPECT_EQ(DetectToolFormat(src), c.format) << c.file << " detected as " << ToolFormatName(DetectToolFormat(src));
  }
#endif
}

TEST(ToolFormat, DetectsMarkersAlone) {
  EXPECT_EQ(DetectToolFormat("{{ '<tool_call>' }}"), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat("{{ '<|python_tag|>' }}"), ToolFormat::kLlama3);
  EXPECT_EQ(DetectToolFormat("[TOOL_CALLS]"), ToolFormat::kMistral);
  EXPECT_EQ(DetectToolFormat("<｜tool▁calls▁begin｜>"), ToolFormat::kDeepSeekV3);
  EXPECT_EQ(DetectToolFormat("{{ messages }}"), ToolFormat::kNone);
  EXPECT_EQ(DetectToolFormat(""), ToolFormat::kNone);
}

// ---------------------------------------------------------------- ids

TEST(ToolCallId, DeterministicAndWellFormed) {
  const std::string id = MakeToolCallId(ToolFormat::kHermes, 7, 0);
  ASSERT_EQ(id.size(), 5u + 24u);
  EXPECT_TRUE(id.starts_with("call_"));
  for (char c : id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
  EXPECT_EQ(id, MakeToolCallId(ToolFormat::kHermes, 7, 0));
  EXPECT_NE(id, MakeToolCallId(ToolFormat::kHermes, 7, 1));
  EXPECT_NE(id, MakeToolCallId(ToolFormat::kHermes, 8, 0));
  const std::string mistral = MakeToolCallId(ToolFormat::kMistral, 7, 0);
  ASSERT_EQ(mistral.size(), 9u);
  for (char c : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << mistral;
}

// ---------------------------------------------------------------- Hermes

TEST(ToolCallsHermes, SingleCall) {
  const auto p = Parse(ToolFormat::kHermes,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  ExpectCall(p, 0, "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(p.tool_calls[0].id, MakeToolCallId(ToolFormat::kHermes, kSeed, 0));
}

TEST(ToolCallsHermes, ParallelCallsWithContentBeforeAndAfter) {
  const auto p = Parse(ToolFormat::kHermes,
                       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\nDone.\n");
  EXPECT_EQ(p.content, "Let me check.\n\n\nDone.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  ExpectCall(p, 0, "get_weather", R"({"city":"Paris"})");
  ExpectCall(p, 1, "get_time", "{}");
  EXPECT_NE(p.tool_calls[0].id, p.tool_calls[1].id);
}

TEST(ToolCallsHermes, MalformedJsonStaysContent) {
  const std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
  const auto p = Parse(ToolFormat::kHermes, "A " + text + " B");
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "A " + text + " B");
}

TEST(ToolCallsHermes, UnknownFunctionStaysContentOthersParse) {
  const std::string unknown = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
  const auto p = Parse(ToolFormat::kHermes,
                       unknown + "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>");
  EXPECT_EQ(p.content, unknown);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  ExpectCall(p, 0, "get_time", R"({"tz":"UTC"})");
  EXPECT_EQ(p.tool_calls[0].id, MakeToolCallId(ToolFormat::kHermes, kSeed, 0));
}

TEST(ToolCallsHermes, UnicodeArgumentsKeptAsUtf8InModelKeyOrder) {
  const auto p = Parse(ToolFormat::kHermes,
                       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"z\": 1, \"city\": \"Zürich 東京 🌧\", "
                       "\"esc\": \"\\u00e9\"}}</tool_call>");
  ExpectCall(p, 0, "get_weather", "{\"z\":1,\"city\":\"Zürich 東京 🌧\",\"esc\":\"é\"}");
}

TEST(ToolCallsHermes, ArgumentsAsStringOrMissing) {
  auto p = Parse(ToolFormat::kHermes,
                 "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}</tool_call>");
  ExpectCall(p, 0, "get_weather", R"({"city":"Oslo"})");
  p = Parse(ToolFormat::kHermes, "<tool_call>{\"name\": \"get_time\"}</tool_call>");
  ExpectCall(p, 0, "get_time", "{}");
  p = Parse(ToolFormat::kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>");
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ToolCallsHermes, MissingCloseTagAcceptedAtEndOnlyWhenJsonComplete) {
  auto p = Parse(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n");
  ExpectCall(p, 0, "get_time", "{}");
  const std::string cut = "<tool_call>\n{\"name\": \"get_time\", \"argu";
  p = Parse(ToolFormat::kHermes, cut);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, cut);
}

TEST(ToolCallsHermes, NoToolsMeansNoCalls) {
  const std::string text = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  const auto p = ParseToolCalls(ToolFormat::kHermes, text, json::array(), kSeed);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, text);
}

TEST(ToolCallsHermes, AcceptsOrderedJsonTools) {
  // The request parser keeps template variables (tools among them) as ordered_json.
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(Tools().dump());
  const auto p = ParseToolCalls(ToolFormat::kHermes, "<tool_call>{\"name\": \"get_time\"}</tool_call>", tools, kSeed);
  ExpectCall(p, 0, "get_time", "{}");
}

TEST(ToolCallsHermes, NoneFormatParsesAsHermes) {
  const auto p = Parse(ToolFormat::kNone, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
  ExpectCall(p, 0, "get_time", "{}");
}

TEST(ToolCallsHermes, PlainTextIsTrimmedOnly) {
  const auto p = Parse(ToolFormat::kHermes, "\n\n  Hello <b>world</b> [x] {y}\n\nBye.  \n");
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "Hello <b>world</b> [x] {y}\n\nBye.");
}

// ---------------------------------------------------------------- Llama 3

TEST(ToolCallsLlama3, BareJsonAndPythonTag) {
  auto p = Parse(ToolFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  EXPECT_EQ(p.content, "");
  ExpectCall(p, 0, "get_weather", R"({"city":"Paris"})");
  p = Parse(ToolFormat::kLlama3,
            "<|python_tag|>{\"type\": \"function\", \"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}");
  EXPECT_EQ(p.content, "");
  ExpectCall(p, 0, "get_time", R"({"tz":"UTC"})");
}

TEST(ToolCallsLlama3, ParallelCallsWithContentBefore) {
  const auto p = Parse(ToolFormat::kLlama3,
                       "Checking both.\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}\n"
                       "{\"name\": \"get_time\", \"parameters\": {}}");
  EXPECT_EQ(p.content, "Checking both.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  ExpectCall(p, 0, "get_weather", R"({"city":"Rome"})");
  ExpectCall(p, 1, "get_time", "{}");
}

TEST(ToolCallsLlama3, NonCallJsonAndBuiltinToolsStayContent) {
  for (const std::string& text : {
           std::string("Here: {\"name\": \"Bob\", \"age\": 3} ok"),
           std::string("{\"name\": \"get_weather\", \"parameters\": {\"city\": }} after"),
           std::string("{\"name\": \"rm_rf\", \"parameters\": {}}"),
           std::string("<|python_tag|>brave_search.call(query=\"x\")"),
           std::string("code { x = 1; } and {\"a\": [}"),
       }) {
    const auto p = Parse(ToolFormat::kLlama3, text);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallsLlama3, Unicode) {
  const auto p = Parse(ToolFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Київ\"}}");
  ExpectCall(p, 0, "get_weather", R"({"city":"Київ"})");
}

// ---------------------------------------------------------------- Mistral

TEST(ToolCallsMistral, ArrayWithParallelCallsAndModelIds) {
  const auto p = Parse(ToolFormat::kMistral,
                       "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}, "
                       "\"id\": \"abc123XYZ\"}, {\"name\": \"get_time\", \"arguments\": {}}]");
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  ExpectCall(p, 0, "get_weather", R"({"city":"Lyon"})");
  ExpectCall(p, 1, "get_time", "{}");
  EXPECT_EQ(p.tool_calls[0].id, "abc123XYZ");
  EXPECT_EQ(p.tool_calls[1].id, MakeToolCallId(ToolFormat::kMistral, kSeed, 1));
  EXPECT_EQ(p.tool_calls[1].id.size(), 9u);
}

TEST(ToolCallsMistral, ArgsForms) {
  auto p = Parse(ToolFormat::kMistral,
                 "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]get_time[ARGS]{}");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  ExpectCall(p, 0, "get_weather", R"({"city":"Nice"})");
  ExpectCall(p, 1, "get_time", "{}");
  p = Parse(ToolFormat::kMistral, "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{\"tz\": \"CET\"}");
  ExpectCall(p, 0, "get_time", R"({"tz":"CET"})");
  EXPECT_EQ(p.tool_calls[0].id, "a1b2c3d4e");
  p = Parse(ToolFormat::kMistral, "[TOOL_CALLS]get_time{\"tz\": \"CET\"}");
  ExpectCall(p, 0, "get_time", R"({"tz":"CET"})");
}

TEST(ToolCallsMistral, BadCallsStayContent) {
  for (const std::string& text : {
           std::string("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}, "
                       "{\"name\": \"nope\", \"arguments\": {}}]"),
           std::string("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": }}]"),
           std::string("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": 1]"),
           std::string("[TOOL_CALLS]nope[ARGS]{}"),
           std::string("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Lyon\""),
           std::string("[TOOL_CALLS] hello"),
           std::string("[TOOL_CALLS]"),
       }) {
    const auto p = Parse(ToolFormat::kMistral, text);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallsMistral, Unicode) {
  const auto p = Parse(ToolFormat::kMistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"São Paulo\"}");
  ExpectCall(p, 0, "get_weather", R"({"city":"São Paulo"})");
}

// ---------------------------------------------------------------- DeepSeek

std::string DsR1Call(std::string_view name, std::string_view args) {
  return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + std::string(name) + "\n```json\n" + std::string(args) +
         "\n```<｜tool▁call▁end｜>";
}

const std::string kDsBegin = "<｜tool▁calls▁begin｜>";
const std::string kDsEnd = "<｜tool▁calls▁end｜>";

TEST(ToolCallsDeepSeek, R1FormSingleAndParallel) {
  auto p = Parse(ToolFormat::kDeepSeekV3, kDsBegin + DsR1Call("get_weather", "{\"city\": \"Pune\"}") + kDsEnd);
  EXPECT_EQ(p.content, "");
  ExpectCall(p, 0, "get_weather", R"({"city":"Pune"})");
  p = Parse(ToolFormat::kDeepSeekV3, "I'll look.\n\n" + kDsBegin + DsR1Call("get_weather", "{\"city\": \"Pune\"}") +
                                         "\n" + DsR1Call("get_time", "{}") + kDsEnd + "<｜end▁of▁sentence｜>");
  EXPECT_EQ(p.content, "I'll look.\n\n<｜end▁of▁sentence｜>");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  ExpectCall(p, 1, "get_time", "{}");
}

TEST(ToolCallsDeepSeek, V31Form) {
  const auto p = Parse(ToolFormat::kDeepSeekV3,
                       kDsBegin + "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Delhi\"}<｜tool▁call▁end｜>" +
                           "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>" + kDsEnd);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  ExpectCall(p, 0, "get_weather", R"({"city":"Delhi"})");
  ExpectCall(p, 1, "get_time", "{}");
}

TEST(ToolCallsDeepSeek, MissingBlockEndAcceptedAtEnd) {
  const auto p = Parse(ToolFormat::kDeepSeekV3, kDsBegin + DsR1Call("get_time", "{}") + "\n");
  ExpectCall(p, 0, "get_time", "{}");
}

TEST(ToolCallsDeepSeek, BadCallsLeaveTheBlockAsContent) {
  for (const std::string& text : {
           kDsBegin + DsR1Call("get_weather", "{\"city\": \"Pune\"}") + DsR1Call("nope", "{}") + kDsEnd,
           kDsBegin + DsR1Call("get_weather", "{\"city\": ") + kDsEnd,
           kDsBegin + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}",
           kDsBegin + kDsEnd,
       }) {
    const auto p = Parse(ToolFormat::kDeepSeekV3, text);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallsDeepSeek, Unicode) {
  const auto p = Parse(ToolFormat::kDeepSeekV3, kDsBegin + DsR1Call("get_weather", "{\"city\": \"北京\"}") + kDsEnd);
  ExpectCall(p, 0, "get_weather", R"({"city":"北京"})");
}

// ---------------------------------------------------------------- streaming

struct Sample {
  ToolFormat format;
  std::string text;
};

std::vector<Sample> StreamingSamples() {
  const std::string hermes_call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich 東京 🌧\"}}\n</tool_call>";
  return {
      {ToolFormat::kHermes, "Héllo wörld 👋, no calls here.\n\n"},
      {ToolFormat::kHermes, "Let me check. " + hermes_call + "\n" + hermes_call + "\nDone ✓"},
      {ToolFormat::kHermes, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call> <tool_cal"},
      {ToolFormat::kHermes, "a <tool_call>{\"name\": \"get_time\", \"arguments\": {\"x\": }}</tool_call> b <tool"},
      {ToolFormat::kHermes, "x <tool_calls> y </tool_call> <tool_call>{\"name\": \"get_time\"}"},
      {ToolFormat::kNone, hermes_call},
      {ToolFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Київ\"}}"},
      {ToolFormat::kLlama3, "Ok { \"na\" } {\"name\": \"Bob\"} <|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}\n"
                            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a}b\\\"c\"}} tail {\"nam"},
      {ToolFormat::kLlama3, "<|python_tag|>brave_search.call(query=\"ü\") {  "},
      {ToolFormat::kMistral, "Sure ✓[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"São]\"}, "
                             "\"id\": \"abc123XYZ\"}, {\"name\": \"get_time\", \"arguments\": {}}] after [TOOL_"},
      {ToolFormat::kMistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}"},
      {ToolFormat::kMistral, "[TOOL_CALLS]nope[ARGS]{} [TOOL_CALLS] hi [TOOL_CALLS][{\"name\": 1}]"},
      {ToolFormat::kDeepSeekV3, "Plan ✓\n" + kDsBegin + DsR1Call("get_weather", "{\"city\": \"北京\"}") + "\n" +
                                    DsR1Call("get_time", "{}") + kDsEnd + " <｜tool▁ca"},
      {ToolFormat::kDeepSeekV3, kDsBegin + "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"東\"}<｜tool▁call▁end｜>"},
      {ToolFormat::kDeepSeekV3, kDsBegin + DsR1Call("nope", "{}") + kDsEnd + " x " + kDsBegin + "junk"},
  };
}

TEST(ToolCallStream, SamplesParseAsExpected) {
  // Spot checks that the streaming corpus exercises calls, not only content.
  const auto samples = StreamingSamples();
  EXPECT_EQ(Parse(samples[1].format, samples[1].text).tool_calls.size(), 2u);
  EXPECT_EQ(Parse(samples[4].format, samples[4].text).tool_calls.size(), 1u);
  EXPECT_EQ(Parse(samples[7].format, samples[7].text).tool_calls.size(), 2u);
  EXPECT_EQ(Parse(samples[9].format, samples[9].text).tool_calls.size(), 2u);
  EXPECT_EQ(Parse(samples[10].format, samples[10].text).tool_calls.size(), 2u);
  EXPECT_EQ(Parse(samples[12].format, samples[12].text).tool_calls.size(), 2u);
  EXPECT_EQ(Parse(samples[12].format, samples[12].text).content, "Plan ✓\n <｜tool▁ca");
  EXPECT_EQ(Parse(samples[14].format, samples[14].text).tool_calls.size(), 0u);
}

TEST(ToolCallStream, EveryTwoWaySplitMatchesWholeText) {
  for (const Sample& s : StreamingSamples()) {
    const ParsedAssistant want = Parse(s.format, s.text);
    for (size_t cut = 0; cut <= s.text.size(); ++cut) {
      ExpectSame(Stream(s.format, s.text, {cut}), want, s.text + " cut at " + std::to_string(cut));
    }
  }
}

TEST(ToolCallStream, ByteByByteMatchesWholeText) {
  for (const Sample& s : StreamingSamples()) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < s.text.size(); ++i) cuts.push_back(i);
    ExpectSame(Stream(s.format, s.text, cuts), Parse(s.format, s.text), s.text);
  }
}

TEST(ToolCallStream, RandomSplitsMatchWholeText) {
  const uint32_t seed = 20240611;
  std::mt19937 rng(seed);
  for (const Sample& s : StreamingSamples()) {
    const ParsedAssistant want = Parse(s.format, s.text);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<size_t> cuts;
      std::uniform_int_distribution<size_t> pos(0, s.text.size());
      const int n = std::uniform_int_distribution<int>(1, 12)(rng);
      for (int k = 0; k < n; ++k) cuts.push_back(pos(rng));
      std::sort(cuts.begin(), cuts.end());
      std::string where = s.text + " (seed " + std::to_string(seed) + ", cuts";
      for (size_t c : cuts) where += " " + std::to_string(c);
      ExpectSame(Stream(s.format, s.text, cuts), want, where + ")");
    }
  }
}

// Texts glued from marker pieces, JSON fragments and multi-byte characters, so that markers
// appear cut, nested, unclosed and back to back; each must stream as it parses whole.
TEST(ToolCallStream, RandomTextsStreamAsTheyParse) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "<tool_c", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[TOOL_",
      kDsBegin, kDsEnd, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁", "function",
      "get_time", "get_weather", "nope", "{\"name\": \"get_time\", \"arguments\": {}}",
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"東\"}}", "[{\"name\": \"get_time\"}]",
      "{\"city\": \"ü\"}", "{", "}", "[", "]", "\"", "\\", "\n", " ", "```json\n", "\n```", "a1b2c3d4e", "é", "🌧",
      "text", "{ \"na", "{\"type\": \"function\", \"name\": \"get_time\"}"};
  const uint32_t seed = 7;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
  size_t num_calls = 0;
  size_t num_texts_with_content = 0;
  for (ToolFormat format : {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral, ToolFormat::kDeepSeekV3}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const int n = std::uniform_int_distribution<int>(1, 16)(rng);
      for (int k = 0; k < n; ++k) text += pieces[pick(rng)];
      const ParsedAssistant want = Parse(format, text);
      num_calls += want.tool_calls.size();
      num_texts_with_content += !want.content.empty();
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (rng() % 3 == 0) cuts.push_back(i);
      }
      ExpectSame(Stream(format, text, cuts), want,
                 std::string(ToolFormatName(format)) + " seed " + std::to_string(seed) + " trial " +
                     std::to_string(trial) + ": " + text);
    }
  }
  // The corpus is only useful if it makes both outcomes often.
  EXPECT_GT(num_calls, 100u);
  EXPECT_GT(num_texts_with_content, 600u);
}

TEST(ToolCallStream, HoldsBackAPartialMarkerUntilFinish) {
  ToolCallStreamParser parser(ToolFormat::kHermes, Tools(), kSeed);
  auto events = parser.Feed("Hello <tool_c");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "Hello");  // the space waits: it may be trailing
  EXPECT_TRUE(parser.Feed("").empty());
  events = parser.Finish();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, " <tool_c");
  EXPECT_FALSE(parser.has_tool_calls());
}

TEST(ToolCallStream, ReleasesAPrefixThatStopsMatching) {
  ToolCallStreamParser parser(ToolFormat::kHermes, Tools(), kSeed);
  EXPECT_EQ(parser.Feed("a <tool_ca").size(), 1u);
  const auto events = parser.Feed("t> b");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, " <tool_cat> b");
}

TEST(ToolCallStream, HoldsBackHalfACharacter) {
  ToolCallStreamParser parser(ToolFormat::kHermes, Tools(), kSeed);
  const std::string text = "ab東";
  auto events = parser.Feed(text.substr(0, 3));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "ab");
  events = parser.Feed(text.substr(3));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "東");
}

TEST(ToolCallStream, CallEventsInOpenAiShape) {
  ToolCallStreamParser parser(ToolFormat::kHermes, Tools(), kSeed);
  EXPECT_TRUE(parser.Feed("<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\"").empty());
  const auto events = parser.Feed(": \"UTC\"}}</tool_call>");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(parser.has_tool_calls());
  const std::string id = MakeToolCallId(ToolFormat::kHermes, kSeed, 0);
  EXPECT_EQ(ToOpenAiDelta(events[0]),
            json::parse(R"({"tool_calls": [{"index": 0, "id": ")" + id +
                        R"(", "type": "function", "function": {"name": "get_time", "arguments": ""}}]})"));
  EXPECT_EQ(ToOpenAiDelta(events[1]),
            json::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": "{\"tz\":\"UTC\"}"}}]})"));
  EXPECT_TRUE(parser.Finish().empty());
}

TEST(ToolCallStream, ContentDelta) {
  ToolStreamEvent e;
  e.text = "hi";
  EXPECT_EQ(ToOpenAiDelta(e), json::parse(R"({"content": "hi"})"));
}

TEST(ToolCallsJson, MessageShape) {
  const std::vector<ToolCall> calls = {{"call_a", "get_time", "{}"}, {"call_b", "get_weather", R"({"city":"X"})"}};
  EXPECT_EQ(ToolCallsJson(calls), json::parse(R"([
    {"id": "call_a", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"X\"}"}}])"));
  EXPECT_EQ(ToolCallsJson({}), json::array());
}

// ---------------------------------------------------------------- validation

TEST(ValidateTools, AcceptsOpenAiTools) {
  EXPECT_EQ(ValidateTools(Tools()), std::nullopt);
  EXPECT_EQ(ValidateTools(json::array()), std::nullopt);
  EXPECT_EQ(ValidateTools(json::parse(R"([{"type": "function", "function": {"name": "a-B_9", "strict": true,
                                           "parameters": {}, "description": ""}}])")),
            std::nullopt);
}

TEST(ValidateTools, NamesTheOffendingField) {
  const struct {
    const char* tools;
    const char* prefix;
  } cases[] = {
      {R"({"type": "function"})", "tools: "},
      {R"([{"type": "function", "function": {"name": "ok"}}, 3])", "tools[1]: "},
      {R"([{"function": {"name": "ok"}}])", "tools[0].type: "},
      {R"([{"type": "retrieval", "function": {"name": "ok"}}])", "tools[0].type: "},
      {R"([{"type": "function", "function": {"name": "ok"}, "extra": 1}])", "tools[0].extra: "},
      {R"([{"type": "function"}])", "tools[0].function: "},
      {R"([{"type": "function", "function": "ok"}])", "tools[0].function: "},
      {R"([{"type": "function", "function": {"description": "x"}}])", "tools[0].function.name: "},
      {R"([{"type": "function", "function": {"name": ""}}])", "tools[0].function.name: "},
      {R"([{"type": "function", "function": {"name": "has space"}}])", "tools[0].function.name: "},
      {R"([{"type": "function", "function": {"name": 5}}])", "tools[0].function.name: "},
      {R"([{"type": "function", "function": {"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}])",
       "tools[0].function.name: "},
      {R"([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}])",
       "tools[1].function.name: "},
      {R"([{"type": "function", "function": {"name": "a", "description": 1}}])", "tools[0].function.description: "},
      {R"([{"type": "function", "function": {"name": "a", "parameters": []}}])", "tools[0].function.parameters: "},
      {R"([{"type": "function", "function": {"name": "a", "strict": "yes"}}])", "tools[0].function.strict: "},
      {R"([{"type": "function", "function": {"name": "a", "returns": {}}}])", "tools[0].function.returns: "},
  };
  for (const auto& c : cases) {
    const auto error = ValidateTools(json::parse(c.tools));
    ASSERT_TRUE(error.has_value()) << c.tools;
    EXPECT_TRUE(error->starts_with(c.prefix)) << c.tools << " -> " << *error;
  }
}

TEST(ValidateToolChoice, AcceptsEveryForm) {
  ToolChoice choice;
  EXPECT_EQ(ValidateToolChoice(json(), Tools(), &choice), std::nullopt);
  EXPECT_EQ(choice.mode, ToolChoiceMode::kAuto);
  EXPECT_EQ(ValidateToolChoice(json(), json::array(), &choice), std::nullopt);
  EXPECT_EQ(choice.mode, ToolChoiceMode::kNone);
  EXPECT_EQ(ValidateToolChoice("none", Tools(), &choice), std::nullopt);
  EXPECT_EQ(choice.mode, ToolChoiceMode::kNone);
  EXPECT_EQ(ValidateToolChoice("auto", Tools(), &choice), std::nullopt);
  EXPECT_EQ(choice.mode, ToolChoiceMode::kAuto);
  EXPECT_EQ(ValidateToolChoice("required", Tools(), &choice), std::nullopt);
  EXPECT_EQ(choice.mode, ToolChoiceMode::kRequired);
  EXPECT_EQ(ValidateToolChoice(json::parse(R"({"type": "function", "function": {"name": "get_time"}})"), Tools(),
                               &choice),
            std::nullopt);
  EXPECT_EQ(choice.mode, ToolChoiceMode::kFunction);
  EXPECT_EQ(choice.name, "get_time");
}

TEST(ValidateToolChoice, NamesTheOffendingField) {
  const struct {
    const char* choice;
    const char* prefix;
  } cases[] = {
      {R"("always")", "tool_choice: "},
      {R"(3)", "tool_choice: "},
      {R"({"type": "function"})", "tool_choice.function: "},
      {R"({"function": {"name": "get_time"}})", "tool_choice.type: "},
      {R"({"type": "tool", "function": {"name": "get_time"}})", "tool_choice.type: "},
      {R"({"type": "function", "function": {"name": "nope"}})", "tool_choice.function.name: "},
      {R"({"type": "function", "function": {"name": 1}})", "tool_choice.function.name: "},
      {R"({"type": "function", "function": {}})", "tool_choice.function.name: "},
      {R"({"type": "function", "function": {"name": "get_time", "x": 1}})", "tool_choice.function.x: "},
      {R"({"type": "function", "function": {"name": "get_time"}, "x": 1})", "tool_choice.x: "},
  };
  for (const auto& c : cases) {
    ToolChoice choice;
    const auto error = ValidateToolChoice(json::parse(c.choice), Tools(), &choice);
    ASSERT_TRUE(error.has_value()) << c.choice;
    EXPECT_TRUE(error->starts_with(c.prefix)) << c.choice << " -> " << *error;
  }
  ToolChoice choice;
  const auto error = ValidateToolChoice("required", json::array(), &choice);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(error->starts_with("tool_choice: ")) << *error;
}

}  // namespace
}  // namespace dspark::serve
