// Golden tests: every real chat template in tests/data/templates/ rendered over the conversations
// in make_goldens.py must equal Python jinja2's output byte for byte (or fail where Python
// fails, with the template's own message when it called raise_exception). The snippet goldens
// pin individual interpreter behaviours the same way.
#include "template/chat_template.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace dspark {
namespace {

using nlohmann::ordered_json;

const std::string kDataDir = std::string(DSPARK_SOURCE_DIR) + "/tests/data/templates/";

// Must match FIXED_NOW in make_goldens.py: 2025-03-14 09:26:53.
std::tm FixedNow() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 9;
  tm.tm_min = 26;
  tm.tm_sec = 53;
  tm.tm_wday = 5;   // Friday
  tm.tm_yday = 72;  // day 73 of the year
  return tm;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ordered_json ReadJson(const std::string& path) {
  std::string text = ReadFile(path);
  EXPECT_FALSE(text.empty()) << "missing " << path << " (run tests/data/templates/make_goldens.py)";
  return ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// First differing position, with some context, for readable failures.
std::string Diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  want: ..." +
         ordered_json(want.substr(from, 100)).dump() + "\n  got:  ..." + ordered_json(got.substr(from, 100)).dump();
}

// Checks one golden case; returns an empty string on success, else a description.
std::string CheckCase(const ChatTemplate& tmpl, const ordered_json& c) {
  auto r = tmpl.Render(c["context"]);
  if (c.contains("expected")) {
    std::string want = c["expected"].get<std::string>();
    if (!r.ok()) return "render failed: " + r.status().ToString();
    if (*r != want) return Diff(want, *r);
    return "";
  }
  std::string error = c["error"].get<std::string>();
  if (r.ok()) return "expected an error like '" + error + "', got " + ordered_json(*r).dump();
  if (c["raised"].get<bool>()) {
    if (!IsRaisedByTemplate(r.status())) return "expected raise_exception, got " + r.status().ToString();
    const std::string& msg = r.status().message();
    if (msg.size() < error.size() || msg.compare(msg.size() - error.size(), error.size(), error) != 0) {
      return "message '" + msg + "' does not end with '" + error + "'";
    }
  }
  return "";
}

class TemplateGolden : public testing::TestWithParam<std::string> {};

TEST_P(TemplateGolden, MatchesJinja2) {
  const std::string name = GetParam();
  auto tmpl = ChatTemplate::Parse(ReadFile(kDataDir + name + ".jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  tmpl->SetClock(FixedNow);
  ordered_json goldens = ReadJson(kDataDir + name + ".goldens.json");
  ASSERT_TRUE(goldens.contains("cases"));
  int passed = 0, total = 0;
  for (const auto& c : goldens["cases"]) {
    ++total;
    std::string failure = CheckCase(*tmpl, c);
    if (failure.empty()) {
      ++passed;
    } else {
      ADD_FAILURE() << name << " / " << c["name"].get<std::string>() << ": " << failure;
    }
  }
  EXPECT_GT(total, 0);
  std::printf("%s: %d/%d golden cases pass\n", name.c_str(), passed, total);
}

INSTANTIATE_TEST_SUITE_P(
    RealTemplates, TemplateGolden,
    testing::Values("HuggingFaceTB-SmolLM3-3B", "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen3-Coder",
                    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai-DeepSeek-V3.1",
                    "google-gemma-2-2b-it", "meta-llama-Llama-3.1-8B-Instruct",
                    "meta-llama-Llama-3.2-3B-Instruct", "microsoft-Phi-3.5-mini-instruct",
                    "mistralai-Mistral-Nemo-Instruct-2407"),
    [](const testing::TestParamInfo<std::string>& info) {
      std::string n;
      for (char c : info.param) n.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
      return n;
    });

TEST(TemplateSnippets, MatchJinja2) {
  ordered_json goldens = ReadJson(kDataDir + "snippets.goldens.json");
  ASSERT_TRUE(goldens.contains("cases"));
  int passed = 0, total = 0;
  for (const auto& c : goldens["cases"]) {
    ++total;
    const std::string source = c["template"].get<std::string>();
    auto tmpl = ChatTemplate::Parse(source);
    std::string failure;
    if (!tmpl.ok()) {
      failure = "parse failed: " + tmpl.status().ToString();
    } else {
      tmpl->SetClock(FixedNow);
      failure = CheckCase(*tmpl, c);
    }
    if (failure.empty()) {
      ++passed;
    } else {
      ADD_FAILURE() << "snippet " << ordered_json(source).dump() << ": " << failure;
    }
  }
  std::printf("snippets: %d/%d golden cases pass\n", passed, total);
}

// Apply() builds the same context as transformers (tools/documents = None) from ChatMessage.
TEST(ChatTemplate, ApplyMatchesRenderOfEquivalentContext) {
  auto tmpl = ChatTemplate::Parse(ReadFile(kDataDir + "Qwen-Qwen2.5-7B-Instruct.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  ordered_json goldens = ReadJson(kDataDir + "Qwen-Qwen2.5-7B-Instruct.goldens.json");
  const ordered_json* system_user = nullptr;
  for (const auto& c : goldens["cases"]) {
    if (c["name"] == "system_user") system_user = &c;
  }
  ASSERT_NE(system_user, nullptr);
  std::vector<ChatMessage> messages;
  for (const auto& m : (*system_user)["context"]["messages"]) {
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  auto r = tmpl->Apply(messages, true, "", "<|im_end|>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (*system_user)["expected"].get<std::string>());
}

TEST(ChatTemplate, ApplyPassesExtrasAndToolCalls) {
  auto tmpl = ChatTemplate::Parse(ReadFile(kDataDir + "Qwen-Qwen3-0.6B.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  ChatMessage user{"user", "Weather?"};
  ChatMessage call{"assistant", ""};
  call.extra["tool_calls"] = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "arguments": {"z": 1, "a": "x"}}}])");
  auto r = tmpl->Apply({user, call, {"user", "ok"}}, true, "", "<|im_end|>", {{"enable_thinking", false}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
            "{\"name\": \"get_weather\", \"arguments\": {\"z\": 1, \"a\": \"x\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, RaiseExceptionIsInvalidArgumentWithTemplateMessage) {
  auto tmpl = ChatTemplate::Parse(ReadFile(kDataDir + "google-gemma-2-2b-it.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  auto r = tmpl->Apply({{"system", "s"}, {"user", "u"}}, true, "<bos>", "<eos>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsRaisedByTemplate(r.status()));
  EXPECT_NE(r.status().message().find("System role not supported"), std::string::npos) << r.status().ToString();
}

TEST(ChatTemplate, RenderAcceptsUnorderedJson) {
  auto tmpl = ChatTemplate::Parse("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  ASSERT_TRUE(tmpl.ok());
  nlohmann::json ctx = {{"bos_token", "<s>"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = tmpl->Render(ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "<s>user:hi;");
}

// Mutated real templates (deleted, duplicated or swapped bytes and tag characters) must parse
// or fail cleanly, and render or fail cleanly: never crash, hang or throw. Seeded; the seed is
// printed on failure via SCOPED_TRACE.
TEST(ChatTemplate, MutatedTemplatesFailCleanly) {
  const char* kFiles[] = {"Qwen3-Coder", "meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
                          "deepseek-ai-DeepSeek-V3.1", "HuggingFaceTB-SmolLM3-3B", "google-gemma-2-2b-it"};
  ordered_json ctx = ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a", "tool_calls": [{"id": "abcdefghi", "type": "function",
                   "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "r", "tool_call_id": "abcdefghi"}, {"role": "user", "content": "v"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  const char kAlphabet[] = "{}%#-+()[]|.,:'\" \n~=<>!*/ abcifelsndortx0123";
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  // DSPARK_TEMPLATE_MUTATION_ROUNDS raises the count for a longer local (e.g. ASan) run.
  const char* rounds_env = std::getenv("DSPARK_TEMPLATE_MUTATION_ROUNDS");
  const int rounds = rounds_env != nullptr ? std::atoi(rounds_env) : 60;
  int parsed = 0, rendered = 0, total = 0;
  for (const char* name : kFiles) {
    const std::string source = ReadFile(kDataDir + std::string(name) + ".jinja");
    for (int round = 0; round < rounds; ++round) {
      SCOPED_TRACE(std::string(name) + " round " + std::to_string(round) + " state " + std::to_string(state));
      std::string s = source;
      int edits = 1 + static_cast<int>(next() % 4);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        size_t pos = next() % s.size();
        switch (next() % 4) {
          case 0: s.erase(pos, 1 + next() % 8); break;
          case 1: s.insert(pos, 1, kAlphabet[next() % (sizeof(kAlphabet) - 1)]); break;
          case 2: s.insert(pos, s.substr(next() % s.size(), next() % 40)); break;
          default: std::swap(s[pos], s[next() % s.size()]);
        }
      }
      ++total;
      auto t = ChatTemplate::Parse(s);
      if (!t.ok()) {
        EXPECT_EQ(t.status().message().rfind("chat template: template:", 0), 0u) << t.status().message();
        continue;
      }
      ++parsed;
      auto r = t->Render(ctx);
      if (r.ok()) ++rendered;
    }
  }
  std::printf("mutations: %d total, %d parsed, %d rendered\n", total, parsed, rendered);
}

// One parsed template serves concurrent requests: Render is const and keeps per-call state only.
TEST(ChatTemplate, ConcurrentRendersAgree) {
  auto tmpl = ChatTemplate::Parse(ReadFile(kDataDir + "Qwen3-Coder.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  ordered_json goldens = ReadJson(kDataDir + "Qwen3-Coder.goldens.json");
  std::vector<const ordered_json*> cases;
  for (const auto& c : goldens["cases"]) {
    if (c.contains("expected")) cases.push_back(&c);
  }
  ASSERT_FALSE(cases.empty());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 3 * cases.size(); ++i) {
        const ordered_json& c = *cases[(i + static_cast<size_t>(t) * 7) % cases.size()];
        auto r = tmpl->Render(c["context"]);
        if (!r.ok() || *r != c["expected"].get<std::string>()) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Callers holding plain nlohmann::json (sorted keys) can pass it anywhere ordered_json is taken.
TEST(ChatTemplate, ApplyAcceptsPlainJson) {
  auto tmpl = ChatTemplate::Parse("{{ messages[0].meta|tojson }}|{{ flag }}|{{ tools }}|{{ documents }}");
  ASSERT_TRUE(tmpl.ok());
  ChatMessage m{"user", "hi"};
  m.extra = nlohmann::json{{"meta", {{"b", 1}, {"a", 2}}}};
  nlohmann::json extra = {{"flag", true}};
  auto r = tmpl->Apply({m}, false, "", "", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "{\"a\": 2, \"b\": 1}|True|None|None");
  ChatMessage null_content{"assistant", ""};
  null_content.extra["content"] = nullptr;  // extra overrides content, e.g. for tool-call turns
  auto r2 = ChatTemplate::Parse("{{ messages[0].content is none }}")->Apply({null_content}, false, "", "");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, "True");
}

TEST(ChatTemplate, RenderRejectsNonObjectContext) {
  auto tmpl = ChatTemplate::Parse("x");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_FALSE(tmpl->Render(ordered_json::array()).ok());
}

}  // namespace
}  // namespace dspark
