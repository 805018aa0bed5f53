// UTF-8 helpers and the GPT-2 byte <-> unicode mapping.
#include "tokenizer/unicode.h"

#include <array>

namespace dspark::tok {

size_t Utf8SeqLen(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp <= 0x7f) {
    out->push_back(static_cast<char>(cp));
  } else if (cp <= 0x7ff) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp <= 0xffff) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

namespace {

constexpr uint32_t kReplacement = 0xfffd;

bool IsCont(std::string_view s, size_t i) {
  return i < s.size() && (static_cast<uint8_t>(s[i]) & 0xc0) == 0x80;
}

// llama.cpp's unicode_cpt_from_utf8: returns false (and consumes nothing) on a malformed sequence.
bool DecodeOne(std::string_view s, size_t* offset, uint32_t* cp) {
  const size_t i = *offset;
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  if (!(b0 & 0x80)) {
    *cp = b0;
    *offset += 1;
    return true;
  }
  if (!(b0 & 0x40)) return false;
  if (!(b0 & 0x20)) {
    if (!IsCont(s, i + 1)) return false;
    *cp = ((b0 & 0x1fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3fu);
    *offset += 2;
    return true;
  }
  if (!(b0 & 0x10)) {
    if (!IsCont(s, i + 1) || !IsCont(s, i + 2)) return false;
    *cp = ((b0 & 0x0fu) << 12) | ((static_cast<uint8_t>(s[i + 1]) & 0x3fu) << 6) |
          (static_cast<uint8_t>(s[i + 2]) & 0x3fu);
    *offset += 3;
    return true;
  }
  if (!(b0 & 0x08)) {
    if (!IsCont(s, i + 1) || !IsCont(s, i + 2) || !IsCont(s, i + 3)) return false;
    *cp = ((b0 & 0x07u) << 18) | ((static_cast<uint8_t>(s[i + 1]) & 0x3fu) << 12) |
          ((static_cast<uint8_t>(s[i + 2]) & 0x3fu) << 6) | (static_cast<uint8_t>(s[i + 3]) & 0x3fu);
    *offset += 4;
    return true;
  }
  return false;
}

struct ByteMap {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cp_to_byte;  // every mapped code point is below 0x144
  ByteMap() {
    cp_to_byte.fill(-1);
    std::array<bool, 256> direct{};
    for (int c = 0x21; c <= 0x7e; ++c) direct[c] = true;
    for (int c = 0xa1; c <= 0xac; ++c) direct[c] = true;
    for (int c = 0xae; c <= 0xff; ++c) direct[c] = true;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const uint32_t cp = direct[c] ? static_cast<uint32_t>(c) : static_cast<uint32_t>(256 + n++);
      AppendUtf8(cp, &byte_to_utf8[c]);
      cp_to_byte[cp] = static_cast<int16_t>(c);
    }
  }
};

const ByteMap& GetByteMap() {
  static const ByteMap map;
  return map;
}

}  // namespace

uint32_t DecodeUtf8Lenient(std::string_view s, size_t* offset) {
  uint32_t cp = 0;
  if (DecodeOne(s, offset, &cp)) return cp;
  ++*offset;
  return kReplacement;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {  // fast path
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    uint32_t cp = 0;
    if (!DecodeOne(text, &i, &cp)) {
      ++i;
      cp = kReplacement;
    } else if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      cp = kReplacement;
    }
    AppendUtf8(cp, &out);
  }
  return out;
}

const std::string& ByteToUnicode(uint8_t byte) { return GetByteMap().byte_to_utf8[byte]; }

int UnicodeToByte(uint32_t cp) {
  return cp < GetByteMap().cp_to_byte.size() ? GetByteMap().cp_to_byte[cp] : -1;
}

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Only the last (up to) 3 bytes can belong to an unfinished sequence.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t b = static_cast<uint8_t>(bytes[n - back]);
    if ((b & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((b & 0xe0) == 0xc0) need = 2;
    else if ((b & 0xf0) == 0xe0) need = 3;
    else if ((b & 0xf8) == 0xf0) need = 4;
    // A lead byte whose sequence is not finished yet: hold it (and its continuations) back.
    if (need > back) return n - back;
    return n;
  }
  return n;
}

}  // namespace dspark::tok
