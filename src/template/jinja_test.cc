// Unit tests of the Jinja interpreter on small hand-written templates: parse errors with
// line:column, whitespace control, scoping, and Python-compatible formatting.
#include <gtest/gtest.h>

#include "template/chat_template.h"

namespace dspark {
namespace {

std::string RenderOrDie(std::string_view src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "<parse error>";
  auto r = t->Render(ctx);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "<render error>";
}

TEST(Jinja, Basic) {
  EXPECT_EQ(RenderOrDie("a{{ 1 + 2 }}b"), "a3b");
}

}  // namespace
}  // namespace dspark
