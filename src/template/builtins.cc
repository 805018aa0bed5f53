// jinja2 3.1 filters and tests (the subset chat templates use plus close neighbours), and the
// globals transformers provides (raise_exception, strftime_now) next to jinja's (range, dict,
// namespace). Generators (select, map, ...) return lists.
#include "template/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "template/eval.h"
#include "template/text.h"

namespace dspark::jinja {
namespace {

// Python truthiness of an optional argument.
bool BoolArg(const CallArgs& a, const char* name, size_t pos, bool def) {
  const Value* v = a.Get(name, pos);
  return v == nullptr ? def : v->Truthy();
}

// Splits "a.b.0" and looks each part up like jinja's environment.getitem.
Result<Value> AttrPath(Interpreter& in, const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key(part);
    if (!part.empty() && part.size() < 18 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10)));
    }
    DSPARK_ASSIGN_OR_RETURN(cur, in.GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Result<std::string> AttrName(const CallArgs& a, const char* name, size_t pos) {
  const Value* v = a.Get(name, pos);
  if (v == nullptr || v->is_none()) return std::string();
  if (!v->is_string()) return InvalidArgument("attribute name must be a string, not {}", TypeName(*v));
  return v->str();
}

// --------------------------------------------------------------------------------- filters

Result<Value> FAbs(Interpreter&, const Value& v, const CallArgs&) {
  if (!v.is_number()) return InvalidArgument("bad operand type for abs(): '{}'", TypeName(v));
  if (v.kind() == Kind::kFloat) return Value(std::fabs(v.float_value()));
  return Value(static_cast<int64_t>(std::llabs(v.int_value())));
}

// Python getattr only: unlike `.name`, |attr never falls back to a dict key.
Result<Value> FAttr(Interpreter&, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(std::string name, AttrName(a, "name", 0));
  if (v.is_undefined()) return InvalidArgument("{}", v.str());
  if (v.kind() == Kind::kNamespace) {
    if (const Value* x = v.dict().Find(name)) return *x;
  }
  if (auto m = FindMethod(v, name)) return *m;
  return Value::Undefined(fmt::format("'{} object' has no attribute '{}'", TypeName(v), name));
}

Result<Value> FCapitalize(Interpreter&, const Value& v, const CallArgs&) { return Value(PyCapitalize(ToStr(v))); }
Result<Value> FLower(Interpreter&, const Value& v, const CallArgs&) { return Value(AsciiLower(ToStr(v))); }
Result<Value> FUpper(Interpreter&, const Value& v, const CallArgs&) { return Value(AsciiUpper(ToStr(v))); }
Result<Value> FTitle(Interpreter&, const Value& v, const CallArgs&) { return Value(JinjaTitle(ToStr(v))); }
Result<Value> FSafe(Interpreter&, const Value& v, const CallArgs&) { return v; }
Result<Value> FString(Interpreter&, const Value& v, const CallArgs&) { return Value(ToStr(v)); }
Result<Value> FEscape(Interpreter&, const Value& v, const CallArgs&) { return Value(HtmlEscape(ToStr(v))); }

Result<Value> FLength(Interpreter&, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Kind::kUndefined: return Value(0);
    case Kind::kString: {
      int64_t n = 0;  // code points: every byte that is not a UTF-8 continuation byte
      for (char c : v.str()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      return Value(n);
    }
    case Kind::kList: return Value(static_cast<int64_t>(v.list().size()));
    case Kind::kDict: return Value(static_cast<int64_t>(v.dict().items.size()));
    default: return InvalidArgument("object of type '{}' has no len()", TypeName(v));
  }
}

Result<Value> FDefault(Interpreter&, const Value& v, const CallArgs& a) {
  bool use_default = v.is_undefined() || (BoolArg(a, "boolean", 1, false) && !v.Truthy());
  if (!use_default) return v;
  const Value* d = a.Get("default_value", 0);
  return d != nullptr ? *d : Value("");
}

Result<Value> FTrim(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* chars = a.Get("chars", 0);
  const std::string* set = chars != nullptr && chars->is_string() ? &chars->str() : nullptr;
  return Value(PyStrip(ToStr(v), set, true, true));
}

Result<Value> FFirst(Interpreter&, const Value& v, const CallArgs&) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> FLast(Interpreter&, const Value& v, const CallArgs&) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> FList(Interpreter&, const Value& v, const CallArgs&) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  return Value::MakeList(std::move(items));
}

