// Unit tests of the Jinja interpreter on small hand-written templates: parse errors with
// line:column, runtime error locations, resource limits, and API details the golden files (which
// compare against Python jinja2 in chat_template_test.cc) do not reach.
#include <gtest/gtest.h>

#include "template/chat_template.h"
#include "template/lexer.h"
#include "template/value.h"

namespace dspark {
namespace {

using nlohmann::ordered_json;

Result<std::string> Render(std::string_view src, const ordered_json& ctx = ordered_json::object()) {
  DSPARK_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Parse(src));
  return t.Render(ctx);
}

std::string RenderOk(std::string_view src, const ordered_json& ctx = ordered_json::object()) {
  auto r = Render(src, ctx);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "<error>";
}

std::string ParseError(std::string_view src) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_FALSE(t.ok()) << "parsed: " << src;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  return t.status().message();
}

std::string RenderError(std::string_view src, const ordered_json& ctx = ordered_json::object()) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "";
  auto r = t->Render(ctx);
  EXPECT_FALSE(r.ok()) << "rendered: " << *r;
  return r.ok() ? "" : r.status().message();
}

TEST(JinjaParse, UnknownTagNamesLineAndColumn) {
  EXPECT_EQ(ParseError("Hello\n  {% frobnicate x %}"), "chat template: template:2:6: unknown tag 'frobnicate'");
  // `do` is an extension transformers does not enable.
  EXPECT_EQ(ParseError("{% do x.append(1) %}"), "chat template: template:1:4: unknown tag 'do'");
}

TEST(JinjaParse, UnknownFilterAndTest) {
  EXPECT_EQ(ParseError("{{ x }}\n{{ x | nosuch }}"), "chat template: template:2:8: unknown filter 'nosuch'");
  EXPECT_EQ(ParseError("{% if x is shiny %}{% endif %}"), "chat template: template:1:12: unknown test 'shiny'");
  // Filters and tests are checked even in branches that never run.
  EXPECT_NE(ParseError("{% if false %}{{ x|bogus }}{% endif %}").find("unknown filter 'bogus'"), std::string::npos);
}

TEST(JinjaParse, UnclosedBlocks) {
  EXPECT_EQ(ParseError("{% if x %}\nabc"),
            "chat template: template:1:4: unclosed 'if' block: missing '{% endif %}' before the end of the template");
  EXPECT_EQ(ParseError("x\n{% for m in messages %}{{ m }}"),
            "chat template: template:2:4: unclosed 'for' block: missing '{% endfor %}' before the end of the template");
  EXPECT_EQ(ParseError("{% macro f() %}"),
            "chat template: template:1:4: unclosed 'macro' block: missing '{% endmacro %}' before the end of the template");
  EXPECT_EQ(ParseError("{% if a %}{% for x in y %}{% endif %}"),
            "chat template: template:1:30: unexpected 'endif'; expected 'else', 'endfor'");
  EXPECT_EQ(ParseError("{% endif %}"), "chat template: template:1:4: unexpected 'endif'");
}

TEST(JinjaParse, UnclosedTagsAndLiterals) {
  EXPECT_EQ(ParseError("abc {{ x"), "chat template: template:1:5: unclosed '{{': missing '}}'");
  EXPECT_EQ(ParseError("a\n {% if x"), "chat template: template:2:2: unclosed '{%': missing '%}'");
  EXPECT_EQ(ParseError("{# note"), "chat template: template:1:1: unclosed comment: missing '#}'");
  EXPECT_EQ(ParseError("{{ 'abc }}"), "chat template: template:1:4: unterminated string literal");
  EXPECT_EQ(ParseError("{% raw %}abc"), "chat template: template:1:1: unclosed 'raw' block: missing '{% endraw %}'");
}

TEST(JinjaParse, SyntaxErrors) {
  EXPECT_EQ(ParseError("{{ 1 + }}"), "chat template: template:1:8: unexpected '}}' in expression");
  EXPECT_EQ(ParseError("{{ x y }}"), "chat template: template:1:6: expected '}}', got 'y'");
  EXPECT_EQ(ParseError("{% for x of y %}{% endfor %}"), "chat template: template:1:10: expected 'in', got 'of'");
  EXPECT_EQ(ParseError("{% break %}"), "chat template: template:1:4: 'break' outside of a loop");
  EXPECT_EQ(ParseError("{{ a ? b }}"), "chat template: template:1:6: unexpected character '?'");
  EXPECT_EQ(ParseError("{% set x %}"),
            "chat template: template:1:4: unclosed 'set' block: missing '{% endset %}' before the end of the template");
  EXPECT_NE(ParseError("{{ f(a=1, 2) }}").find("positional argument follows keyword argument"), std::string::npos);
}

TEST(JinjaParse, ColumnsCountCodePoints) {
  EXPECT_EQ(ParseError("héllo {% nope %}"), "chat template: template:1:10: unknown tag 'nope'");
}

TEST(JinjaParse, HostileNestingIsAnErrorNotACrash) {
  std::string deep(5000, '(');
  EXPECT_NE(ParseError("{{ " + deep + "1" + std::string(5000, ')') + " }}").find("more than 1000 tokens"),
            std::string::npos);
  std::string nested;
  for (int i = 0; i < 150; ++i) nested += "{% if true %}";
  for (int i = 0; i < 150; ++i) nested += "{% endif %}";
  EXPECT_NE(ParseError(nested).find("nested deeper than"), std::string::npos);
  std::string parens = "{{ " + std::string(200, '[') + std::string(200, ']') + " }}";
  EXPECT_NE(ParseError(parens).find("nested deeper than"), std::string::npos);
}

