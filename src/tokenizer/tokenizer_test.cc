// Tokenizer behaviour beyond the llama.cpp vectors: round trips, streaming, special tokens,
// end-of-generation ids, loader errors and a 100 KB text. Uses the vocabularies in
// tests/data/vocab/ and small GGUFs written here.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"
#include "util/testing/temp_dir.h"

namespace dspark {
namespace {

const std::string kVocabDir = std::string(DSPARK_SOURCE_DIR) + "/tests/data/vocab/";

// Vocabulary files are large; load each once for the whole binary.
const Tokenizer& Vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto file = gguf::File::Open(kVocabDir + "ggml-vocab-" + name + ".gguf");
    DSPARK_CHECK_MSG(file.ok(), file.status().ToString());
    auto tok = Tokenizer::FromGguf(**file);
    DSPARK_CHECK_MSG(tok.ok(), tok.status().ToString());
    it = cache.emplace(name, std::move(tok).value()).first;
  }
  return *it->second;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    size_t n = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

const std::vector<std::string>& SampleTexts() {
  static const std::vector<std::string> texts = {
      "Hello world",
      " Hello world",
      "  two leading spaces and trailing  ",
      "\ttabs\tand\nnewlines\n\n\nend",
      "emoji: 🦙🚀 😶‍🌫️ ✅ 👨‍👩‍👧‍👦",
      "CJK: 我想在apple工作1314151天～ 日本語のテキスト 한국어",
      "Ünïcödé àçcénts, Ελληνικά, кириллица, العربية, हिन्दी, ខ្មែរ",
      "def f(x):\n    return x**2  # comment\n\nprint(f(3))\n",
      "numbers 3 33 333 3333 33333 1,234,567.89",
      "y'all can't won't I'M HE'LL they've",
      "<s> </s> <|im_end|> <|endoftext|> look like special tokens",
      "",
      "\n",
      "a",
  };
  return texts;
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, DecodeOfEncodeIsIdentity) {
  const Tokenizer& tok = Vocab(GetParam());
  for (const std::string& text : SampleTexts()) {
    const std::vector<int32_t> ids = tok.Encode(text);
    EXPECT_EQ(tok.Decode(ids), text) << GetParam() << ": '" << text << "'";
    EncodeOptions plain;
    plain.add_bos = false;
    EXPECT_EQ(tok.Decode(tok.Encode(text, plain)), text) << GetParam() << " (no BOS): '" << text << "'";
  }
}

TEST_P(RoundTrip, StreamingNeverSplitsUtf8AndMatchesDecode) {
  const Tokenizer& tok = Vocab(GetParam());
  for (const std::string& text : SampleTexts()) {
    const std::vector<int32_t> ids = tok.Encode(text);
    StreamingDetokenizer stream(tok);
    std::string all;
    for (int32_t id : ids) {
      const std::string out = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(out)) << GetParam() << ": token " << id << " of '" << text << "'";
      all += out;
    }
    const std::string rest = stream.Flush();
    EXPECT_TRUE(IsValidUtf8(rest));
    all += rest;
    EXPECT_EQ(all, tok.Decode(ids)) << GetParam() << ": '" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, RoundTrip,
                         ::testing::Values("llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2",
                                           "deepseek-llm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(StreamingDetokenizer, HoldsBackSplitCharacterAcrossByteTokens) {
  const Tokenizer& tok = Vocab("llama-spm");
  // Llama 2 has no token for U+1F999, so it is spelled with four byte tokens.
  std::vector<int32_t> ids = tok.Encode("🦙", EncodeOptions{.add_bos = false});
  ASSERT_GE(ids.size(), 4u);
  StreamingDetokenizer stream(tok);
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(stream.Push(id));
  EXPECT_EQ(outs.back(), "🦙");
  for (size_t i = 0; i + 1 < outs.size(); ++i) EXPECT_EQ(outs[i].find('\xf0'), std::string::npos);
  EXPECT_EQ(stream.Flush(), "");
}

TEST(StreamingDetokenizer, GeneratedTextKeepsTheFirstPiecesSpaceAsLlamaCppPrintsIt) {
  // "    def" in a SentencePiece vocabulary with a space prefix: the text's first piece starts
  // with "▁". At the start of a text Decode drops the added space; continuing a prompt (generated
  // tokens) the stream prints every piece whole, as llama.cpp's generation does.
  const Tokenizer& tok = Vocab("llama-spm");
  ASSERT_TRUE(tok.add_space_prefix());
  const std::vector<int32_t> ids = tok.Encode("    def f():", EncodeOptions{.add_bos = false});
  ASSERT_FALSE(ids.empty());
  std::string pieces;
  for (int32_t id : ids) pieces += tok.TokenToPiece(id);
  ASSERT_EQ(pieces.substr(0, 5), "     ");
  StreamingDetokenizer continuing(tok, false, /*text_start=*/false), starting(tok);
  std::string cont, start;
  for (int32_t id : ids) {
    cont += continuing.Push(id);
    start += starting.Push(id);
  }
  EXPECT_EQ(cont + continuing.Flush(), pieces);
  EXPECT_EQ(start + starting.Flush(), tok.Decode(ids));
  EXPECT_EQ(tok.Decode(ids), "    def f():");
  continuing.Reset();
  EXPECT_EQ(continuing.Push(ids[0]), tok.TokenToPiece(ids[0]));  // Reset keeps the mode
}

TEST(StreamingDetokenizer, FlushReleasesIncompleteTail) {
  const Tokenizer& tok = Vocab("llama-spm");
  const auto lead = tok.FindToken("<0xF0>");
  ASSERT_TRUE(lead.has_value());
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.Push(*lead), "");
  EXPECT_EQ(stream.Flush(), "\xf0");
}

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  const Tokenizer& tok = Vocab("qwen2");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const int32_t im_start = *tok.FindToken("<|im_start|>");
  const int32_t im_end = *tok.FindToken("<|im_end|>");
  EncodeOptions on;
  on.parse_special = true;
  const std::vector<int32_t> parsed = tok.Encode(text, on);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), im_start);
  EXPECT_EQ(parsed.back(), im_end);
  EXPECT_EQ(tok.Decode(parsed), "user\nhi");  // control tokens are not rendered by default
  EXPECT_EQ(tok.Decode(parsed, /*render_special=*/true), text);

  const std::vector<int32_t> plain = tok.Encode(text);
  for (int32_t id : plain) {
    EXPECT_NE(id, im_start);
    EXPECT_NE(id, im_end);
  }
  EXPECT_EQ(tok.Decode(plain), text);
}

