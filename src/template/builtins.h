// Built-in filters, tests, global functions and the str/dict methods templates call
// (message.content.startswith(...), tool.items()). Names follow jinja2 3.1 and Python; tojson
// follows Hugging Face's override (json.dumps, ensure_ascii=False, no HTML escaping).
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace dspark::jinja {

// Null when no filter / test has that name.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);

// A bound method (e.g. str.startswith with its receiver captured) for attribute access on a
// string, dict or list; nullopt when the receiver type has no such method.
std::optional<Value> FindMethod(const Value& receiver, std::string_view name);

// Python's printf-style `format % args`: a tuple supplies positional values, a dict %(name)s keys,
// anything else is the single value.
Result<std::string> PercentFormat(const std::string& format, const Value& args);

struct GlobalsOptions {
  // strftime_now's clock; defaults to the system clock (local time, as transformers does).
  std::function<std::tm()> now;
  // Receives every namespace() the render creates, so the caller can clear them afterwards: a
  // template can make reference cycles (set ns.self = ns) that shared ownership never frees.
  std::vector<Value>* namespaces = nullptr;
};
// range, dict, namespace, raise_exception, strftime_now.
Dict MakeGlobals(const GlobalsOptions& options);

// The message raise_exception() returns carries this prefix so callers can tell template-raised
// errors apart from evaluation errors.
inline constexpr std::string_view kRaisedPrefix = "template raised: ";

}  // namespace dspark::jinja
