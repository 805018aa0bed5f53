// Splitting raw text on special-token texts, as llama.cpp's tokenizer_st_partition: each special
// token in turn (longest first) splits every raw fragment left by the previous ones.
#include "tokenizer/encoders.h"

namespace dspark::tok {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

std::vector<Fragment> PartitionSpecial(const Vocab& vocab, std::string_view text,
                                       bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : vocab.special_tokens) {
    const uint32_t attr = vocab.attrs[id];
    // Control and unknown tokens only with parse_special; user-defined ones always.
    if (!parse_special && (attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view tok = vocab.tokens[id];
    next.clear();
    bool changed = false;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t b = f.begin;
      const size_t e = f.end;
      while (b < e) {
        const size_t m = text.substr(0, e).find(tok, b);
        if (m == std::string_view::npos) break;
        changed = true;
        size_t left_end = m;
        if (attr & kAttrLstrip) {
          while (left_end > b && IsAsciiSpace(text[left_end - 1])) --left_end;
        }
        if (left_end > b) next.push_back({-1, b, left_end});
        next.push_back({id, m, m + tok.size()});
        b = m + tok.size();
        if (attr & kAttrRstrip) {
          while (b < e && IsAsciiSpace(text[b])) ++b;
        }
      }
      if (b < e) next.push_back({-1, b, e});
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

}  // namespace dspark::tok