TEST(Tokenizer, SpmSpacePrefixAfterSpecialToken) {
  const Tokenizer& tok = Vocab("llama-spm");
  EncodeOptions opts;
  opts.add_bos = false;
  const std::vector<int32_t> hello = tok.Encode("Hello", opts);  // "▁Hello"
  opts.parse_special = true;
  std::vector<int32_t> expected = {tok.bos_id()};
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(tok.Encode("<s>Hello", opts), expected);
}

TEST(Tokenizer, Phi3SpecialTokensStripFollowingWhitespace) {
  // llama.cpp marks Phi-3's special tokens rstrip (by model name); "</s>" is user-defined there.
  const Tokenizer& tok = Vocab("phi-3");
  EncodeOptions opts;
  opts.add_bos = false;
  opts.parse_special = true;
  const int32_t user = *tok.FindToken("<|user|>");
  const int32_t end = *tok.FindToken("<|end|>");
  const int32_t assistant = *tok.FindToken("<|assistant|>");
  std::vector<int32_t> expected = {user};
  const std::vector<int32_t> hi = tok.Encode("Hi", EncodeOptions{.add_bos = false});
  expected.insert(expected.end(), hi.begin(), hi.end());
  expected.push_back(end);
  expected.push_back(assistant);
  EXPECT_EQ(tok.Encode("<|user|>\nHi<|end|>\n<|assistant|>", opts), expected);
  EXPECT_TRUE(tok.IsEog(end));
  EXPECT_FALSE(tok.IsEog(assistant));
}

TEST(Tokenizer, ConcurrentEncodeIsDeterministic) {
  const Tokenizer& tok = Vocab("llama-bpe");
  std::string text;
  for (const std::string& t : SampleTexts()) text += t;
  const std::vector<int32_t> expected = tok.Encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r) results[i] = tok.Encode(text);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

