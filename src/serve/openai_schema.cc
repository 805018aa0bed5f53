#include "serve/openai_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "grammar/json_schema.h"

namespace dspark::serve {

using ojson = nlohmann::ordered_json;

nlohmann::json ApiError::ToJson() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", e}};
}

ApiError BadRequest(std::string param, std::string code, std::string message) {
  ApiError e;
  e.http_status = 400;
  e.param = std::move(param);
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

namespace {
ApiError ServerError(std::string code, std::string message) {
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}
}  // namespace

uint64_t FreshSeed() {
  static std::mutex mu;
  static std::mt19937_64 gen(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return gen() & ((uint64_t{1} << 53) - 1);
}

uint64_t ChoiceSeed(uint64_t seed, int i) {
  if (i == 0) return seed;
  uint64_t x = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (x ^ (x >> 31)) & ((uint64_t{1} << 53) - 1);
}

ApiError ShuttingDown(std::string message) { return ServerError("shutting_down", std::move(message)); }
ApiError OutOfMemory(std::string message) { return ServerError("out_of_memory", std::move(message)); }

namespace {

const char* TypeName(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "boolean";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return "integer";
    case ojson::value_t::number_float: return "number";
    case ojson::value_t::string: return "string";
    case ojson::value_t::array: return "array";
    case ojson::value_t::object: return "object";
    default: return "value";
  }
}

ApiError WrongType(const std::string& field, const char* expected, const ojson& got) {
  return BadRequest(field, "invalid_type",
                    fmt::format("'{}' must be {}, got {}", field, expected, TypeName(got)));
}

ApiError OutOfRangeError(const std::string& field, const std::string& what) {
  return BadRequest(field, "out_of_range", fmt::format("'{}' {}", field, what));
}

// Field readers: absent or null leaves *out unchanged.
std::optional<ApiError> ReadNumber(const ojson& body, const char* field, double* out, bool* present = nullptr) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return WrongType(field, "a number", *it);
  *out = it->get<double>();
  if (!std::isfinite(*out)) return OutOfRangeError(field, "must be finite");
  if (present) *present = true;
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const ojson& body, const char* field, int64_t* out, bool* present = nullptr) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    *out = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                           : static_cast<int64_t>(u);
  } else if (it->is_number_integer()) {
    *out = it->get<int64_t>();
  } else if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>() &&
             std::fabs(it->get<double>()) < 9e15) {
    *out = static_cast<int64_t>(it->get<double>());  // 16.0 is an integer in JSON Schema
  } else {
    return WrongType(field, "an integer", *it);
  }
  if (present) *present = true;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const ojson& body, const char* field, bool* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return WrongType(field, "a boolean", *it);
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadStop(const ojson& body, std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  // The engine holds back output text as long as the longest stop string and matches every stop
  // against it per token, so both the count and the length are bounded.
  const auto add = [out](const std::string& field, const std::string& s) -> std::optional<ApiError> {
    if (s.size() > kMaxStopBytes)
      return OutOfRangeError(field, fmt::format("is {} bytes long; at most {} are allowed", s.size(), kMaxStopBytes));
    if (!s.empty()) out->push_back(s);
    return std::nullopt;
  };
  if (it->is_string()) return add("stop", it->get<std::string>());
  if (!it->is_array()) return WrongType("stop", "a string or an array of strings", *it);
  if (it->size() > kMaxStops)
    return OutOfRangeError("stop", fmt::format("has {} strings; at most {} are allowed", it->size(), kMaxStops));
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& s = (*it)[i];
    if (!s.is_string()) return WrongType(fmt::format("stop[{}]", i), "a string", s);
    if (auto e = add(fmt::format("stop[{}]", i), s.get<std::string>())) return e;
  }
  return std::nullopt;
}

