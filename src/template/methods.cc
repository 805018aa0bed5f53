// Python methods on str, dict and list values that chat templates call
// (content.split('</think>'), system_message.rstrip(), tool.items(), ...). Lists and dicts are
// immutable (ImmutableSandboxedEnvironment), so mutating methods are refused as in transformers.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "template/builtins.h"
#include "template/text.h"

namespace dspark::jinja {
namespace {

using Method = Result<Value> (*)(const Value& self, const CallArgs& args);

Result<std::string> StrArg(const CallArgs& args, size_t pos, const char* name, const char* method) {
  const Value* v = args.Get(name, pos);
  if (v == nullptr) return InvalidArgument("{}() missing required argument '{}'", method, name);
  if (!v->is_string()) return InvalidArgument("{}() argument must be str, not {}", method, TypeName(*v));
  return v->str();
}

// Optional chars argument of strip/lstrip/rstrip: nullptr or None means whitespace.
Result<Value> StripMethod(const Value& self, const CallArgs& args, bool left, bool right) {
  const Value* chars = args.Get("chars", 0);
  if (chars != nullptr && !chars->is_none() && !chars->is_string()) {
    return InvalidArgument("strip arg must be None or str");
  }
  return Value(PyStrip(self.str(), chars != nullptr && chars->is_string() ? &chars->str() : nullptr, left, right));
}

Result<Value> Startswith(const Value& self, const CallArgs& args, bool ends) {
  const Value* arg = args.Get("prefix", 0);
  if (arg == nullptr) return InvalidArgument("startswith() takes at least 1 argument (0 given)");
  List options = arg->is_list() ? arg->list() : List{*arg};
  std::string_view s = self.str();
  for (const Value& o : options) {
    if (!o.is_string()) return InvalidArgument("startswith first arg must be str or a tuple of str");
    if (ends ? s.ends_with(o.str()) : s.starts_with(o.str())) return Value(true);
  }
  return Value(false);
}

Result<Value> SplitMethod(const Value& self, const CallArgs& args, bool from_right) {
  const Value* sep = args.Get("sep", 0);
  const Value* maxsplit = args.Get("maxsplit", 1);
  int64_t limit = maxsplit != nullptr && maxsplit->is_integral() ? maxsplit->int_value() : -1;
  if (sep != nullptr && !sep->is_none()) {
    if (!sep->is_string()) return InvalidArgument("must be str or None, not {}", TypeName(*sep));
    if (sep->str().empty()) return InvalidArgument("empty separator");
  }
  std::vector<std::string> parts =
      PySplit(self.str(), sep != nullptr && sep->is_string() ? &sep->str() : nullptr, limit, from_right);
  List out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::MakeList(std::move(out));
}

// str.format with "{}", "{0}", "{name}", "{{", "}}" and the !s / !r conversions; format specs
// after ':' are not supported.
Result<Value> StrFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') return InvalidArgument("Single '}}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return InvalidArgument("Single '{{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 1 < field.size()) conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos || field.find('.') != std::string::npos ||
        field.find('[') != std::string::npos) {
      return Unimplemented("str.format: format specs and field access are not supported ('{{{}}}')", field);
    }
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t index = field.empty() ? auto_index++ : static_cast<size_t>(std::strtoul(field.c_str(), nullptr, 10));
      if (index >= args.args.size()) return InvalidArgument("Replacement index {} out of range", index);
      v = &args.args[index];
    } else {
      for (const auto& [k, x] : args.kwargs) {
        if (k == field) v = &x;
      }
      if (v == nullptr) return InvalidArgument("KeyError: '{}'", field);
    }
    out += conversion == 'r' || conversion == 'a' ? Repr(*v) : ToStr(*v);
  }
  return Value(std::move(out));
}

