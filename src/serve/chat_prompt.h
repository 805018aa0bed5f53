// A chat as prompt tokens: what /v1/chat/completions and `dspark generate --chat` both feed the
// engine.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace dspark {

struct ChatPrompt {
  std::string text;          // the rendered template
  std::vector<int32_t> ids;  // its tokens
};

// `messages` rendered with `tmpl` (add_generation_prompt, the vocabulary's BOS and EOS texts as
// bos_token / eos_token, then extra_vars), encoded with the model's control tokens parsed (the
// template writes them as text) and a BOS added only where the template did not write one.
Result<ChatPrompt> EncodeChat(const ChatTemplate& tmpl, const Tokenizer& tokenizer,
                              const std::vector<ChatMessage>& messages,
                              const nlohmann::ordered_json& extra_vars = nlohmann::ordered_json::object());

}  // namespace dspark