// prompt: "text" | ["text"] | [ids...] | [[ids...]].
std::optional<ApiError> ReadPrompt(const ojson& body, ApiRequest* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadRequest("prompt", "missing_field", "'prompt' is required");
  const ojson* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out->prompt = p->get<std::string>();
    return std::nullopt;
  }
  if (p->is_array()) {
    if (p->empty()) return BadRequest("prompt", "invalid_value", "'prompt' is an empty array");
    if ((*p)[0].is_string() || (*p)[0].is_array())
      return BadRequest("prompt", "unsupported", "'prompt' holds several prompts; send one prompt per request (n = 1)");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < p->size(); ++i) {
      const ojson& v = (*p)[i];
      if (!v.is_number_integer() && !v.is_number_unsigned())
        return WrongType(fmt::format("prompt[{}]", i), "a token id (integer)", v);
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        return OutOfRangeError(fmt::format("prompt[{}]", i), fmt::format("is not a token id: {}", id));
      ids.push_back(static_cast<int32_t>(id));
    }
    out->prompt_ids = std::move(ids);
    return std::nullopt;
  }
  return WrongType("prompt", "a string, an array of token ids or an array of one string", *p);
}

// content: "text" | [{"type": "text", "text": "..."}] | null.
std::optional<ApiError> ReadContent(const ojson& v, const std::string& field, std::string* out) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(field, "a string or an array of content parts", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const ojson& part = v[i];
    const std::string pf = fmt::format("{}[{}]", field, i);
    if (!part.is_object()) return WrongType(pf, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text")
      return BadRequest(pf + ".type", "unsupported", fmt::format("'{}.type' must be \"text\" (only text parts are supported)", pf));
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return BadRequest(pf + ".text", "invalid_type", fmt::format("'{}.text' must be a string", pf));
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

// tools / tool_choice (chat): ValidateTools' and ValidateToolChoice's messages begin with the
// offending path ("tools[1].function.name: ..."), which becomes the error's param.
std::optional<ApiError> ReadTools(const ojson& body, ApiRequest* out) {
  const auto error = [](const std::string& message, const char* field) {
    const size_t colon = message.find(": ");
    return BadRequest(colon == std::string::npos ? field : message.substr(0, colon), "invalid_value", message);
  };
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return WrongType("tools", "an array", *it);
    if (auto e = ValidateTools(nlohmann::json(*it))) return error(*e, "tools");
    out->tools = *it;
    if (!it->empty()) out->template_vars["tools"] = *it;
  }
  if (auto e = ReadBool(body, "parallel_tool_calls", &out->parallel_tool_calls)) return e;
  nlohmann::json choice = nullptr;
  if (auto it = body.find("tool_choice"); it != body.end()) choice = *it;
  if (auto e = ValidateToolChoice(choice, nlohmann::json(out->tools), &out->tool_choice)) return error(*e, "tool_choice");
  return std::nullopt;
}

std::optional<ApiError> ReadMessages(const ojson& body, ApiRequest* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return BadRequest("messages", "missing_field", "'messages' is required");
  if (!it->is_array()) return WrongType("messages", "an array of messages", *it);
  if (it->empty()) return BadRequest("messages", "invalid_value", "'messages' must hold at least one message");
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& m = (*it)[i];
    const std::string mf = fmt::format("messages[{}]", i);
    if (!m.is_object()) return WrongType(mf, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return BadRequest(mf + ".role", "invalid_type", fmt::format("'{}.role' must be a string", mf));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      return BadRequest(mf + ".role", "invalid_value",
                        fmt::format("'{}.role' is '{}'; expected system, developer, user, assistant or tool", mf, r));
    ChatMessage msg;
    msg.role = r;
    auto content = m.find("content");
    if (content == m.end()) {
      if (r != "assistant") return BadRequest(mf + ".content", "missing_field", fmt::format("'{}.content' is required", mf));
    } else if (auto e = ReadContent(*content, mf + ".content", &msg.content)) {
      return e;
    }
    for (auto kv = m.begin(); kv != m.end(); ++kv)
      if (kv.key() != "role" && kv.key() != "content") msg.extra[kv.key()] = kv.value();
    out->messages.push_back(std::move(msg));
  }
  if (auto e = ReadTools(body, out)) return e;
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
    for (auto kv = kw->begin(); kv != kw->end(); ++kv) out->template_vars[kv.key()] = kv.value();
  }
  return std::nullopt;
}

