#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace dspark::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> MustCompile(const std::string& gbnf) {
  auto g = Grammar::Compile(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << gbnf;
  return g.ok() ? *g : nullptr;
}

std::shared_ptr<const Grammar> FromSchema(const std::string& schema_text) {
  auto gbnf = JsonSchemaTextToGbnf(schema_text);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
  return gbnf.ok() ? MustCompile(*gbnf) : nullptr;
}

std::string CompileError(const std::string& gbnf) {
  auto g = Grammar::Compile(gbnf);
  return g.ok() ? "OK" : g.status().message();
}

// Feeds `s` whole, byte by byte and in random chunks; all three must agree.
bool Matches(const Grammar& g, std::string_view s, uint32_t seed = 1) {
  auto run = [&](auto chunk_size) {
    GrammarState st = g.Start();
    for (size_t i = 0; i < s.size();) {
      size_t n = std::min(chunk_size(), s.size() - i);
      if (!g.Advance(&st, s.substr(i, n))) return false;
      i += n;
    }
    return g.CanEnd(st);
  };
  std::mt19937 rng(seed);
  bool whole = run([&] { return s.size(); });
  bool bytes = run([] { return size_t{1}; });
  bool chunks = run([&] { return size_t{1} + rng() % 7; });
  EXPECT_EQ(whole, bytes) << s;
  EXPECT_EQ(whole, chunks) << s;
  return whole;
}

// --- GBNF parser ---------------------------------------------------------------------------------

TEST(GbnfTest, ParsesFullSyntax) {
  const char* text = R"(# a comment line
root ::= greeting ws (name | "anon") ws? punct{1,3} tail   # trailing comment
greeting ::= "h\x65llo" | "\u4F60\u597D" | "\U0001F600"
name ::= [A-Z] [a-z0-9_\-]* 
ws ::= [ \t\n]
punct ::= [^a-zA-Z0-9 \t\n"\\]
tail ::= (
    "." |
    "!" "!"
  )+ digits{2} more{0,} any?
digits ::= [0-9]
more ::= "m"
any ::= .
)";
  auto g = MustCompile(text);
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, "hello Bob?..!!12"));
  EXPECT_TRUE(Matches(*g, "\xE4\xBD\xA0\xE5\xA5\xBD\tanon???.42mmmz"));
  EXPECT_TRUE(Matches(*g, "\xF0\x9F\x98\x80 Al-x,.00\xE2\x82\xAC"));
  EXPECT_FALSE(Matches(*g, "hello Bob????.12"));   // punct{1,3}
  EXPECT_FALSE(Matches(*g, "hello bob?.12"));      // name needs a capital
  EXPECT_FALSE(Matches(*g, "hello Bob?a.12"));     // class excludes letters
  EXPECT_FALSE(Matches(*g, "hello Bob?.1"));       // digits{2}
  EXPECT_FALSE(Matches(*g, "hello Bob?.12ab"));    // any? is one char
}

