// StreamingDetokenizer: Decode, one token at a time, holding back unfinished UTF-8 sequences.
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace dspark {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special, bool text_start)
    : tokenizer_(tokenizer), render_special_(render_special), text_start_(text_start), at_start_(text_start) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  std::string piece = tokenizer_.TokenToPiece(id, render_special_);
  if (piece.empty()) return {};
  if (at_start_) {
    at_start_ = false;
    if (tokenizer_.add_space_prefix() && piece[0] == ' ') piece.erase(0, 1);  // as Decode
  }
  pending_ += piece;
  const size_t n = tok::CompleteUtf8Prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

void StreamingDetokenizer::Reset() {
  pending_.clear();
  at_start_ = text_start_;
}

}  // namespace dspark
