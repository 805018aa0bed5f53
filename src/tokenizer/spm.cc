// SentencePiece-style BPE, as llama.cpp's llm_tokenizer_spm_session.
#include <queue>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace dspark::tok {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t begin;  // byte offset into the text
  size_t n;      // byte length; 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; on equal scores the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const size_t len = std::min(Utf8SeqLen(static_cast<uint8_t>(text[offs])), text.size() - offs);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offs + len == text.size() ? -1 : index + 1, offs, len});
    offs += len;
  }
  if (symbols.empty()) return;

  std::vector<Bigram> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{}, std::move(storage));
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = vocab.Find(text.substr(symbols[left].begin, size));
    if (id < 0) return;
    queue.push({left, right, vocab.scores[id], size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // outdated
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t id = vocab.Find(text.substr(s.begin, s.n));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Every merged symbol is a token, so this is one code point missing from the vocabulary.
    for (size_t j = 0; j < s.n; ++j) {
      const int32_t byte_id = vocab.ByteToken(static_cast<uint8_t>(text[s.begin + j]));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace dspark::tok
