// Value construction, Python-compatible formatting (str, repr, json.dumps) and comparisons.
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace dspark::jinja {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(std::string key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(std::string_view name, size_t pos) const {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return pos < args.size() ? &args[pos] : nullptr;
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::MakeList(List items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = is_tuple;
  uint32_t depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  v.list_depth_ = depth + 1;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict dict) {
  uint32_t depth = 0;
  for (const auto& item : dict.items) depth = std::max(depth, item.second.depth());
  dict.depth = depth + 1;
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeNamespace(Dict dict) {
  Value v = MakeDict(std::move(dict));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::MakeCallable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

uint32_t Value::depth() const {
  if (kind_ == Kind::kList) return list_depth_;
  if (kind_ == Kind::kDict || kind_ == Kind::kNamespace) return dict_->depth;
  return 0;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_.empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->items.empty();
    case Kind::kCallable:
    case Kind::kNamespace: return true;
  }
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kCallable: return "function";
    case Kind::kNamespace: return "Namespace";
  }
  return "?";
}

// ----------------------------------------------------------------------------------- UTF-8

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// ------------------------------------------------------------------------------ formatting

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) {
    out += "0." + std::string(-exp - 1, '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return out;
}

static std::string ReprString(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      AppendUtf8(c, &out);
    }
  }
  out.push_back(quote);
  return out;
}

static std::string ReprAt(const Value& v, int depth);

std::string Repr(const Value& v) { return ReprAt(v, 0); }

// Python prints "[...]" for a container that contains itself; namespaces can (set ns.x = ns).
static std::string ReprAt(const Value& v, int depth) {
  if (depth > static_cast<int>(kMaxValueDepth)) return "...";
  switch (v.kind()) {
    case Kind::kString: return ReprString(v.str());
    case Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += ", ";
        out += ReprAt(v.list()[i], depth + 1);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(k) + ": " + ReprAt(item, depth + 1);
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, item] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(k) + ": " + ReprAt(item, depth + 1);
      }
      return out + "}>";
    }
    case Kind::kUndefined: return "Undefined";
    default: return ToStr(v);
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.bool_value() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.int_value());
    case Kind::kFloat: return FormatFloat(v.float_value());
    case Kind::kString: return v.str();
    case Kind::kList:
    case Kind::kDict: return Repr(v);
    case Kind::kCallable: return "<function " + v.callable().name + ">";
    case Kind::kNamespace: return Repr(v);
  }
  return "";
}

// ----------------------------------------------------------------------------- comparison

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, item] : a.dict().items) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equals(item, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

Result<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      double x = a.float_value(), y = b.float_value();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.int_value(), y = b.int_value();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order equals code point order.
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (Equals(a.list()[i], b.list()[i])) continue;
      return Compare(a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  return InvalidArgument("'<' not supported between instances of '{}' and '{}'", TypeName(a),
                         TypeName(b));
}

// ----------------------------------------------------------------------------------- JSON

static void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7E && c < 0x10000)) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else if (ensure_ascii && c >= 0x10000) {
          unsigned v = static_cast<unsigned>(c) - 0x10000;
          std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          *out += buf;
        } else {
          AppendUtf8(c, out);
        }
      }
    }
  }
  out->push_back('"');
}

static Status JsonValue(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 512) return InvalidArgument("tojson: nesting deeper than 512");
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator : o.indent >= 0 ? "," : ", ";
  auto newline = [&](int d) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * d, ' ');
  };
  switch (v.kind()) {
    case Kind::kNone: *out += "null"; return Status::Ok();
    case Kind::kBool: *out += v.bool_value() ? "true" : "false"; return Status::Ok();
    case Kind::kInt: *out += std::to_string(v.int_value()); return Status::Ok();
    case Kind::kFloat: {
      double d = v.float_value();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FormatFloat(d);
      return Status::Ok();
    }
    case Kind::kString: JsonString(v.str(), o.ensure_ascii, out); return Status::Ok();
    case Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return Status::Ok();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        DSPARK_TRY(JsonValue(v.list()[i], o, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case Kind::kDict: {
      if (v.dict().items.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict().items) items.push_back(&item);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        JsonString(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        DSPARK_TRY(JsonValue(items[i]->second, o, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    default:
      return InvalidArgument("Object of type {} is not JSON serializable", TypeName(v));
  }
}

Result<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  DSPARK_TRY(JsonValue(v, options, 0, &out));
  return out;
}

template <typename J>
static Result<Value> FromJsonImpl(const J& j, uint32_t depth) {
  if (depth > kMaxValueDepth) return InvalidArgument("JSON nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) {
        DSPARK_ASSIGN_OR_RETURN(Value v, FromJsonImpl(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        DSPARK_ASSIGN_OR_RETURN(Value v, FromJsonImpl(it.value(), depth + 1));
        d.items.emplace_back(it.key(), std::move(v));
      }
      return Value::MakeDict(std::move(d));
    }
    default: return InvalidArgument("unsupported JSON value (binary)");
  }
}

Result<Value> FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j, 0); }
Result<Value> FromJson(const nlohmann::json& j) { return FromJsonImpl(j, 0); }

}  // namespace dspark::jinja
