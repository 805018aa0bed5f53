// Python str operations on UTF-8 text, indexed by code point as Python does: strip, split,
// replace, find, case mapping (ASCII, Latin-1, Greek and Cyrillic letters only).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dspark::jinja {

// str.strip/lstrip/rstrip; `chars` null strips Python whitespace.
std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right);
// str.split/rsplit; `sep` null splits on whitespace runs. maxsplit < 0: no limit.
std::vector<std::string> PySplit(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::string PyReplace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
int64_t PyCount(const std::string& s, const std::string& sub);
// Code point index of the first (or last) occurrence, -1 if absent.
int64_t PyFind(const std::string& s, const std::string& sub, bool from_right);
std::string AsciiUpper(const std::string& s);
std::string AsciiLower(const std::string& s);
std::string PyTitle(const std::string& s);       // str.title()
std::string PyCapitalize(const std::string& s);  // str.capitalize()
std::string JinjaTitle(const std::string& s);    // the |title filter (splits on -, space, brackets)
bool PyCharClass(std::string_view method, const std::string& s);  // isdigit, isalpha, ...
std::string HtmlEscape(const std::string& s);
std::string JinjaIndent(const std::string& s, const std::string& indent, bool first, bool blank);

}  // namespace dspark::jinja
