// Byte-level BPE pre-tokenization: the regex chains llama.cpp selects by `tokenizer.ggml.pre`,
// run with PCRE2 (UTF + UCP) instead of llama.cpp's hand-written splitters and std::regex on
// "collapsed" text; the chains split the same way (up to Unicode-version differences). Each regex
// of a chain splits every piece left by the previous one; text between matches stays a piece.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace dspark::tok {

struct PreTokenizerSpec {
  struct Regex {
    const char* pattern;
    // false where llama.cpp runs the regex through std::wregex, whose \d, \w and \b are ASCII.
    bool ucp = true;
  };
  std::vector<Regex> regexes;
  bool ignore_merges = false;  // a pre-token that is a whole token is emitted as is
  bool add_bos = false;        // default of add_bos_token for this pre-tokenizer
  bool no_bos = false;         // the vocabulary has no BOS token (chatglm)
};

// The spec for a `tokenizer.ggml.pre` name ("" means "default"); NotFound naming it if unknown.
Result<PreTokenizerSpec> FindPreTokenizerSpec(std::string_view pre);

class PreTokenizer {
 public:
  // Compiles the regexes (JIT where available). Internal error if PCRE2 rejects one.
  static Result<std::unique_ptr<PreTokenizer>> Create(const PreTokenizerSpec& spec);
  ~PreTokenizer();

  // `text` must be valid UTF-8 (see SanitizeUtf8). Returns [begin, end) byte ranges of the
  // pre-tokens, in order, covering the text; empty pieces are dropped.
  std::vector<std::pair<size_t, size_t>> Split(std::string_view text) const;

 private:
  PreTokenizer() = default;
  struct Compiled;
  std::vector<Compiled> regexes_;
};

}  // namespace dspark::tok