TEST(GbnfTest, ErrorsNameTheProblemAndPosition) {
  EXPECT_EQ(CompileError("root ::= obj\nobj ::= \"{\" value\n\n"),
            "grammar: undefined rule 'value' at 2:13");
  EXPECT_EQ(CompileError("a ::= \"x\"\n"), "grammar: missing root rule");
  EXPECT_EQ(CompileError(""), "grammar: missing root rule");
  EXPECT_NE(CompileError("root ::= \"x\"\nroot ::= \"y\"\n").find("defined twice"),
            std::string::npos);
  EXPECT_NE(CompileError("root ::= \"abc\n").find("unterminated string literal at 1:10"),
            std::string::npos);
  EXPECT_NE(CompileError("root ::= [a-z\n").find("unterminated character class"),
            std::string::npos);
  EXPECT_NE(CompileError("root ::= (\"a\" \n").find("unclosed '('"), std::string::npos);
  EXPECT_NE(CompileError("root ::= * \"a\"\n").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(CompileError("root ::= \"a\"{3,2}\n").find("max < min"), std::string::npos);
  EXPECT_NE(CompileError("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_NE(CompileError("root ::= \"a\" ) \n").find("expected newline"), std::string::npos);
  EXPECT_NE(CompileError("root ::= []\n").find("empty character class"), std::string::npos);
}

TEST(GbnfTest, RejectsLeftRecursion) {
  EXPECT_EQ(CompileError("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n"),
            "grammar: left recursion in rule 'expr' at 2:1: it can reach itself without "
            "consuming input (a repeated item that can match the empty string does this too)");
  // Indirect, and through a nullable prefix.
  EXPECT_NE(CompileError("root ::= a\na ::= b \"x\"\nb ::= \"y\"? a\n").find("left recursion"),
            std::string::npos);
  // A repeated group that can be empty would loop as well.
  EXPECT_NE(CompileError("root ::= (\"a\"?)*\n").find("left recursion in rule 'root'"),
            std::string::npos);
  // Right recursion is fine.
  EXPECT_EQ(CompileError("root ::= \"(\" root \")\" | \"x\"\n"), "OK");
}

TEST(GbnfTest, SizeLimits) {
  GbnfLimits limits;
  limits.max_text_bytes = 100;
  std::string big = "root ::= \"" + std::string(200, 'a') + "\"\n";
  auto r = Grammar::Compile(big, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  auto e = Grammar::Compile("root ::= (\"abcdefgh\"{0,9000}){0,9000}\n");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("elements"), std::string::npos);
  EXPECT_NE(CompileError("root ::= \"a\"{0,99999999}\n").find("over the limit"), std::string::npos);
}

TEST(GbnfTest, MangledGrammarsNeverCrash) {
  const std::string base =
      "root ::= (\"a\" | [b-d]+ x){1,3} \"\\u00e9\"? # c\nx ::= [^\"\\\\] . ( \"y\" )*\n";
  ASSERT_EQ(CompileError(base), "OK");
  std::mt19937 rng(9);
  const std::string junk = "()[]{}|*+?.\"\\#:=-^,0123456789ab \n";
  for (int i = 0; i < 3000; ++i) {
    std::string s = base;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) {
      size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = junk[rng() % junk.size()]; break;
        case 1: s.erase(at, 1); break;
        default: s.insert(at, 1, junk[rng() % junk.size()]); break;
      }
    }
    auto g = Grammar::Compile(s);
    if (g.ok()) {
      GrammarState st = (*g)->Start();
      (*g)->Advance(&st, "abcdy\xC3\xA9");
    }
  }
  EXPECT_NE(CompileError("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')') +
                         "\n").find("nest deeper"),
            std::string::npos);
}

// --- matcher -------------------------------------------------------------------------------------

TEST(MatcherTest, CanEndAndEmptyInput) {
  auto g = MustCompile("root ::= \"ab\" (\"c\")?\n");
  GrammarState st = g->Start();
  EXPECT_FALSE(g->CanEnd(st));
  EXPECT_FALSE(g->Advance(&st, ""));  // empty tokens never advance
  EXPECT_FALSE(g->Advance(&st, "ax"));
  EXPECT_TRUE(g->Advance(&st, "a"));  // the failed call above left the state as it was
  EXPECT_FALSE(g->CanEnd(st));
  EXPECT_TRUE(g->Advance(&st, "b"));
  EXPECT_TRUE(g->CanEnd(st));
  EXPECT_TRUE(g->Advance(&st, "c"));
  EXPECT_TRUE(g->CanEnd(st));
  EXPECT_FALSE(g->Accepts(st, "c"));
  auto empty = MustCompile("root ::= \"x\" | \n");
  EXPECT_TRUE(empty->CanEnd(empty->Start()));
}

TEST(MatcherTest, PartialUtf8) {
  auto g = MustCompile("root ::= [a-z\\u00E0-\\u00FF]+ \"\\u4E2D\"?\n");
  GrammarState st = g->Start();
  ASSERT_TRUE(g->Advance(&st, "caf\xC3"));  // first byte of é
  EXPECT_TRUE(st.in_partial_utf8());
  EXPECT_FALSE(g->CanEnd(st));
  EXPECT_FALSE(g->Accepts(st, "\xBF\xBF"));  // U+00FF then a stray continuation byte
  EXPECT_FALSE(g->Accepts(st, "a"));         // the character must finish first
  ASSERT_TRUE(g->Advance(&st, "\xA9"));
  EXPECT_TRUE(g->CanEnd(st));
  EXPECT_FALSE(g->Accepts(st, "\xC4"));       // U+0100.. is outside the class
  EXPECT_TRUE(g->Accepts(st, "\xE4"));        // could still be U+4E2D
  EXPECT_TRUE(g->Accepts(st, "\xE4\xB8"));
  EXPECT_FALSE(g->Accepts(st, "\xE4\xB9"));   // U+4E40.. cannot be U+4E2D
  EXPECT_TRUE(g->Accepts(st, "\xE4\xB8\xAD"));
  EXPECT_FALSE(g->Accepts(st, "\xC1\x81"));   // overlong 'A'
  EXPECT_FALSE(g->Accepts(st, "\x80"));       // continuation without a lead
  auto any = MustCompile("root ::= .+\n");
  GrammarState a = any->Start();
  EXPECT_FALSE(any->Accepts(a, "\xED\xA0\x80"));  // surrogate
  EXPECT_FALSE(any->Accepts(a, "\xF4\x90"));      // past U+10FFFF
  EXPECT_TRUE(any->Accepts(a, "\xF0\x9F\x98\x80"));
  // A negated class whose excluded ranges together cover everything the lead byte could start.
  auto neg = MustCompile("root ::= [^\\u0080-\\u00BF\\u00C0-\\u07FF]\n");
  EXPECT_FALSE(neg->Accepts(neg->Start(), "\xC3"));
  EXPECT_TRUE(neg->Accepts(neg->Start(), "\xE4"));
}

