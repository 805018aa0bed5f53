// The vocabulary as llama.cpp's llama_vocab sees it after loading: token texts, scores, attribute
// bits (with llama.cpp's corrections), special ids, end-of-generation set, BPE merge ranks, and the
// per-token piece cache. Internal to src/tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace dspark::tok {

// llama.cpp's llama_token_attr bits.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

enum class VocabType { kSpm, kBpe };

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
  VocabType type = VocabType::kSpm;
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre, "default" when absent

  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;  // as stored
  std::vector<uint32_t> attrs;   // TokenAttr bits, after llama.cpp's corrections
  StringIdMap token_to_id;

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::vector<int32_t> eog;  // sorted

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prefix raw text with ' ' (after BOS / special tokens)
  bool ignore_merges = false;     // BPE: a pre-token that is a whole token skips the merges

  // Control, user-defined and unknown tokens, longest text first: the order in which
  // tokenizer_st_partition splits raw text on them.
  std::vector<int32_t> special_tokens;
  // "left right" -> merge rank.
  StringIdMap bpe_ranks;
  // TokenToPiece(id, render_special = true) for every id.
  std::vector<std::string> pieces;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t Find(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
  // SPM byte fallback: "<0xXX>", else the byte itself as a token, else unk (llama.cpp throws).
  int32_t ByteToken(uint8_t byte) const;
};

// Everything llama_vocab::impl::load does for the SPM and BPE types. Errors name the file and the
// key; an unknown `tokenizer.ggml.pre` is NotFound (the names live in pretokenizer.cc).
Result<Vocab> LoadVocab(const gguf::File& file);

}  // namespace dspark::tok
