// Tool calling for the OpenAI-compatible server: finding the tool-call syntax of a chat template,
// turning model output into OpenAI `tool_calls` (whole or streamed), and validating `tools` and
// `tool_choice`. Pure functions on strings and JSON: knows no HTTP, no engine and no tokenizer.
//
// Formats (the markers are those the templates in tests/data/templates print):
//   kHermes      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Qwen2.5, Qwen3)
//   kLlama3      [<|python_tag|>]{"name": "f", "parameters": {...}}              (Llama 3.1-3.3)
//   kMistral     [TOOL_CALLS][{"name": "f", "arguments": {...}, "id"?: "..."}, ...]
//                [TOOL_CALLS]f[ARGS]{...}  (also f[CALL_ID]id[ARGS]{...} and f{...})
//   kDeepSeekV3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```
//                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>   (V3, R1; V3.1 writes f<｜tool▁sep｜>{...})
//   kNone        the template prints no tool calls; parsed as kHermes (below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace dspark::serve {

enum class ToolFormat { kNone, kHermes, kLlama3, kMistral, kDeepSeekV3 };

// "none", "hermes", "llama3", "mistral", "deepseek_v3" (logs, /v1/models).
std::string_view ToolFormatName(ToolFormat format);

// Finds the format from the markers a template's source prints when it renders an assistant
// tool call, checked in this order (as llama.cpp's common/chat.cpp does): "<｜tool▁calls▁begin｜>"
// (DeepSeek), "[TOOL_CALLS]" (Mistral), "<|start_header_id|>ipython<|end_header_id|>" or
// "<|python_tag|>" (Llama 3.x), "<tool_call>" (Hermes). Anything else is kNone.
// Qwen3-Coder's template wraps XML (<function=f><parameter=k>...) in <tool_call> and so detects as
// kHermes; its XML calls are not JSON and stay content.
ToolFormat DetectToolFormat(std::string_view chat_template_source);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as compact text, key order as the model wrote it
};

struct ParsedAssistant {
  std::string content;  // text outside the calls, leading and trailing whitespace removed
  std::vector<ToolCall> tool_calls;
};

// The id of the call_index-th call of a response: "call_" + 24 alphanumerics derived from
// (seed, call_index), or for kMistral 9 alphanumerics, because Mistral's templates raise an
// error for any other id when the call is sent back in the next request. Deterministic for a
// seed; the server draws a random seed per request.
std::string MakeToolCallId(ToolFormat format, uint64_t seed, size_t call_index);

// Splits a complete assistant output into content and tool calls.
//
// `tools` is the request's validated `tools` array: a call counts only when it names one of its
// functions and its arguments are a JSON object (or a string holding one; a missing arguments
// field is {}). Anything else (an unknown name, unparsable JSON, a block that never closes) stays
// in `content` verbatim, markers included, so nothing the model wrote is dropped. A block that is
// still open when the text ends is accepted if its JSON is complete (the model stopped before
// the closing marker). Calls inside one Mistral array or one DeepSeek block count together: one
// bad call leaves the whole block as content.
//
// kNone is parsed as kHermes: a model whose template has no tool syntax most likely learnt
// Hermes' <tool_call> (the most common fine-tuning format), and since a call must name a
// requested function, plain text is never taken for a call.
//
// Equals the concatenation of ToolCallStreamParser's events for the same text, however split.
ParsedAssistant ParseToolCalls(ToolFormat format, std::string_view text, const nlohmann::json& tools,
                               uint64_t id_seed);

// One streamed piece of an assistant message.
struct ToolStreamEvent {
  enum class Kind {
    kContent,        // `text` is a content delta
    kToolCallStart,  // a new call: `index`, `id`, `name`
    kToolCallArgs,   // `text` is a fragment of call `index`'s arguments
  };
  Kind kind = Kind::kContent;
  size_t index = 0;
  std::string id;
  std::string name;
  std::string text;

  bool operator==(const ToolStreamEvent&) const = default;
};