TEST(MatcherTest, StackExplosionIsADeadEndNotAHang) {
  // Every "a" doubles the ways to parse; the cap turns that into a rejection.
  auto g = MustCompile("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\"\n");
  MatchLimits limits;
  limits.max_stacks = 4;
  auto parsed = ParseGbnf("root ::= (x | y)*\nx ::= \"a\"+\ny ::= \"a\"+\n");
  ASSERT_TRUE(parsed.ok());
  auto small = Grammar::FromParsed(*parsed, limits);
  GrammarState st = small->Start();
  bool rejected = false;
  for (int i = 0; i < 64 && !rejected; ++i) rejected = !small->Advance(&st, "a");
  EXPECT_TRUE(rejected);
  // Deep nesting is refused past max_stack_depth.
  MatchLimits shallow;
  shallow.max_stack_depth = 20;
  auto nested = ParseGbnf("root ::= \"[\" root? \"]\"\n");
  auto ng = Grammar::FromParsed(*nested, shallow);
  EXPECT_TRUE(ng->Accepts(ng->Start(), std::string(10, '[')));
  EXPECT_FALSE(ng->Accepts(ng->Start(), std::string(30, '[')));
  EXPECT_TRUE(Matches(*g, "aaaaaa"));
}

// Found by grammar_fuzz: every character opens one more root* that may close or continue, so few
// distinct stacks (after duplicates merge) come from raw copies that grow with the square of the
// text; without max_expansion 256 characters took seconds under the sanitizers.
TEST(MatcherTest, AmbiguousRecursionEndsAtTheExpansionBudget) {
  const auto accepted = [](size_t max_expansion) {
    MatchLimits limits;
    limits.max_expansion = max_expansion;
    auto parsed = ParseGbnf("root ::= [a-z] root*\n");
    EXPECT_TRUE(parsed.ok());
    auto g = Grammar::FromParsed(*parsed, limits);
    GrammarState st = g->Start();
    int n = 0;
    while (n < 256 && g->Advance(&st, "a")) ++n;
    EXPECT_LE(st.num_stacks(), limits.max_stacks);
    return n;
  };
  const int full = accepted(MatchLimits{}.max_expansion);
  EXPECT_GE(full, 20);  // text of ordinary length is accepted
  EXPECT_LT(full, 256);
  EXPECT_LT(accepted(2048), full);  // the budget, not another limit, ends it
  // The budget leaves room for real documents: JSON nested 100 deep.
  auto json = MustCompile(JsonObjectGbnf());
  std::string doc;
  for (int i = 0; i < 50; ++i) doc += "{\"k\": [";
  doc += "1";
  for (int i = 0; i < 50; ++i) doc += "]}";
  EXPECT_TRUE(Matches(*json, "{\"a\": " + doc + "}"));
  // And for a schema's object of 300 optional properties, any of which may come first.
  ojson props = ojson::object();
  for (int i = 0; i < 300; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  auto wide = FromSchema(ojson({{"type", "object"}, {"properties", props}}).dump());
  EXPECT_FALSE(Matches(*wide, "{\"p299\": 1, \"p0\": 2}"));  // schema order
  EXPECT_TRUE(Matches(*wide, "{\"p0\": 2, \"p299\": 1}"));
  // An unambiguous grammar of the same language takes all of it.
  auto plain = MustCompile("root ::= [a-z]+\n");
  EXPECT_TRUE(Matches(*plain, std::string(256, 'a')));
}

// --- JSON schema ---------------------------------------------------------------------------------

TEST(JsonSchemaTest, NestedObjectsRequiredAndOptional) {
  auto g = FromSchema(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "age": {"type": "integer", "minimum": 0},
      "address": {"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 5},
          "zip": {"type": "string", "format": "uuid"}},
        "required": ["city"]},
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}
    },
    "required": ["name", "tags"]
  })");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, R"({"name": "A\"b\\c\u00e9\n", "tags": ["x"]})"));
  EXPECT_TRUE(Matches(*g, "{\n  \"name\":\"\xC3\xA9\",\n  \"age\": 0,\n  \"tags\": [\"a\",\"b\",\"c\"]\n}"));
  EXPECT_TRUE(Matches(*g, R"({"name":"x","address":{"city":"Paris"},"tags":["t"]})"));
  EXPECT_TRUE(Matches(*g, R"({"name":"x","address":{"city":"Rome","zip":"0123abcd-0000-1111-2222-333344445555"},"tags":["t"]})"));
  EXPECT_FALSE(Matches(*g, R"({"name":"x","tags":[]})"));                  // minItems
  EXPECT_FALSE(Matches(*g, R"({"name":"x","tags":["1","2","3","4"]})"));   // maxItems
  EXPECT_FALSE(Matches(*g, R"({"tags":["x"]})"));                          // name required
  EXPECT_FALSE(Matches(*g, R"({"tags":["x"],"name":"x"})"));               // schema order
  EXPECT_FALSE(Matches(*g, R"({"name":"x","age":-1,"tags":["x"]})"));      // minimum 0
  EXPECT_FALSE(Matches(*g, R"({"name":"x","age":01,"tags":["x"]})"));      // JSON numbers
  EXPECT_FALSE(Matches(*g, R"({"name":"x","address":{"city":"Berlin"},"tags":["t"]})"));
  EXPECT_FALSE(Matches(*g, R"({"name":"x","extra":1,"tags":["x"]})"));     // no additional
  EXPECT_FALSE(Matches(*g, "{\"name\":\"a\tb\",\"tags\":[\"x\"]}"));       // raw control char
  EXPECT_FALSE(Matches(*g, R"({"name":"\x41","tags":["x"]})"));            // bad escape
  EXPECT_FALSE(Matches(*g, "{\"name\":\"x\",\"tags\":[\"x\"]}" + std::string(30, ' ')));
}

