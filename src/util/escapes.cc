#include "util/escapes.h"

namespace dspark {

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string ProcessEscapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case '\'': case '"': case '\\': out += c; break;
      case 'x': {
        int value = 0, digits = 0;
        while (digits < 2 && i + 1 < text.size() && HexValue(text[i + 1]) >= 0) {
          value = value * 16 + HexValue(text[++i]);
          ++digits;
        }
        if (digits > 0) {
          out += static_cast<char>(value);
        } else {
          out += "\\x";  // no hex digit follows: keep it as written
        }
        break;
      }
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

}  // namespace dspark