TEST(Tokenizer, ArbitraryBytesNeverCrash) {
  uint64_t state = 42;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint8_t>(state >> 56);
  };
  for (int iter = 0; iter < 200; ++iter) {
    std::string bytes;
    const int n = 1 + iter % 40;
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>(next()));
    // SentencePiece with byte fallback spells any valid UTF-8. (Invalid bytes may swallow part of
    // an escaped space, "\xcf" + "\xe2\x96\x81", which then decodes as bytes: as llama.cpp.)
    const Tokenizer& spm = Vocab("llama-spm");
    for (int32_t id : spm.Encode(bytes)) ASSERT_TRUE(id >= 0 && id < spm.n_vocab());
    const std::string valid = tok::SanitizeUtf8(bytes);
    EXPECT_EQ(spm.Decode(spm.Encode(valid)), valid) << "iteration " << iter;
    for (const char* name : {"llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "gpt-2"}) {
      const Tokenizer& bpe = Vocab(name);
      const std::vector<int32_t> ids = bpe.Encode(bytes, EncodeOptions{.add_bos = false, .parse_special = true});
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < bpe.n_vocab()) << name;
      // Invalid UTF-8 becomes U+FFFD first, so the round trip holds for the sanitized text.
      EXPECT_EQ(bpe.Decode(ids, /*render_special=*/true), tok::SanitizeUtf8(bytes)) << name;
    }
  }
}

TEST(Tokenizer, BosEosPerVocabulary) {
  EXPECT_TRUE(Vocab("llama-spm").add_bos());
  EXPECT_EQ(Vocab("llama-spm").Encode("Hi").front(), 1);
  EXPECT_EQ(Vocab("llama-spm").Encode("").size(), 1u);  // just BOS, as SentencePiece
  EXPECT_TRUE(Vocab("llama-bpe").add_bos());
  EXPECT_EQ(Vocab("llama-bpe").Encode("Hi").front(), Vocab("llama-bpe").bos_id());
  EXPECT_FALSE(Vocab("qwen2").add_bos());
  EXPECT_EQ(Vocab("qwen2").Encode("Hi"), Vocab("qwen2").Encode("Hi", EncodeOptions{.add_bos = false}));
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2", "gpt-2"}) {
    EXPECT_FALSE(Vocab(name).add_eos()) << name;
  }
}

TEST(Tokenizer, EndOfGenerationIds) {
  const Tokenizer& llama3 = Vocab("llama-bpe");
  EXPECT_TRUE(llama3.IsEog(*llama3.FindToken("<|eot_id|>")));
  EXPECT_TRUE(llama3.IsEog(*llama3.FindToken("<|end_of_text|>")));
  EXPECT_TRUE(llama3.IsEog(llama3.eos_id()));
  EXPECT_FALSE(llama3.IsEog(*llama3.FindToken("<|begin_of_text|>")));
  EXPECT_FALSE(llama3.IsEog(*llama3.FindToken("Hello")));

  const Tokenizer& qwen = Vocab("qwen2");
  EXPECT_TRUE(qwen.IsEog(*qwen.FindToken("<|im_end|>")));
  EXPECT_TRUE(qwen.IsEog(*qwen.FindToken("<|endoftext|>")));
  EXPECT_FALSE(qwen.IsEog(*qwen.FindToken("<|im_start|>")));
  EXPECT_EQ(qwen.eot_id(), qwen.FindToken("<|im_end|>"));

  const Tokenizer& spm = Vocab("llama-spm");
  EXPECT_TRUE(spm.IsEog(2));
  EXPECT_FALSE(spm.IsEog(1));
  EXPECT_FALSE(spm.IsEog(-1));
}

TEST(Tokenizer, PiecesAndTypes) {
  const Tokenizer& spm = Vocab("llama-spm");
  EXPECT_EQ(spm.TokenToPiece(1), "");
  EXPECT_EQ(spm.TokenToPiece(1, /*render_special=*/true), "<s>");
  EXPECT_EQ(spm.GetTokenType(1), TokenType::kControl);
  EXPECT_EQ(spm.GetTokenType(*spm.FindToken("<0x0A>")), TokenType::kByte);
  EXPECT_EQ(spm.TokenToPiece(*spm.FindToken("<0x0A>")), "\n");
  EXPECT_EQ(spm.TokenToPiece(*spm.FindToken("▁Hello")), " Hello");
  EXPECT_EQ(spm.TokenToPiece(-5), "");
  EXPECT_EQ(spm.TokenToPiece(spm.n_vocab()), "");
  const Tokenizer& bpe = Vocab("gpt-2");
  EXPECT_EQ(bpe.TokenToPiece(*bpe.FindToken("ĠHello")), " Hello");
  EXPECT_EQ(bpe.TokenText(*bpe.FindToken("ĠHello")), "ĠHello");
  EXPECT_EQ(bpe.n_vocab(), static_cast<int32_t>(bpe.tokens().size()));
}