Result<Value> FReverse(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string u = DecodeUtf8(v.str());
    std::reverse(u.begin(), u.end());
    return Value(EncodeUtf8(u));
  }
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

Result<Value> FItems(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) return InvalidArgument("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, item] : v.dict().items) out.push_back(Value::MakeList({Value(k), item}, true));
  return Value::MakeList(std::move(out));
}

Result<Value> FJoin(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* sep = a.Get("d", 0);
  DSPARK_ASSIGN_OR_RETURN(std::string attr, AttrName(a, "attribute", 1));
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i && sep != nullptr) out += ToStr(*sep);
    Value item = items[i];
    if (!attr.empty()) {
      DSPARK_ASSIGN_OR_RETURN(item, AttrPath(in, item, attr));
    }
    out += ToStr(item);
  }
  return Value(std::move(out));
}

Result<Value> FReplace(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* from = a.Get("old", 0);
  const Value* to = a.Get("new", 1);
  const Value* count = a.Get("count", 2);
  if (from == nullptr || to == nullptr) return InvalidArgument("replace() needs 'old' and 'new'");
  return Value(PyReplace(ToStr(v), ToStr(*from), ToStr(*to),
                         count != nullptr && count->is_integral() ? count->int_value() : -1));
}

Result<Value> FInt(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = a.Get("default", 0);
  Value fallback = def != nullptr ? *def : Value(0);
  if (v.is_undefined()) return InvalidArgument("{}", v.str());  // int(Undefined) raises
  if (v.is_integral()) return Value(v.int_value());
  // Doubles outside int64 would need Python's big ints.
  auto from_double = [&](double d) -> Result<Value> {
    if (!std::isfinite(d)) return fallback;
    if (std::fabs(d) >= 9.2e18) return InvalidArgument("int: {} does not fit in 64 bits", FormatFloat(d));
    return Value(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.kind() == Kind::kFloat) return from_double(v.float_value());
  if (!v.is_string()) return fallback;
  std::string s = PyStrip(v.str(), nullptr, true, true);
  char* end = nullptr;
  errno = 0;
  long long i = std::strtoll(s.c_str(), &end, 10);
  if (!s.empty() && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(i));
  double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == '\0') return from_double(d);
  return fallback;
}

Result<Value> FFloat(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = a.Get("default", 0);
  Value fallback = def != nullptr ? *def : Value(0.0);
  if (v.is_undefined()) return InvalidArgument("{}", v.str());  // float(Undefined) raises
  if (v.is_number()) return Value(v.float_value());
  if (!v.is_string()) return fallback;
  std::string s = PyStrip(v.str(), nullptr, true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == '\0') return Value(d);
  return fallback;
}

Result<Value> FRound(Interpreter&, const Value& v, const CallArgs& a) {
  if (!v.is_number()) return InvalidArgument("type {} doesn't define __round__", TypeName(v));
  const Value* p = a.Get("precision", 0);
  const Value* m = a.Get("method", 1);
  int64_t precision = p != nullptr && p->is_integral() ? p->int_value() : 0;
  std::string method = m != nullptr && m->is_string() ? m->str() : "common";
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.float_value() * scale;
  if (method == "common" && precision >= 0 && std::isfinite(x)) {
    // Python rounds the exact decimal value of the double, ties to even; so does printf.
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), v.float_value());
    if (v.is_integral()) return Value(v.int_value());
    return Value(std::strtod(buf, nullptr));
  } else if (method == "common") {
    x = std::nearbyint(x);
  } else if (method == "ceil") {
    x = std::ceil(x);
  } else if (method == "floor") {
    x = std::floor(x);
  } else {
    return InvalidArgument("method must be common, ceil or floor");
  }
  if (method == "common" && v.is_integral()) return Value(v.int_value());
  return Value(x / scale);
}

