// Jinja parser: turns the lexer's token stream into a statement tree (ast.h), following
// jinja2.parser's grammar and operator precedence. Unknown tags, filters and tests, unclosed
// blocks and syntax errors are reported here with line:column.
#pragma once

#include <string_view>

#include "template/ast.h"
#include "util/status.h"

namespace dspark::jinja {

Result<Body> ParseTemplate(std::string_view source);

}  // namespace dspark::jinja