Result<Value> StrMethod(std::string_view name, const Value& self, const CallArgs& args) {
  const std::string& s = self.str();
  if (name == "strip") return StripMethod(self, args, true, true);
  if (name == "lstrip") return StripMethod(self, args, true, false);
  if (name == "rstrip") return StripMethod(self, args, false, true);
  if (name == "startswith") return Startswith(self, args, false);
  if (name == "endswith") return Startswith(self, args, true);
  if (name == "split") return SplitMethod(self, args, false);
  if (name == "rsplit") return SplitMethod(self, args, true);
  if (name == "upper") return Value(AsciiUpper(s));
  if (name == "lower") return Value(AsciiLower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") return Value(PyCapitalize(s));
  if (name == "replace") {
    DSPARK_ASSIGN_OR_RETURN(std::string from, StrArg(args, 0, "old", "replace"));
    DSPARK_ASSIGN_OR_RETURN(std::string to, StrArg(args, 1, "new", "replace"));
    const Value* count = args.Get("count", 2);
    return Value(PyReplace(s, from, to, count != nullptr && count->is_integral() ? count->int_value() : -1));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    DSPARK_ASSIGN_OR_RETURN(std::string sub, StrArg(args, 0, "sub", std::string(name).c_str()));
    if (name == "count") return Value(PyCount(s, sub));
    int64_t pos = PyFind(s, sub, name == "rfind" || name == "rindex");
    if (pos < 0 && (name == "index" || name == "rindex")) return InvalidArgument("substring not found");
    return Value(pos);
  }
  if (name == "join") {
    const Value* items = args.Get("iterable", 0);
    if (items == nullptr) return InvalidArgument("join() takes exactly one argument");
    if (!items->is_list()) return InvalidArgument("can only join an iterable");
    std::string out;
    for (size_t i = 0; i < items->list().size(); ++i) {
      const Value& item = items->list()[i];
      if (!item.is_string()) {
        return InvalidArgument("sequence item {}: expected str instance, {} found", i, TypeName(item));
      }
      if (i) out += s;
      out += item.str();
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.emplace_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    return Value::MakeList(std::move(out));
  }
  if (name == "format") return StrFormat(s, args);
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isupper" ||
      name == "islower") {
    return Value(PyCharClass(name, s));
  }
  return Internal("unhandled str method {}", name);
}

Result<Value> DictMethod(std::string_view name, const Value& self, const CallArgs& args) {
  const Dict& d = self.dict();
  if (name == "get") {
    const Value* key = args.Get("key", 0);
    if (key == nullptr) return InvalidArgument("get expected at least 1 argument, got 0");
    if (key->is_string()) {
      if (const Value* v = d.Find(key->str())) return *v;
    }
    const Value* def = args.Get("default", 1);
    return def != nullptr ? *def : Value::None();
  }
  List out;
  for (const auto& [k, v] : d.items) {
    if (name == "keys") {
      out.emplace_back(k);
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::MakeList({Value(k), v}, /*is_tuple=*/true));
    }
  }
  return Value::MakeList(std::move(out));
}

Result<Value> ListMethod(std::string_view name, const Value& self, const CallArgs& args) {
  const Value* x = args.Get("value", 0);
  if (x == nullptr) return InvalidArgument("{}() takes exactly one argument (0 given)", name);
  int64_t count = 0;
  for (size_t i = 0; i < self.list().size(); ++i) {
    if (!Equals(self.list()[i], *x)) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return InvalidArgument("{} is not in list", Repr(*x));
  return Value(count);
}

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit", "upper", "lower",
    "title", "capitalize", "replace", "find", "rfind", "count", "index", "rindex", "join",
    "splitlines", "format", "isdigit", "isalpha", "isspace", "isalnum", "isupper", "islower"};
constexpr std::string_view kDictMethods[] = {"get", "keys", "values", "items"};
constexpr std::string_view kListMethods[] = {"index", "count"};
// Exist in Python but modify the receiver: the sandbox refuses them.
constexpr std::string_view kMutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort",
                                          "reverse", "update", "setdefault", "popitem"};

template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace

