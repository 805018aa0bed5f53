#include "grammar/json_schema.h"

#include <functional>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/pattern.h"

namespace dspark::grammar {
namespace {

using json = nlohmann::ordered_json;

// Shared building blocks, written with {P} where the rule prefix goes. Whitespace is bounded: an
// unbounded `[ \t\n]*` lets a model emit spaces forever while every token stays "allowed".
struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};
const Primitive kPrimitives[] = {
    {"space", R"(| " " | "\n" [ \t]{0,20})", {}},
    {"boolean", R"(("true" | "false") {P}space)", {"space"}},
    {"null", R"("null" {P}space)", {"space"}},
    {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))", {}},
    {"string", R"("\"" {P}char* "\"" {P}space)", {"char", "space"}},
    {"integral-part", R"([0] | [1-9] [0-9]{0,15})", {}},
    {"decimal-part", R"([0-9]{1,16})", {}},
    {"number",
     R"(("-"? {P}integral-part) ("." {P}decimal-part)? ([eE] [-+]? {P}integral-part)? {P}space)",
     {"integral-part", "decimal-part", "space"}},
    {"integer", R"(("-"? {P}integral-part) {P}space)", {"integral-part", "space"}},
    {"nonneg-integer", R"({P}integral-part {P}space)", {"integral-part", "space"}},
    {"pos-integer", R"([1-9] [0-9]{0,15} {P}space)", {"space"}},
    {"value", R"({P}object | {P}array | {P}string | {P}number | {P}boolean | {P}null)",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object",
     R"("{" {P}space ( {P}string ":" {P}space {P}value ( "," {P}space {P}string ":" {P}space {P}value )* )? "}" {P}space)",
     {"string", "value", "space"}},
    {"array", R"("[" {P}space ( {P}value ( "," {P}space {P}value )* )? "]" {P}space)",
     {"value", "space"}},
    {"uuid",
     R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" {P}space)",
     {"space"}},
    {"date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] ))",
     {}},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
     {}},
    {"date-time", R"({P}date "T" {P}time)", {"date", "time"}},
    {"date-string", R"("\"" {P}date "\"" {P}space)", {"date", "space"}},
    {"time-string", R"("\"" {P}time "\"" {P}space)", {"time", "space"}},
    {"date-time-string", R"("\"" {P}date-time "\"" {P}space)", {"date-time", "space"}},
};

// Keywords that restrict the accepted documents and that we cannot express; ignoring them would
// let the model produce output the schema rejects.
const std::set<std::string> kUnsupported = {
    "not",           "if",           "then",           "else",
    "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies",  "uniqueItems",  "contains",       "minContains",
    "maxContains",   "minProperties", "maxProperties", "unevaluatedProperties",
    "unevaluatedItems", "multipleOf", "$dynamicRef",   "$recursiveRef",
};

std::string Sanitize(std::string_view s) {
  std::string out;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    out += ok ? c : '-';
  }
  return out.empty() ? "x" : out;
}

