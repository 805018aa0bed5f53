// ChatTemplate: parse once, render per request. Owns the parsed tree; builds the globals and the
// context dict for each render.
#include "template/chat_template.h"

#include "template/ast.h"
#include "template/builtins.h"
#include "template/eval.h"
#include "template/parser.h"

namespace dspark {

struct ChatTemplate::Program {
  jinja::Body body;
};

Result<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  auto body = jinja::ParseTemplate(source);
  if (!body.ok()) return body.status().WithContext("chat template: ");
  auto program = std::make_shared<Program>();
  program->body = std::move(body).value();
  return ChatTemplate(std::move(program));
}

namespace {

Result<std::string> RenderValue(const jinja::Body& body, const Result<jinja::Value>& converted,
                                const std::function<std::tm()>& now) {
  if (!converted.ok()) return converted.status().WithContext("chat template: context: ");
  const jinja::Value& context = *converted;
  if (!context.is_dict()) return InvalidArgument("chat template: render context must be a JSON object");
  std::vector<jinja::Value> namespaces;
  jinja::GlobalsOptions options;
  options.now = now;
  options.namespaces = &namespaces;
  jinja::Dict globals = jinja::MakeGlobals(options);
  std::string out;
  Status st;
  {
    jinja::Interpreter interp(&globals, &context.dict());
    st = interp.Render(body, &out);
  }
  for (jinja::Value& ns : namespaces) ns.mutable_namespace().items.clear();
  if (!st.ok()) return st.WithContext("chat template: ");
  return out;
}

}  // namespace

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  return RenderValue(program_->body, jinja::FromJson(context), now_);
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  return RenderValue(program_->body, jinja::FromJson(context), now_);
}

Result<std::string> ChatTemplate::Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                        const std::string& bos_token, const std::string& eos_token,
                                        const nlohmann::ordered_json& extra_vars) const {
  if (!extra_vars.is_null() && !extra_vars.is_object()) {
    return InvalidArgument("chat template: extra_vars must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json msg = nlohmann::ordered_json::object();
    msg["role"] = m.role;
    msg["content"] = m.content;
    if (m.extra.is_object()) {
      for (auto it = m.extra.begin(); it != m.extra.end(); ++it) msg[it.key()] = it.value();
    }
    list.push_back(std::move(msg));
  }
  context["messages"] = std::move(list);
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  if (extra_vars.is_object()) {
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it) context[it.key()] = it.value();
  }
  return Render(context);
}

bool IsRaisedByTemplate(const Status& status) {
  return status.message().find(jinja::kRaisedPrefix) != std::string::npos;
}

}  // namespace dspark
