// Escape sequences in command-line prompts, as llama.cpp's -e/--escape reads them.
#pragma once

#include <string>
#include <string_view>

namespace dspark {

// `text` with \n, \r, \t, \', \", \\ and \xHH (one or two hex digits) replaced by the characters
// they name (llama.cpp's set). Any other backslash, and one at the very end, stays as written (a
// regex's \d+ keeps its backslash).
std::string ProcessEscapes(std::string_view text);

}  // namespace dspark