Result<Value> FIndent(Interpreter&, const Value& v, const CallArgs& a) {
  // jinja appends "\n" to the value itself, which only works for strings.
  if (!v.is_string()) return InvalidArgument("indent: expected a string, got {}", TypeName(v));
  const Value* w = a.Get("width", 0);
  if (w != nullptr && !w->is_string() && (!w->is_integral() || w->int_value() > 1000)) {
    return InvalidArgument("indent: width must be a string or an integer up to 1000");
  }
  std::string indent = w == nullptr       ? "    "
                       : w->is_string()   ? w->str()
                                          : std::string(static_cast<size_t>(std::max<int64_t>(0, w->int_value())), ' ');
  return Value(JinjaIndent(ToStr(v), indent, BoolArg(a, "first", 1, false), BoolArg(a, "blank", 2, false)));
}

Result<Value> FToJson(Interpreter&, const Value& v, const CallArgs& a) {
  JsonOptions o;
  const Value* indent = a.Get("indent", 0);
  if (indent != nullptr && indent->is_integral()) o.indent = static_cast<int>(indent->int_value());
  if (indent != nullptr && indent->is_string()) return Unimplemented("tojson: string indent is not supported");
  o.ensure_ascii = BoolArg(a, "ensure_ascii", 1, false);
  const Value* seps = a.Get("separators", 2);
  if (seps != nullptr && seps->is_list() && seps->list().size() == 2) {
    o.item_separator = ToStr(seps->list()[0]);
    o.key_separator = ToStr(seps->list()[1]);
  }
  o.sort_keys = BoolArg(a, "sort_keys", 3, false);
  DSPARK_ASSIGN_OR_RETURN(std::string json, ToJson(v, o));
  return Value(std::move(json));
}

// select / reject / selectattr / rejectattr share one body.
Result<Value> SelectImpl(Interpreter& in, const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  if (!v.Truthy()) return Value::MakeList({});  // jinja: `if seq:` before iterating
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.args.empty()) return InvalidArgument("selectattr/rejectattr need an attribute name");
    attr = ToStr(a.args[next++]);
  }
  std::string test;
  if (next < a.args.size()) test = ToStr(a.args[next++]);
  CallArgs test_args;
  test_args.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(next), a.args.end());
  test_args.kwargs = a.kwargs;
  if (!test.empty() && FindTest(test) == nullptr) return InvalidArgument("no test named '{}'", test);
  List out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      DSPARK_ASSIGN_OR_RETURN(subject, AttrPath(in, item, attr));
    }
    bool pass = subject.Truthy();
    if (!test.empty()) {
      DSPARK_ASSIGN_OR_RETURN(pass, in.ApplyTest(test, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}
Result<Value> FSelect(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, false, true); }
Result<Value> FReject(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, false, false); }
Result<Value> FSelectAttr(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, true, true); }
Result<Value> FRejectAttr(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, true, false); }

Result<Value> FMap(Interpreter& in, const Value& v, const CallArgs& a) {
  if (!v.Truthy()) return Value::MakeList({});  // jinja: `if value:` before iterating
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  DSPARK_ASSIGN_OR_RETURN(std::string attr, AttrName(a, "attribute", 99));
  List out;
  if (!attr.empty()) {
    const Value* def = a.Get("default", 99);
    for (const Value& item : items) {
      DSPARK_ASSIGN_OR_RETURN(Value x, AttrPath(in, item, attr));
      out.push_back(x.is_undefined() && def != nullptr ? *def : x);
    }
    return Value::MakeList(std::move(out));
  }
  if (a.args.empty()) return InvalidArgument("map requires a filter argument");
  std::string filter = ToStr(a.args[0]);
  CallArgs fargs;
  fargs.args.assign(a.args.begin() + 1, a.args.end());
  fargs.kwargs = a.kwargs;
  for (const Value& item : items) {
    DSPARK_ASSIGN_OR_RETURN(Value x, in.ApplyFilter(filter, item, fargs));
    out.push_back(std::move(x));
  }
  return Value::MakeList(std::move(out));
}

