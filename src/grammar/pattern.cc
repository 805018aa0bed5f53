#include "grammar/pattern.h"

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"

namespace dspark::grammar {
namespace {

using json = nlohmann::json;

class PatternConverter {
 public:
  PatternConverter(std::string_view re, std::string any_char)
      : re_(re), any_char_(std::move(any_char)) {}

  Result<std::string> Convert() {
    bool anchored_start = !re_.empty() && re_[0] == '^';
    if (anchored_start) ++pos_;
    std::string body = Alternation();
    bool anchored_end = false;
    if (pos_ < re_.size() && re_[pos_] == '$' && pos_ + 1 == re_.size()) {
      anchored_end = true;
      ++pos_;
    }
    if (error_.empty() && pos_ < re_.size()) Fail(std::string("unexpected '") + re_[pos_] + "'");
    if (!error_.empty()) {
      return Unimplemented("json_schema: pattern '{}' is not supported: {} at offset {}", re_,
                           error_, pos_);
    }
    std::string out = "(" + body + ")";
    if (!anchored_start) out = any_char_ + "* " + out;
    if (!anchored_end) out += " " + any_char_ + "*";
    return out;
  }

 private:
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

  void Fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }
  bool More() const { return pos_ < re_.size() && error_.empty(); }

  std::string Alternation() {
    std::string out = Sequence();
    while (More() && re_[pos_] == '|') {
      ++pos_;
      out += " | " + Sequence();
    }
    return out;
  }

  std::string Sequence() {
    std::string out;
    while (More() && re_[pos_] != '|' && re_[pos_] != ')' &&
           !(re_[pos_] == '$' && pos_ + 1 == re_.size())) {
      std::string atom = Atom();
      atom += Quantifier();
      out += (out.empty() ? "" : " ") + atom;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string Quantifier() {
    if (!More()) return "";
    char c = re_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      size_t close = re_.find('}', pos_);
      if (close == std::string_view::npos) {
        Fail("unclosed '{'");
        return "";
      }
      q = std::string(re_.substr(pos_, close + 1 - pos_));
      for (char d : q.substr(1, q.size() - 2)) {
        if (!(d >= '0' && d <= '9') && d != ',') Fail("bad quantifier " + q);
      }
      pos_ = close + 1;
    } else {
      return "";
    }
    if (More() && re_[pos_] == '?') ++pos_;  // lazy: same language
    return q;
  }

  uint32_t NextCodePoint() {
    uint32_t cp;
    size_t n = DecodeUtf8(re_.substr(pos_), &cp);
    if (n == 0) {
      Fail("invalid UTF-8");
      return 0;
    }
    pos_ += n;
    return cp;
  }

  // After a backslash: fills *ranges (and *negated) for class escapes, or returns a code point.
  bool Escape(Ranges* ranges, bool* negated, uint32_t* cp) {
    if (pos_ >= re_.size()) {
      Fail("trailing backslash");
      return false;
    }
    char e = re_[pos_++];
    *negated = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
      case 'd': case 'D': *ranges = {{'0', '9'}}; return true;
      case 'w': case 'W': *ranges = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; return true;
      case 's': case 'S': *ranges = {{'\t', '\r'}, {' ', ' '}}; return true;
      case 'n': *cp = '\n'; return false;
      case 't': *cp = '\t'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case 'x': case 'u': {
        size_t digits = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (size_t i = 0; i < digits; ++i) {
          char h = pos_ < re_.size() ? re_[pos_] : '\0';
          int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) {
            Fail("bad \\" + std::string(1, e) + " escape");
            return false;
          }
          v = v * 16 + static_cast<uint32_t>(d);
          ++pos_;
        }
        *cp = v;
        return false;
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
          Fail(std::string("escape \\") + e + " (backreferences, \\b and friends)");
          return false;
        }
        *cp = static_cast<uint8_t>(e);
        return false;
    }
  }