TEST(JsonSchemaTest, NumbersEnumsConstNullable) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "n": {"type": "number"},
      "color": {"enum": ["red", "green", 7, null, {"a": [1]}]},
      "k": {"const": "fixed"},
      "maybe": {"type": ["string", "null"]},
      "opt": {"type": "boolean", "nullable": true}},
    "required": ["n", "color", "k", "maybe", "opt"]})");
  ASSERT_TRUE(g);
  for (const char* n : {"0", "-0", "12.5", "-3.25e10", "1E+2", "7e-3"}) {
    std::string doc = std::string(R"({"n":)") + n + R"(,"color":"red","k":"fixed","maybe":null,"opt":true})";
    EXPECT_TRUE(Matches(*g, doc)) << doc;
  }
  for (const char* n : {"01", "1.", ".5", "+1", "1e", "--1", "NaN"}) {
    std::string doc = std::string(R"({"n":)") + n + R"(,"color":"red","k":"fixed","maybe":null,"opt":true})";
    EXPECT_FALSE(Matches(*g, doc)) << doc;
  }
  EXPECT_TRUE(Matches(*g, R"({"n":1,"color":{"a":[1]},"k":"fixed","maybe":"s","opt":null})"));
  EXPECT_TRUE(Matches(*g, R"({"n":1,"color":7,"k":"fixed","maybe":"s","opt":false})"));
  EXPECT_FALSE(Matches(*g, R"({"n":1,"color":"blue","k":"fixed","maybe":"s","opt":false})"));
  EXPECT_FALSE(Matches(*g, R"({"n":1,"color":7,"k":"other","maybe":"s","opt":false})"));
  EXPECT_FALSE(Matches(*g, R"({"n":1,"color":7,"k":"fixed","maybe":1,"opt":false})"));
}