TEST(JinjaRender, RuntimeErrorsNameTheirLocation) {
  EXPECT_EQ(RenderError("line1\n  {{ x.y.z }}"), "chat template: template:2:7: 'x' is undefined");
  EXPECT_EQ(RenderError("{{ 'a' + 1 }}"), "chat template: template:1:8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(RenderError("{% for m in 3 %}{% endfor %}"), "chat template: template:1:13: 'int' object is not iterable");
}

TEST(JinjaRender, RaiseExceptionKeepsTheTemplateMessage) {
  auto r = Render("{% if messages|length == 0 %}{{ raise_exception('No messages given!') }}{% endif %}",
                  {{"messages", ordered_json::array()}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsRaisedByTemplate(r.status()));
  EXPECT_EQ(r.status().message(), "chat template: template raised: No messages given!");
  EXPECT_FALSE(IsRaisedByTemplate(Render("{{ 1 / 0 }}").status()));
}

TEST(JinjaRender, RunawayTemplatesHitLimits) {
  EXPECT_NE(RenderError("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested deeper than"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ 'x' * 100000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(RenderError("{% for i in range(1000000) %}{% endfor %}").find("range too big"), std::string::npos);
  EXPECT_NE(RenderError("{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}")
                .find("more than 1000000 steps"),
            std::string::npos);
}

TEST(JinjaRender, HostileValuesAreErrorsNotCrashes) {
  EXPECT_NE(RenderError("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(RenderError("{{ 2 ** 100 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(RenderOk("{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ 3 ** 0 }}"), "4611686018427387904|-9223372036854775808|1");
  EXPECT_NE(RenderError("{{ x // -1 }}", {{"x", INT64_MIN}}).find("integer overflow"), std::string::npos);
  EXPECT_NE(RenderError("{{ 1e300|int }}").find("does not fit"), std::string::npos);
  EXPECT_NE(RenderError("{{ 'x'|indent(100000000) }}").find("indent"), std::string::npos);
  // Values nested past the limit, built by the template or passed in the context.
  EXPECT_NE(RenderError("{% set ns = namespace(l=[]) %}{% for i in range(500) %}{% set ns.l = [ns.l] %}{% endfor %}")
                .find("nested deeper than"),
            std::string::npos);
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 1000; ++i) deep = ordered_json::array({deep});
  EXPECT_NE(RenderError("{{ x }}", {{"x", deep}}).find("nested deeper than"), std::string::npos);
  // A namespace that contains itself prints like Python's recursive repr, without recursing forever.
  EXPECT_NE(RenderOk("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("..."), std::string::npos);
}

TEST(JinjaRender, WhitespaceControlMatchesTransformers) {
  // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(RenderOk("<\n  {% if true %}\n  x\n  {% endif %}\n>"), "<\n  x\n>");
  EXPECT_EQ(RenderOk("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(RenderOk("a\n{%- if true -%}\n b \n{%- endif -%}\n c"), "abc");
  // One trailing newline of the template source is dropped, like jinja2's default.
  EXPECT_EQ(RenderOk("x\n"), "x");
  EXPECT_EQ(RenderOk("x\n\n"), "x\n");
}

TEST(JinjaRender, NamespaceSurvivesLoopScopeButSetDoesNot) {
  const char* src =
      "{% set ns = namespace(found=false) %}{% set plain = false %}"
      "{% for m in messages %}{% if m.role == 'tool' %}{% set ns.found = true %}{% set plain = true %}{% endif %}"
      "{% endfor %}{{ ns.found }} {{ plain }}";
  ordered_json ctx = {{"messages", ordered_json::parse(R"([{"role": "user"}, {"role": "tool"}])")}};
  EXPECT_EQ(RenderOk(src, ctx), "True False");
}

TEST(JinjaRender, ContextIsReadOnlyAndShadowable) {
  ordered_json ctx = {{"messages", {1, 2, 3}}};
  EXPECT_EQ(RenderOk("{% set messages = messages[1:] %}{{ messages }}", ctx), "[2, 3]");
  EXPECT_EQ(RenderOk("{{ messages }}", ctx), "[1, 2, 3]");
}

TEST(JinjaRender, TojsonKeepsInsertionOrderAndUnicode) {
  ordered_json ctx = ordered_json::parse(R"({"t": {"z": 1, "a": "ü", "m": [true, null, 1.5]}})");
  EXPECT_EQ(RenderOk("{{ t|tojson }}", ctx), R"({"z": 1, "a": "ü", "m": [true, null, 1.5]})");
}

TEST(JinjaRender, StrftimeNowUsesTheConfiguredClock) {
  auto t = ChatTemplate::Parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(t.ok());
  t->SetClock([] {
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    return tm;
  });
  auto r = t->Render(ordered_json::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "26 Jul 2024");
  // Without a clock it uses the system time: just check it renders a plausible date.
  auto now = ChatTemplate::Parse("{{ strftime_now('%Y') }}")->Render(ordered_json::object());
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->size(), 4u);
}

TEST(JinjaRender, TemplateIsReusableAcrossRenders) {
  auto t = ChatTemplate::Parse("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(ordered_json{{"xs", {1, 2}}}), "3");
  EXPECT_EQ(*t->Render(ordered_json{{"xs", {5}}}), "5");
}

TEST(JinjaValue, FloatFormattingMatchesPythonRepr) {
  using jinja::FormatFloat;
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(0.1), "0.1");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatFloat(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(FormatFloat(123.456), "123.456");
}

TEST(JinjaLexer, DataAndTagTokens) {
  auto toks = jinja::Tokenize("a{{ x|upper }}b");
  ASSERT_TRUE(toks.ok());
  std::vector<std::string> texts;
  for (const auto& t : *toks) texts.push_back(t.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"a", "{{", "x", "|", "upper", "}}", "b", ""}));
}

}  // namespace
}  // namespace dspark
