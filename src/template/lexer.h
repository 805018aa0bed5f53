// Jinja lexer: splits a template into data and tag tokens, applying whitespace control the way
// jinja2 does with trim_blocks=True and lstrip_blocks=True (Hugging Face's settings), and tokenizes
// the expressions inside tags. Knows no statement or expression grammar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace dspark::jinja {

enum class TokenKind {
  kData,        // literal template text (whitespace control already applied)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,    // text holds the operator: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Returns the token stream ending in kEof, or an error naming line:column.
Result<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options = {});

const char* TokenKindName(TokenKind kind);

}  // namespace dspark::jinja