TEST(JsonSchemaTest, RefsRecursionAnyOfAllOfFormats) {
  auto g = FromSchema(R"({
    "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "definitions": {"when": {"type": "string", "format": "date-time"}},
    "type": "object",
    "properties": {
      "tree": {"$ref": "#/$defs/node"},
      "at": {"$ref": "#/definitions/when"},
      "either": {"anyOf": [{"type": "integer"}, {"type": "array", "maxItems": 0}]},
      "both": {"allOf": [{"properties": {"a": {"type": "null"}}, "required": ["a"]},
                         {"properties": {"b": {"type": "boolean"}}}]}
    },
    "required": ["tree"]})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, R"({"tree":{"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]}})"));
  EXPECT_TRUE(Matches(*g, R"({"tree":{"v":1},"at":"2024-02-29T13:05:00.123+01:00"})"));
  EXPECT_TRUE(Matches(*g, R"({"tree":{"v":1},"either":[],"both":{"a":null,"b":true}})"));
  EXPECT_TRUE(Matches(*g, R"({"tree":{"v":1},"either":-5,"both":{"a":null}})"));
  EXPECT_FALSE(Matches(*g, R"({"tree":{"kids":[]}})"));
  EXPECT_FALSE(Matches(*g, R"({"tree":{"v":1},"at":"2024-13-01T00:00:00Z"})"));
  EXPECT_FALSE(Matches(*g, R"({"tree":{"v":1},"either":[1]})"));
  EXPECT_FALSE(Matches(*g, R"({"tree":{"v":1},"both":{"b":true}})"));
}

TEST(JsonSchemaTest, AdditionalPropertiesAndJsonObject) {
  auto open = FromSchema(R"({"type":"object","properties":{"a":{"type":"integer"}},
                             "additionalProperties":{"type":"string"}})");
  ASSERT_TRUE(open);
  EXPECT_TRUE(Matches(*open, R"({"a":1,"x":"y","z":"w"})"));
  EXPECT_TRUE(Matches(*open, R"({"x":"y"})"));
  EXPECT_TRUE(Matches(*open, R"({})"));
  EXPECT_FALSE(Matches(*open, R"({"x":1})"));
  auto any = MustCompile(JsonObjectGbnf());
  EXPECT_TRUE(Matches(*any, R"({"a":[1,{"b":null},"c",true,-2.5e3],"d":{}})"));
  EXPECT_TRUE(Matches(*any, "{}"));
  EXPECT_FALSE(Matches(*any, "[]"));
  EXPECT_FALSE(Matches(*any, R"("str")"));
  EXPECT_FALSE(Matches(*any, R"({"a":})"));
}

TEST(JsonSchemaTest, Patterns) {
  auto code = FromSchema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}(?:x|yz)?$"})");
  ASSERT_TRUE(code);
  EXPECT_TRUE(Matches(*code, R"("AB-123")"));
  EXPECT_TRUE(Matches(*code, R"("QQ-000yz")"));
  EXPECT_FALSE(Matches(*code, R"("ab-123")"));
  EXPECT_FALSE(Matches(*code, R"("AB-12")"));
  EXPECT_FALSE(Matches(*code, R"("AB-123y")"));
  // Unanchored: the match may sit anywhere; a quote in the pattern appears escaped in JSON.
  auto quoted = FromSchema(R"({"type":"string","pattern":"say \"hi\"[.!]"})");
  ASSERT_TRUE(quoted);
  EXPECT_TRUE(Matches(*quoted, R"("they say \"hi\"! loudly")"));
  EXPECT_FALSE(Matches(*quoted, R"("they say hi!")"));
  auto err = [](const std::string& text) {
    auto r = JsonSchemaTextToGbnf(text);
    return r.ok() ? std::string("OK") : r.status().message();
  };
  EXPECT_NE(err(R"({"type":"string","pattern":"^a(?=b)$"})").find("lookaround"), std::string::npos);
  EXPECT_NE(err(R"({"properties":{"p":{"type":"string","pattern":"(a)\\1"}}})").find("at /properties/p"),
            std::string::npos);
}

TEST(JsonSchemaTest, PrefixedGrammarsConcatenate) {
  auto a = JsonSchemaTextToGbnf(R"({"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]})", "tool1-");
  auto b = JsonSchemaTextToGbnf(R"({"type":"array","items":{"type":"boolean"},"maxItems":2})", "tool2-");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rfind("tool1-root ::= ", 0), 0u);
  auto g = MustCompile(*a + *b + "root ::= tool1-root | tool2-root\n");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, R"({"x":3})"));
  EXPECT_TRUE(Matches(*g, R"([true,false])"));
  EXPECT_FALSE(Matches(*g, R"([true,false,true])"));
}

