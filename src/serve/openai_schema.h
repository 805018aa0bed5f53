// OpenAI request parsing and validation, and response / stream-chunk / error serialisation for
// /v1/completions and /v1/chat/completions. Pure functions on JSON: knows no HTTP and no engine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/sampling.h"
#include "serve/tool_calls.h"
#include "speculative/stats.h"
#include "template/chat_template.h"

namespace dspark::serve {

enum class Endpoint { kCompletions, kChatCompletions };

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("temperature", "messages[1].role"); empty = null
  std::string code;   // machine-readable reason ("invalid_type", "out_of_range"); empty = null

  nlohmann::json ToJson() const;
};

ApiError BadRequest(std::string param, std::string code, std::string message);
// 503s a client may retry (the server sends Retry-After with them): the server is draining
// (`shutting_down`), or it found no memory for the request (`out_of_memory`).
ApiError ShuttingDown(std::string message);

// A seed for a request that sent none. 53 bits: JavaScript clients read JSON numbers as doubles,
// and the seed they get back must be the one that was used.
uint64_t FreshSeed();
// Choice i's seed of a request with `n` > 1: the request's for the first, a seed of its own
// derived from it for the others (53 bits too).
uint64_t ChoiceSeed(uint64_t seed, int i);
ApiError OutOfMemory(std::string message);

// Limits on what one request may ask for, so no field costs unbounded memory or time (each is a
// 400 naming the field). The body as a whole is bounded by ServerOptions::max_body_bytes (413),
// which also bounds the prompt, the messages and the tools.
inline constexpr int kMaxChoices = 8;
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 256;           // each stop string
inline constexpr size_t kMaxLogitBias = 1024;          // logit_bias entries
inline constexpr size_t kMaxGrammarBytes = 64 << 10;   // GBNF text of `grammar`
inline constexpr int kMaxJsonDepth = 128;              // nesting of arrays and objects in the body

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // /v1/completions: the prompt as text, or as token ids when the client sent integers.
  std::string prompt;
  std::optional<std::vector<int32_t>> prompt_ids;
  // /v1/chat/completions.
  std::vector<ChatMessage> messages;
  nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();  // tools, chat_template_kwargs
  // The validated `tools` (empty: none) and `tool_choice`. The tools reach the chat template; the
  // output is parsed for calls unless the choice is "none".
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;  // false: a required call is exactly one
  // Structured output as GBNF (from response_format, `grammar` or `json_schema`; empty: none) and
  // the field it came from, which errors name.
  std::string grammar;
  std::string grammar_param;
  std::optional<int> max_tokens;  // absent: as many as the context allows (capped by the server)
  SamplingParams sampling;        // OpenAI's default temperature is 1
  // Whether the client sent a seed. A seeded request draws keyed (sampling.keyed): its output does
  // not depend on load, batch position, speculation or drafter. Without one the server draws a
  // fresh seed (and returns it) and keeps rejection sampling, whose acceptance is higher.
  bool seed_given = false;
  int n = 1;  // choices, in [1, kMaxChoices]: each its own engine request sharing the prompt's KV
  // Log-probabilities: -1 none, else how many alternatives per token (completions: `logprobs`;
  // chat: `logprobs: true` with `top_logprobs`).
  int logprobs = -1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = true;  // usage in the last stream chunk (always sent; OpenAI needs stream_options)
  // Extensions under "dspark": {"speculate": bool, "ignore_eos": bool} (benchmarks, A/B runs),
  // {"return_tokens": bool}: the generated token ids beside the text (choices[0].tokens, and per
  // stream chunk), for clients that need the exact ids (the training toolkit's data generator:
  // re-tokenising the text would not give back the ids the model produced).
  bool speculate = true;
  bool ignore_eos = false;
  bool return_tokens = false;
};

