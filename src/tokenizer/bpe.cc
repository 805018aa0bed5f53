// Byte-level BPE, as llama.cpp's llm_tokenizer_bpe_session: pre-tokenize, map bytes to GPT-2's
// printable code points, then merge the adjacent pair with the lowest merge rank (leftmost on
// ties) until no ranked pair is left.
#include <queue>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace dspark::tok {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t begin;  // byte offset into the encoded word
  size_t n;      // byte length; 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  size_t size;
};

// Lowest rank first; on equal ranks the leftmost pair.
struct BigramGreater {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

void BpeSession::Encode(std::string_view text, std::vector<int32_t>* out) {
  const std::string clean = SanitizeUtf8(text);
  std::string word;
  for (const auto& [b, e] : pre_.Split(clean)) {
    word.clear();
    for (size_t i = b; i < e; ++i) word += ByteToUnicode(static_cast<uint8_t>(clean[i]));
    auto it = cache_.find(word);
    if (it == cache_.end()) {
      std::vector<int32_t> ids;
      EncodeWord(word, &ids);
      it = cache_.emplace(word, std::move(ids)).first;
    }
    out->insert(out->end(), it->second.begin(), it->second.end());
  }
}

void BpeSession::EncodeWord(const std::string& word, std::vector<int32_t>* out) {
  if (vocab_.ignore_merges) {
    const int32_t id = vocab_.Find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const std::string_view w(word);
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  for (size_t offs = 0; offs < w.size();) {
    const size_t len = std::min(Utf8SeqLen(static_cast<uint8_t>(w[offs])), w.size() - offs);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offs + len == w.size() ? -1 : index + 1, offs, len});
    offs += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    key_.assign(w.substr(l.begin, l.n));
    key_ += ' ';
    key_.append(w.substr(r.begin, r.n));
    auto it = vocab_.bpe_ranks.find(key_);
    if (it == vocab_.bpe_ranks.end()) return;
    queue.push({left, right, it->second, l.n + r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // A symbol only grows by absorbing its right neighbour, so unchanged sizes mean an unchanged
    // pair (llama.cpp compares the texts).
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1 && !symbols.empty(); i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = w.substr(s.begin, s.n);
    const int32_t id = vocab_.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // llama.cpp's fallback: each byte of the encoded text that is a token on its own.
    for (char c : piece) {
      const int32_t byte_id = vocab_.Find(std::string_view(&c, 1));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace dspark::tok