TEST(JsonSchemaTest, Errors) {
  auto err = [](const std::string& text) {
    auto r = JsonSchemaTextToGbnf(text);
    return r.ok() ? std::string("OK") : r.status().message();
  };
  EXPECT_EQ(err(R"({"type":"object","properties":{"a":{"not":{"type":"null"}}}})"),
            "json_schema: keyword 'not' at /properties/a is not supported");
  EXPECT_EQ(err(R"({"type":"array","items":{"type":"object","patternProperties":{}}})"),
            "json_schema: keyword 'patternProperties' at /items is not supported");
  EXPECT_EQ(err(R"({"type":"array","uniqueItems":true})"),
            "json_schema: keyword 'uniqueItems' at / is not supported");
  EXPECT_EQ(err(R"({"if":{},"then":{}})"), "json_schema: keyword 'if' at / is not supported");
  EXPECT_NE(err(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(err(R"({"type":"wat"})").find("unknown type 'wat'"), std::string::npos);
  EXPECT_NE(err("{nope").find("not valid JSON"), std::string::npos);
  // Too deep.
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  auto d = JsonSchemaTextToGbnf(deep);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  // Too many rules.
  ojson wide = {{"type", "object"}, {"properties", ojson::object()}};
  for (int i = 0; i < 1500; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "string"}};
  auto w = JsonSchemaToGbnf(wide);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("more than 2000 grammar rules"), std::string::npos);
}

// --- token masking -------------------------------------------------------------------------------

std::vector<std::string> SyntheticVocab(size_t extra_random, uint32_t seed) {
  std::vector<std::string> v;
  v.push_back("");  // a special token
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xE4\xB8", "\xB8\xAD",
                        "\x9F\x98", "\x98\x80", "\xF0\x9F", "caf\xC3", "\xA9s", "\xC3\xA9t\xC3\xA9"}) {
    v.push_back(s);
  }
  for (const char* s : {"name", "age", "tags", "city", "red", "green", "blue", "true", "false",
                        "null", "nul", "tr", "{\"", "\":", "\": ", ", \"", "\",", "\"}", "},", "]}",
                        " {", "{", "}", "[", "]", "[\"", "\"]", ",", ", ", "\n", "\n  ", "  ",
                        " ", "\\", "\\\"", "\\n", "\\u00", "e9", "12", "3.5", "-", "0", "e+",
                        ".5", "\"", "\"\"", "\t", "\"name\"", "\": \"", "\"\n}", "abc", "A"}) {
    v.push_back(s);
  }
  std::mt19937 rng(seed);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz\" {}[]:,.0123456789-\\_\n";
  for (size_t i = 0; i < extra_random; ++i) {
    std::string w = (rng() % 3 == 0) ? " " : "";
    size_t len = 1 + rng() % 8;
    for (size_t k = 0; k < len; ++k) {
      w += (rng() % 5 == 0) ? alphabet[rng() % alphabet.size()] : static_cast<char>('a' + rng() % 26);
    }
    v.push_back(w);
  }
  return v;
}

std::vector<uint8_t> BruteForce(const Grammar& g, const GrammarState& st,
                                const std::vector<std::string>& vocab) {
  std::vector<uint8_t> out(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) out[i] = g.Accepts(st, vocab[i]) ? 1 : 0;
  return out;
}

const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0},
    "color": {"enum": ["red", "green", "blue"]},
    "city": {"type": "string", "maxLength": 6},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
    "ok": {"type": ["boolean", "null"]}},
  "required": ["name", "color", "tags"]})";

// Random walk: picks uniformly among the tokens brute force allows until the grammar can end
// (stopping there with some probability); returns the generated text.
std::string RandomWalk(const Grammar& g, const std::vector<std::string>& vocab, std::mt19937* rng,
                       const TokenMasker* check, int* states_checked) {
  GrammarState st = g.Start();
  std::string text;
  for (int step = 0; step < 400; ++step) {
    std::vector<uint8_t> brute = BruteForce(g, st, vocab);
    if (check) {
      std::vector<uint8_t> fast;
      check->AllowedTokens(g, st, &fast);
      EXPECT_EQ(fast, brute) << "after " << text;
      ++*states_checked;
    }
    if (g.CanEnd(st) && (*rng)() % 4 != 0) break;
    std::vector<size_t> ids;
    for (size_t i = 0; i < brute.size(); ++i) {
      if (brute[i]) ids.push_back(i);
    }
    if (ids.empty()) break;
    const std::string& tok = vocab[ids[(*rng)() % ids.size()]];
    EXPECT_TRUE(g.Advance(&st, tok));
    text += tok;
  }
  EXPECT_TRUE(g.CanEnd(st)) << text;
  return text;
}