// Parses and validates a request body. Every failure names the field: malformed JSON, wrong
// types, values out of range (temperature < 0, top_p outside (0, 1], penalties outside [-2, 2],
// n outside [1, 8], logprobs above 20, the kMax* limits above, ...), unknown roles, empty prompt or messages, invalid
// tools or tool_choice, and schemas or grammars the server cannot honour. Fields are checked
// against the endpoint's list first (README.md, "Request fields"): an unknown field is a 400
// `unknown_parameter`; echo and suffix are a 400 `unsupported` unless neutral. Nothing a client
// sends is silently ignored, except the documented harmless fields (user, metadata, store,
// service_tier).
std::optional<ApiError> ParseRequest(std::string_view body, Endpoint endpoint, ApiRequest* out);

// POST /tokenize (llama.cpp server's shape): {"content": string, "add_special": bool = false,
// "parse_special": bool = true, "with_pieces": bool = false, "model": string (ignored)}.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;   // BOS/EOS where the vocabulary asks for them
  bool parse_special = true;  // "<|im_end|>" written as text is the control token
  bool with_pieces = false;   // [{"id", "piece"}] instead of [ids]
};
std::optional<ApiError> ParseTokenizeRequest(std::string_view body, TokenizeRequest* out);

// POST /detokenize: {"tokens": [ids], "model": string (ignored)}; ids outside [0, n_vocab) are a
// 400 naming "tokens[i]".
std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, int32_t n_vocab, std::vector<int32_t>* out);

// A token's piece as llama.cpp's /tokenize reports it: the text when the bytes are valid UTF-8,
// else the list of byte values.
nlohmann::json PieceJson(const std::string& piece);
bool IsValidUtf8(std::string_view s);

// OpenAI's finish_reason for an engine stop reason ("eos"/"stop" -> "stop", "length"/"context"
// -> "length", others passed through).
std::string FinishReason(const std::string& stop_reason);

// The per-response speculative statistics extension object.
nlohmann::json SpecJson(const SpecStats& stats);

struct ResponseHeader {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  uint64_t seed = 0;  // the seed the response was drawn with (returned as "seed")
};

// OpenAI's usage object; prompt_tokens_details.cached_tokens: prompt tokens the prompt cache held.
nlohmann::json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens = 0);

// A complete (non-streamed) response.
// `tokens`: the generated ids, added as choices[0].tokens when not null (dspark.return_tokens).
// `logprobs`: the choice's logprobs object (LogprobsWriter), null when not asked for.
nlohmann::json Response(const ResponseHeader& h, const std::string& text, const std::string& finish_reason,
                        const SpecStats& stats, const std::vector<int32_t>* tokens = nullptr,
                        nlohmann::json logprobs = nullptr);

// One streamed chunk carrying `text`; `source` is "draft" or "target" (the dspark_source
// extension the playground colours by). The first chat chunk also carries the assistant role.
// `token` >= 0 adds "tokens": [token] to the choice (dspark.return_tokens).
nlohmann::json TokenChunk(const ResponseHeader& h, const std::string& text, const char* source, bool first,
                          int32_t token = -1, nlohmann::json logprobs = nullptr);

// Builds a choice's `logprobs` object in the endpoint's shape from the engine's per-token values.
// Completions (OpenAI's legacy shape): {tokens, token_logprobs, top_logprobs: [{piece: logprob}],
// text_offset}, offsets counted in bytes from the start of the completion. Chat: {content:
// [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], refusal: null}. A token's
// text is its piece (`piece(id)`); pieces that are part of a UTF-8 character are not valid text on
// their own and come through with U+FFFD in `token`, their exact bytes in `bytes`.
class LogprobsWriter {
 public:
  using PieceFn = std::function<std::string(int32_t)>;
  LogprobsWriter(Endpoint endpoint, PieceFn piece) : endpoint_(endpoint), piece_(std::move(piece)) {}
  // The object for these tokens; offsets continue from the tokens written before (streaming).
  nlohmann::json Write(std::span<const TokenLogprob> tokens);

 private:
  Endpoint endpoint_;
  PieceFn piece_;
  int64_t offset_ = 0;
};

// The last chunk: empty delta, finish_reason, usage and the dspark statistics.
nlohmann::json FinalChunk(const ResponseHeader& h, const std::string& finish_reason, const SpecStats& stats);

// "data: <json>\n\n".
std::string SseEvent(const nlohmann::json& j);

}  // namespace dspark::serve