// The `delta` object of a chat.completion.chunk for one event:
//   kContent        {"content": text}
//   kToolCallStart  {"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}]}
//   kToolCallArgs   {"tool_calls": [{"index", "function": {"arguments": text}}]}
nlohmann::json ToOpenAiDelta(const ToolStreamEvent& event);

// Incremental ParseToolCalls for streaming responses.
//
// Content is released as soon as it cannot be part of a call. Held back are: a tail that could
// still grow into a start marker ("<tool_c", "[TOOL_", "{ \"na" for Llama 3), an incomplete
// UTF-8 sequence at the end of the text seen so far, whitespace that might turn out to be
// trailing (released before the next non-whitespace content), and a whole call block from its
// start marker until it is complete. When a block completes, each call is sent as a kToolCallStart
// and then one kToolCallArgs with all of its arguments: arguments are not streamed piecewise,
// because a call is only known to be valid (named function, parsable JSON) once it is complete.
// A block that turns out not to be a call is released as content. Finish() releases what is
// still held (a partial marker becomes content) and drops trailing whitespace.
//
// Feed and Finish return the events of that call; consecutive content is merged into one event.
// Calls after Finish return nothing. Not thread-safe; one parser per response.
class ToolCallStreamParser {
 public:
  using Event = ToolStreamEvent;

  // `tools` is copied (names only); see ParseToolCalls for the format, tools and ids.
  ToolCallStreamParser(ToolFormat format, const nlohmann::json& tools, uint64_t id_seed);

  std::vector<Event> Feed(std::string_view delta);
  std::vector<Event> Finish();

  // Whether any call has been emitted: the response's finish_reason is then "tool_calls".
  bool has_tool_calls() const { return num_calls_ > 0; }

 private:
  void Run(bool at_end);
  void EmitContent(std::string_view text);
  void EmitCalls(std::vector<ToolCall> calls);

  ToolFormat format_;
  std::vector<std::string> tool_names_;
  uint64_t id_seed_;
  std::string buf_;           // text not yet released; starts at a held-back position
  bool in_block_ = false;     // buf_ starts with a block's start marker
  bool content_started_ = false;
  std::string pending_ws_;    // whitespace released only if non-whitespace content follows
  size_t num_calls_ = 0;
  bool finished_ = false;
  std::vector<Event> events_;
};

// The message's `tool_calls` array: [{"id", "type": "function", "function": {"name", "arguments"}}].
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls);

// Checks a request's `tools`: an array of {"type": "function", "function": {"name",
// "description"?, "parameters"?, "strict"?}} with names from [a-zA-Z0-9_-]{1,64}, unique. Any
// other key is an error, as for every other request field. Returns an error message that starts
// with the path of the offending field ("tools[1].function.name: ..."), or nullopt when valid.
std::optional<std::string> ValidateTools(const nlohmann::json& tools);

enum class ToolChoiceMode { kNone, kAuto, kRequired, kFunction };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;  // kFunction: the function the model must call
};

// Checks a request's `tool_choice` against its (already validated) `tools` and fills *out.
// Accepts "none", "auto", "required" and {"type": "function", "function": {"name": X}} with X
// among `tools`. Null or absent means OpenAI's default: "auto" with tools, "none" without.
// "required" and a named function need at least one tool. Returns an error message starting
// with the path ("tool_choice.function.name: ..."), or nullopt when valid.
std::optional<std::string> ValidateToolChoice(const nlohmann::json& choice, const nlohmann::json& tools,
                                              ToolChoice* out);

// The grammar that enforces a tool_choice of "required" (one or more calls of the offered tools,
// parallel where the format allows and `parallel` says so) or a named function (one call of it), in `format`'s syntax
// (kNone: Hermes), each call's arguments constrained by its function's `parameters` schema (any
// object when it has none). Errors name the tool whose schema cannot be honoured.
// `parallel` false (OpenAI's parallel_tool_calls): exactly one call.
Result<std::string> ToolCallGrammar(ToolFormat format, const nlohmann::ordered_json& tools, const ToolChoice& choice,
                                    bool parallel = true);

}  // namespace dspark::serve
