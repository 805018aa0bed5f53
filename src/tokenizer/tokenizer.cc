// Tokenizer: loads the vocabulary and glues special-token partitioning, SPM/BPE encoding and
// piece rendering together the way llama_vocab::impl::tokenize / detokenize do.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/encoders.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace dspark {

using tok::VocabType;

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const gguf::File& file) {
  DSPARK_ASSIGN_OR_RETURN(tok::Vocab vocab, tok::LoadVocab(file));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (vocab.type == VocabType::kBpe) {
    DSPARK_ASSIGN_OR_RETURN(tok::PreTokenizerSpec spec, tok::FindPreTokenizerSpec(vocab.pre));
    DSPARK_ASSIGN_OR_RETURN(t->pre_, tok::PreTokenizer::Create(spec));
  }
  t->vocab_ = std::make_unique<tok::Vocab>(std::move(vocab));
  return t;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& opts) const {
  const tok::Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (opts.add_bos && v.add_bos && v.bos >= 0) out.push_back(v.bos);

  const std::vector<tok::Fragment> frags = tok::PartitionSpecial(v, text, opts.parse_special);
  if (v.type == VocabType::kSpm) {
    // The space prefix goes before the first fragment and after every special token.
    bool prev_special = true;
    std::string escaped;
    for (const tok::Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      escaped.clear();
      if (v.add_space_prefix && prev_special) escaped += "\xe2\x96\x81";
      for (size_t i = f.begin; i < f.end; ++i) {
        if (text[i] == ' ') escaped += "\xe2\x96\x81";
        else escaped.push_back(text[i]);
      }
      tok::SpmEncode(v, escaped, &out);
      prev_special = false;
    }
  } else {
    tok::BpeSession session(v, *pre_);
    for (const tok::Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        session.Encode(text.substr(f.begin, f.end - f.begin), &out);
      }
    }
  }

  if (opts.add_eos && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  const tok::Vocab& v = *vocab_;
  if (id < 0 || id >= v.n_tokens()) return {};
  if (!render_special && (v.attrs[id] & (tok::kAttrUnknown | tok::kAttrControl))) return {};
  return v.pieces[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  bool strip = vocab_->add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = TokenToPiece(id, render_special);
    if (piece.empty()) continue;
    if (strip && piece[0] == ' ') {
      out.append(piece, 1);
    } else {
      out += piece;
    }
    strip = false;
  }
  return out;
}

int32_t Tokenizer::n_vocab() const { return vocab_->n_tokens(); }
int32_t Tokenizer::bos_id() const { return vocab_->bos; }
int32_t Tokenizer::eos_id() const { return vocab_->eos; }

namespace {
std::optional<int32_t> OptId(int32_t id) {
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}
}  // namespace

std::optional<int32_t> Tokenizer::unk_id() const { return OptId(vocab_->unk); }
std::optional<int32_t> Tokenizer::pad_id() const { return OptId(vocab_->pad); }
std::optional<int32_t> Tokenizer::mask_id() const { return OptId(vocab_->mask); }
std::optional<int32_t> Tokenizer::eot_id() const { return OptId(vocab_->eot); }

bool Tokenizer::IsEog(int32_t id) const {
  return std::binary_search(vocab_->eog.begin(), vocab_->eog.end(), id);
}
const std::vector<int32_t>& Tokenizer::eog_ids() const { return vocab_->eog; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
bool Tokenizer::add_space_prefix() const { return vocab_->add_space_prefix; }

std::optional<int32_t> Tokenizer::FindToken(std::string_view text) const {
  return OptId(vocab_->Find(text));
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string kEmpty;
  return (id >= 0 && id < vocab_->n_tokens()) ? vocab_->tokens[id] : kEmpty;
}

TokenType Tokenizer::GetTokenType(int32_t id) const {
  return (id >= 0 && id < vocab_->n_tokens()) ? vocab_->types[id] : TokenType::kUndefined;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_->n_tokens() &&
         (vocab_->attrs[id] & (tok::kAttrControl | tok::kAttrUserDefined | tok::kAttrUnknown));
}

const std::vector<std::string>& Tokenizer::tokens() const { return vocab_->tokens; }
const std::string& Tokenizer::model() const { return vocab_->model; }
const std::string& Tokenizer::pre_tokenizer() const { return vocab_->pre; }

}  // namespace dspark
