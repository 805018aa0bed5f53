// UTF-8 helpers and GPT-2's byte <-> unicode mapping for the tokenizers. No Unicode property
// tables live here: category-based splitting is PCRE2's job (pretokenizer.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dspark::tok {

// Byte length of the UTF-8 sequence that starts with `lead`, from its high nibble only (llama.cpp's
// unicode_len_utf8): 1 for ASCII and stray continuation bytes, 2, 3 or 4 otherwise.
size_t Utf8SeqLen(uint8_t lead);

void AppendUtf8(uint32_t cp, std::string* out);

// Decodes the code point at *offset and advances past it, as llama.cpp's unicode_cpts_from_utf8:
// a malformed sequence yields U+FFFD and advances one byte. Requires *offset < s.size().
uint32_t DecodeUtf8Lenient(std::string_view s, size_t* offset);

// Re-encodes `text` as valid UTF-8 the way llama.cpp decodes it: every byte that does not start a
// well-formed sequence becomes U+FFFD. Overlong forms are re-encoded canonically (llama.cpp does
// too); surrogates and code points above U+10FFFF, which llama.cpp cannot re-encode, become U+FFFD.
std::string SanitizeUtf8(std::string_view text);

// GPT-2 byte-level BPE: each byte maps to one printable code point (' ' -> 'Ġ', '\n' -> 'Ċ').
const std::string& ByteToUnicode(uint8_t byte);  // UTF-8 of the mapped code point
int UnicodeToByte(uint32_t cp);                   // -1 if cp is not in the mapping

// Length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence that could
// still be completed by more bytes. Invalid bytes count as complete (they never will be).
size_t CompleteUtf8Prefix(std::string_view bytes);

}  // namespace dspark::tok
