// Every tokenizer family on the vocabularies in tests/data/vocab: the first input byte picks the
// vocabulary, the rest is text. Ids stay in the vocabulary, streaming detokenisation equals Decode
// and never splits a UTF-8 sequence of valid input, and Decode(Encode(x)) gives x back where the vocabulary
// guarantees it (tokenizer_test's round trip): SentencePiece with byte fallback for valid UTF-8
// without U+2581 (its space marker),
// byte-level BPE for any bytes (invalid UTF-8 read as U+FFFD first), special tokens included.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace dspark;

namespace {

struct Vocab {
  std::string name;
  bool spm;
  std::unique_ptr<Tokenizer> tok;
};

std::vector<Vocab>& Vocabs() {
  static std::vector<Vocab> vocabs = [] {
    std::vector<Vocab> v;
    const std::pair<const char*, bool> names[] = {{"llama-spm", true},     {"phi-3", true},      {"llama-bpe", false},
                                                  {"qwen2", false},        {"gpt-2", false},     {"deepseek-llm", false},
                                                  {"deepseek-coder", false}};
    for (const auto& [name, spm] : names) {
      auto file = gguf::File::Open(std::string(DSPARK_VOCAB_DIR) + "/ggml-vocab-" + name + ".gguf");
      if (!file.ok()) fuzz::Fail(file.status().ToString());
      auto tok = Tokenizer::FromGguf(**file);
      if (!tok.ok()) fuzz::Fail(tok.status().ToString());
      v.push_back({name, spm, std::move(*tok)});
    }
    return v;
  }();
  return vocabs;
}

}  // namespace

// Loads the vocabularies before the first input: their parse is not the input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Vocabs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Vocab& v = Vocabs()[data[0] % Vocabs().size()];
  const Tokenizer& tok = *v.tok;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = tok.Encode(bytes, EncodeOptions{.add_bos = false, .parse_special = !v.spm});
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) fuzz::Fail(v.name + ": id out of range");
  // Streaming holds back incomplete UTF-8 sequences; bytes that can never become valid (invalid
  // input spelled with byte tokens) pass through, so pieces are valid when the input is.
  const std::string valid = tok::SanitizeUtf8(bytes);
  StreamingDetokenizer stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    if (valid == bytes && tok::SanitizeUtf8(piece) != piece) fuzz::Fail(v.name + ": streaming split a UTF-8 sequence");
    streamed += piece;
  }
  streamed += stream.Flush();
  if (streamed != tok.Decode(ids)) fuzz::Fail(v.name + ": streamed text differs from Decode");
  if (v.spm) {
    // SentencePiece writes spaces as U+2581 and decodes U+2581 as a space (llama.cpp too): text
    // holding that character itself does not come back byte for byte.
    if (valid.find("\xe2\x96\x81") == std::string::npos && tok.Decode(tok.Encode(valid)) != valid)
      fuzz::Fail(v.name + ": round trip of valid UTF-8");
  } else if (tok.Decode(ids, /*render_special=*/true) != valid) {
    fuzz::Fail(v.name + ": round trip");
  }
  return 0;
}
