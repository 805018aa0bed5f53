// Pre-tokenizer regex chains per `tokenizer.ggml.pre` (the table mirrors llama.cpp's
// llm_tokenizer_bpe constructor and the name mapping in llama_vocab::impl::load) and the PCRE2
// splitter that applies them.
//
// How llama.cpp's regex engine choices map onto PCRE2:
// - gpt2/llama3 chains use hand-written splitters equivalent to the regexes below (the gpt2 one
//   implements the regex plus a trailing `|\s+`, which we spell out).
// - Other regexes with \p{..} run on "collapsed" text where every non-ASCII code point becomes
//   one byte per category; \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all collapse to "letter",
//   so we write them as \p{L} to split the same way.
// - Regexes without \p{..} run through std::wregex: \s covers Unicode spaces (llama.cpp maps them
//   to \v first) but \d, \w and \b are ASCII, hence `ucp = false` where those appear.
// - `$` means end of piece (std::regex has no multiline mode): PCRE2_DOLLAR_ENDONLY.
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <array>

namespace dspark::tok {
namespace {

using Regex = PreTokenizerSpec::Regex;

#define DSPARK_CONTRACTIONS R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))re"

constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
constexpr const char* kLlama3 = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2 = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen35 = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kJais2 = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re";
// DeepSeek LLM letters (escaped: several code points here have canonical singleton
// decompositions, e.g. U+2126 OHM SIGN, that editors silently normalise).
constexpr const char* kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})re"
    R"re(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F})re"
    R"re(\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481})re"
    R"re(\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD})re"
    R"re(\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})re"
    R"re(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45})re"
    R"re(\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})re"
    R"re(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})re"
    R"re(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})re"
    R"re(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})re"
    R"re(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})re"
    R"re(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})re"
    R"re(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})re"
    R"re(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})re"
    R"re(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})re"
    R"re(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
constexpr const char* kCjkHangul = R"re([一-龥ࠀ-一가-퟿]+)re";
constexpr const char* kCjkKana = R"re([一-龥぀-ゟ゠-ヿ]+)re";
constexpr const char* kDeepseek3Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kSpark25Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)re" DSPARK_CONTRACTIONS
    R"re(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)re" DSPARK_CONTRACTIONS
    R"re(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGraniteEmbMulti =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+)re" DSPARK_CONTRACTIONS
    R"re(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*)re" DSPARK_CONTRACTIONS
    R"re(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Tiny Aya's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ after llama.cpp's collapse.
constexpr const char* kTinyAyaMain =
    R"re([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+)re" DSPARK_CONTRACTIONS
    R"re(?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*)re" DSPARK_CONTRACTIONS
    R"re(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kBailingMoe =
    R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* kSeedCoder = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kUfakzeka =
    R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kExaoneMoe = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* kMiniCpm5Main = DSPARK_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

#undef DSPARK_CONTRACTIONS

enum class Chain {
  kDefault, kLlama3, kJais2, kDeepseekLlm, kDeepseek3, kSpark25, kDeepseekCoder, kFalcon,
  kStarcoder, kGpt2, kQwen2, kQwen35, kPoro, kViking, kTekken, kChameleon, kGpt4o,
  kGraniteEmbMulti, kTinyAya, kSuperBpe, kBailingMoe, kSeedCoder, kUfakzeka, kLaguna, kExaoneMoe,
  kMiniCpm5,
};

