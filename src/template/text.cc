// Python string semantics over UTF-8. Case mapping covers the scripts chat templates plausibly
// touch with upper/lower/title (ASCII, Latin-1, Greek, Cyrillic); other code points pass through.
#include "template/text.h"

#include <algorithm>

#include "template/value.h"

namespace dspark::jinja {
namespace {

char32_t Upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t Lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool IsCased(char32_t c) { return Upper(c) != c || Lower(c) != c; }

template <typename F>
std::string MapChars(const std::string& s, F f) {
  std::u32string u = DecodeUtf8(s);
  for (char32_t& c : u) c = f(c);
  return EncodeUtf8(u);
}

}  // namespace

std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right) {
  // Works on bytes and decodes only the code points at the edges: contents can be long.
  std::u32string set = chars != nullptr ? DecodeUtf8(*chars) : std::u32string();
  auto strip = [&](char32_t c) { return chars == nullptr ? IsPySpace(c) : set.find(c) != std::u32string::npos; };
  auto decode_at = [&](size_t i, size_t len) { return DecodeUtf8(std::string_view(s).substr(i, len))[0]; };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t len = 1;
      while (b + len < e && (static_cast<unsigned char>(s[b + len]) & 0xC0) == 0x80) ++len;
      if (!strip(decode_at(b, len))) break;
      b += len;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!strip(decode_at(start, e - start))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

std::vector<std::string> PySplit(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t p = s.find(*sep, start);
        if (p == std::string::npos) break;
        out.push_back(s.substr(start, p - start));
        start = p + sep->size();
      }
      out.push_back(s.substr(start));
      return out;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string::npos) break;
      out.push_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string u = DecodeUtf8(s);
  if (from_right) std::reverse(u.begin(), u.end());
  size_t i = 0;
  while (true) {
    while (i < u.size() && IsPySpace(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      std::u32string rest = u.substr(i);
      if (from_right) std::reverse(rest.begin(), rest.end());
      out.push_back(EncodeUtf8(rest));
      break;
    }
    size_t j = i;
    while (j < u.size() && !IsPySpace(u[j])) ++j;
    std::u32string word = u.substr(i, j - i);
    if (from_right) std::reverse(word.begin(), word.end());
    out.push_back(EncodeUtf8(word));
    i = j;
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

std::string PyReplace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    std::u32string u = DecodeUtf8(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t PyCount(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(DecodeUtf8(s).size()) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

int64_t PyFind(const std::string& s, const std::string& sub, bool from_right) {
  size_t p = from_right ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) return -1;
  return static_cast<int64_t>(DecodeUtf8(std::string_view(s).substr(0, p)).size());
}

std::string AsciiUpper(const std::string& s) { return MapChars(s, Upper); }
std::string AsciiLower(const std::string& s) { return MapChars(s, Lower); }

std::string PyTitle(const std::string& s) {
  bool prev_cased = false;
  return MapChars(s, [&](char32_t c) {
    char32_t r = c;
    if (IsCased(c)) {
      r = prev_cased ? Lower(c) : Upper(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
    return r;
  });
}

std::string PyCapitalize(const std::string& s) {
  bool first = true;
  return MapChars(s, [&](char32_t c) {
    char32_t r = first ? Upper(c) : Lower(c);
    first = false;
    return r;
  });
}

std::string JinjaTitle(const std::string& s) {
  // re.split(r"([-\s({\[<]+)", s): every piece, separators included, gets item[0].upper() +
  // item[1:].lower().
  std::u32string u = DecodeUtf8(s);
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c); };
  std::u32string out;
  size_t i = 0;
  while (i < u.size()) {
    bool sep = is_sep(u[i]);
    size_t j = i;
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) out.push_back(k == i ? Upper(u[k]) : Lower(u[k]));
    i = j;
  }
  return EncodeUtf8(out);
}

bool PyCharClass(std::string_view method, const std::string& s) {
  std::u32string u = DecodeUtf8(s);
  if (u.empty()) return false;
  bool any_cased = false;
  for (char32_t c : u) {
    bool digit = c >= '0' && c <= '9';
    bool alpha = IsCased(c) || (c > 0x7F && !IsPySpace(c));
    if (method == "isdigit" && !digit) return false;
    if (method == "isalpha" && !alpha) return false;
    if (method == "isalnum" && !alpha && !digit) return false;
    if (method == "isspace" && !IsPySpace(c)) return false;
    if (method == "isupper" && Upper(c) != c) return false;
    if (method == "islower" && Lower(c) != c) return false;
    any_cased |= IsCased(c);
  }
  return (method == "isupper" || method == "islower") ? any_cased : true;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string JinjaIndent(const std::string& s, const std::string& indent, bool first, bool blank) {
  std::vector<std::string> lines;
  std::string text = s + "\n";
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      lines.push_back(text.substr(start, i - start));
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) rv += "\n";
    if (i > 0 && (blank || !lines[i].empty())) rv += indent;
    rv += lines[i];
  }
  if (first) rv = indent + rv;
  return rv;
}

}  // namespace dspark::jinja
