// The Jinja engine: any template source either fails to parse with a Status or renders a fixed
// chat context, within the engine's own time and output limits (a render that raises is fine).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "template/chat_template.h"

using namespace dspark;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return 0;
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "You are terse."},
                 {"role": "user", "content": "Hi <b>there</b>"},
                 {"role": "assistant", "content": "Hello.", "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "user", "content": "Bye"}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
  })");
  tmpl->SetClock([] { return std::tm{}; });
  (void)tmpl->Render(context);
  return 0;
}