TEST(TokenMaskerTest, AgreesWithBruteForce) {
  std::vector<std::string> vocab = SyntheticVocab(300, 7);
  TokenMasker masker(vocab);
  std::mt19937 rng(42);
  int checked = 0;
  auto person = FromSchema(kPersonSchema);
  ASSERT_TRUE(person);
  for (int doc = 0; doc < 6; ++doc) RandomWalk(*person, vocab, &rng, &masker, &checked);
  auto any = MustCompile(JsonObjectGbnf());
  for (int doc = 0; doc < 3; ++doc) RandomWalk(*any, vocab, &rng, &masker, &checked);
  // Fixed documents walked in random chunks, including splits inside multi-byte characters.
  const std::string docs[] = {
      "{\"name\": \"caf\xC3\xA9 \\u00e9\\\"\", \"age\": 31, \"color\": \"blue\", "
      "\"tags\": [\"\xE4\xB8\xAD\", \"\xF0\x9F\x98\x80\"], \"ok\": null}",
      "{\n  \"name\":\"x\",\n  \"color\":\"red\",\"city\":\"\xE4\xB8\xAD\xE4\xB8\xAD\",\"tags\":[]}"};
  for (const std::string& d : docs) {
    GrammarState st = person->Start();
    for (size_t i = 0; i < d.size();) {
      size_t n = std::min<size_t>(1 + rng() % 3, d.size() - i);
      ASSERT_TRUE(person->Advance(&st, d.substr(i, n))) << d.substr(0, i + n);
      i += n;
      std::vector<uint8_t> fast;
      masker.AllowedTokens(*person, st, &fast);
      EXPECT_EQ(fast, BruteForce(*person, st, vocab)) << d.substr(0, i);
      ++checked;
    }
    EXPECT_TRUE(person->CanEnd(st));
  }
  EXPECT_GT(checked, 100);
  std::vector<uint8_t> allowed;
  masker.AllowedTokens(*person, person->Start(), &allowed);
  EXPECT_EQ(allowed[0], 0);  // the empty (special) token is never allowed
  EXPECT_EQ(allowed[static_cast<unsigned char>('{') + 1], 1);
}

// Found by grammar_fuzz: where a limit refuses a character, the masker must refuse the token too.
// Here long tokens of an ambiguous recursive grammar hit the expansion budget; a masker that shared
// work across tokens had allowed them while Accepts refused.
TEST(TokenMaskerTest, AgreesWithAcceptsWhereALimitBinds) {
  std::vector<std::string> vocab = {"a", "ab", "false", "items", "abcdefgh", "zzzzzzzzzzzz", "a}", "}}}",
                                    std::string(24, 'q'), std::string(40, 'x')};
  TokenMasker masker(vocab);
  MatchLimits tight;
  tight.max_expansion = 256;
  // The last: a run of 900 nullable items, which the budget cuts short wherever it is explored from.
  const char* grammars[] = {"root ::= [a-z] root*{0,3}\n", "root ::= [a-z] root*\n",
                            "root ::= [\"a-}] root*{0,3}\n", "root ::= x*\nx ::= [a-z] | [a-z] [a-z] x?\n",
                            "root ::= [a-z] root*{900}\n"};
  int refused = 0;
  for (const char* text : grammars) {
    for (const MatchLimits& limits : {MatchLimits{}, tight}) {
      auto parsed = ParseGbnf(text);
      ASSERT_TRUE(parsed.ok()) << text;
      auto g = Grammar::FromParsed(*parsed, limits);
      GrammarState st = g->Start();
      for (int step = 0; step < 40 && !st.dead(); ++step) {
        std::vector<uint8_t> fast;
        masker.AllowedTokens(*g, st, &fast);
        const std::vector<uint8_t> slow = BruteForce(*g, st, vocab);
        EXPECT_EQ(fast, slow) << text << " after " << step << " characters";
        refused += static_cast<int>(std::count(slow.begin(), slow.end(), 0));
        if (!g->Advance(&st, "a")) break;
      }
    }
  }
  EXPECT_GT(refused, 0);  // some limit did bind
}

