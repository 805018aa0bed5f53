// Loading `tokenizer.ggml.*` metadata into a Vocab, step for step as llama_vocab::impl::load
// (SPM and BPE types only): defaults per model type, special ids, text-based detection of
// EOT/EOM/FIM/EOG tokens with their attribute corrections, the special-token order used for
// partitioning, the piece cache, and model-name-based strip attributes.
#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace dspark::tok {
namespace {

constexpr const char* kKeyModel = "tokenizer.ggml.model";
constexpr const char* kKeyPre = "tokenizer.ggml.pre";
constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
constexpr const char* kKeyScores = "tokenizer.ggml.scores";
constexpr const char* kKeyTypes = "tokenizer.ggml.token_type";
constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
constexpr const char* kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kKeyAddPrefix = "tokenizer.ggml.add_space_prefix";

uint32_t AttrFromType(int64_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// llama.cpp's token_to_byte: the two hex digits of "<0xXX>" (strtol semantics: stops early).
uint8_t ByteOfToken(const std::string& text) {
  int v = 0;
  for (size_t i = 3; i < 5 && i < text.size(); ++i) {
    const int d = HexDigit(text[i]);
    if (d < 0) break;
    v = v * 16 + d;
  }
  return static_cast<uint8_t>(v);
}

// llama_decode_text: byte-level BPE token text back to raw bytes.
std::string DecodeByteLevel(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint32_t cp = DecodeUtf8Lenient(text, &i);
    const int byte = UnicodeToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    std::string utf8;
    AppendUtf8(cp, &utf8);
    out += "[UNK_BYTE_0x";
    for (unsigned char c : utf8) out += fmt::format("{:02x}", c);
    out += text + "]";
  }
  return out;
}

std::string MakePiece(const Vocab& v, int32_t id) {
  const uint32_t attr = v.attrs[id];
  const std::string& text = v.tokens[id];
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (attr & kAttrNormal) {
    if (v.type == VocabType::kBpe) return DecodeByteLevel(text);
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\xe2\x96\x81") == 0) {
        out.push_back(' ');
        i += 3;
      } else {
        out.push_back(text[i++]);
      }
    }
    return out;
  }
  if (attr & kAttrByte) return std::string(1, static_cast<char>(ByteOfToken(text)));
  return "";
}

bool IsOneOf(const std::string& s, std::initializer_list<const char*> list) {
  for (const char* x : list) {
    if (s == x) return true;
  }
  return false;
}

}  // namespace

int32_t Vocab::ByteToken(uint8_t byte) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  int32_t id = Find(std::string_view(buf, 6));
  if (id >= 0) return id;
  id = Find(std::string_view(reinterpret_cast<const char*>(&byte), 1));
  return id >= 0 ? id : unk;
}