std::vector<Regex> ChainRegexes(Chain chain) {
  switch (chain) {
    case Chain::kDefault:
      return {{R"re([\p{P}\$\+<=>\^~\|]+)re"}, {kGpt2}, {R"re(\p{N}+)re"}, {"[0-9][0-9][0-9]"}};
    case Chain::kLlama3: return {{kLlama3}};
    case Chain::kJais2: return {{kJais2}};
    case Chain::kDeepseekLlm:
      return {{R"re([\r\n])re"}, {kDeepseekLetters}, {R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re"},
              {R"re(\s+$)re"}, {kCjkHangul}, {R"re(\p{N}+)re"}};
    case Chain::kDeepseek3: return {{R"re(\p{N}{1,3})re"}, {kCjkKana}, {kDeepseek3Main}};
    case Chain::kSpark25:
      return {{R"re(\p{N}{1,3})re"}, {kCjkKana}, {kSpark25Main}, {R"re(\p{N})re"}};
    case Chain::kDeepseekCoder:
      return {{R"re([\r\n])re"}, {R"re(\s?\p{L}+)re"}, {R"re(\s?\p{P}+)re"}, {kCjkHangul},
              {R"re(\p{N})re"}};
    case Chain::kFalcon:
      return {{R"re([\p{P}\$\+<=>\^~\|`]+)re"}, {kGpt2}, {"[0-9][0-9][0-9]"}};
    case Chain::kStarcoder: return {{R"re(\p{N})re"}, {kGpt2}};
    case Chain::kGpt2: return {{kGpt2}};
    case Chain::kQwen2: return {{kQwen2}};
    case Chain::kQwen35: return {{kQwen35}};
    case Chain::kPoro: return {{kPoro}};
    case Chain::kViking: return {{kPoro}, {R"re(\p{N})re"}};
    case Chain::kTekken: return {{kTekken}};
    case Chain::kChameleon:
      return {{"<sentinel:[0-9]+>"}, {"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"},
              {"([\\t\\n]|    |  )"}, {R"re(\p{N})re"}, {R"re([\p{P}!-/:-@\[-`{-~])re"}, {kGpt2}};
    case Chain::kGpt4o: return {{kGpt4o}};
    case Chain::kGraniteEmbMulti: return {{kGraniteEmbMulti}};
    case Chain::kTinyAya:
      return {{R"re(\d{1,3}(?=(?:\d{3})*\b))re", false}, {kTinyAyaMain}};
    case Chain::kSuperBpe: return {{R"re(\p{N}+)re"}, {R"re((?=(\d{3})+(?!\d)))re", false}};
    case Chain::kBailingMoe: return {{kBailingMoe}};
    case Chain::kSeedCoder: return {{kSeedCoder}};
    case Chain::kUfakzeka: return {{kUfakzeka}};
    case Chain::kLaguna: return {{R"re([^\n]+|[\n]+)re"}, {kQwen2}};
    case Chain::kExaoneMoe: return {{kExaoneMoe}};
    case Chain::kMiniCpm5: return {{R"re(\p{N}{1,3})re"}, {kMiniCpm5Main}};
  }
  return {};
}

struct NameEntry {
  const char* name;
  Chain chain;
  bool ignore_merges = false;
  bool add_bos = false;
  bool no_bos = false;
};

// llama_vocab::impl::load's `tokenizer_pre` mapping, for the byte-level chains we implement.
// Not supported: kimi-k2 and afmoe (custom splitters), gemma4, sarvam-moe and whitespace
// (not byte-level), youtu.
constexpr NameEntry kNames[] = {
    {"default", Chain::kDefault},
    {"llama3", Chain::kLlama3, true, true},
    {"llama-v3", Chain::kLlama3, true, true},
    {"llama-bpe", Chain::kLlama3, true, true},
    {"falcon3", Chain::kLlama3, true, true},
    {"falcon-h1", Chain::kLlama3, true, true},
    {"pixtral", Chain::kLlama3, true, true},
    {"midm-2.0", Chain::kLlama3, true, true},
    {"lfm2", Chain::kLlama3, true, true},
    {"jina-v5-nano", Chain::kLlama3, true, true},
    {"dbrx", Chain::kLlama3},
    {"smaug-bpe", Chain::kLlama3},
    {"glm4", Chain::kLlama3, false, false, true},
    {"chatglm-bpe", Chain::kLlama3, false, false, true},
    {"jais-2", Chain::kJais2},
    {"deepseek-llm", Chain::kDeepseekLlm},
    {"deepseek-coder", Chain::kDeepseekCoder},
    {"deepseek-v3", Chain::kDeepseek3},
    {"hunyuan-dense", Chain::kDeepseek3},
    {"hy_v4", Chain::kDeepseek3},
    {"joyai-llm", Chain::kDeepseek3},
    {"spark2_5", Chain::kSpark25},
    {"falcon", Chain::kFalcon},
    {"starcoder", Chain::kStarcoder},
    {"refact", Chain::kStarcoder},
    {"command-r", Chain::kStarcoder},
    {"smollm", Chain::kStarcoder},
    {"codeshell", Chain::kStarcoder},
    {"exaone", Chain::kStarcoder},
    {"minerva-7b", Chain::kStarcoder},
    {"mellum2", Chain::kStarcoder},
    {"gpt-2", Chain::kGpt2},
    {"phi-2", Chain::kGpt2},
    {"jina-es", Chain::kGpt2},
    {"jina-de", Chain::kGpt2},
    {"gigachat", Chain::kGpt2},
    {"jina-v2-es", Chain::kGpt2},
    {"jina-v2-de", Chain::kGpt2},
    {"a.x-4.0", Chain::kGpt2},
    {"mellum", Chain::kGpt2},
    {"modern-bert", Chain::kGpt2},
    {"jina-v1-en", Chain::kGpt2},
    {"jina-v2-code", Chain::kGpt2},
    {"roberta-bpe", Chain::kGpt2},
    {"exaone4", Chain::kGpt2},
    {"mpt", Chain::kGpt2},
    {"olmo", Chain::kGpt2},
    {"jais", Chain::kGpt2},
    {"trillion", Chain::kGpt2},
    {"granite-docling", Chain::kGpt2},
    {"qwen2", Chain::kQwen2},
    {"deepseek-r1-qwen", Chain::kQwen2},
    {"kormo", Chain::kQwen2},
    {"f2llmv2", Chain::kQwen2},
    {"megrez", Chain::kQwen2},
    {"stablelm2", Chain::kQwen2},
    {"hunyuan", Chain::kQwen2},
    {"solar-open", Chain::kQwen2},
    {"grok-2", Chain::kQwen2},
    {"qwen35", Chain::kQwen35},
    {"poro-chat", Chain::kPoro},
    {"bloom", Chain::kPoro},
    {"gpt3-finnish", Chain::kPoro},
    {"viking", Chain::kViking},
    {"tekken", Chain::kTekken, true, true},
    {"chameleon", Chain::kChameleon, false, true},
    {"gpt-4o", Chain::kGpt4o},
    {"llama4", Chain::kGpt4o},
    {"kanana2", Chain::kGpt4o},
    {"talkie", Chain::kGpt4o},
    {"minimax-m2", Chain::kGpt4o},
    {"granite-embed-multi-97m", Chain::kGraniteEmbMulti, true},
    {"tiny_aya", Chain::kTinyAya},
    {"cohere2moe", Chain::kTinyAya},
    {"superbpe", Chain::kSuperBpe},
    {"bailingmoe", Chain::kBailingMoe},
    {"bailingmoe2", Chain::kBailingMoe},
    {"llada-moe", Chain::kBailingMoe},
    {"seed-coder", Chain::kSeedCoder},
    {"ufakzeka", Chain::kUfakzeka},
    {"laguna", Chain::kLaguna},
    {"exaone-moe", Chain::kExaoneMoe},
    {"minicpm5", Chain::kMiniCpm5, true},
};

}  // namespace

