// JSON Schema to GBNF, for OpenAI-style structured output (response_format json_schema and
// json_object, tool-call arguments). Follows llama.cpp's json-schema-to-grammar where it makes a
// choice; see README.md in this folder for what is supported and the deliberate differences.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace dspark::grammar {

struct JsonSchemaLimits {
  size_t max_rules = 2000;  // rules in the produced grammar
  int max_depth = 64;       // nesting of subschemas
  uint32_t max_items = 10000;  // largest minItems/maxItems/minLength/maxLength honoured
};

// Returns GBNF whose start rule is `<rule_prefix>root`; every other rule carries the prefix too, so
// several converted schemas can be concatenated into one grammar (one per tool, say). Keywords
// that would change the meaning but are not supported ("not", "if", "patternProperties",
// "uniqueItems", ...) fail with kUnimplemented naming the keyword and its JSON pointer path, so a
// server can answer 400; a malformed schema fails with kInvalidArgument; a schema that needs more
// than limits.max_rules rules or nests deeper than limits.max_depth fails with kResourceExhausted.
// Properties keep schema order only in an ordered_json: nlohmann::json sorts object keys, so parse
// request bodies with ordered_json (or pass the text) when key order matters to the caller.
Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                     std::string_view rule_prefix = "",
                                     const JsonSchemaLimits& limits = {});
Result<std::string> JsonSchemaToGbnf(const nlohmann::json& schema, std::string_view rule_prefix = "",
                                     const JsonSchemaLimits& limits = {});
Result<std::string> JsonSchemaTextToGbnf(std::string_view schema_text,
                                         std::string_view rule_prefix = "",
                                         const JsonSchemaLimits& limits = {});

// Grammar for response_format {"type": "json_object"}: any JSON value whose top level is an object.
std::string JsonObjectGbnf(std::string_view rule_prefix = "");

}  // namespace dspark::grammar