Result<Vocab> LoadVocab(const gguf::File& file) {
  const std::string where = "tokenizer: " + file.path() + ": ";
  auto missing = [&](const char* key, const char* what) {
    return NotFound("{}missing key '{}' ({}); the file has no usable tokenizer", where, key, what);
  };
  Vocab v;
  if (!file.Has(kKeyModel)) return missing(kKeyModel, "tokenizer type");
  DSPARK_ASSIGN_OR_RETURN(v.model, file.GetString(kKeyModel));
  DSPARK_ASSIGN_OR_RETURN(v.pre, file.GetStringOr(kKeyPre, ""));
  if (v.pre.empty()) v.pre = "default";

  bool ignore_merges = false;
  if (v.model == "llama") {
    v.type = VocabType::kSpm;
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.add_space_prefix = true;
    v.add_bos = true;
    v.add_eos = false;
  } else if (v.model == "gpt2") {
    v.type = VocabType::kBpe;
    v.bos = 11;
    v.eos = 11;
    auto spec = FindPreTokenizerSpec(v.pre);
    if (!spec.ok()) return spec.status().WithContext(where);
    ignore_merges = spec->ignore_merges;
    v.add_bos = spec->add_bos;
    if (spec->no_bos) v.bos = -1;
    if (!file.Has(kKeyMerges)) return missing(kKeyMerges, "BPE merges");
    auto merges = file.GetStringArray(kKeyMerges);
    if (!merges.ok()) return merges.status().WithContext(where);
    v.bpe_ranks.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string& m = (*merges)[i];
      const size_t pos = m.find(' ', 1);
      if (pos == std::string::npos) {
        return InvalidArgument("{}bad merge at index {} of '{}': '{}', expected 'left right'", where,
                               i, kKeyMerges, m);
      }
      v.bpe_ranks.emplace(m, static_cast<int32_t>(i));  // the first of duplicate pairs wins
    }
  } else {
    return Unimplemented("{}unknown tokenizer model '{}' ({}); supported: llama (SentencePiece), "
                         "gpt2 (byte-level BPE)", where, v.model, kKeyModel);
  }
  v.ignore_merges = ignore_merges;
  DSPARK_ASSIGN_OR_RETURN(v.add_space_prefix, file.GetBoolOr(kKeyAddPrefix, v.add_space_prefix));

  if (!file.Has(kKeyTokens)) return missing(kKeyTokens, "token list");
  {
    auto tokens = file.GetStringArray(kKeyTokens);
    if (!tokens.ok()) return tokens.status().WithContext(where);
    v.tokens = std::move(tokens).value();
  }
  const size_t n = v.tokens.size();
  if (n == 0) return InvalidArgument("{}'{}' is empty", where, kKeyTokens);
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgument("{}too many tokens ({})", where, n);

  v.scores.assign(n, 0.0f);
  if (file.Has(kKeyScores)) {
    auto scores = file.GetFloatArray(kKeyScores);
    if (!scores.ok()) return scores.status().WithContext(where);
    if (scores->size() < n) {
      return InvalidArgument("{}'{}' has {} entries for {} tokens", where, kKeyScores,
                             scores->size(), n);
    }
    for (size_t i = 0; i < n; ++i) v.scores[i] = static_cast<float>((*scores)[i]);
  }
  v.types.assign(n, TokenType::kNormal);
  v.attrs.assign(n, kAttrNormal);
  if (file.Has(kKeyTypes)) {
    auto types = file.GetIntArray(kKeyTypes);
    if (!types.ok()) return types.status().WithContext(where);
    if (types->size() < n) {
      return InvalidArgument("{}'{}' has {} entries for {} tokens", where, kKeyTypes,
                             types->size(), n);
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      v.types[i] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
      v.attrs[i] = AttrFromType(t);
    }
  }

  v.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.tokens[i].empty()) v.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
    auto [it, inserted] = v.token_to_id.emplace(v.tokens[i], static_cast<int32_t>(i));
    if (!inserted) {
      return InvalidArgument("{}duplicate token '{}' in '{}' at ids {} and {}", where, v.tokens[i],
                             kKeyTokens, it->second, i);
    }
  }

  // Special ids: defaults out of range are disabled; a key out of range keeps the default.
  const std::pair<const char*, int32_t*> special_keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},
      {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},
      {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},
      {"tokenizer.ggml.seperator_token_id", &v.sep},
      {"tokenizer.ggml.padding_token_id", &v.pad},
      {"tokenizer.ggml.mask_token_id", &v.mask},
      {"tokenizer.ggml.fim_pre_token_id", &v.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &v.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &v.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &v.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &v.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &v.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &v.fim_pre},
      {"tokenizer.ggml.suffix_token_id", &v.fim_suf},
      {"tokenizer.ggml.middle_token_id", &v.fim_mid},
  };
  for (const auto& [key, id] : special_keys) {
    if (*id >= static_cast<int64_t>(n)) *id = -1;
    if (!file.Has(key)) continue;
    auto value = file.GetInt(key);
    if (!value.ok()) return value.status().WithContext(where);
    if (*value >= 0 && *value < static_cast<int64_t>(n)) *id = static_cast<int32_t>(*value);
  }
  DSPARK_ASSIGN_OR_RETURN(v.add_bos, file.GetBoolOr(kKeyAddBos, v.add_bos));
  DSPARK_ASSIGN_OR_RETURN(v.add_eos, file.GetBoolOr(kKeyAddEos, v.add_eos));
  if (v.add_bos && v.bos < 0) {
    return InvalidArgument("{}{} is true, but tokenizer.ggml.bos_token_id is not set", where, kKeyAddBos);
  }
  if (v.add_eos && v.eos < 0) {
    return InvalidArgument("{}{} is true, but tokenizer.ggml.eos_token_id is not set", where, kKeyAddEos);
  }

  // Text-based detection of EOT, EOM and FIM tokens; each found token becomes a control token.
  // llama.cpp takes the first match in hash-map order (unspecified); we take the first text of
  // the list that exists, so Qwen's eot is "<|im_end|>" rather than "<|endoftext|>".
  auto detect = [&](int32_t* slot, std::initializer_list<const char*> texts) {
    if (*slot >= 0) return;
    for (const char* text : texts) {
      const int32_t id = v.Find(text);
      if (id >= 0) {
        *slot = id;
        v.attrs[id] |= kAttrControl;
        return;
      }
    }
  };
  detect(&v.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                  "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                  "<end_of_utterance>"});
  detect(&v.eom, {"<|eom_id|>"});
  detect(&v.fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                      "▁<PRE>", "<|code_prefix|>", "<|prefix|>"});
  detect(&v.fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                      "▁<SUF>", "<|code_suffix|>", "<|suffix|>"});
  detect(&v.fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                      "▁<MID>", "<|code_middle|>", "<|middle|>"});
  detect(&v.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(&v.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(&v.fim_sep, {"<|file_sep|>"});

  for (size_t i = 0; i < n; ++i) {
    if ((v.attrs[i] & kAttrControl) && v.tokens[i].find("unused") != std::string::npos) {
      v.attrs[i] |= kAttrUnused;
    }
  }

  // End-of-generation set.
  std::set<int32_t> eog;
  for (int32_t id : {v.fim_pad, v.fim_rep, v.fim_sep}) {
    if (id >= 0) eog.insert(id);
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (IsOneOf(t, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                    "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["})) {
      eog.insert(static_cast<int32_t>(i));
      v.attrs[i] |= kAttrControl;
    }
  }
  for (size_t i = 0; i < n; ++i) {  // gpt-oss: always rendered
    if (IsOneOf(v.tokens[i], {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      v.attrs[i] = kAttrUserDefined;
    }
  }
  for (int32_t id : {v.eos, v.eot, v.eom}) {
    if (id >= 0) eog.insert(id);
  }
  {
    // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>"/"<|call|>" exist.
    bool has_return = false, has_call = false, has_flush = false;
    int32_t end_id = -1;
    for (int32_t id : eog) {
      const std::string& t = v.tokens[id];
      if (t == "<|return|>") has_return = true;
      else if (t == "<|call|>" || t == "<|calls|>") has_call = true;
      else if (t == "<|flush|>") has_flush = true;
      else if (t == "<|end|>") end_id = id;
    }
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
      eog.erase(end_id);
      v.attrs[end_id] = kAttrUserDefined;
    }
    // gemma4 / paddleocr: "</s>" is not EOG next to "<|tool_response>".
    bool has_tool_response = false;
    int32_t s_id = -1;
    for (int32_t id : eog) {
      if (v.tokens[id] == "<|tool_response>") has_tool_response = true;
      else if (v.tokens[id] == "</s>") s_id = id;
    }
    if (has_tool_response && s_id >= 0) {
      eog.erase(s_id);
      v.attrs[s_id] = kAttrNormal;
    }
  }
  v.eog.assign(eog.begin(), eog.end());

  for (size_t i = 0; i < n; ++i) {
    if (v.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v.special_tokens.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });

  v.pieces.resize(n);
  for (size_t i = 0; i < n; ++i) v.pieces[i] = MakePiece(v, static_cast<int32_t>(i));

  // Per-model strip attributes (llama.cpp sets these by name; GGUF has no field for them).
  {
    DSPARK_ASSIGN_OR_RETURN(std::string name, file.GetStringOr("general.name", ""));
    DSPARK_ASSIGN_OR_RETURN(std::string arch, file.GetStringOr("general.architecture", ""));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    auto contains = [](const std::string& s, std::initializer_list<const char*> subs) {
      for (const char* x : subs) {
        if (s.find(x) != std::string::npos) return true;
      }
      return false;
    };
    auto set_attr = [&](const char* text, uint32_t attr, bool on) {
      const int32_t id = v.Find(text);
      if (id < 0) return;
      v.attrs[id] = on ? (v.attrs[id] | attr) : (v.attrs[id] & ~attr);
    };
    if (contains(v.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
      set_attr("<mask>", kAttrLstrip, true);
    } else if (contains(name, {"phi-3", "phi3"})) {
      for (int32_t id : v.special_tokens) v.attrs[id] |= kAttrRstrip;
      set_attr("</s>", kAttrRstrip, true);
      for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
    } else if (contains(name, {"modern-bert"})) {
      set_attr("[MASK]", kAttrLstrip, true);
    }
  }
  return v;
}

}  // namespace dspark::tok