Result<PreTokenizerSpec> FindPreTokenizerSpec(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const NameEntry& e : kNames) {
    if (pre == e.name) {
      PreTokenizerSpec spec;
      spec.regexes = ChainRegexes(e.chain);
      spec.ignore_merges = e.ignore_merges;
      spec.add_bos = e.add_bos;
      spec.no_bos = e.no_bos;
      return spec;
    }
  }
  std::string known;
  for (const NameEntry& e : kNames) known += fmt::format("{}{}", known.empty() ? "" : ", ", e.name);
  return NotFound("unknown pre-tokenizer type '{}' (tokenizer.ggml.pre); supported: {}", pre, known);
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  Compiled() = default;
  Compiled(Compiled&& o) noexcept : code(o.code) { o.code = nullptr; }
  Compiled& operator=(Compiled&&) = delete;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::~PreTokenizer() = default;

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(const PreTokenizerSpec& spec) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const Regex& r : spec.regexes) {
    uint32_t options = PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK;
    if (r.ucp) options |= PCRE2_UCP;
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    Compiled c;
    c.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(r.pattern), PCRE2_ZERO_TERMINATED, options,
                           &err, &err_offset, nullptr);
    if (!c.code) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      return Internal("tokenizer: cannot compile pre-tokenizer regex '{}' at offset {}: {}",
                      r.pattern, err_offset, reinterpret_cast<const char*>(msg.data()));
    }
    pcre2_jit_compile(c.code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
    pre->regexes_.push_back(std::move(c));
  }
  return pre;
}

namespace {

// One match at or after `start` within subject [0, len); false if none. On a JIT stack overflow
// (very long runs) retries with the interpreter.
bool MatchAt(const pcre2_code* code, pcre2_match_data* md, std::string_view subject, size_t start,
             uint32_t options, size_t* mb, size_t* me) {
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                       options | PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), start,
                     options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  }
  if (rc < 0) return false;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *mb = ov[0];
  *me = ov[1];
  return true;
}

size_t NextCharEnd(std::string_view s, size_t i) {
  ++i;
  while (i < s.size() && (static_cast<uint8_t>(s[i]) & 0xc0) == 0x80) ++i;
  return i;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(0, text.size());
  std::vector<std::pair<size_t, size_t>> next;
  for (const Compiled& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
    next.clear();
    for (const auto& piece : pieces) {
      // Like std::regex_iterator over [pb, pe): the piece is the whole subject. (Named copies, not
      // a structured binding: clang before 16 cannot capture those in the lambda below.)
      const size_t pb = piece.first, pe = piece.second;
      const std::string_view sub = text.substr(pb, pe - pb);
      auto emit = [&](size_t b, size_t e) {
        if (e > b) next.emplace_back(pb + b, pb + e);
      };
      size_t done = 0;  // end of the last match
      size_t start = 0;
      size_t mb = 0, me = 0;
      bool found = MatchAt(re.code, md, sub, start, 0, &mb, &me);
      while (found) {
        emit(done, mb);
        emit(mb, me);
        done = me;
        if (me > mb) {
          if (me >= sub.size()) break;
          found = MatchAt(re.code, md, sub, me, 0, &mb, &me);
          continue;
        }
        // Empty match: first a non-empty match anchored at the same place, else move one char on.
        const size_t at = me;
        if (MatchAt(re.code, md, sub, at, PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED, &mb, &me)) {
          continue;
        }
        if (at >= sub.size()) break;
        found = MatchAt(re.code, md, sub, NextCharEnd(sub, at), 0, &mb, &me);
      }
      emit(done, sub.size());
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace dspark::tok
