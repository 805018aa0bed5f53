// Response, stream-chunk and log-probability JSON for /v1/completions and /v1/chat/completions
// (openai_schema.h); request parsing is in openai_schema.cc.
#include "serve/openai_schema.h"

namespace dspark::serve {

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

nlohmann::json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
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
                        const SpecStats& stats, const std::vector<int32_t>* tokens, nlohmann::json logprobs) {
  nlohmann::json j = Envelope(h, false);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", std::move(logprobs)}};
  if (h.endpoint == Endpoint::kChatCompletions)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  if (tokens != nullptr) choice["tokens"] = *tokens;
  j["choices"] = nlohmann::json::array({choice});
  j["usage"] = Usage(stats.prompt_tokens, stats.generated_tokens, stats.prompt_cached_tokens);
  j["seed"] = h.seed;
  j["dspark"] = SpecJson(stats);
  return j;
}

nlohmann::json TokenChunk(const ResponseHeader& h, const std::string& text, const char* source, bool first,
                          int32_t token, nlohmann::json logprobs) {
  nlohmann::json j = Envelope(h, true);
  nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", std::move(logprobs)}};
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
  j["usage"] = Usage(stats.prompt_tokens, stats.generated_tokens, stats.prompt_cached_tokens);
  j["seed"] = h.seed;
  j["dspark"] = SpecJson(stats);
  return j;
}

nlohmann::json LogprobsWriter::Write(std::span<const TokenLogprob> tokens) {
  const auto bytes = [](const std::string& piece) {
    nlohmann::json b = nlohmann::json::array();
    for (unsigned char c : piece) b.push_back(static_cast<int>(c));
    return b;
  };
  if (endpoint_ == Endpoint::kChatCompletions) {
    nlohmann::json content = nlohmann::json::array();
    for (const TokenLogprob& t : tokens) {
      const std::string piece = piece_(t.id);
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string p = piece_(id);
        top.push_back({{"token", p}, {"logprob", lp}, {"bytes", bytes(p)}});
      }
      content.push_back({{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  nlohmann::json j = {{"tokens", nlohmann::json::array()},
                      {"token_logprobs", nlohmann::json::array()},
                      {"top_logprobs", nlohmann::json::array()},
                      {"text_offset", nlohmann::json::array()}};
  for (const TokenLogprob& t : tokens) {
    const std::string piece = piece_(t.id);
    j["tokens"].push_back(piece);
    j["token_logprobs"].push_back(t.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [id, lp] : t.top) top[piece_(id)] = lp;
    if (t.top.empty()) top[piece] = t.logprob;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(offset_);
    offset_ += static_cast<int64_t>(piece.size());
  }
  return j;
}

std::string SseEvent(const nlohmann::json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace dspark::serve