// Sort key for sort/min/max/unique/dictsort: optional attribute, case folding of strings.
Result<List> SortKeys(Interpreter& in, const List& items, const std::string& attr, bool case_sensitive) {
  List keys;
  for (const Value& item : items) {
    Value k = item;
    if (!attr.empty()) {
      DSPARK_ASSIGN_OR_RETURN(k, AttrPath(in, item, attr));
    }
    if (k.is_string() && !case_sensitive) k = Value(AsciiLower(k.str()));
    keys.push_back(std::move(k));
  }
  return keys;
}

Result<std::vector<size_t>> SortedOrder(const List& keys, bool reverse) {
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    auto c = reverse ? Compare(keys[y], keys[x]) : Compare(keys[x], keys[y]);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return *c < 0;
  });
  if (!error.ok()) return error;
  return order;
}

Result<Value> FSort(Interpreter& in, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  DSPARK_ASSIGN_OR_RETURN(std::string attr, AttrName(a, "attribute", 2));
  DSPARK_ASSIGN_OR_RETURN(List keys, SortKeys(in, items, attr, BoolArg(a, "case_sensitive", 1, false)));
  DSPARK_ASSIGN_OR_RETURN(auto order, SortedOrder(keys, BoolArg(a, "reverse", 0, false)));
  List out;
  for (size_t i : order) out.push_back(items[i]);
  return Value::MakeList(std::move(out));
}

