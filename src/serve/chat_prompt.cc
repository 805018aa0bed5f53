#include "serve/chat_prompt.h"

namespace dspark {

Result<ChatPrompt> EncodeChat(const ChatTemplate& tmpl, const Tokenizer& tokenizer,
                              const std::vector<ChatMessage>& messages, const nlohmann::ordered_json& extra_vars) {
  const std::string bos_text = tokenizer.bos_id() >= 0 ? tokenizer.TokenText(tokenizer.bos_id()) : std::string();
  const std::string eos_text = tokenizer.eos_id() >= 0 ? tokenizer.TokenText(tokenizer.eos_id()) : std::string();
  ChatPrompt out;
  DSPARK_ASSIGN_OR_RETURN(out.text, tmpl.Apply(messages, true, bos_text, eos_text, extra_vars));
  EncodeOptions eo;
  eo.add_eos = false;
  eo.parse_special = true;
  eo.add_bos = bos_text.empty() || out.text.compare(0, bos_text.size(), bos_text) != 0;
  out.ids = tokenizer.Encode(out.text, eo);
  return out;
}

}  // namespace dspark