TEST(Tokenizer, InvalidUtf8IsReplacedForByteLevelBpe) {
  const Tokenizer& tok = Vocab("qwen2");
  const std::vector<int32_t> ids = tok.Encode("a\xff" "b");
  EXPECT_EQ(tok.Decode(ids), "a\xef\xbf\xbd" "b");  // U+FFFD, as llama.cpp
}

TEST(Tokenizer, Encodes100KBLosslesslyAndAsItsPartsDo) {
  // Mostly distinct pseudo-words (fixed seed), so per-word caches do not make it trivial. Built
  // from parts that each end in ".\n" and start with "Hello world": a place where every
  // byte-level BPE pre-tokenizer here splits, so the parts encode to the whole's ids.
  static const char* kSyllables[] = {"ka", "ro", "mi", "sen", "tha", "qu", "ëx", "да", "日", "ing",
                                     "str", "ph", "ol", "🦙", "ni", "zz", "ae", "u", " ", "\n"};
  std::vector<std::string> parts;
  std::string text;
  uint64_t state = 12345;
  while (text.size() < 100 * 1024) {
    std::string part;
    for (const std::string& t : SampleTexts()) part += t + " ";
    for (int w = 0; w < 200; ++w) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const int n = 1 + static_cast<int>((state >> 33) % 5);
      for (int k = 0; k < n; ++k) part += kSyllables[(state >> (13 + 4 * k)) % 18];
      part += (state >> 60) % 7 == 0 ? ", " : " ";
    }
    part += std::to_string(state % 100000) + ".\n";
    parts.push_back(part);
    text += part;
  }
  ASSERT_GE(parts.size(), 10u);
  ASSERT_EQ(SampleTexts()[0].rfind("Hello", 0), 0u);  // what the part boundaries rely on
  EncodeOptions plain;
  plain.add_bos = false;
  plain.add_eos = false;
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2", "deepseek-llm"}) {
    SCOPED_TRACE(name);
    const Tokenizer& tok = Vocab(name);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.Encode(text, plain);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ info ] " << name << ": " << text.size() << " bytes -> " << ids.size() << " tokens in "
              << s * 1e3 << " ms\n";  // informational only: no timing is asserted
    // Lossless.
    EXPECT_EQ(tok.Decode(ids), text);
    // Merges happened (a byte-per-token or character-per-token encoding fails the lower bound,
    // one that drops text fails the round trip), but no token spans more than a few words.
    EXPECT_GE(static_cast<double>(text.size()) / ids.size(), 1.8) << ids.size() << " tokens";
    EXPECT_LE(static_cast<double>(text.size()) / ids.size(), 8.0) << ids.size() << " tokens";
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab()) << id;
    // The same as encoding the parts one by one, for the byte-level BPE vocabularies (a
    // SentencePiece vocabulary adds its space prefix to each part, so its parts differ).
    if (tok.model() != "gpt2") continue;
    std::vector<int32_t> joined;
    for (const std::string& part : parts) {
      const std::vector<int32_t> p = tok.Encode(part, plain);
      joined.insert(joined.end(), p.begin(), p.end());
    }
    EXPECT_EQ(joined, ids);
  }
}

TEST(PreTokenizer, EveryKnownChainCompiles) {
  for (const char* pre :
       {"default", "llama3", "llama-bpe", "dbrx", "chatglm-bpe", "jais-2", "deepseek-llm",
        "deepseek-coder", "deepseek-v3", "spark2_5", "falcon", "starcoder", "smollm", "gpt-2",
        "phi-2", "qwen2", "qwen35", "poro-chat", "viking", "tekken", "chameleon", "gpt-4o",
        "granite-embed-multi-97m", "tiny_aya", "superbpe", "bailingmoe", "seed-coder",
        "ufakzeka", "laguna", "exaone-moe", "minicpm5"}) {
    auto spec = tok::FindPreTokenizerSpec(pre);
    ASSERT_TRUE(spec.ok()) << pre;
    auto compiled = tok::PreTokenizer::Create(*spec);
    EXPECT_TRUE(compiled.ok()) << pre << ": " << compiled.status().ToString();
    if (compiled.ok()) {
      const std::string text = "Hello, y'all! 1234567 我想 🦙  \n\n end";
      size_t covered = 0;
      for (const auto& [b, e] : (*compiled)->Split(text)) {
        EXPECT_EQ(b, covered) << pre;
        covered = e;
      }
      EXPECT_EQ(covered, text.size()) << pre;
    }
  }
}

