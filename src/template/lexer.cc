// Template lexer. Mirrors jinja2.lexer: data runs up to the next "{{", "{%" or "{#"; "-" strips
// whitespace on that side of a tag; lstrip_blocks removes indentation before "{%" / "{#" that
// starts a line (unless "{%+"); trim_blocks drops the first newline after "%}" / "#}".
#include "template/lexer.h"

#include <algorithm>
#include <cstring>

#include "template/value.h"

namespace dspark::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Bounds the size (and so the depth) of any one expression tree: evaluation recurses over it, and
// a template arrives inside a model file that may be hostile. Real templates stay under 100.
constexpr size_t kMaxTokensPerTag = 1000;

// Longest first, so "//" wins over "/".
constexpr const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                      "<",  ">",  "=",  "(",  ")",  "[",  "]", "{", "}", ".", ",", ":",
                                      "|",  ";"};

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& options) : src_(std::move(src)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous match ended with a newline
    bool strip_next = false;    // the previous tag ended with "-"
    while (pos <= src_.size()) {
      size_t tag = FindTag(pos);
      std::string text = src_.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
      size_t text_pos = pos;
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text.erase(0, k);
        text_pos += k;
        strip_next = false;
      }
      if (tag == std::string::npos) {
        Emit(TokenKind::kData, std::move(text), text_pos);
        break;
      }
      char type = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      ApplyLeftStrip(type, sign, line_starting, &text);
      Emit(TokenKind::kData, std::move(text), text_pos);
      size_t inner = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (type == '#') {
        size_t end = src_.find("#}", inner);
        if (end == std::string::npos) return Error(tag, "unclosed comment: missing '#}'");
        bool minus = end > inner && src_[end - 1] == '-';
        bool plus = end > inner && src_[end - 1] == '+';
        pos = end + 2;
        FinishTag(minus, plus, &pos, &strip_next, &line_starting);
        continue;
      }
      bool is_var = type == '{';
      size_t start_token = tokens_.size();
      Emit(is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, is_var ? "{{" : "{%", tag);
      pos = inner;
      bool minus = false, plus = false;
      DSPARK_TRY(LexTag(is_var, tag, &pos, &minus, &plus));
      Emit(is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, is_var ? "}}" : "%}", pos);
      if (is_var) {
        pos += minus ? 3 : 2;
        if (minus) SkipSpace(&pos);
        line_starting = pos > 0 && src_[pos - 1] == '\n';
        continue;
      }
      pos += (minus || plus) ? 3 : 2;
      FinishTag(minus, plus, &pos, &strip_next, &line_starting);
      if (tokens_.size() == start_token + 3 && tokens_[start_token + 1].kind == TokenKind::kName &&
          tokens_[start_token + 1].text == "raw") {
        tokens_.resize(start_token);
        DSPARK_TRY(LexRaw(tag, &pos, &strip_next, &line_starting));
      }
    }
    Emit(TokenKind::kEof, "", src_.size());
    tokens_.back().kind = TokenKind::kEof;
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void ApplyLeftStrip(char type, char sign, bool line_starting, std::string* text) const {
    if (sign == '-') {
      size_t k = text->size();
      while (k > 0 && IsSpace((*text)[k - 1])) --k;
      text->resize(k);
    } else if (sign != '+' && options_.lstrip_blocks && type != '{') {
      size_t nl = text->rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool all_space = l_pos < text->size();
        for (size_t k = l_pos; k < text->size(); ++k) {
          if (!IsSpace((*text)[k])) all_space = false;
        }
        if (all_space) text->resize(l_pos);
      }
    }
  }

  void FinishTag(bool minus, bool plus, size_t* pos, bool* strip_next, bool* line_starting) {
    if (minus) {
      *strip_next = true;
    } else if (!plus && options_.trim_blocks && *pos < src_.size() && src_[*pos] == '\n') {
      ++*pos;
    }
    *line_starting = *pos > 0 && src_[*pos - 1] == '\n';
  }

  void SkipSpace(size_t* pos) const {
    while (*pos < src_.size() && IsSpace(src_[*pos])) ++*pos;
  }

  // Lexes expression tokens until the closing "}}" / "%}"; *pos ends on the closing tag, with
  // *minus / *plus telling whether it carried "-" or "+".
  Status LexTag(bool is_var, size_t open, size_t* pos, bool* minus, bool* plus) {
    const char* close = is_var ? "}}" : "%}";
    const size_t first_token = tokens_.size();
    while (true) {
      if (tokens_.size() - first_token > kMaxTokensPerTag) {
        return Error(open, fmt::format("tag has more than {} tokens", kMaxTokensPerTag));
      }
      SkipSpace(pos);
      if (*pos >= src_.size()) {
        return Error(open, is_var ? "unclosed '{{': missing '}}'" : "unclosed '{%': missing '%}'");
      }
      std::string_view rest(src_.data() + *pos, src_.size() - *pos);
      if (rest.starts_with(close)) return Status::Ok();
      if ((rest[0] == '-' || (!is_var && rest[0] == '+')) && rest.substr(1).starts_with(close)) {
        (rest[0] == '-' ? *minus : *plus) = true;
        return Status::Ok();
      }
      size_t start = *pos;
      char c = rest[0];
      if (IsNameStart(c)) {
        while (*pos < src_.size() && IsNameChar(src_[*pos])) ++*pos;
        Emit(TokenKind::kName, src_.substr(start, *pos - start), start);
      } else if (IsDigit(c)) {
        DSPARK_TRY(LexNumber(pos));
      } else if (c == '\'' || c == '"') {
        DSPARK_TRY(LexString(pos));
      } else {
        bool matched = false;
        for (const char* op : kOperators) {
          if (rest.starts_with(op)) {
            Emit(TokenKind::kOperator, op, start);
            *pos += std::strlen(op);
            matched = true;
            break;
          }
        }
        if (!matched) return Error(start, "unexpected character '" + std::string(1, c) + "'");
      }
    }
  }

  Status LexNumber(size_t* pos) {
    size_t start = *pos;
    auto digits = [&] {
      while (*pos < src_.size() && (IsDigit(src_[*pos]) || (src_[*pos] == '_' && *pos + 1 < src_.size() &&
                                                            IsDigit(src_[*pos + 1])))) {
        ++*pos;
      }
    };
    digits();
    bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator && tokens_.back().text == ".";
    bool is_float = false;
    if (!after_dot && *pos + 1 < src_.size() && src_[*pos] == '.' && IsDigit(src_[*pos + 1])) {
      ++*pos;
      digits();
      is_float = true;
    }
    if (!after_dot && *pos < src_.size() && (src_[*pos] == 'e' || src_[*pos] == 'E')) {
      size_t save = *pos;
      ++*pos;
      if (*pos < src_.size() && (src_[*pos] == '+' || src_[*pos] == '-')) ++*pos;
      if (*pos < src_.size() && IsDigit(src_[*pos])) {
        digits();
        is_float = true;
      } else {
        *pos = save;
      }
    }
    std::string text;
    for (size_t k = start; k < *pos; ++k) {
      if (src_[k] != '_') text.push_back(src_[k]);
    }
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInt, text};
    SetPos(&t, start);
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(start, "integer literal too large: " + text);
    }
    tokens_.push_back(std::move(t));
    return Status::Ok();
  }

  // Python string-literal escapes, as jinja2 decodes them ("unicode-escape").
  Status LexString(size_t* pos) {
    size_t start = *pos;
    char quote = src_[(*pos)++];
    std::string value;
    while (true) {
      if (*pos >= src_.size()) return Error(start, "unterminated string literal");
      char c = src_[(*pos)++];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (*pos >= src_.size()) return Error(start, "unterminated string literal");
      char e = src_[(*pos)++];
      switch (e) {
        case '\n': break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (*pos + n > src_.size()) return Error(*pos - 2, "truncated \\" + std::string(1, e) + " escape");
          char32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[*pos + k];
            if (!IsHex(h)) return Error(*pos - 2, "truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<char32_t>(IsDigit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          *pos += n;
          AppendUtf8(cp, &value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && *pos < src_.size() && src_[*pos] >= '0' && src_[*pos] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(src_[(*pos)++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    Emit(TokenKind::kString, std::move(value), start);
    return Status::Ok();
  }

  // After "{% raw %}": everything up to "{% endraw %}" is data.
  Status LexRaw(size_t open, size_t* pos, bool* strip_next, bool* line_starting) {
    size_t search = *pos;
    while (true) {
      size_t p = src_.find("{%", search);
      if (p == std::string::npos) return Error(open, "unclosed 'raw' block: missing '{% endraw %}'");
      size_t q = p + 2;
      char sign = q < src_.size() ? src_[q] : '\0';
      if (sign == '-' || sign == '+') ++q;
      SkipSpace(&q);
      if (src_.compare(q, 6, "endraw") != 0) {
        search = p + 2;
        continue;
      }
      q += 6;
      SkipSpace(&q);
      bool minus = false, plus = false;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) {
        (src_[q] == '-' ? minus : plus) = true;
        ++q;
      }
      if (src_.compare(q, 2, "%}") != 0) return Error(p, "malformed '{% endraw %}'");
      std::string text = src_.substr(*pos, p - *pos);
      size_t text_pos = *pos;
      if (*strip_next) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text.erase(0, k);
        text_pos += k;
        *strip_next = false;
      }
      ApplyLeftStrip('%', sign, *line_starting, &text);
      Emit(TokenKind::kData, std::move(text), text_pos);
      *pos = q + 2;
      FinishTag(minus, plus, pos, strip_next, line_starting);
      return Status::Ok();
    }
  }

  void SetPos(Token* t, size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_start = *(it - 1);
    t->line = static_cast<int>(it - line_starts_.begin());
    int col = 1;
    for (size_t k = line_start; k < offset && k < src_.size(); ++k) {
      if ((static_cast<unsigned char>(src_[k]) & 0xC0) != 0x80) ++col;
    }
    t->column = col;
  }

  void Emit(TokenKind kind, std::string text, size_t offset) {
    if (kind == TokenKind::kData && text.empty()) return;
    Token t{kind, std::move(text)};
    SetPos(&t, offset);
    tokens_.push_back(std::move(t));
  }

  Status Error(size_t offset, const std::string& message) const {
    Token t{TokenKind::kEof, ""};
    SetPos(&t, offset);
    return InvalidArgument("template:{}:{}: {}", t.line, t.column, message);
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  // jinja2 normalises "\r\n" and "\r" to "\n" and drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).Run();
}

const char* TokenKindName(TokenKind kind) {
  switch (kind) {
    case TokenKind::kData: return "text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName: return "name";
    case TokenKind::kString: return "string";
    case TokenKind::kInt: return "integer";
    case TokenKind::kFloat: return "float";
    case TokenKind::kOperator: return "operator";
    case TokenKind::kEof: return "end of template";
  }
  return "?";
}

}  // namespace dspark::jinja