std::string EscapePointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class Converter {
 public:
  Converter(const json& root, std::string_view prefix, const JsonSchemaLimits& limits)
      : root_(root), prefix_(prefix), limits_(limits) {}

  Result<std::string> Run() {
    for (char c : prefix_) {
      if (Sanitize(std::string(1, c)) != std::string(1, c) && c != '_') {
        return InvalidArgument("json_schema: rule prefix '{}' may only hold [A-Za-z0-9_-]", prefix_);
      }
    }
    for (const Primitive& p : kPrimitives) names_.insert(prefix_ + p.name);
    size_t root = Reserve("root");
    std::string body = Body(root_, "root", "", 0);
    if (!error_.ok()) return error_;
    rules_[root].second = body;
    std::string out;
    for (const auto& [name, rule_body] : rules_) out += name + " ::= " + rule_body + "\n";
    return out;
  }

 private:
  void Fail(Status s) {
    if (error_.ok()) error_ = std::move(s);
  }
  bool failed() const { return !error_.ok(); }

  // Creates a rule named prefix + hint (made unique) with an empty body; returns its index.
  size_t Reserve(const std::string& hint) {
    std::string base = prefix_ + Sanitize(hint);
    std::string name = base;
    for (int i = 1; names_.count(name); ++i) name = base + "-" + std::to_string(i);
    names_.insert(name);
    rules_.emplace_back(name, "");
    if (rules_.size() > limits_.max_rules) {
      Fail(Status(StatusCode::kResourceExhausted,
                  fmt::format("json_schema: the schema needs more than {} grammar rules",
                              limits_.max_rules)));
    }
    return rules_.size() - 1;
  }

  std::string AddRule(const std::string& hint, const std::string& body) {
    size_t i = Reserve(hint);
    rules_[i].second = body;
    return rules_[i].first;
  }

  std::string Prim(const std::string& name) {
    if (!added_prims_.count(name)) {
      for (const Primitive& p : kPrimitives) {
        if (name != p.name) continue;
        added_prims_.insert(name);
        std::string body = p.body;
        for (size_t at; (at = body.find("{P}")) != std::string::npos;) body.replace(at, 3, prefix_);
        names_.insert(prefix_ + name);
        rules_.emplace_back(prefix_ + name, body);
        for (const char* dep : p.deps) Prim(dep);
      }
    }
    return prefix_ + name;
  }

  std::string Visit(const json& schema, const std::string& name, const std::string& path,
                    int depth) {
    size_t i = Reserve(name);
    std::string body = Body(schema, name, path, depth);
    rules_[i].second = body;
    return rules_[i].first;
  }

  std::string Literal(const json& value) { return GbnfLiteral(value.dump()) + " " + Prim("space"); }

  std::string Ref(const std::string& ref, const std::string& path, int depth) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') {
      Fail(Unimplemented("json_schema: only local $ref (\"#/...\") is supported, got '{}' at {}",
                         ref, path.empty() ? "/" : path));
      return "";
    }
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(ref.substr(1)));
    } catch (const json::exception&) {
    }
    if (!target) {
      Fail(InvalidArgument("json_schema: $ref '{}' at {} does not resolve", ref,
                           path.empty() ? "/" : path));
      return "";
    }
    size_t slash = ref.rfind('/');
    size_t i = Reserve(slash == std::string::npos ? "ref" : ref.substr(slash + 1));
    ref_rules_[ref] = rules_[i].first;  // before visiting, so recursive refs terminate
    std::string body = Body(*target, rules_[i].first.substr(prefix_.size()), ref.substr(1), depth);
    rules_[i].second = body;
    return rules_[i].first;
  }

  std::string Body(const json& schema, const std::string& name, const std::string& path,
                   int depth) {
    if (failed()) return "";
    const std::string where = path.empty() ? "/" : path;
    if (depth > limits_.max_depth) {
      Fail(Status(StatusCode::kResourceExhausted,
                  fmt::format("json_schema: nesting deeper than {} at {}", limits_.max_depth,
                              where)));
      return "";
    }
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Prim("value");
      Fail(InvalidArgument("json_schema: schema 'false' at {} accepts nothing", where));
      return "";
    }
    if (!schema.is_object()) {
      Fail(InvalidArgument("json_schema: expected a schema object at {}", where));
      return "";
    }
    for (const auto& [key, unused] : schema.items()) {
      if (kUnsupported.count(key)) {
        Fail(Unimplemented("json_schema: keyword '{}' at {} is not supported", key, where));
        return "";
      }
    }
    if (schema.contains("$ref")) {
      if (!schema["$ref"].is_string()) {
        Fail(InvalidArgument("json_schema: $ref at {} must be a string", where));
        return "";
      }
      return Ref(schema["$ref"].get<std::string>(), path + "/$ref", depth + 1);
    }
    if (auto nullable = schema.find("nullable"); nullable != schema.end() && !nullable->is_boolean()) {
      Fail(InvalidArgument("json_schema: nullable at {} must be a boolean", where));
      return "";
    }
    if (schema.contains("nullable") && schema["nullable"].get<bool>()) {
      json inner = schema;
      inner.erase("nullable");
      return Visit(inner, name, path, depth + 1) + " | " + Prim("null");
    }
    if (schema.contains("const")) return Literal(schema["const"]);
    if (schema.contains("enum")) {
      const json& e = schema["enum"];
      if (!e.is_array() || e.empty()) {
        Fail(InvalidArgument("json_schema: enum at {} must be a non-empty array", where));
        return "";
      }
      std::string out;
      for (const json& v : e) out += (out.empty() ? "" : " | ") + Literal(v);
      return out;
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      // oneOf is treated as anyOf: exclusivity cannot be expressed, and the alternatives of
      // practical schemas (tagged unions) are disjoint anyway.
      const json& alts = schema[key];
      if (!alts.is_array() || alts.empty()) {
        Fail(InvalidArgument("json_schema: {} at {} must be a non-empty array", key, where));
        return "";
      }
      std::string out;
      for (size_t i = 0; i < alts.size(); ++i) {
        std::string sub = Visit(alts[i], name + "-" + std::to_string(i),
                                path + "/" + key + "/" + std::to_string(i), depth + 1);
        out += (i ? " | " : "") + sub;
      }
      return out;
    }
    if (schema.contains("allOf")) return AllOf(schema, name, path, depth);
    if (schema.contains("type") && schema["type"].is_array()) {
      std::string out;
      for (const json& t : schema["type"]) {
        json sub = schema;
        sub["type"] = t;
        std::string tn = t.is_string() ? t.get<std::string>() : "type";
        out += (out.empty() ? "" : " | ") + Visit(sub, name + "-" + tn, path, depth + 1);
      }
      if (out.empty()) Fail(InvalidArgument("json_schema: empty type list at {}", where));
      return out;
    }
    std::string type;
    if (schema.contains("type")) {
      if (!schema["type"].is_string()) {
        Fail(InvalidArgument("json_schema: type at {} must be a string or array", where));
        return "";
      }
      type = schema["type"].get<std::string>();
    } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
               schema.contains("required")) {
      type = "object";
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      type = "array";
    }
    if (type.empty()) return Prim("value");
    if (type == "object") return Object(schema, name, path, depth);
    if (type == "array") return Array(schema, name, path, depth);
    if (type == "string") return String(schema, where);
    if (type == "boolean") return Prim("boolean");
    if (type == "null") return Prim("null");
    if (type == "number") return Prim("number");
    if (type == "integer") {
      // Only the sign-deciding bounds are honoured; see README.md.
      double lo = -1;
      if (schema.contains("minimum") && schema["minimum"].is_number()) {
        lo = schema["minimum"].get<double>();
      }
      if (schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_number()) {
        lo = std::max(lo, schema["exclusiveMinimum"].get<double>() + 1);
      }
      if (lo >= 1) return Prim("pos-integer");
      if (lo >= 0) return Prim("nonneg-integer");
      return Prim("integer");
    }
    Fail(InvalidArgument("json_schema: unknown type '{}' at {}", type, where));
    return "";
  }

  bool Count(const json& schema, const char* key, const std::string& where, uint32_t* out) {
    if (!schema.contains(key)) return false;
    const json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      Fail(InvalidArgument("json_schema: {} at {} must be a non-negative integer", key, where));
      return false;
    }
    if (v.get<uint64_t>() > limits_.max_items) {
      Fail(Status(StatusCode::kResourceExhausted,
                  fmt::format("json_schema: {} {} at {} is over the limit of {}", key,
                              v.get<uint64_t>(), where, limits_.max_items)));
      return false;
    }
    *out = v.get<uint32_t>();
    return true;
  }

  // "x{min,max}" in GBNF, max < 0 meaning unbounded.
  static std::string Repeat(const std::string& item, uint32_t min, int64_t max) {
    if (max < 0) return fmt::format("{}{{{},}}", item, min);
    if (min == static_cast<uint32_t>(max)) return fmt::format("{}{{{}}}", item, min);
    return fmt::format("{}{{{},{}}}", item, min, max);
  }

  std::string String(const json& schema, const std::string& where) {
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) {
        Fail(InvalidArgument("json_schema: pattern at {} must be a string", where));
        return "";
      }
      if (schema.contains("minLength") || schema.contains("maxLength")) {
        Fail(Unimplemented("json_schema: pattern together with minLength/maxLength at {} is not "
                           "supported", where));
        return "";
      }
      auto body = PatternToGbnf(schema["pattern"].get<std::string>(), Prim("char"));
      if (!body.ok()) {
        Fail(Status(body.status().code(), body.status().message() + " (at " + where + ")"));
        return "";
      }
      return "\"\\\"\" " + *body + " \"\\\"\" " + Prim("space");
    }
    std::string format = schema.value("format", "");
    if (format == "date" || format == "time" || format == "date-time") return Prim(format + "-string");
    if (format == "uuid") return Prim("uuid");
    uint32_t min = 0, max = 0;
    bool has_min = Count(schema, "minLength", where, &min);
    bool has_max = Count(schema, "maxLength", where, &max);
    if (failed()) return "";
    if (!has_min && !has_max) return Prim("string");
    if (has_max && max < min) {
      Fail(InvalidArgument("json_schema: maxLength < minLength at {}", where));
      return "";
    }
    return "\"\\\"\" " + Repeat(Prim("char"), min, has_max ? max : -1) + " \"\\\"\" " + Prim("space");
  }

  std::string Array(const json& schema, const std::string& name, const std::string& path,
                    int depth) {
    const std::string where = path.empty() ? "/" : path;
    std::string open = "\"[\" " + Prim("space"), close = "\"]\" " + Prim("space");
    std::string comma = "\",\" " + Prim("space");
    const json* tuple = schema.contains("prefixItems")                            ? &schema["prefixItems"]
                        : (schema.contains("items") && schema["items"].is_array()) ? &schema["items"]
                                                                                   : nullptr;
    if (tuple) {
      // Exactly the listed items: extra items allowed by `items` are never generated.
      std::string out = open;
      for (size_t i = 0; i < tuple->size(); ++i) {
        if (i) out += " " + comma;
        out += " " + Visit((*tuple)[i], name + "-" + std::to_string(i),
                           path + "/prefixItems/" + std::to_string(i), depth + 1);
      }
      return out + " " + close;
    }
    std::string item = schema.contains("items")
                           ? Visit(schema["items"], name + "-item", path + "/items", depth + 1)
                           : Prim("value");
    uint32_t min = 0, max = 0;
    Count(schema, "minItems", where, &min);
    bool has_max = Count(schema, "maxItems", where, &max);
    if (failed()) return "";
    if (has_max && max < min) {
      Fail(InvalidArgument("json_schema: maxItems < minItems at {}", where));
      return "";
    }
    if (has_max && max == 0) return open + " " + close;
    std::string more = "(" + comma + " " + item + ")";
    std::string list = item + " " + Repeat(more, min ? min - 1 : 0, has_max ? int64_t{max} - 1 : -1);
    return open + " " + (min == 0 ? "(" + list + ")?" : list) + " " + close;
  }

  std::string Object(const json& schema, const std::string& name, const std::string& path,
                     int depth) {
    const std::string where = path.empty() ? "/" : path;
    const json empty = json::object();
    const json& props = schema.contains("properties") ? schema["properties"] : empty;
    if (!props.is_object()) {
      Fail(InvalidArgument("json_schema: properties at {} must be an object", where));
      return "";
    }
    std::set<std::string> required;
    if (schema.contains("required")) {
      for (const json& r : schema["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    // additionalProperties: absent means false once properties are listed (OpenAI strict and
    // llama.cpp agree); an object schema with neither means any object.
    bool has_props = schema.contains("properties");
    const json* additional = nullptr;
    json any = true;
    if (schema.contains("additionalProperties")) {
      const json& a = schema["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) additional = &a;
    } else if (!has_props) {
      additional = &any;
    }
    if (!has_props && additional == &any) return Prim("object");

    struct Prop {
      std::string kv;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [key, sub] : props.items()) {
      std::string value = Visit(sub, name + "-" + key, path + "/properties/" + EscapePointer(key),
                                depth + 1);
      list.push_back({GbnfLiteral(json(key).dump()) + " " + Prim("space") + " \":\" " +
                          Prim("space") + " " + value,
                      required.count(key) > 0});
    }
    for (const std::string& r : required) {
      if (!props.contains(r)) {
        Fail(Unimplemented("json_schema: required property '{}' at {} is not in properties", r,
                           where));
        return "";
      }
    }
    std::string extra_kv;
    if (additional) {
      std::string value = Visit(*additional, name + "-additional",
                                path + "/additionalProperties", depth + 1);
      extra_kv = AddRule(name + "-additional-kv",
                         Prim("string") + " \":\" " + Prim("space") + " " + value);
    }
    if (failed()) return "";
    // Tail(i, first): the properties from index i on, in schema order; `first` says no comma is
    // due yet. Each (i, first) pair becomes at most one rule, so the grammar stays linear in the
    // number of properties while optional ones may be skipped anywhere.
    std::string comma = "\",\" " + Prim("space");
    std::map<std::pair<size_t, bool>, std::string> memo;
    std::function<std::string(size_t, bool)> tail = [&](size_t i, bool first) -> std::string {
      auto key = std::make_pair(i, first);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      std::string body;
      if (i == list.size()) {
        if (additional) {
          std::string rest = "(" + comma + " " + extra_kv + ")*";
          body = first ? "(" + extra_kv + " " + rest + ")?" : rest;
        }
      } else {
        std::string take = (first ? "" : comma + " ") + list[i].kv;
        std::string after = tail(i + 1, false);
        if (!after.empty()) take += " " + after;
        if (list[i].required) {
          body = take;
        } else {
          std::string skip = tail(i + 1, first);
          body = skip.empty() ? "(" + take + ")?" : take + " | " + skip;
        }
      }
      std::string ref;
      if (!body.empty()) {
        ref = AddRule(name + "-tail-" + std::to_string(i) + (first ? "-first" : ""), body);
      }
      return memo[key] = ref;
    };
    std::string inner = tail(0, true);
    return "\"{\" " + Prim("space") + (inner.empty() ? "" : " " + inner) + " \"}\" " + Prim("space");
  }

  std::string AllOf(const json& schema, const std::string& name, const std::string& path,
                    int depth) {
    // Merged when every part is an object schema (possibly via $ref): properties and required
    // lists are united, which is what allOf means for such parts.
    json merged = schema;
    merged.erase("allOf");
    const json& parts = schema["allOf"];
    if (!parts.is_array()) {
      Fail(InvalidArgument("json_schema: allOf at {} must be an array", path));
      return "";
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      json part = parts[i];
      for (int hops = 0; part.is_object() && part.contains("$ref") && hops < 16; ++hops) {
        std::string ref = part["$ref"].is_string() ? part["$ref"].get<std::string>() : "";
        try {
          part = root_.at(json::json_pointer(ref.substr(ref.empty() ? 0 : 1)));
        } catch (const json::exception&) {
          Fail(InvalidArgument("json_schema: $ref '{}' at {}/allOf/{} does not resolve", ref,
                               path, i));
          return "";
        }
      }
      bool objectish = part.is_object() && !part.contains("allOf") && !part.contains("anyOf") &&
                       !part.contains("oneOf") &&
                       (part.value("type", "object") == "object");
      if (!objectish) {
        Fail(Unimplemented("json_schema: allOf at {}/allOf/{} is supported only for object "
                           "schemas", path, i));
        return "";
      }
      for (const auto& [key, value] : part.items()) {
        if (key == "properties") {
          for (const auto& [pk, pv] : value.items()) merged["properties"][pk] = pv;
        } else if (key == "required") {
          for (const json& r : value) merged["required"].push_back(r);
        } else if (!merged.contains(key)) {
          merged[key] = value;
        }
      }
    }
    if (!merged.contains("type")) merged["type"] = "object";
    return Body(merged, name, path, depth + 1);
  }

  const json& root_;
  std::string prefix_;
  JsonSchemaLimits limits_;
  Status error_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::set<std::string> added_prims_;
  std::map<std::string, std::string> ref_rules_;
};

}  // namespace

Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                     std::string_view rule_prefix, const JsonSchemaLimits& limits) {
  // The converter checks the types of the keywords it reads; a JSON type error that escapes it is
  // still a bad schema, never an exception through a request handler.
  Result<std::string> converted = InvalidArgument("json_schema: not converted");
  try {
    converted = Converter(schema, rule_prefix, limits).Run();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument("json_schema: malformed schema: {}", e.what());
  }
  DSPARK_ASSIGN_OR_RETURN(std::string gbnf, std::move(converted));
  // A $ref cycle that consumes no input ({"anyOf": [{"type": "null"}, {"$ref": "#"}]}) converts to a
  // left-recursive grammar: refuse the schema here rather than hand out a grammar that cannot be
  // compiled.
  std::string check = gbnf;
  if (!rule_prefix.empty()) check += fmt::format("root ::= {}root\n", rule_prefix);
  if (auto parsed = ParseGbnf(check); !parsed.ok())
    return InvalidArgument("json_schema: the schema has no finite instances the grammar can describe ({})",
                           parsed.status().message());
  return gbnf;
}

Result<std::string> JsonSchemaToGbnf(const nlohmann::json& schema, std::string_view rule_prefix,
                                     const JsonSchemaLimits& limits) {
  return JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema.dump()), rule_prefix, limits);
}

Result<std::string> JsonSchemaTextToGbnf(std::string_view schema_text, std::string_view rule_prefix,
                                         const JsonSchemaLimits& limits) {
  nlohmann::ordered_json schema = nlohmann::ordered_json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return InvalidArgument("json_schema: the schema is not valid JSON");
  return JsonSchemaToGbnf(schema, rule_prefix, limits);
}

std::string JsonObjectGbnf(std::string_view rule_prefix) {
  return JsonSchemaToGbnf(nlohmann::ordered_json{{"type", "object"}}, rule_prefix).value();
}

}  // namespace dspark::grammar