Result<std::string> PercentFormat(const std::string& format, const Value& args) {
  List positional;
  if (args.is_tuple()) {
    positional = args.list();
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return InvalidArgument("incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) return InvalidArgument("incomplete format key");
      if (!args.is_dict()) return InvalidArgument("format requires a mapping");
      arg = args.dict().Find(format.substr(i + 1, close - i - 1));
      if (arg == nullptr) return InvalidArgument("KeyError: '{}'", format.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::strchr("-+ 0#", format[i]) != nullptr) flags.push_back(format[i++]);
    int width = 0, precision = -1;
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) width = width * 10 + (format[i++] - '0');
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        precision = precision * 10 + (format[i++] - '0');
      }
    }
    if (width > 256 || precision > 256) return InvalidArgument("format width or precision too large");
    std::string spec = "%";
    spec += flags;
    if (width > 0) spec += std::to_string(width);
    if (precision >= 0) {
      spec += '.';
      spec += std::to_string(precision);
    }
    if (i >= format.size()) return InvalidArgument("incomplete format");
    char conv = format[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (arg == nullptr) {
      if (next >= positional.size()) return InvalidArgument("not enough arguments for format string");
      arg = &positional[next++];
    }
    char buf[512];
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::string text = conv == 's' ? ToStr(*arg) : Repr(*arg);
      std::u32string u = DecodeUtf8(text);
      if (precision >= 0 && static_cast<size_t>(precision) < u.size()) u.resize(static_cast<size_t>(precision));
      std::string pad(width > static_cast<int>(u.size()) ? width - u.size() : 0, ' ');
      out += flags.find('-') != std::string::npos ? EncodeUtf8(u) + pad : pad + EncodeUtf8(u);
    } else if (std::strchr("diuxXoc", conv) != nullptr) {
      if (!arg->is_number()) return InvalidArgument("%{} format: a real number is required, not {}", conv, TypeName(*arg));
      int64_t n = arg->kind() == Kind::kFloat ? static_cast<int64_t>(arg->float_value()) : arg->int_value();
      if (conv == 'c') {
        AppendUtf8(static_cast<char32_t>(n), &out);
        continue;
      }
      spec += std::string("ll") + (conv == 'i' || conv == 'u' ? 'd' : conv);
      std::snprintf(buf, sizeof(buf), spec.c_str(), static_cast<long long>(n));
      out += buf;
    } else if (std::strchr("eEfFgG", conv) != nullptr) {
      if (!arg->is_number()) return InvalidArgument("%{} format: a real number is required, not {}", conv, TypeName(*arg));
      spec.push_back(conv);
      std::snprintf(buf, sizeof(buf), spec.c_str(), arg->float_value());
      out += buf;
    } else {
      return InvalidArgument("unsupported format character '{}'", conv);
    }
  }
  // Python skips this check when the argument is a mapping or sequence used as one.
  if (next < positional.size() && !args.is_dict() && !(args.is_list() && !args.is_tuple())) {
    return InvalidArgument("not all arguments converted during string formatting");
  }
  return out;
}

std::optional<Value> FindMethod(const Value& receiver, std::string_view name) {
  using Impl = Result<Value> (*)(std::string_view, const Value&, const CallArgs&);
  Impl impl = nullptr;
  if (receiver.is_string() && In(kStrMethods, name)) impl = StrMethod;
  if (receiver.is_dict() && In(kDictMethods, name)) impl = DictMethod;
  if (receiver.is_list() && In(kListMethods, name)) impl = ListMethod;
  std::string method(name);
  if (impl == nullptr) {
    if ((receiver.is_list() || receiver.is_dict()) && In(kMutators, name)) {
      std::string type = TypeName(receiver);
      return Value::MakeCallable(method, [method, type](const CallArgs&) -> Result<Value> {
        return InvalidArgument("access to attribute '{}' of '{}' object is unsafe", method, type);
      });
    }
    return std::nullopt;
  }
  return Value::MakeCallable(method, [impl, method, receiver](const CallArgs& args) {
    return impl(method, receiver, args);
  });
}

}  // namespace dspark::jinja
