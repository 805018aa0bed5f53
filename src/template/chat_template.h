// Chat templates: renders a model's `tokenizer.chat_template` (Jinja2) the way Hugging Face
// transformers does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// tojson without HTML escaping, raise_exception, strftime_now). Parsing happens once, up front;
// rendering is const and may run on many threads at once.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace dspark {

namespace jinja {
struct Stmt;
}

struct ChatMessage {
  std::string role;
  std::string content;
  // Other message fields (tool_calls, reasoning_content, name, tool_call_id, ...), merged into
  // the message object the template sees. Ordered so tojson keeps the client's key order.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses the whole template: an unknown tag, filter or test, an unclosed block or a syntax
  // error is reported here as kInvalidArgument "template:LINE:COL: ...".
  static Result<ChatTemplate> Parse(std::string_view source);

  // Renders with `context` as the template's variables (messages, add_generation_prompt,
  // bos_token, eos_token, tools, and any extras such as enable_thinking). A template calling
  // raise_exception(msg) yields kInvalidArgument whose message ends with msg. Use ordered_json
  // where key order matters: tojson prints objects in the order given.
  Result<std::string> Render(const nlohmann::ordered_json& context) const;
  Result<std::string> Render(const nlohmann::json& context) const;

  // Builds the context the way transformers' apply_chat_template does: messages,
  // add_generation_prompt, bos_token, eos_token, tools = None and documents = None unless
  // extra_vars sets them, then every key of extra_vars (extra_vars wins).
  Result<std::string> Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            const std::string& bos_token, const std::string& eos_token,
                            const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json::object()) const;

  // Clock for strftime_now (transformers uses local time); tests pin it for determinism.
  void SetClock(std::function<std::tm()> now) { now_ = std::move(now); }

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}

  std::shared_ptr<const Program> program_;
  std::function<std::tm()> now_;
};

// True when `status` came from the template's own raise_exception() call (a client error such as
// roles not alternating), as opposed to a template that could not be evaluated.
bool IsRaisedByTemplate(const Status& status);

}  // namespace dspark
