// Parser for llama.cpp's GBNF grammar syntax. The output is llama.cpp's flat rule encoding: each
// rule is a list of elements, alternatives separated by kAlt and closed by kEnd. Repetitions and
// parenthesised groups are expanded into generated rules, so the matcher only ever sees characters,
// character classes and rule references.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace dspark::grammar {

enum class ElementType : uint8_t {
  kEnd,             // end of a rule
  kAlt,             // start of another alternative of the same rule
  kRuleRef,         // value = rule id
  kChar,            // value = code point; starts a positive character class
  kCharNot,         // value = code point; starts a negated class ([^...])
  kCharRangeUpper,  // value = inclusive upper bound of the range started by the previous element
  kCharAlt,         // value = another code point (or range start) of the current class
  kCharAny,         // `.`: any code point
};

struct Element {
  ElementType type;
  uint32_t value;
  bool operator==(const Element&) const = default;
};

struct ParsedGrammar {
  // rules[id] is the element list of rule id, always ending with kEnd.
  std::vector<std::vector<Element>> rules;
  // names[id]: the user's name, or "<parent>_<n>" for rules generated from groups and repetitions.
  std::vector<std::string> names;
  uint32_t root_id = 0;
  size_t num_elements = 0;
};

struct GbnfLimits {
  size_t max_text_bytes = size_t{1} << 20;
  // Elements after expanding repetitions: "x"{0,10000} is small text but a large grammar.
  size_t max_elements = 50000;
  uint32_t max_repetition = 10000;  // largest m or n in {m,n}
};

// Parses GBNF text whose start symbol is `root`. Errors carry line:column ("undefined rule 'value'
// at 3:12"). Left recursion (direct, indirect, or through rules that can match the empty string,
// including a repeated group that can be empty) is rejected because the matcher would loop on it.
Result<ParsedGrammar> ParseGbnf(std::string_view text, const GbnfLimits& limits = {});

// Renders a GBNF string literal (with quotes) that matches `bytes` exactly; bytes are read as
// UTF-8, and anything outside printable ASCII is written as an escape.
std::string GbnfLiteral(std::string_view bytes);

// Decodes one UTF-8 code point from the front of `s`; returns the byte length (0 = invalid).
size_t DecodeUtf8(std::string_view s, uint32_t* cp);

}  // namespace dspark::grammar
