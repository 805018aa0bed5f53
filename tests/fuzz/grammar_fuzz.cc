// The grammar compilers: any text either fails cleanly or compiles, and every grammar that the JSON
// schema converter produces compiles. The first byte picks the mode: GBNF source, or a JSON schema.
// A compiled grammar then matches the rest of the input byte by byte, and its start state's
// allowed tokens over a small vocabulary agree with Accepts token by token.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

using namespace dspark;

namespace {

const std::vector<std::string>& Vocab() {
  static const std::vector<std::string> vocab = {
      "", "{", "}", "[", "]", ",", ":", "\"", "\\", " ", "\n", "a", "ab", "true", "false", "null", "0", "12", "-",
      ".", "e", "\"a", "\": ", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82\xac", "{\"", "\"}", "x y"};
  return vocab;
}

// A quarter of the engine's expansion budget. Work per character is linear in the budget, and this
// harness pays it afresh some sixty times per input (each Accepts matches from scratch) in a build
// that sanitizers and coverage make tens of times slower than a release build: at the full budget a
// worst-case input took ~1.7 s here, about 0.1 s of matching in a release build.
grammar::MatchLimits FuzzLimits() {
  grammar::MatchLimits limits;
  limits.max_expansion /= 4;
  return limits;
}

void Exercise(const grammar::Grammar& g, std::string_view text) {
  grammar::GrammarState state = g.Start();
  static const grammar::TokenMasker masker(Vocab());
  std::vector<uint8_t> allowed;
  masker.AllowedTokens(g, state, &allowed);
  for (size_t id = 0; id < Vocab().size(); ++id)
    if ((allowed[id] != 0) != g.Accepts(state, Vocab()[id]))
      fuzz::Fail("TokenMasker disagrees with Accepts on token " + std::to_string(id));
  for (size_t i = 0; i < text.size() && i < 256; ++i)
    if (!g.Advance(&state, text.substr(i, 1))) break;
  (void)g.CanEnd(state);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool schema = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string gbnf;
  if (schema) {
    auto converted = grammar::JsonSchemaTextToGbnf(text);
    if (!converted.ok()) return 0;
    gbnf = std::move(*converted);
  } else {
    gbnf = std::string(text);
  }
  auto g = grammar::Grammar::Compile(gbnf, {}, FuzzLimits());
  if (!g.ok()) {
    if (schema) fuzz::Fail("a converted schema does not compile: " + g.status().message() + "\n" + gbnf);
    return 0;
  }
  Exercise(**g, text);
  return 0;
}
