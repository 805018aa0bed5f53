#include "grammar/gbnf.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace dspark::grammar {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsCharType(ElementType t) { return t >= ElementType::kChar; }

class Parser {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : src_(text), limits_(limits) {}

  Result<ParsedGrammar> Parse() {
    if (src_.size() > limits_.max_text_bytes) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("grammar is {} bytes; the limit is {}", src_.size(),
                                limits_.max_text_bytes));
    }
    SkipSpace(true);
    while (pos_ < src_.size() && error_.ok()) {
      ParseRule();
      SkipSpace(true);
    }
    if (!error_.ok()) return error_;
    return Finish();
  }

 private:
  // --- errors and positions ---

  std::string Where(size_t offset) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return fmt::format("{}:{}", line, col);
  }

  void Fail(size_t offset, const std::string& what) {
    if (error_.ok()) error_ = InvalidArgument("grammar: {} at {}", what, Where(offset));
  }

  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= src_.size(); }

  // Skips blanks and comments; newlines only when `newline_ok` (inside parentheses or between
  // rules), since a newline ends a top-level rule.
  void SkipSpace(bool newline_ok) {
    while (!AtEnd()) {
      char c = Peek();
      if (c == '#') {
        while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (newline_ok && (c == '\r' || c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // --- symbols ---

  uint32_t SymbolId(const std::string& name, size_t ref_offset) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(names_.size());
    ids_.emplace(name, id);
    names_.push_back(name);
    rules_.emplace_back();
    defined_at_.push_back(std::nullopt);
    first_ref_.push_back(ref_offset);
    return id;
  }

  uint32_t NewSubRule(const std::string& parent) {
    std::string name;
    do {
      name = fmt::format("{}_{}", parent, ++generated_);
    } while (ids_.count(name));
    uint32_t id = SymbolId(name, pos_);
    defined_at_[id] = pos_;
    return id;
  }

  void AddElements(size_t n) {
    num_elements_ += n;
    if (num_elements_ > limits_.max_elements && error_.ok()) {
      error_ = Status(StatusCode::kResourceExhausted,
                      fmt::format("grammar: more than {} elements after expanding repetitions "
                                  "(near {})",
                                  limits_.max_elements, Where(pos_)));
    }
  }

  void SetRule(uint32_t id, std::vector<Element> elements) {
    AddElements(elements.size());
    rules_[id] = std::move(elements);
  }

  // --- grammar productions ---

  void ParseRule() {
    size_t start = pos_;
    std::string name = ParseName();
    if (name.empty()) return Fail(pos_, "expected a rule name");
    SkipSpace(false);
    if (src_.substr(pos_, 3) != "::=") return Fail(pos_, "expected '::=' after rule name '" + name + "'");
    pos_ += 3;
    SkipSpace(true);
    uint32_t id = SymbolId(name, start);
    if (defined_at_[id]) {
      return Fail(start, fmt::format("rule '{}' is defined twice (first at {})", name,
                                     Where(*defined_at_[id])));
    }
    defined_at_[id] = start;
    ParseAlternates(name, id, /*nested=*/false);
    if (!error_.ok()) return;
    if (Peek() == '\r') ++pos_;
    if (Peek() == '\n') {
      ++pos_;
    } else if (!AtEnd()) {
      Fail(pos_, fmt::format("unexpected '{}' (expected newline or end of rule)", Peek()));
    }
  }

  std::string ParseName() {
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(src_.substr(start, pos_ - start));
  }

  void ParseAlternates(const std::string& name, uint32_t id, bool nested) {
    std::vector<Element> out;
    ParseSequence(name, &out, nested);
    while (error_.ok() && Peek() == '|') {
      out.push_back({ElementType::kAlt, 0});
      ++pos_;
      SkipSpace(true);
      ParseSequence(name, &out, nested);
    }
    out.push_back({ElementType::kEnd, 0});
    SetRule(id, std::move(out));
  }

  // One escaped or plain character inside a literal or class.
  std::optional<uint32_t> ParseChar() {
    if (AtEnd()) {
      Fail(pos_, "unexpected end of input");
      return std::nullopt;
    }
    if (Peek() == '\\') {
      size_t at = pos_;
      char e = Peek(1);
      pos_ += 2;
      int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          int h = HexValue(Peek());
          if (h < 0) {
            Fail(pos_, fmt::format("expected {} hex digits after '\\{}'", digits, e));
            return std::nullopt;
          }
          v = v * 16 + static_cast<uint32_t>(h);
          ++pos_;
        }
        if (v > 0x10FFFF) {
          Fail(at, "escape is beyond U+10FFFF");
          return std::nullopt;
        }
        return v;
      }
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
          return static_cast<uint32_t>(e);
        default:
          Fail(at, fmt::format("unknown escape '\\{}'", e));
          return std::nullopt;
      }
    }
    uint32_t cp;
    size_t n = DecodeUtf8(src_.substr(pos_), &cp);
    if (n == 0) {
      Fail(pos_, "invalid UTF-8");
      return std::nullopt;
    }
    pos_ += n;
    return cp;
  }

  void ParseSequence(const std::string& name, std::vector<Element>* out, bool nested) {
    size_t last_start = out->size();
    while (error_.ok() && !AtEnd()) {
      char c = Peek();
      size_t at = pos_;
      if (c == '"') {
        ++pos_;
        last_start = out->size();
        while (error_.ok() && Peek() != '"') {
          if (AtEnd() || Peek() == '\n') return Fail(at, "unterminated string literal");
          if (auto cp = ParseChar()) out->push_back({ElementType::kChar, *cp});
        }
        ++pos_;
        // "" matches the empty string; it contributes no elements, so it cannot be repeated.
      } else if (c == '[') {
        ++pos_;
        last_start = out->size();
        ElementType first = ElementType::kChar;
        if (Peek() == '^') {
          ++pos_;
          first = ElementType::kCharNot;
        }
        bool empty = true;
        while (error_.ok() && Peek() != ']') {
          if (AtEnd() || Peek() == '\n') return Fail(at, "unterminated character class");
          auto lo = ParseChar();
          if (!lo) return;
          out->push_back({empty ? first : ElementType::kCharAlt, *lo});
          empty = false;
          if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
            ++pos_;
            auto hi = ParseChar();
            if (!hi) return;
            if (*hi < *lo) return Fail(at, "character range is reversed");
            out->push_back({ElementType::kCharRangeUpper, *hi});
          }
        }
        if (empty) return Fail(at, "empty character class");
        ++pos_;
      } else if (IsNameChar(c)) {
        std::string ref = ParseName();
        last_start = out->size();
        out->push_back({ElementType::kRuleRef, SymbolId(ref, at)});
      } else if (c == '(') {
        if (++depth_ > kMaxNesting) {
          return Fail(at, fmt::format("parentheses nest deeper than {}", kMaxNesting));
        }
        ++pos_;
        SkipSpace(true);
        uint32_t sub = NewSubRule(name);
        ParseAlternates(name, sub, /*nested=*/true);
        if (!error_.ok()) return;
        if (Peek() != ')') return Fail(at, "unclosed '('");
        ++pos_;
        --depth_;
        last_start = out->size();
        out->push_back({ElementType::kRuleRef, sub});
      } else if (c == '.') {
        ++pos_;
        last_start = out->size();
        out->push_back({ElementType::kCharAny, 0});
      } else if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        if (last_start == out->size()) return Fail(at, fmt::format("'{}' has nothing to repeat", c));
        Repeat(name, out, last_start, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded);
      } else if (c == '{') {
        ++pos_;
        if (last_start == out->size()) return Fail(at, "'{' has nothing to repeat");
        SkipSpace(nested);
        uint32_t min = 0, max = 0;
        if (!ParseInt(&min)) return;
        SkipSpace(nested);
        if (Peek() == ',') {
          ++pos_;
          SkipSpace(nested);
          if (Peek() == '}') {
            max = kUnbounded;
          } else if (!ParseInt(&max)) {
            return;
          }
          SkipSpace(nested);
        } else {
          max = min;
        }
        if (Peek() != '}') return Fail(pos_, "expected '}' to close the repetition");
        ++pos_;
        if (max < min) return Fail(at, fmt::format("repetition {{{},{}}} has max < min", min, max));
        Repeat(name, out, last_start, min, max);
      } else {
        break;
      }
      SkipSpace(nested);
    }
  }

  bool ParseInt(uint32_t* v) {
    size_t start = pos_;
    uint64_t x = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      x = x * 10 + static_cast<uint64_t>(Peek() - '0');
      ++pos_;
      if (x > limits_.max_repetition) {
        Fail(start, fmt::format("repetition count is over the limit of {}", limits_.max_repetition));
        return false;
      }
    }
    if (pos_ == start) {
      Fail(pos_, "expected a number in the repetition");
      return false;
    }
    *v = static_cast<uint32_t>(x);
    return true;
  }

  static constexpr uint32_t kUnbounded = UINT32_MAX;

  // Replaces the item at out[last_start..] by min copies followed by (max-min) optional copies or,
  // when unbounded, a rule `r ::= item r |`.
  void Repeat(const std::string& name, std::vector<Element>* out, size_t last_start, uint32_t min,
              uint32_t max) {
    std::vector<Element> item(out->begin() + static_cast<std::ptrdiff_t>(last_start), out->end());
    // Every copy counts, the optional ones too ({0,10000} of a long item is as big as {10000}).
    const uint64_t copies = max == kUnbounded ? uint64_t{min} + 1 : uint64_t{max};
    const uint64_t total = num_elements_ + out->size() + (item.size() + 3) * copies;
    if (total > limits_.max_elements) {
      AddElements(static_cast<size_t>(std::min<uint64_t>(total, SIZE_MAX)));  // reports the limit
      return;
    }
    out->resize(last_start);
    for (uint32_t i = 0; i < min; ++i) out->insert(out->end(), item.begin(), item.end());
    if (max == kUnbounded) {
      uint32_t rec = NewSubRule(name);
      std::vector<Element> body = item;
      body.push_back({ElementType::kRuleRef, rec});
      body.push_back({ElementType::kAlt, 0});
      body.push_back({ElementType::kEnd, 0});
      SetRule(rec, std::move(body));
      out->push_back({ElementType::kRuleRef, rec});
      return;
    }
    // Nested optionals: opt_1 ::= item opt_2 |, ..., opt_k ::= item |.
    uint32_t next = 0;
    bool have_next = false;
    for (uint32_t i = min; i < max && error_.ok(); ++i) {
      uint32_t opt = NewSubRule(name);
      std::vector<Element> body = item;
      if (have_next) body.push_back({ElementType::kRuleRef, next});
      body.push_back({ElementType::kAlt, 0});
      body.push_back({ElementType::kEnd, 0});
      SetRule(opt, std::move(body));
      next = opt;
      have_next = true;
    }
    if (have_next) out->push_back({ElementType::kRuleRef, next});
  }

  // --- whole-grammar checks ---

  Result<ParsedGrammar> Finish() {
    size_t worst = SIZE_MAX;
    uint32_t undefined = 0;
    for (uint32_t id = 0; id < names_.size(); ++id) {
      if (!defined_at_[id] && first_ref_[id] < worst) {
        worst = first_ref_[id];
        undefined = id;
      }
    }
    if (worst != SIZE_MAX) {
      return InvalidArgument("grammar: undefined rule '{}' at {}", names_[undefined], Where(worst));
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return InvalidArgument("grammar: missing root rule");
    DSPARK_TRY(CheckLeftRecursion());
    ParsedGrammar g;
    g.rules = std::move(rules_);
    g.names = std::move(names_);
    g.root_id = root->second;
    g.num_elements = num_elements_;
    return g;
  }

  Status CheckLeftRecursion() {
    size_t n = rules_.size();
    // Nullable rules, by fixpoint.
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        bool alt_nullable = true;
        for (const Element& e : rules_[r]) {
          if (e.type == ElementType::kAlt || e.type == ElementType::kEnd) {
            if (alt_nullable) {
              nullable[r] = 1;
              changed = true;
              break;
            }
            alt_nullable = true;
          } else if (IsCharType(e.type) || (e.type == ElementType::kRuleRef && !nullable[e.value])) {
            alt_nullable = false;
          }
        }
      }
    }
    // Edges r -> s when s can be entered before r has consumed anything.
    std::vector<std::vector<uint32_t>> edges(n);
    for (size_t r = 0; r < n; ++r) {
      bool leading = true;
      for (const Element& e : rules_[r]) {
        if (e.type == ElementType::kAlt || e.type == ElementType::kEnd) {
          leading = true;
        } else if (!leading || e.type == ElementType::kCharRangeUpper ||
                   e.type == ElementType::kCharAlt) {
          continue;
        } else if (e.type == ElementType::kRuleRef) {
          edges[r].push_back(e.value);
          leading = nullable[e.value];
        } else {
          leading = false;
        }
      }
    }
    // Iterative depth-first cycle search (a recursive one could overflow the thread's stack on
    // a large grammar); 0 = unseen, 1 = on the current path, 2 = done.
    std::vector<char> color(n, 0);
    std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge to try
    for (uint32_t start = 0; start < n; ++start) {
      if (color[start] != 0) continue;
      int c = -1;
      color[start] = 1;
      path.emplace_back(start, 0);
      while (!path.empty() && c < 0) {
        auto& [r, next] = path.back();
        if (next == edges[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        uint32_t s = edges[r][next++];
        if (color[s] == 1) {
          c = static_cast<int>(s);
        } else if (color[s] == 0) {
          color[s] = 1;
          path.emplace_back(s, 0);
        }
      }
      if (c < 0) continue;
      uint32_t named = static_cast<uint32_t>(c);
      while (!IsUserRule(named)) named = ids_[names_[named].substr(0, names_[named].rfind('_'))];
      const std::string& name = names_[named];
      size_t at = defined_at_[ids_[name]].value_or(0);
      return InvalidArgument(
          "grammar: left recursion in rule '{}' at {}: it can reach itself without consuming "
          "input (a repeated item that can match the empty string does this too)",
          name, Where(at));
    }
    return Status::Ok();
  }

  bool IsUserRule(uint32_t id) const {
    const std::string& s = names_[id];
    size_t u = s.rfind('_');
    if (u == std::string::npos || u + 1 == s.size()) return true;
    bool digits = std::all_of(s.begin() + static_cast<std::ptrdiff_t>(u) + 1, s.end(),
                              [](char c) { return c >= '0' && c <= '9'; });
    return !(digits && ids_.count(s.substr(0, u)));
  }

  std::string_view src_;
  GbnfLimits limits_;
  size_t pos_ = 0;
  Status error_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Element>> rules_;
  std::vector<std::optional<size_t>> defined_at_;
  std::vector<size_t> first_ref_;
  size_t num_elements_ = 0;
  int generated_ = 0;
  int depth_ = 0;  // open parentheses; bounded because parsing recurses on them
  static constexpr int kMaxNesting = 256;
};

}  // namespace

size_t DecodeUtf8(std::string_view s, uint32_t* cp) {
  if (s.empty()) return 0;
  auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  uint8_t c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (len == 0 || s.size() < len) return 0;
  uint32_t v = c & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

std::string GbnfLiteral(std::string_view bytes) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp;
    size_t n = DecodeUtf8(bytes.substr(i), &cp);
    if (n == 0) {  // not UTF-8: keep the byte's value as a code point so nothing is lost silently
      cp = static_cast<uint8_t>(bytes[i]);
      n = 1;
    }
    i += n;
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02X}", cp);
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04X}", cp);
    } else {
      out += fmt::format("\\U{:08X}", cp);
    }
  }
  out += '"';
  return out;
}

Result<ParsedGrammar> ParseGbnf(std::string_view text, const GbnfLimits& limits) {
  return Parser(text, limits).Parse();
}

}  // namespace dspark::grammar