ApiError UnknownField(const std::string& field, Endpoint endpoint) {
  return BadRequest(field, "unknown_parameter",
                    fmt::format("unrecognised request field '{}' for {} (the accepted fields are listed in the "
                                "server's README, src/serve/README.md)",
                                field, endpoint == Endpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions"));
}

ApiError Unsupported(const std::string& field, const std::string& what) {
  return BadRequest(field, "unsupported", fmt::format("'{}' is not supported by this server: {}", field, what));
}

// Fields of OpenAI features the server does not implement are accepted only at their neutral
// value (what the client gets anyway); anything else is a 400, never silently ignored.
std::optional<ApiError> CheckNeutral(const std::string& key, const ojson& v) {
  if (v.is_null()) return std::nullopt;
  if (key == "echo") {
    if (!v.is_boolean()) return WrongType(key, "a boolean", v);
    if (v.get<bool>()) return Unsupported(key, "the prompt is not echoed (only false is accepted)");
    return std::nullopt;
  }
  if (key == "suffix") {
    if (!v.is_string()) return WrongType(key, "a string", v);
    if (!v.get<std::string>().empty()) return Unsupported(key, "insertion (fill in the middle) is not implemented");
    return std::nullopt;
  }
  return std::nullopt;
}

// Harmless fields: accepted (type-checked) and ignored; they do not change the output.
std::optional<ApiError> CheckHarmless(const std::string& key, const ojson& v) {
  if (v.is_null()) return std::nullopt;
  if ((key == "user" || key == "service_tier") && !v.is_string()) return WrongType(key, "a string", v);
  if (key == "metadata" && !v.is_object()) return WrongType(key, "an object", v);
  if (key == "store" && !v.is_boolean()) return WrongType(key, "a boolean", v);
  return std::nullopt;
}

enum class FieldKind { kRead, kNeutral, kHarmless };

// Every field an endpoint accepts. kRead: ParseRequest reads it. kNeutral: an unimplemented
// feature, accepted at its neutral value only. kHarmless: accepted and ignored.
std::optional<FieldKind> FieldKindOf(const std::string& key, Endpoint endpoint) {
  static const std::vector<std::pair<const char*, FieldKind>> kCommon = {
      {"model", FieldKind::kRead},          {"max_tokens", FieldKind::kRead},
      {"max_completion_tokens", FieldKind::kRead}, {"temperature", FieldKind::kRead},
      {"top_p", FieldKind::kRead},          {"min_p", FieldKind::kRead},
      {"top_k", FieldKind::kRead},          {"seed", FieldKind::kRead},
      {"stop", FieldKind::kRead},           {"stream", FieldKind::kRead},
      {"stream_options", FieldKind::kRead}, {"n", FieldKind::kRead},
      {"sampler_order", FieldKind::kRead},  {"dspark", FieldKind::kRead},
      {"frequency_penalty", FieldKind::kRead}, {"presence_penalty", FieldKind::kRead},
      {"repeat_penalty", FieldKind::kRead}, {"repeat_last_n", FieldKind::kRead},
      {"logit_bias", FieldKind::kRead},     {"logprobs", FieldKind::kRead},
      {"response_format", FieldKind::kRead}, {"grammar", FieldKind::kRead},
      {"json_schema", FieldKind::kRead},
      {"user", FieldKind::kHarmless},       {"metadata", FieldKind::kHarmless},
      {"store", FieldKind::kHarmless},      {"service_tier", FieldKind::kHarmless},
  };
  static const std::vector<std::pair<const char*, FieldKind>> kCompletions = {
      {"prompt", FieldKind::kRead}, {"best_of", FieldKind::kRead}, {"echo", FieldKind::kNeutral},
      {"suffix", FieldKind::kNeutral},
  };
  static const std::vector<std::pair<const char*, FieldKind>> kChat = {
      {"messages", FieldKind::kRead},          {"chat_template_kwargs", FieldKind::kRead},
      {"top_logprobs", FieldKind::kRead},      {"tools", FieldKind::kRead},
      {"tool_choice", FieldKind::kRead},    
      {"parallel_tool_calls", FieldKind::kRead},
  };
  for (const auto& [name, kind] : kCommon)
    if (key == name) return kind;
  for (const auto& [name, kind] : endpoint == Endpoint::kChatCompletions ? kChat : kCompletions)
    if (key == name) return kind;
  return std::nullopt;
}

std::optional<ApiError> CheckFields(const ojson& body, Endpoint endpoint) {
  for (auto kv = body.begin(); kv != body.end(); ++kv) {
    const std::optional<FieldKind> kind = FieldKindOf(kv.key(), endpoint);
    if (!kind) return UnknownField(kv.key(), endpoint);
    if (*kind == FieldKind::kNeutral) {
      if (auto e = CheckNeutral(kv.key(), kv.value())) return e;
    } else if (*kind == FieldKind::kHarmless) {
      if (auto e = CheckHarmless(kv.key(), kv.value())) return e;
    }
  }
  // The objects ParseRequest reads: their unknown keys are errors too.
  auto check_keys = [&](const char* object, std::initializer_list<const char*> known) -> std::optional<ApiError> {
    auto it = body.find(object);
    if (it == body.end() || !it->is_object()) return std::nullopt;  // type errors come from the reader
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      bool ok = false;
      for (const char* k : known) ok = ok || kv.key() == k;
      if (!ok) return UnknownField(fmt::format("{}.{}", object, kv.key()), endpoint);
    }
    return std::nullopt;
  };
  if (auto e = check_keys("dspark", {"speculate", "ignore_eos", "return_tokens"})) return e;
  if (auto e = check_keys("stream_options", {"include_usage"})) return e;
  return std::nullopt;
}

// OpenAI's frequency_penalty / presence_penalty ([-2, 2]), llama.cpp's repeat_penalty (> 0) and
// repeat_last_n (>= -1), and logit_bias: {"token id": bias in [-100, 100]} (ids outside the
// vocabulary are the engine's 400).
std::optional<ApiError> ReadPenalties(const ojson& body, SamplingParams* s) {
  for (auto [field, out] : {std::pair{"frequency_penalty", &s->frequency_penalty},
                            std::pair{"presence_penalty", &s->presence_penalty}}) {
    double v = 0;
    if (auto e = ReadNumber(body, field, &v)) return e;
    if (!(v >= -2 && v <= 2)) return OutOfRangeError(field, fmt::format("must be in [-2, 2], got {}", v));
    *out = static_cast<float>(v);
  }
  double repeat = 1;
  if (auto e = ReadNumber(body, "repeat_penalty", &repeat)) return e;
  if (!(repeat > 0)) return OutOfRangeError("repeat_penalty", fmt::format("must be > 0 (1 = off), got {}", repeat));
  s->repeat_penalty = static_cast<float>(repeat);
  int64_t last_n = s->repeat_last_n;
  if (auto e = ReadInt(body, "repeat_last_n", &last_n)) return e;
  if (last_n < -1 || last_n > std::numeric_limits<int>::max())
    return OutOfRangeError("repeat_last_n", fmt::format("must be >= -1 (-1 = the whole context), got {}", last_n));
  s->repeat_last_n = static_cast<int>(last_n);
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return WrongType("logit_bias", "an object of token id to bias", *it);
  // Every entry is applied to every sampled row (verification blocks included).
  if (it->size() > kMaxLogitBias)
    return OutOfRangeError("logit_bias", fmt::format("has {} entries; at most {} are allowed", it->size(), kMaxLogitBias));
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    const std::string param = fmt::format("logit_bias.{}", kv.key());
    int64_t id = -1;
    const std::string& k = kv.key();
    const bool digits = !k.empty() && k.size() <= 10 && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(k);
    if (!digits || id > std::numeric_limits<int32_t>::max())
      return BadRequest(param, "invalid_value", fmt::format("logit_bias keys must be token ids, got '{}'", k));
    if (!kv.value().is_number()) return WrongType(param, "a number", kv.value());
    const double bias = kv.value().get<double>();
    if (!(bias >= -100 && bias <= 100)) return OutOfRangeError(param, fmt::format("must be in [-100, 100], got {}", bias));
    s->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return std::nullopt;
}

// Completions: logprobs is an integer in [0, 20] (the alternatives per token). Chat: logprobs is a
// boolean, top_logprobs in [0, 20] and only with logprobs true.
std::optional<ApiError> ReadLogprobs(const ojson& body, Endpoint endpoint, int* out) {
  constexpr int64_t kMaxTop = 20;
  if (endpoint == Endpoint::kCompletions) {
    int64_t n = -1;
    bool present = false;
    if (auto e = ReadInt(body, "logprobs", &n, &present)) return e;
    if (!present) return std::nullopt;
    if (n < 0 || n > kMaxTop) return OutOfRangeError("logprobs", fmt::format("must be in [0, {}], got {}", kMaxTop, n));
    *out = static_cast<int>(n);
    return std::nullopt;
  }
  bool on = false;
  if (auto e = ReadBool(body, "logprobs", &on)) return e;
  int64_t top = 0;
  bool top_present = false;
  if (auto e = ReadInt(body, "top_logprobs", &top, &top_present)) return e;
  if (top_present && top != 0 && !on)
    return BadRequest("top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
  if (top < 0 || top > kMaxTop) return OutOfRangeError("top_logprobs", fmt::format("must be in [0, {}], got {}", kMaxTop, top));
  if (on) *out = static_cast<int>(top);
  return std::nullopt;
}

// Structured output: OpenAI's response_format ({"type": "text" | "json_object" | "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}) and llama.cpp's `grammar` (GBNF)
// and `json_schema` (a schema) fields, one of them at most. The result is GBNF text; schemas the
// converter cannot honour are a 400 naming the keyword's path.
std::optional<ApiError> ReadConstraint(const ojson& body, ApiRequest* out) {
  std::vector<std::string> given;
  for (const char* field : {"response_format", "grammar", "json_schema"})
    if (auto it = body.find(field); it != body.end() && !it->is_null()) given.push_back(field);
  if (given.size() > 1)
    return BadRequest(given[1], "invalid_value",
                      fmt::format("'{}' and '{}' both constrain the output; send one of them", given[0], given[1]));
  if (given.empty()) return std::nullopt;
  const auto schema_error = [](const std::string& param, const Status& st) {
    const char* code = st.code() == StatusCode::kUnimplemented       ? "unsupported"
                       : st.code() == StatusCode::kResourceExhausted ? "too_large"  // JsonSchemaLimits
                                                                     : "invalid_value";
    return BadRequest(param, code, fmt::format("'{}': {}", param, st.message()));
  };
  const ojson& v = body[given[0]];
  if (given[0] == "grammar") {
    if (!v.is_string()) return WrongType("grammar", "a string (GBNF)", v);
    if (v.get_ref<const std::string&>().size() > kMaxGrammarBytes)
      return BadRequest("grammar", "too_large",
                        fmt::format("'grammar' is {} bytes long; at most {} are allowed",
                                    v.get_ref<const std::string&>().size(), kMaxGrammarBytes));
    out->grammar = v.get<std::string>();
    out->grammar_param = "grammar";
    return std::nullopt;
  }
  if (given[0] == "json_schema") {
    if (!v.is_object()) return WrongType("json_schema", "an object (a JSON schema)", v);
    auto g = grammar::JsonSchemaToGbnf(v);
    if (!g.ok()) return schema_error("json_schema", g.status());
    out->grammar = std::move(*g);
    out->grammar_param = "json_schema";
    return std::nullopt;
  }
  if (!v.is_object()) return WrongType("response_format", "an object", v);
  for (auto kv = v.begin(); kv != v.end(); ++kv)
    if (kv.key() != "type" && kv.key() != "json_schema")
      return UnknownField(fmt::format("response_format.{}", kv.key()), out->endpoint);
  auto type = v.find("type");
  if (type == v.end() || !type->is_string())
    return BadRequest("response_format.type", "invalid_type", "'response_format.type' must be a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out->grammar = grammar::JsonObjectGbnf();
    out->grammar_param = "response_format";
    return std::nullopt;
  }
  if (t != "json_schema")
    return BadRequest("response_format.type", "invalid_value",
                      fmt::format("'response_format.type' is '{}'; expected text, json_object or json_schema", t));
  auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object())
    return BadRequest("response_format.json_schema", "missing_field",
                      "'response_format.json_schema' must be an object with 'name' and 'schema'");
  for (auto kv = js->begin(); kv != js->end(); ++kv) {
    const std::string& k = kv.key();
    if (k != "name" && k != "schema" && k != "strict" && k != "description")
      return UnknownField(fmt::format("response_format.json_schema.{}", k), out->endpoint);
  }
  auto name = js->find("name");
  if (name == js->end() || !name->is_string() || name->get<std::string>().empty())
    return BadRequest("response_format.json_schema.name", "missing_field",
                      "'response_format.json_schema.name' must be a non-empty string");
  if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() && !strict->is_boolean())
    return WrongType("response_format.json_schema.strict", "a boolean", *strict);
  auto schema = js->find("schema");
  // OpenAI: without a schema the model may answer any JSON object.
  if (schema == js->end() || schema->is_null()) {
    out->grammar = grammar::JsonObjectGbnf();
  } else {
    if (!schema->is_object()) return WrongType("response_format.json_schema.schema", "an object", *schema);
    auto g = grammar::JsonSchemaToGbnf(*schema);
    if (!g.ok()) return schema_error("response_format.json_schema.schema", g.status());
    out->grammar = std::move(*g);
  }
  out->grammar_param = "response_format";
  return std::nullopt;
}

