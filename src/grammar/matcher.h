// Runtime for GBNF grammars: an immutable compiled Grammar shared by all requests, a small
// copyable GrammarState per sequence (llama.cpp-style set of pushdown stacks plus a partial UTF-8
// decoder, because vocabulary tokens can hold single bytes of a multi-byte character), and a
// TokenMasker built once per vocabulary that computes the allowed-token set by walking a byte
// trie of the vocabulary with the stacks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/gbnf.h"
#include "util/status.h"

namespace dspark::grammar {

struct MatchLimits {
  // More live stacks than this after a character means the grammar is ambiguous enough to explode;
  // the character is then rejected (a dead end) rather than letting the set grow without bound.
  size_t max_stacks = 1024;
  // Stacks deeper than this are dropped: nesting that deep ("[[[[...") is refused.
  size_t max_stack_depth = 1024;
  // Work one character may cost: the size of its expansion tree, counted as if no stack were
  // shared, plus a sixteenth of the stacks each of its nodes collects and the depth of each stack
  // it leaves. An ambiguous recursive grammar ("root ::= [a-z] root*") makes few distinct stacks
  // out of many ways to reach them, so neither bound above sees the work grow; past this the
  // character is a dead end too. A JSON document nested 100 deep costs about a thousand, and an
  // object of 300 optional properties fits as well (MatcherTest checks both); max_stack_depth caps
  // nesting first.
  size_t max_expansion = 16384;
};

// Where a sequence is inside a grammar. Copy it to branch (speculative decoding keeps one per
// draft position). A state whose stacks are all gone is dead: nothing is accepted, CanEnd is false.
class GrammarState {
 public:
  bool dead() const { return stacks_.empty(); }
  size_t num_stacks() const { return stacks_.size(); }
  bool in_partial_utf8() const { return utf8_.remain != 0; }

  // Decoder for a code point split across tokens; exposed for the matcher's helpers only.
  struct Utf8 {
    uint32_t cp = 0;     // bits decoded so far
    uint8_t remain = 0;  // continuation bytes still expected
    uint8_t len = 0;     // total length of the code point being decoded
    bool operator==(const Utf8&) const = default;
  };

 private:
  friend class Grammar;
  friend class TokenMasker;
  // Each stack holds flat element positions, bottom first; the top is always a character element
  // (an empty stack means the grammar has been completed along that path). Unique; the empty stack,
  // if present, first.
  std::vector<std::vector<uint32_t>> stacks_;
  Utf8 utf8_;
};

class Grammar {
 public:
  static Result<std::shared_ptr<const Grammar>> Compile(std::string_view gbnf,
                                                        const GbnfLimits& parse_limits = {},
                                                        const MatchLimits& match_limits = {});
  static std::shared_ptr<const Grammar> FromParsed(const ParsedGrammar& parsed,
                                                   const MatchLimits& match_limits = {});

  GrammarState Start() const;
  // Whether `bytes` can follow `state`. Empty input is never accepted.
  bool Accepts(const GrammarState& state, std::string_view bytes) const;
  // Consumes `bytes`; on false the state is unchanged.
  bool Advance(GrammarState* state, std::string_view bytes) const;
  // True when the text so far is a complete sentence of the grammar: an end-of-generation token is
  // allowed exactly then.
  bool CanEnd(const GrammarState& state) const;

  const MatchLimits& limits() const { return limits_; }

 private:
  friend class TokenMasker;
  Grammar() = default;

  bool IsCharElement(uint32_t pos) const;
  bool IsRuleEnd(uint32_t pos) const;
  // Tests code point `cp` against the class at `pos`; on a match sets *end to the element after it.
  bool MatchChar(uint32_t pos, uint32_t cp, uint32_t* end) const;
  // Whether some code point in [lo, hi] matches the class at `pos`.
  bool MatchRange(uint32_t pos, uint32_t lo, uint32_t hi) const;
  // Hash-consed stacks and memoised steps: the one matching engine behind Start, Advance and
  // TokenMasker (matcher.cc).
  class Forest;

  std::vector<Element> flat_;         // all rules back to back
  std::vector<uint32_t> alt_begin_;   // alternatives of rule r: alts_[alt_begin_[r]..alt_begin_[r+1])
  std::vector<uint32_t> alts_;        // flat position of each alternative's first element
  uint32_t root_ = 0;
  MatchLimits limits_;
};

// Per-vocabulary allowed-token computation. Thread-safe: all scratch memory is per call.
class TokenMasker {
 public:
  // token_bytes[id] is the raw byte string token id decodes to. Special/control tokens should be
  // passed as empty strings: they are never allowed here (the caller allows end-of-generation
  // tokens when Grammar::CanEnd is true).
  explicit TokenMasker(const std::vector<std::string>& token_bytes);

  size_t vocab_size() const { return vocab_size_; }
  // Fills allowed (resized to vocab_size) with 1 for each token that Grammar::Accepts.
  void AllowedTokens(const Grammar& grammar, const GrammarState& state,
                     std::vector<uint8_t>* allowed) const;

  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  struct Node {
    uint32_t edge_begin, edge_end;    // into edges_
    uint32_t token_begin, token_end;  // into token_ids_: tokens whose bytes end here
  };

 private:
  class Walk;
  uint32_t Build(std::vector<uint32_t>& ids, size_t lo, size_t hi, size_t depth,
                 const std::vector<std::string>& token_bytes);

  size_t vocab_size_ = 0;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty prefix)
  std::vector<Edge> edges_;
  std::vector<uint32_t> token_ids_;
};

// Steps the decoder by one byte. Returns false on bytes that cannot continue valid UTF-8 (overlong
// forms, surrogates and values past U+10FFFF included); *complete is set when a code point ends.
bool StepUtf8(GrammarState::Utf8* u, uint8_t byte, bool* complete);
// The code points a partial decoder can still complete to, as one range.
void PartialRange(const GrammarState::Utf8& u, uint32_t* lo, uint32_t* hi);

}  // namespace dspark::grammar
