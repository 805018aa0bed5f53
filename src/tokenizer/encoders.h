// The two subword algorithms and special-token partitioning, on raw text fragments. Internal to
// src/tokenizer; Tokenizer::Encode glues them together.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace dspark::tok {

// SentencePiece-style BPE (llama.cpp's llm_tokenizer_spm): `text` already has spaces escaped as
// U+2581. Merges the adjacent pair whose concatenation is the highest-scoring token (leftmost on
// ties) until none is left; symbols that are not tokens fall back to byte tokens.
void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

// Byte-level BPE (llama.cpp's llm_tokenizer_bpe) over the pre-tokens of one text fragment.
// Caches the ids of each distinct pre-token for the lifetime of the session (one Encode call).
class BpeSession {
 public:
  BpeSession(const Vocab& vocab, const PreTokenizer& pre) : vocab_(vocab), pre_(pre) {}
  void Encode(std::string_view text, std::vector<int32_t>* out);

 private:
  void EncodeWord(const std::string& word, std::vector<int32_t>* out);

  const Vocab& vocab_;
  const PreTokenizer& pre_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
  std::string key_;  // scratch for merge lookups
};

// A piece of the input: raw text [begin, end) or one special token.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token
  size_t begin = 0;
  size_t end = 0;
};

// llama.cpp's tokenizer_st_partition: splits `text` on the texts of special tokens, longest token
// first. Without parse_special only user-defined tokens are split out. Honors lstrip/rstrip.
std::vector<Fragment> PartitionSpecial(const Vocab& vocab, std::string_view text, bool parse_special);

}  // namespace dspark::tok
