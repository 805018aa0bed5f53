// Text <-> token ids with a GGUF model's own vocabulary, token for token as llama.cpp tokenizes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dspark/export.h"

namespace dspark::api {

namespace detail {
struct Access;  // the library's own access to the handles' state
}  // namespace detail

// A handle: copies share one immutable vocabulary. Every method is const and thread-safe.
class DSPARK_API Tokenizer {
 public:
  // The vocabulary alone (tokenizer.ggml.* of a GGUF), without loading weights. Model::tokenizer()
  // gives a loaded model's. Throws Error.
  static Tokenizer Load(const std::string& gguf_path);

  // add_bos: prepend BOS if the vocabulary asks for it (tokenizer.ggml.add_bos_token), as the
  // engine does for a text prompt. parse_special: recognise control tokens written as text
  // ("<|im_start|>").
  std::vector<int32_t> Encode(std::string_view text, bool add_bos = true, bool parse_special = false) const;
  // Concatenated token texts; control tokens render as "" unless render_special. Decode(Encode(x))
  // == x for text without control tokens.
  std::string Decode(const std::vector<int32_t>& ids, bool render_special = false) const;
  // The raw bytes of one token (possibly part of a UTF-8 character).
  std::string TokenToPiece(int32_t id, bool render_special = false) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the vocabulary has none
  int32_t eos_id() const;  // -1 when the vocabulary has none
  // End-of-generation tokens (EOS, EOT, "<|im_end|>", ...), sorted: generation stops at any of them.
  std::vector<int32_t> eog_ids() const;
  bool IsEog(int32_t id) const;


 private:
  friend struct detail::Access;
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dspark::api