  std::string Atom() {
    char c = re_[pos_];
    if (c == '(') {
      ++pos_;
      if (re_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (re_.substr(pos_, 2) == "?<" && re_.substr(pos_, 3) != "?<=" &&
                 re_.substr(pos_, 3) != "?<!") {
        size_t close = re_.find('>', pos_);
        if (close == std::string_view::npos) Fail("bad group name");
        pos_ = close + 1;
      } else if (pos_ < re_.size() && re_[pos_] == '?') {
        Fail("lookaround groups");
        return "";
      }
      std::string inner = Alternation();
      if (!More() || re_[pos_] != ')') {
        Fail("unclosed '('");
        return "";
      }
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') return Class();
    if (c == '.') {
      ++pos_;
      return ClassToGbnf({{'\n', '\n'}, {'\r', '\r'}}, true);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{' || c == ')') {
      Fail(std::string("'") + c + "' has nothing to repeat");
      return "";
    }
    if (c == '^' || c == '$') {
      Fail("anchors inside the pattern");
      return "";
    }
    uint32_t cp;
    if (c == '\\') {
      ++pos_;
      Ranges ranges;
      bool negated;
      if (Escape(&ranges, &negated, &cp)) return ClassToGbnf(ranges, negated);
      if (!error_.empty()) return "";
    } else {
      cp = NextCodePoint();
    }
    // The JSON text of the character: `"` appears as \", a newline as \n, and so on.
    std::string utf8;
    AppendUtf8(cp, &utf8);
    std::string quoted = json(utf8).dump();
    return GbnfLiteral(quoted.substr(1, quoted.size() - 2));
  }

  std::string Class() {
    size_t start = pos_++;
    bool negated = pos_ < re_.size() && re_[pos_] == '^';
    if (negated) ++pos_;
    Ranges ranges;
    bool first = true;
    while (More() && (re_[pos_] != ']' || first)) {
      first = false;
      uint32_t lo;
      if (re_[pos_] == '\\') {
        ++pos_;
        Ranges sub;
        bool sub_negated;
        if (Escape(&sub, &sub_negated, &lo)) {
          if (sub_negated) {
            Fail("negated class escapes inside [...]");
            return "";
          }
          ranges.insert(ranges.end(), sub.begin(), sub.end());
          continue;
        }
      } else {
        lo = NextCodePoint();
      }
      uint32_t hi = lo;
      if (pos_ + 1 < re_.size() && re_[pos_] == '-' && re_[pos_ + 1] != ']') {
        ++pos_;
        if (re_[pos_] == '\\') {
          ++pos_;
          Ranges sub;
          bool sub_negated;
          if (Escape(&sub, &sub_negated, &hi)) Fail("class escape as a range end");
        } else {
          hi = NextCodePoint();
        }
        if (hi < lo) Fail("reversed range");
      }
      ranges.emplace_back(lo, hi);
    }
    if (!More() || re_[pos_] != ']') {
      pos_ = start;
      Fail("unclosed '['");
      return "";
    }
    ++pos_;
    return ClassToGbnf(ranges, negated);
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  static std::string ClassChar(uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
      return std::string(1, static_cast<char>(cp));
    }
    if (cp < 0x100) return fmt::format("\\x{:02X}", cp);
    if (cp < 0x10000) return fmt::format("\\u{:04X}", cp);
    return fmt::format("\\U{:08X}", cp);
  }

  // A class over raw JSON string characters: `"`, `\` and control characters are never matched.
  std::string ClassToGbnf(Ranges ranges, bool negated) {
    const Ranges unsafe = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
    if (negated) {
      ranges.insert(ranges.end(), unsafe.begin(), unsafe.end());
    } else {
      for (auto [a, b] : unsafe) {
        Ranges kept;
        for (auto [lo, hi] : ranges) {
          if (hi < a || lo > b) {
            kept.emplace_back(lo, hi);
            continue;
          }
          if (lo < a) kept.emplace_back(lo, a - 1);
          if (hi > b) kept.emplace_back(b + 1, hi);
        }
        ranges = kept;
      }
      if (ranges.empty()) {
        Fail("a class with no characters allowed raw in a JSON string");
        return "";
      }
    }
    std::string out = negated ? "[^" : "[";
    for (auto [lo, hi] : ranges) {
      out += ClassChar(lo);
      if (hi != lo) out += "-" + ClassChar(hi);
    }
    return out + "]";
  }

  std::string_view re_;
  std::string any_char_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

Result<std::string> PatternToGbnf(std::string_view pattern, const std::string& any_char_rule) {
  return PatternConverter(pattern, any_char_rule).Convert();
}

}  // namespace dspark::grammar
