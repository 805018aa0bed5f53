// JSON Schema `pattern` (an ECMA-262 regex subset) to a GBNF expression for the characters
// between a JSON string's quotes.
#pragma once

#include <string>
#include <string_view>

#include "util/status.h"

namespace dspark::grammar {

// Supported: literals, escapes (\d \w \s and negations, \xHH, \uHHHH), `.`, classes, groups
// ((...), (?:...), (?<name>...)), `|`, quantifiers (* + ? {m} {m,} {m,n}, lazy forms too), and `^`
// / `$` at the ends. A side without its anchor may hold any other characters (regex search
// semantics), written as `any_char_rule*`. Literal characters that JSON escapes are matched in
// escaped form (a `"` in the pattern matches `\"` in the JSON text); classes and `.` never match
// `"`, `\` or control characters, so the model cannot produce those there. Lookaround,
// backreferences, `\b` and inner anchors fail with kUnimplemented.
Result<std::string> PatternToGbnf(std::string_view pattern, const std::string& any_char_rule);

}  // namespace dspark::grammar