// The deepest nesting of arrays and objects in `text`, counted without parsing (brackets inside
// strings do not count). Stops counting past `limit`.
int JsonDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

ojson ParseBody(std::string_view body_text, std::optional<ApiError>* error) {
  ojson body;
  // Copying, printing and converting a JSON value recurse once per level (the chat template, the
  // schema converter, nlohmann's dump), so a body of 100k nested arrays would overflow the stack.
  if (const int depth = JsonDepth(body_text, kMaxJsonDepth); depth > kMaxJsonDepth) {
    *error = BadRequest("body", "too_deep",
                        fmt::format("request body nests arrays and objects deeper than {} levels", kMaxJsonDepth));
    return body;
  }
  try {
    body = ojson::parse(body_text.begin(), body_text.end());
  } catch (const ojson::exception& e) {
    *error = BadRequest("", "invalid_json", fmt::format("request body is not valid JSON: {}", e.what()));
    return body;
  }
  if (!body.is_object()) *error = WrongType("body", "a JSON object", body);
  return body;
}

}  // namespace

std::optional<ApiError> ParseRequest(std::string_view body_text, Endpoint endpoint, ApiRequest* out) {
  *out = ApiRequest{};
  out->endpoint = endpoint;
  out->sampling.temperature = 1.0f;
  std::optional<ApiError> error;
  const ojson body = ParseBody(body_text, &error);
  if (error) return error;
  if (auto e = CheckFields(body, endpoint)) return e;

  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return WrongType("model", "a string", *it);
    out->model = it->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = ReadPrompt(body, out)) return e;
  } else {
    if (auto e = ReadMessages(body, out)) return e;
  }

  int64_t n = 1;
  if (auto e = ReadInt(body, "n", &n)) return e;
  if (n < 1 || n > kMaxChoices)
    return OutOfRangeError("n", fmt::format("must be in [1, {}] (choices per request), got {}", kMaxChoices, n));
  out->n = static_cast<int>(n);
  int64_t best_of = 1;
  if (auto e = ReadInt(body, "best_of", &best_of)) return e;
  if (best_of != 1) return OutOfRangeError("best_of", fmt::format("must be 1, got {}", best_of));

  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    int64_t max_tokens = 0;
    bool present = false;
    if (auto e = ReadInt(body, field, &max_tokens, &present)) return e;
    if (!present) continue;
    if (max_tokens < 1) return OutOfRangeError(field, fmt::format("must be >= 1, got {}", max_tokens));
    out->max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, std::numeric_limits<int>::max()));
  }

  double temperature = out->sampling.temperature;
  if (auto e = ReadNumber(body, "temperature", &temperature)) return e;
  if (temperature < 0) return OutOfRangeError("temperature", fmt::format("must be >= 0, got {}", temperature));
  out->sampling.temperature = static_cast<float>(temperature);

  double top_p = 1.0;
  if (auto e = ReadNumber(body, "top_p", &top_p)) return e;
  if (!(top_p > 0 && top_p <= 1)) return OutOfRangeError("top_p", fmt::format("must be in (0, 1], got {}", top_p));
  out->sampling.top_p = static_cast<float>(top_p);

  double min_p = 0.0;
  if (auto e = ReadNumber(body, "min_p", &min_p)) return e;
  if (!(min_p >= 0 && min_p < 1)) return OutOfRangeError("min_p", fmt::format("must be in [0, 1), got {}", min_p));
  out->sampling.min_p = static_cast<float>(min_p);

  int64_t top_k = 0;
  if (auto e = ReadInt(body, "top_k", &top_k)) return e;
  if (top_k < 0) return OutOfRangeError("top_k", fmt::format("must be >= 0 (0 = off), got {}", top_k));
  out->sampling.top_k = static_cast<int>(std::min<int64_t>(top_k, std::numeric_limits<int>::max()));

  int64_t seed = 0;
  if (auto e = ReadInt(body, "seed", &seed, &out->seed_given)) return e;
  out->sampling.seed = static_cast<uint64_t>(seed);
  out->sampling.keyed = out->seed_given;

  if (auto e = ReadPenalties(body, &out->sampling)) return e;
  if (auto e = ReadLogprobs(body, endpoint, &out->logprobs)) return e;
  if (auto e = ReadConstraint(body, out)) return e;

  // dspark's extension: where temperature sits in the sampler chain (sampling/sampling.h).
  if (auto it = body.find("sampler_order"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return WrongType("sampler_order", "a string", *it);
    auto order = ParseSamplerOrder(it->get<std::string>());
    if (!order.ok()) return OutOfRangeError("sampler_order", "must be \"temp-first\" or \"temp-last\"");
    out->sampling.order = *order;
  }

  if (auto e = ReadStop(body, &out->stop)) return e;
  if (auto e = ReadBool(body, "stream", &out->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return WrongType("stream_options", "an object", *it);
    if (auto e = ReadBool(*it, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (auto it = body.find("dspark"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return WrongType("dspark", "an object", *it);
    if (auto e = ReadBool(*it, "speculate", &out->speculate)) {
      e->param = "dspark.speculate";
      return e;
    }
    if (auto e = ReadBool(*it, "ignore_eos", &out->ignore_eos)) {
      e->param = "dspark.ignore_eos";
      return e;
    }
    if (auto e = ReadBool(*it, "return_tokens", &out->return_tokens)) {
      e->param = "dspark.return_tokens";
      return e;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseTokenizeRequest(std::string_view body_text, TokenizeRequest* out) {
  *out = TokenizeRequest{};
  std::optional<ApiError> error;
  const ojson body = ParseBody(body_text, &error);
  if (error) return error;
  for (auto kv = body.begin(); kv != body.end(); ++kv) {
    const std::string& k = kv.key();
    if (k != "content" && k != "add_special" && k != "parse_special" && k != "with_pieces" && k != "model")
      return BadRequest(k, "unknown_parameter",
                        fmt::format("unrecognised request field '{}' for /tokenize (accepted: content, add_special, "
                                    "parse_special, with_pieces, model)", k));
  }
  auto it = body.find("content");
  if (it == body.end() || it->is_null()) return BadRequest("content", "missing_field", "'content' is required");
  if (!it->is_string()) return WrongType("content", "a string", *it);
  out->content = it->get<std::string>();
  if (auto m = body.find("model"); m != body.end() && !m->is_null() && !m->is_string())
    return WrongType("model", "a string", *m);
  if (auto e = ReadBool(body, "add_special", &out->add_special)) return e;
  if (auto e = ReadBool(body, "parse_special", &out->parse_special)) return e;
  if (auto e = ReadBool(body, "with_pieces", &out->with_pieces)) return e;
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(std::string_view body_text, int32_t n_vocab,
                                               std::vector<int32_t>* out) {
  out->clear();
  std::optional<ApiError> error;
  const ojson body = ParseBody(body_text, &error);
  if (error) return error;
  for (auto kv = body.begin(); kv != body.end(); ++kv)
    if (kv.key() != "tokens" && kv.key() != "model")
      return BadRequest(kv.key(), "unknown_parameter",
                        fmt::format("unrecognised request field '{}' for /detokenize (accepted: tokens, model)", kv.key()));
  if (auto m = body.find("model"); m != body.end() && !m->is_null() && !m->is_string())
    return WrongType("model", "a string", *m);
  auto it = body.find("tokens");
  if (it == body.end() || it->is_null()) return BadRequest("tokens", "missing_field", "'tokens' is required");
  if (!it->is_array()) return WrongType("tokens", "an array of token ids", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& v = (*it)[i];
    const std::string field = fmt::format("tokens[{}]", i);
    if (!v.is_number_integer() && !v.is_number_unsigned()) return WrongType(field, "a token id (integer)", v);
    const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    const uint64_t id = negative ? 0 : v.get<uint64_t>();
    if (negative || id >= static_cast<uint64_t>(n_vocab))
      return OutOfRangeError(field, fmt::format("is {}, outside the vocabulary [0, {})", v.dump(), n_vocab));
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;  // overlong, range, surrogate
    i += len;
  }
  return true;
}

nlohmann::json PieceJson(const std::string& piece) {
  if (IsValidUtf8(piece)) return piece;
  nlohmann::json bytes = nlohmann::json::array();
  for (const char c : piece) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

}  // namespace dspark::serve
