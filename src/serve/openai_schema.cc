#include "serve/openai_schema.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

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
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) out->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return WrongType("stop", "a string or an array of strings", *it);
  constexpr size_t kMaxStops = 16;
  if (it->size() > kMaxStops)
    return OutOfRangeError("stop", fmt::format("has {} strings; at most {} are allowed", it->size(), kMaxStops));
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& s = (*it)[i];
    if (!s.is_string()) return WrongType(fmt::format("stop[{}]", i), "a string", s);
    if (!s.get<std::string>().empty()) out->push_back(s.get<std::string>());
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
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    out->template_vars["tools"] = *tools;
  }
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
    for (auto kv = kw->begin(); kv != kw->end(); ++kv) out->template_vars[kv.key()] = kv.value();
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(std::string_view body_text, Endpoint endpoint, ApiRequest* out) {
  *out = ApiRequest{};
  out->endpoint = endpoint;
  out->sampling.temperature = 1.0f;
  ojson body;
  try {
    body = ojson::parse(body_text.begin(), body_text.end());
  } catch (const ojson::exception& e) {
    return BadRequest("", "invalid_json", fmt::format("request body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) return WrongType("body", "a JSON object", body);

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
  if (n != 1) return OutOfRangeError("n", fmt::format("must be 1 (one choice per request), got {}", n));
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
  if (auto e = ReadInt(body, "seed", &seed)) return e;
  out->sampling.seed = static_cast<uint64_t>(seed);

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

std::string FinishReason(const std::string& stop_reason) {
  if (stop_reason == "eos" || stop_reason == "stop") return "stop";
  if (stop_reason == "length" || stop_reason == "context") return "length";
  return stop_reason;
}

nlohmann::json SpecJson(const SpecStats& s) {
  return {{"drafts", s.num_drafts},
          {"drafted", s.num_draft_tokens},
          {"accepted", s.num_accepted_tokens},
          {"acceptance_rate", s.acceptance_rate()},
          {"tau", s.tau()},
          {"acceptance_per_position", s.acceptance_per_position()},
          {"target_calls", s.num_target_calls},
          {"fallbacks", s.num_fallbacks},
          {"prompt_ms", s.prompt_ms},
          {"draft_ms", s.draft_ms},
          {"verify_ms", s.verify_ms},
          {"decode_ms", s.decode_ms},
          {"tokens_per_second", s.tokens_per_second()}};
}

nlohmann::json Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
nlohmann::json Envelope(const ResponseHeader& h, bool chunk) {
  const bool chat = h.endpoint == Endpoint::kChatCompletions;
  return {{"id", h.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", h.created},
          {"model", h.model}};
}
}  // namespace

nlohmann::json Response(const ResponseHeader& h, const std::string& text, const std::string& finish_reason,
                        const SpecStats& stats, const std::vector<int32_t>* tokens) {
  nlohmann::json j = Envelope(h, false);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (h.endpoint == Endpoint::kChatCompletions)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  if (tokens != nullptr) choice["tokens"] = *tokens;
  j["choices"] = nlohmann::json::array({choice});
  j["usage"] = Usage(stats.prompt_tokens, stats.generated_tokens);
  j["dspark"] = SpecJson(stats);
  return j;
}

nlohmann::json TokenChunk(const ResponseHeader& h, const std::string& text, const char* source, bool first,
                          int32_t token) {
  nlohmann::json j = Envelope(h, true);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
  if (h.endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = {{"content", text}};
    if (first) choice["delta"]["role"] = "assistant";
  } else {
    choice["text"] = text;
  }
  if (token >= 0) choice["tokens"] = nlohmann::json::array({token});
  j["choices"] = nlohmann::json::array({choice});
  j["dspark_source"] = source;
  return j;
}

nlohmann::json FinalChunk(const ResponseHeader& h, const std::string& finish_reason, const SpecStats& stats) {
  nlohmann::json j = Envelope(h, true);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (h.endpoint == Endpoint::kChatCompletions)
    choice["delta"] = nlohmann::json::object();
  else
    choice["text"] = "";
  j["choices"] = nlohmann::json::array({choice});
  j["usage"] = Usage(stats.prompt_tokens, stats.generated_tokens);
  j["dspark"] = SpecJson(stats);
  return j;
}

std::string SseEvent(const nlohmann::json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace dspark::serve
