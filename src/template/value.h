// Jinja runtime values for the chat-template interpreter: the JSON-like kinds (none, bool, int,
// float, string, list, dict) plus undefined, callables and namespace() objects, with Python's
// str()/repr()/json.dumps() spellings so rendered text matches Hugging Face's jinja2 byte for byte.
// Knows nothing about templates or parsing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace dspark::jinja {

class Value;
using List = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

// Insertion-ordered string-keyed map (Python dicts keep insertion order; tojson relies on it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  uint32_t depth = 1;  // nesting depth, see Value::depth()
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

struct CallArgs {
  std::vector<Value> args;
  Kwargs kwargs;
  // Keyword argument `name`, or positional `pos` when that exists, else nullptr.
  const Value* Get(std::string_view name, size_t pos) const;
};
using NativeFn = std::function<Result<Value>(const CallArgs&)>;
struct Callable {
  std::string name;
  NativeFn fn;
};

inline constexpr uint32_t kMaxValueDepth = 200;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable, kNamespace };

// Lists and dicts are immutable once built (HF renders in an ImmutableSandboxedEnvironment), so
// copies share storage. A namespace is the one mutable container (`{% set ns.x = ... %}`).
class Value {
 public:
  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::kBool), b_(b) {}  // NOLINT: implicit by design
  Value(int v) : kind_(Kind::kInt), i_(v) {}  // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}  // NOLINT
  Value(double v) : kind_(Kind::kFloat), f_(v) {}  // NOLINT
  Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}  // NOLINT
  Value(const char* s) : kind_(Kind::kString), s_(s) {}  // NOLINT

  // `hint` names what was undefined, for error messages ("'x' is undefined").
  static Value Undefined(std::string hint);
  static Value None();
  static Value MakeList(List items, bool is_tuple = false);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(Dict dict);
  static Value MakeCallable(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double float_value() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(int_value()); }
  const std::string& str() const { return s_; }             // string, or the undefined hint
  const List& list() const { return *list_; }               // kList
  const Dict& dict() const { return *dict_; }                // kDict or kNamespace
  Dict& mutable_namespace() const { return *dict_; }         // kNamespace
  const Callable& callable() const { return *fn_; }          // kCallable
  const void* identity() const;                              // storage address, for `is sameas`
  // Container nesting depth (scalars 0). Evaluation refuses values deeper than kMaxValueDepth so
  // destruction, repr and comparison, which recurse, stay within the C++ stack.
  uint32_t depth() const;

  bool Truthy() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  uint32_t list_depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> fn_;
};

// Python's type(x).__name__ ("str", "NoneType", "dict", ...), for error messages.
std::string TypeName(const Value& v);
// Python str(x); undefined renders as "".
std::string ToStr(const Value& v);
// Python repr(x).
std::string Repr(const Value& v);
// Python float.__repr__ (shortest round-trip, 'e' notation outside [1e-4, 1e16)).
std::string FormatFloat(double d);
// Python ==, deep for containers; 1 == 1.0 == True.
bool Equals(const Value& a, const Value& b);
// Python <, for numbers, strings and lists; error for other pairs.
Result<int> Compare(const Value& a, const Value& b);

struct JsonOptions {
  int indent = -1;  // < 0: single line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: Python's default (", " or "," with indent)
  std::string key_separator = ": ";
};
// Python json.dumps(x, ...) as HF's tojson filter calls it.
Result<std::string> ToJson(const Value& v, const JsonOptions& options);

// Fails for JSON nested deeper than kMaxValueDepth.
Result<Value> FromJson(const nlohmann::ordered_json& j);
Result<Value> FromJson(const nlohmann::json& j);

// UTF-8 helpers: Python strings index by code point. Invalid bytes decode as U+FFFD.
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);
void AppendUtf8(char32_t c, std::string* out);
bool IsPySpace(char32_t c);

}  // namespace dspark::jinja