TEST(TokenMaskerTest, GeneratedDocumentsParseAndFollowTheSchema) {
  std::vector<std::string> vocab = SyntheticVocab(300, 11);
  TokenMasker masker(vocab);
  auto g = FromSchema(kPersonSchema);
  ASSERT_TRUE(g);
  std::mt19937 rng(5);
  for (int doc = 0; doc < 20; ++doc) {
    GrammarState st = g->Start();
    std::string text;
    std::vector<uint8_t> allowed;
    for (int step = 0; step < 600 && !(g->CanEnd(st) && rng() % 3 == 0); ++step) {
      masker.AllowedTokens(*g, st, &allowed);
      std::vector<size_t> ids;
      for (size_t i = 0; i < allowed.size(); ++i) {
        if (allowed[i]) ids.push_back(i);
      }
      if (ids.empty()) break;
      const std::string& tok = vocab[ids[rng() % ids.size()]];
      ASSERT_TRUE(g->Advance(&st, tok));
      text += tok;
    }
    ASSERT_TRUE(g->CanEnd(st)) << text;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_TRUE(j.contains("name") && j["name"].is_string()) << text;
    EXPECT_LE(nlohmann::json(j["name"]).get<std::string>().size(), 12u * 4);
    ASSERT_TRUE(j.contains("color")) << text;
    std::string c = j["color"].get<std::string>();
    EXPECT_TRUE(c == "red" || c == "green" || c == "blue") << text;
    ASSERT_TRUE(j.contains("tags") && j["tags"].is_array()) << text;
    EXPECT_LE(j["tags"].size(), 3u);
    if (j.contains("age")) {
      EXPECT_TRUE(j["age"].is_number_integer() && j["age"].get<int64_t>() >= 0);
    }
    for (const auto& [k, v] : j.items()) {
      EXPECT_TRUE(k == "name" || k == "age" || k == "color" || k == "city" || k == "tags" ||
                  k == "ok") << k;
    }
  }
}

TEST(TokenMaskerTest, TimingOn32kVocab) {
  std::vector<std::string> vocab = SyntheticVocab(32000 - 330, 3);
  TokenMasker masker(vocab);
  auto g = FromSchema(kPersonSchema);
  auto any = MustCompile(JsonObjectGbnf());
  ASSERT_TRUE(g && any);
  struct Case {
    const Grammar* grammar;
    const char* prefix;
  };
  const Case cases[] = {{g.get(), "{\"name\": \"ab"},     // mid-string
                        {g.get(), "{\"name\": \"ab\", "}, // mid-object, before a key
                        {any.get(), "{\"a\": [1, {\"b\": \"xy"},
                        {any.get(), "{\"a\": [1, {\"b\": 2}, "}};
  for (const Case& c : cases) {
    GrammarState st = c.grammar->Start();
    ASSERT_TRUE(c.grammar->Advance(&st, c.prefix));
    std::vector<uint8_t> allowed;
    masker.AllowedTokens(*c.grammar, st, &allowed);  // warm-up
    const int reps = 20;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) masker.AllowedTokens(*c.grammar, st, &allowed);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count() / reps;
    size_t n = 0;
    for (uint8_t a : allowed) n += a;
    std::printf("mask %-28s %6.3f ms, %zu of %zu allowed\n", c.prefix, ms, n, vocab.size());
    EXPECT_EQ(allowed, BruteForce(*c.grammar, st, vocab));
    EXPECT_LT(ms, 100.0);  // loose: sanitizer and debug builds run this too
  }
}

// A $ref cycle that consumes no input would be a left-recursive grammar: the schema is refused
// (found by grammar_fuzz).
TEST(JsonSchema, KeywordsOfTheWrongTypeAreErrorsNotExceptions) {
  // Found by grammar_fuzz: "nullable" holding an array.
  auto g = JsonSchemaTextToGbnf(R"({"type": "object", "nullable": ["name"]})");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nullable"), std::string::npos) << g.status().message();
}

TEST(JsonSchema, ReferenceCycleWithoutInputIsRefused) {
  auto g = JsonSchemaTextToGbnf(R"({"$defs": {"n": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}]}},
                                    "$ref": "#/$defs/n"})");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("left recursion"), std::string::npos) << g.status().message();
  // A cycle through an object property consumes input and converts.
  EXPECT_TRUE(JsonSchemaTextToGbnf(R"({"$defs": {"t": {"type": "object", "properties": {"c": {"$ref": "#/$defs/t"}}}},
                                      "$ref": "#/$defs/t"})").ok());
}

}  // namespace
}  // namespace dspark::grammar