TEST(PreTokenizer, SplitsLikeTheRegex) {
  auto spec = tok::FindPreTokenizerSpec("superbpe");  // zero-width matches split digit groups
  ASSERT_TRUE(spec.ok());
  auto pre = tok::PreTokenizer::Create(*spec);
  ASSERT_TRUE(pre.ok());
  const std::string text = "x1234567";
  std::vector<std::string> pieces;
  for (const auto& [b, e] : (*pre)->Split(text)) pieces.push_back(text.substr(b, e - b));
  EXPECT_EQ(pieces, (std::vector<std::string>{"x", "1", "234", "567"}));
}

TEST(Unicode, CompleteUtf8Prefix) {
  EXPECT_EQ(tok::CompleteUtf8Prefix(""), 0u);
  EXPECT_EQ(tok::CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(tok::CompleteUtf8Prefix("a\xf0\x9f\xa6"), 1u);      // 🦙 missing its last byte
  EXPECT_EQ(tok::CompleteUtf8Prefix("a\xf0\x9f\xa6\x99"), 5u);  // complete
  EXPECT_EQ(tok::CompleteUtf8Prefix("a\xe6"), 1u);
  EXPECT_EQ(tok::CompleteUtf8Prefix("a\x99"), 2u);  // stray continuation byte: never completes
  EXPECT_EQ(tok::CompleteUtf8Prefix("\xe6\x88\x91\xe6\x83"), 3u);
}

TEST(Unicode, SanitizeUtf8LikeLlamaCpp) {
  EXPECT_EQ(tok::SanitizeUtf8("ok 日本 🦙"), "ok 日本 🦙");
  EXPECT_EQ(tok::SanitizeUtf8("a\xff\xfe"), "a\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(tok::SanitizeUtf8("\xe6\x88"), "\xef\xbf\xbd\xef\xbf\xbd");  // truncated sequence
  EXPECT_EQ(tok::SanitizeUtf8("\xed\xa0\x80"), "\xef\xbf\xbd");          // surrogate
  EXPECT_EQ(tok::ByteToUnicode(' '), "Ġ");
  EXPECT_EQ(tok::ByteToUnicode('\n'), "Ċ");
  EXPECT_EQ(tok::UnicodeToByte(0x120), ' ');
  EXPECT_EQ(tok::UnicodeToByte('A'), 'A');
  EXPECT_EQ(tok::UnicodeToByte(0x4e00), -1);
}

// ---- Loader errors and synthetic vocabularies ---------------------------------------------------

class SyntheticVocab : public ::testing::Test {
 protected:
  // A tiny SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, a few pieces and a
  // user-defined "\n    " (indentation) token.
  static gguf::Writer SpmWriter() {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(fmt::format("<0x{:02X}>", b));
      types.push_back(6);
    }
    for (const char* t : {"▁", "a", "b", "▁a", "ab", "▁ab", "x", "▁x"}) {
      tokens.push_back(t);
      types.push_back(1);
    }
    tokens.push_back("\n    ");
    types.push_back(4);
    std::vector<float> scores(tokens.size(), 0.0f);
    for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
    gguf::Writer w;
    w.SetString("general.architecture", "llama");
    w.SetString("tokenizer.ggml.model", "llama");
    w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
    w.Set("tokenizer.ggml.scores", gguf::Value::F32Array(scores));
    w.Set("tokenizer.ggml.token_type", gguf::Value::I32Array(types));
    return w;
  }

  static gguf::Writer BpeWriter() {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(tok::ByteToUnicode(static_cast<uint8_t>(b)));
    tokens.push_back("ab");
    tokens.push_back("Ġab");
    tokens.push_back("<|endoftext|>");
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    gguf::Writer w;
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", "gpt-2");
    w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
    w.Set("tokenizer.ggml.token_type", gguf::Value::I32Array(types));
    w.Set("tokenizer.ggml.merges", gguf::Value::StringArray({"a b", "Ġ ab"}));
    w.SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
    return w;
  }

  Result<std::unique_ptr<Tokenizer>> Load(const gguf::Writer& w) {
    path_ = testing::TempPath(std::string("tok_") + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                              ".gguf");
    Status st = w.WriteFile(path_);
    if (!st.ok()) return st;
    auto file = gguf::File::Open(path_);
    if (!file.ok()) return file.status();
    file_ = std::move(file).value();
    return Tokenizer::FromGguf(*file_);
  }
  void TearDown() override {
    file_.reset();
    if (!path_.empty()) std::remove(path_.c_str());
  }

  std::string path_;
  std::unique_ptr<gguf::File> file_;
};

TEST_F(SyntheticVocab, SpmMergesByScoreAndFallsBackToBytes) {
  auto tok = Load(SpmWriter());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EncodeOptions opts;
  opts.add_bos = false;
  const std::vector<int32_t> ids = (*tok)->Encode("ab ab z", opts);
  std::vector<std::string> texts;
  for (int32_t id : ids) texts.push_back((*tok)->TokenText(id));
  EXPECT_EQ(texts, (std::vector<std::string>{"▁ab", "▁ab", "▁", "<0x7A>"}));
  EXPECT_EQ((*tok)->Decode(ids), "ab ab z");
}

TEST_F(SyntheticVocab, UserDefinedTokensSplitFirstAndRestartSpacePrefix) {
  // platform-notes: llama.cpp splits on user-defined tokens even without parse_special and
  // prefixes the next fragment with a space.
  auto tok = Load(SpmWriter());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EncodeOptions opts;
  opts.add_bos = false;
  const std::vector<int32_t> ids = (*tok)->Encode("x\n    a", opts);
  std::vector<std::string> texts;
  for (int32_t id : ids) texts.push_back((*tok)->TokenText(id));
  EXPECT_EQ(texts, (std::vector<std::string>{"▁x", "\n    ", "▁a"}));
}

TEST_F(SyntheticVocab, BpeMergesByRank) {
  auto tok = Load(BpeWriter());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<int32_t> ids = (*tok)->Encode("ab ab<|endoftext|>", EncodeOptions{.parse_special = true});
  std::vector<std::string> texts;
  for (int32_t id : ids) texts.push_back((*tok)->TokenText(id));
  EXPECT_EQ(texts, (std::vector<std::string>{"ab", "Ġab", "<|endoftext|>"}));
  EXPECT_TRUE((*tok)->IsEog(ids.back()));
  EXPECT_FALSE((*tok)->add_bos());
}

TEST_F(SyntheticVocab, MissingTokensIsAnError) {
  gguf::Writer w;
  w.SetString("tokenizer.ggml.model", "llama");
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.tokens"), std::string::npos)
      << tok.status().message();
}

TEST_F(SyntheticVocab, MissingModelIsAnError) {
  gguf::Writer w;
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray({"a"}));
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.model"), std::string::npos);
}