Result<Value> MinMax(Interpreter& in, const Value& v, const CallArgs& a, bool is_max) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  if (items.empty()) return Value::Undefined(is_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
  DSPARK_ASSIGN_OR_RETURN(std::string attr, AttrName(a, "attribute", 1));
  DSPARK_ASSIGN_OR_RETURN(List keys, SortKeys(in, items, attr, BoolArg(a, "case_sensitive", 0, false)));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    DSPARK_ASSIGN_OR_RETURN(int c, Compare(keys[i], keys[best]));
    if (is_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Result<Value> FMax(Interpreter& in, const Value& v, const CallArgs& a) { return MinMax(in, v, a, true); }
Result<Value> FMin(Interpreter& in, const Value& v, const CallArgs& a) { return MinMax(in, v, a, false); }

Result<Value> FUnique(Interpreter& in, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  DSPARK_ASSIGN_OR_RETURN(std::string attr, AttrName(a, "attribute", 1));
  DSPARK_ASSIGN_OR_RETURN(List keys, SortKeys(in, items, attr, BoolArg(a, "case_sensitive", 0, false)));
  List out, seen;
  for (size_t i = 0; i < items.size(); ++i) {
    bool dup = false;
    for (const Value& s : seen) dup |= Equals(s, keys[i]);
    if (dup) continue;
    seen.push_back(keys[i]);
    out.push_back(items[i]);
  }
  return Value::MakeList(std::move(out));
}

Result<Value> FSum(Interpreter& in, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(List items, Iterate(v));
  DSPARK_ASSIGN_OR_RETURN(std::string attr, AttrName(a, "attribute", 0));
  const Value* start = a.Get("start", 1);
  Value total = start != nullptr ? *start : Value(0);
  for (const Value& item : items) {
    Value x = item;
    if (!attr.empty()) {
      DSPARK_ASSIGN_OR_RETURN(x, AttrPath(in, item, attr));
    }
    if (!total.is_number() || !x.is_number()) return InvalidArgument("sum: unsupported operand types");
    total = total.is_integral() && x.is_integral() ? Value(total.int_value() + x.int_value())
                                                   : Value(total.float_value() + x.float_value());
  }
  return total;
}

Result<Value> FDictSort(Interpreter&, const Value& v, const CallArgs& a) {
  if (!v.is_dict()) return InvalidArgument("dictsort: expected a mapping, got {}", TypeName(v));
  bool case_sensitive = BoolArg(a, "case_sensitive", 0, false);
  const Value* by = a.Get("by", 1);
  bool by_value = by != nullptr && ToStr(*by) == "value";
  List items, keys;
  for (const auto& [k, item] : v.dict().items) {
    items.push_back(Value::MakeList({Value(k), item}, true));
    Value key = by_value ? item : Value(k);
    if (key.is_string() && !case_sensitive) key = Value(AsciiLower(key.str()));
    keys.push_back(key);
  }
  DSPARK_ASSIGN_OR_RETURN(auto order, SortedOrder(keys, BoolArg(a, "reverse", 2, false)));
  List out;
  for (size_t i : order) out.push_back(items[i]);
  return Value::MakeList(std::move(out));
}

Result<Value> FFormat(Interpreter&, const Value& v, const CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) {
    return InvalidArgument("can't handle positional and keyword arguments at the same time");
  }
  Value args;
  if (!a.kwargs.empty()) {
    Dict d;
    for (const auto& [k, x] : a.kwargs) d.Set(k, x);
    args = Value::MakeDict(std::move(d));
  } else {
    args = Value::MakeList(a.args, /*is_tuple=*/true);
  }
  DSPARK_ASSIGN_OR_RETURN(std::string s, PercentFormat(ToStr(v), args));
  return Value(std::move(s));
}

// jinja counts matches of the regex \w+.
Result<Value> FWordCount(Interpreter&, const Value& v, const CallArgs&) {
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(ToStr(v))) {
    bool word_char = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                     (c > 0x7F && !IsPySpace(c));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value(words);
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};
constexpr FilterEntry kFilters[] = {
    {"abs", FAbs},           {"attr", FAttr},         {"capitalize", FCapitalize}, {"count", FLength},
    {"d", FDefault},         {"default", FDefault},   {"dictsort", FDictSort},     {"e", FEscape},
    {"escape", FEscape},     {"first", FFirst},       {"format", FFormat},       {"float", FFloat},           {"indent", FIndent},
    {"int", FInt},           {"items", FItems},       {"join", FJoin},             {"last", FLast},
    {"length", FLength},     {"list", FList},         {"lower", FLower},           {"map", FMap},
    {"max", FMax},           {"min", FMin},           {"reject", FReject},         {"rejectattr", FRejectAttr},
    {"replace", FReplace},   {"reverse", FReverse},   {"round", FRound},           {"safe", FSafe},
    {"select", FSelect},     {"selectattr", FSelectAttr}, {"sort", FSort},         {"string", FString},
    {"sum", FSum},           {"title", FTitle},       {"tojson", FToJson},         {"trim", FTrim},
    {"unique", FUnique},     {"upper", FUpper},       {"wordcount", FWordCount},
};

// ----------------------------------------------------------------------------------- tests

const Value& Arg0(const CallArgs& a) {
  static const Value kUndefined;
  return a.args.empty() ? (a.kwargs.empty() ? kUndefined : a.kwargs[0].second) : a.args[0];
}

Result<bool> TDefined(Interpreter&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
Result<bool> TUndefined(Interpreter&, const Value& v, const CallArgs&) { return v.is_undefined(); }
Result<bool> TNone(Interpreter&, const Value& v, const CallArgs&) { return v.is_none(); }
Result<bool> TBoolean(Interpreter&, const Value& v, const CallArgs&) { return v.kind() == Kind::kBool; }
Result<bool> TFalse(Interpreter&, const Value& v, const CallArgs&) { return v.kind() == Kind::kBool && !v.bool_value(); }
Result<bool> TTrue(Interpreter&, const Value& v, const CallArgs&) { return v.kind() == Kind::kBool && v.bool_value(); }
Result<bool> TInteger(Interpreter&, const Value& v, const CallArgs&) { return v.kind() == Kind::kInt; }
Result<bool> TFloat(Interpreter&, const Value& v, const CallArgs&) { return v.kind() == Kind::kFloat; }
Result<bool> TNumber(Interpreter&, const Value& v, const CallArgs&) { return v.is_number(); }
Result<bool> TString(Interpreter&, const Value& v, const CallArgs&) { return v.is_string(); }
Result<bool> TMapping(Interpreter&, const Value& v, const CallArgs&) { return v.is_dict(); }
Result<bool> TIterable(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
Result<bool> TCallable(Interpreter&, const Value& v, const CallArgs&) {
  return v.kind() == Kind::kCallable || v.is_undefined();
}
// jinja: str(value).islower() / isupper(), so non-strings are tested by their text.
Result<bool> TLower(Interpreter&, const Value& v, const CallArgs&) { return PyCharClass("islower", ToStr(v)); }
Result<bool> TUpper(Interpreter&, const Value& v, const CallArgs&) { return PyCharClass("isupper", ToStr(v)); }
Result<bool> TEscaped(Interpreter&, const Value&, const CallArgs&) { return false; }
Result<bool> TEq(Interpreter&, const Value& v, const CallArgs& a) { return Equals(v, Arg0(a)); }
Result<bool> TNe(Interpreter&, const Value& v, const CallArgs& a) { return !Equals(v, Arg0(a)); }
Result<bool> TLt(Interpreter&, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(int c, Compare(v, Arg0(a)));
  return c < 0;
}
Result<bool> TLe(Interpreter&, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(int c, Compare(v, Arg0(a)));
  return c <= 0;
}
Result<bool> TGt(Interpreter&, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(int c, Compare(v, Arg0(a)));
  return c > 0;
}
Result<bool> TGe(Interpreter&, const Value& v, const CallArgs& a) {
  DSPARK_ASSIGN_OR_RETURN(int c, Compare(v, Arg0(a)));
  return c >= 0;
}
Result<bool> TIn(Interpreter&, const Value& v, const CallArgs& a) { return Contains(Arg0(a), v); }
Result<bool> TSameAs(Interpreter&, const Value& v, const CallArgs& a) {
  const Value& o = Arg0(a);
  if (v.kind() != o.kind()) return false;
  if (v.identity() != nullptr) return v.identity() == o.identity();
  return Equals(v, o);
}
// jinja: value % 2 == 1, value % 2 == 0, value % num == 0 (so floats are allowed).
Result<bool> ModuloIs(const Value& v, const Value& divisor, int64_t want) {
  DSPARK_ASSIGN_OR_RETURN(Value m, Arithmetic("%", v, divisor));
  return Equals(m, Value(want));
}
Result<bool> TOdd(Interpreter&, const Value& v, const CallArgs&) { return ModuloIs(v, Value(2), 1); }
Result<bool> TEven(Interpreter&, const Value& v, const CallArgs&) { return ModuloIs(v, Value(2), 0); }
Result<bool> TDivisibleBy(Interpreter&, const Value& v, const CallArgs& a) { return ModuloIs(v, Arg0(a), 0); }
Result<bool> TFilter(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() && FindFilter(v.str()) != nullptr;
}
Result<bool> TTest(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_string() && FindTest(v.str()) != nullptr;
}

struct TestEntry {
  const char* name;
  TestFn fn;
};
constexpr TestEntry kTests[] = {
    {"defined", TDefined},   {"undefined", TUndefined}, {"none", TNone},         {"boolean", TBoolean},
    {"false", TFalse},       {"true", TTrue},           {"integer", TInteger},   {"float", TFloat},
    {"number", TNumber},     {"string", TString},       {"mapping", TMapping},   {"iterable", TIterable},
    {"sequence", TIterable}, {"callable", TCallable},   {"lower", TLower},       {"upper", TUpper},
    {"escaped", TEscaped},   {"eq", TEq},               {"equalto", TEq},        {"==", TEq},
    {"ne", TNe},             {"!=", TNe},               {"lt", TLt},             {"lessthan", TLt},
    {"<", TLt},              {"le", TLe},               {"<=", TLe},             {"gt", TGt},
    {"greaterthan", TGt},    {">", TGt},                {"ge", TGe},             {">=", TGe},
    {"in", TIn},             {"sameas", TSameAs},       {"odd", TOdd},           {"even", TEven},
    {"divisibleby", TDivisibleBy}, {"filter", TFilter}, {"test", TTest},
};

// --------------------------------------------------------------------------------- globals

Result<Value> GRange(const CallArgs& a) {
  int64_t start = 0, stop = 0, step = 1;
  for (const Value& v : a.args) {
    if (!v.is_integral()) return InvalidArgument("range() expects integers, got {}", TypeName(v));
  }
  if (a.args.size() == 1) {
    stop = a.args[0].int_value();
  } else if (a.args.size() == 2 || a.args.size() == 3) {
    start = a.args[0].int_value();
    stop = a.args[1].int_value();
    if (a.args.size() == 3) step = a.args[2].int_value();
  } else {
    return InvalidArgument("range expected 1 to 3 arguments, got {}", a.args.size());
  }
  if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) return InvalidArgument("range too big (more than 100000 items)");
    out.emplace_back(i);
  }
  return Value::MakeList(std::move(out));
}

Result<Dict> KwargsDict(const CallArgs& a, const char* fn) {
  Dict d;
  for (const Value& v : a.args) {
    if (!v.is_dict()) return InvalidArgument("{}() positional argument must be a mapping", fn);
    for (const auto& [k, item] : v.dict().items) d.Set(k, item);
  }
  for (const auto& [k, item] : a.kwargs) d.Set(k, item);
  return d;
}

}  // namespace

