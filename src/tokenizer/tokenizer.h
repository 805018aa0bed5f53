// Text <-> token ids for GGUF vocabularies, token for token identical to llama.cpp's tokenizer:
// SentencePiece-style BPE (`tokenizer.ggml.model = llama`) and byte-level BPE (`gpt2`) with the
// pre-tokenizer regexes selected by `tokenizer.ggml.pre`. Knows no model architecture and no chat
// template. All methods are const and thread-safe once constructed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "util/status.h"

namespace dspark {

namespace tok {
struct Vocab;
class PreTokenizer;
}  // namespace tok

// `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct EncodeOptions {
  // Prepend BOS / append EOS, each only if the vocabulary asks for it
  // (`tokenizer.ggml.add_bos_token` / `add_eos_token`, defaults per model type as llama.cpp).
  // Both true is llama.cpp's `add_special = true`.
  bool add_bos = true;
  bool add_eos = true;
  // Recognise control and unknown tokens written as text ("<|im_end|>"). User-defined tokens
  // are always recognised, as in llama.cpp and Hugging Face tokenizers.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Reads the `tokenizer.ggml.*` metadata. Errors name the file and key: missing tokens, unknown
  // `tokenizer.ggml.model` or `tokenizer.ggml.pre`, malformed merges, mistyped arrays.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const gguf::File& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& opts = {}) const;

  // Raw bytes of one token (may be part of a UTF-8 sequence). Control and unknown tokens render as
  // "" unless render_special; user-defined tokens always render their text. Out-of-range ids: "".
  std::string TokenToPiece(int32_t id, bool render_special = false) const;
  // Concatenated pieces. For vocabularies that add a space prefix (SentencePiece), the one leading
  // space of the first non-empty piece is removed, so Decode(Encode(x)) == x. Unlike llama.cpp's
  // llama_detokenize it never "cleans up" spaces before punctuation.
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the vocabulary has none
  int32_t eos_id() const;  // -1 when the vocabulary has none
  std::optional<int32_t> unk_id() const;
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> mask_id() const;
  std::optional<int32_t> eot_id() const;
  // End-of-generation: eos, eot, eom, FIM pad/repo/sep, and tokens whose text llama.cpp treats as
  // EOG ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<end_of_turn>", ...).
  bool IsEog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;  // sorted
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;

  std::optional<int32_t> FindToken(std::string_view text) const;
  const std::string& TokenText(int32_t id) const;  // as stored in the GGUF ("Ġhello", "▁hello")
  TokenType GetTokenType(int32_t id) const;
  // Control, user-defined or unknown (after llama.cpp's corrections, e.g. EOG texts → control).
  bool IsSpecial(int32_t id) const;
  const std::vector<std::string>& tokens() const;  // for draft/target vocabulary comparison

  const std::string& model() const;          // tokenizer.ggml.model: "llama" or "gpt2"
  const std::string& pre_tokenizer() const;  // tokenizer.ggml.pre ("default" when absent)

 private:
  Tokenizer();

  std::unique_ptr<tok::Vocab> vocab_;
  std::unique_ptr<tok::PreTokenizer> pre_;  // byte-level BPE only
};

// Streams text out of a token sequence without ever emitting a split UTF-8 sequence: bytes of an
// incomplete trailing sequence are held back until it completes. Bytes that can never become
// valid UTF-8 are passed through unchanged, so the concatenation of all outputs (Push... then
// Flush) equals Tokenizer::Decode of the same ids. Not thread-safe; one per sequence.
//
// `text_start`: the ids begin a text, so a SentencePiece vocabulary's added space prefix comes off
// the first piece, as Decode does. Generated tokens continue their prompt (text_start false): the
// first one keeps its leading space, as llama.cpp's generation prints it.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false, bool text_start = true);
  std::string Push(int32_t id);
  std::string Flush();  // returns whatever is held back, complete or not, and resets
  void Reset();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool text_start_;
  bool at_start_;  // the leading-space removal of Decode still applies
  std::string pending_;
};

}  // namespace dspark