TEST_F(SyntheticVocab, UnknownModelIsAnError) {
  gguf::Writer w = SpmWriter();
  w.SetString("tokenizer.ggml.model", "wordpiece-9000");
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("wordpiece-9000"), std::string::npos) << tok.status().message();
}

TEST_F(SyntheticVocab, UnknownPreTokenizerIsAnErrorNamingIt) {
  gguf::Writer w = BpeWriter();
  w.SetString("tokenizer.ggml.pre", "my-fancy-pre");
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("'my-fancy-pre'"), std::string::npos) << tok.status().message();
}

TEST_F(SyntheticVocab, BadMergesAreAnError) {
  gguf::Writer w = BpeWriter();
  w.Set("tokenizer.ggml.merges", gguf::Value::StringArray({"a b", "nospace"}));
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("index 1"), std::string::npos) << tok.status().message();
}

TEST_F(SyntheticVocab, MissingMergesIsAnError) {
  gguf::Writer bpe = BpeWriter();
  gguf::Writer w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray({"a", "b"}));
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.merges"), std::string::npos);
}

TEST_F(SyntheticVocab, MistypedTokensIsAnError) {
  gguf::Writer w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetU32("tokenizer.ggml.tokens", 7);
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.tokens"), std::string::npos);
}

TEST_F(SyntheticVocab, ShortScoresAreAnError) {
  gguf::Writer w = SpmWriter();
  w.Set("tokenizer.ggml.scores", gguf::Value::F32Array({0.0f}));
  auto tok = Load(w);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.scores"), std::string::npos);
}

}  // namespace
}  // namespace dspark