FilterFn FindFilter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (name == f.name) return f.fn;
  }
  return nullptr;
}

TestFn FindTest(std::string_view name) {
  for (const auto& t : kTests) {
    if (name == t.name) return t.fn;
  }
  return nullptr;
}

Dict MakeGlobals(const GlobalsOptions& options) {
  Dict g;
  g.Set("range", Value::MakeCallable("range", GRange));
  g.Set("dict", Value::MakeCallable("dict", [](const CallArgs& a) -> Result<Value> {
    DSPARK_ASSIGN_OR_RETURN(Dict d, KwargsDict(a, "dict"));
    return Value::MakeDict(std::move(d));
  }));
  std::vector<Value>* created = options.namespaces;
  g.Set("namespace", Value::MakeCallable("namespace", [created](const CallArgs& a) -> Result<Value> {
    DSPARK_ASSIGN_OR_RETURN(Dict d, KwargsDict(a, "namespace"));
    Value ns = Value::MakeNamespace(std::move(d));
    if (created != nullptr) created->push_back(ns);
    return ns;
  }));
  g.Set("raise_exception", Value::MakeCallable("raise_exception", [](const CallArgs& a) -> Result<Value> {
    std::string message = a.args.empty() ? "" : ToStr(a.args[0]);
    return Status(StatusCode::kInvalidArgument, std::string(kRaisedPrefix) + message);
  }));
  auto now = options.now;
  g.Set("strftime_now", Value::MakeCallable("strftime_now", [now](const CallArgs& a) -> Result<Value> {
    const Value* fmt = a.Get("format", 0);
    if (fmt == nullptr || !fmt->is_string()) return InvalidArgument("strftime_now(format) needs a format string");
    std::tm tm{};
    if (now) {
      tm = now();
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    char buf[512];
    size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
    if (n == 0 && !fmt->str().empty()) return InvalidArgument("strftime_now: formatted date too long or empty");
    return Value(std::string(buf, n));
  }));
  return g;
}

}  // namespace dspark::jinja
