// Statement execution and expression evaluation with Python/jinja2 semantics: `and`/`or` return an
// operand, undefined is falsy and renders as "" but raises when used in arithmetic or attribute
// access, missing keys/attributes/indices yield undefined.
#include "template/eval.h"

#include <cmath>

#include "template/builtins.h"

namespace dspark::jinja {
namespace {

// Limits that keep a hostile template (it ships inside a model file) from exhausting the stack,
// CPU or memory of the server; real chat templates stay orders of magnitude below them.
constexpr int kMaxDepth = 100;                       // nested macro calls
constexpr int64_t kMaxSteps = 1'000'000;             // statements and loop iterations per render
constexpr size_t kMaxOutputBytes = 256u << 20;       // rendered text, and any one repeated string

}  // namespace

namespace {

Status UndefinedError(const Value& v) {
  return InvalidArgument("{}", v.str().empty() ? std::string("value is undefined") : v.str());
}

Status TypeError(const std::string& op, const Value& a, const Value& b) {
  return InvalidArgument("unsupported operand type(s) for {}: '{}' and '{}'", op, TypeName(a), TypeName(b));
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Result<Value> Repeat(const Value& seq, int64_t n) {
  size_t unit = seq.is_string() ? seq.str().size() : seq.list().size() * sizeof(Value);
  if (n > 0 && unit > 0 && static_cast<uint64_t>(n) > kMaxOutputBytes / unit) {
    return InvalidArgument("repetition result too large ({} x {})", n, unit);
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::MakeList(std::move(out), seq.is_tuple());
}

}  // namespace

Result<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(out), a.is_tuple());
    }
    if (a.is_string()) {
      return InvalidArgument("can only concatenate str (not \"{}\") to str", TypeName(b));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return Repeat(a, b.int_value());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return Repeat(b, a.int_value());
  }
  if (!a.is_number() || !b.is_number()) {
    if (op == "%" && a.is_string()) {
      DSPARK_ASSIGN_OR_RETURN(std::string s, PercentFormat(a.str(), b));
      return Value(std::move(s));
    }
    return TypeError(op, a, b);
  }
  const bool ints = a.is_integral() && b.is_integral();
  const double x = a.float_value(), y = b.float_value();
  const int64_t i = a.int_value(), j = b.int_value();
  int64_t r = 0;
  // Python ints are unbounded; ours are 64-bit and refuse to wrap.
  auto overflow = [&] { return InvalidArgument("integer overflow in {} {} {}", i, op, j); };
  if (op == "+") {
    if (!ints) return Value(x + y);
    if (__builtin_add_overflow(i, j, &r)) return overflow();
    return Value(r);
  }
  if (op == "-") {
    if (!ints) return Value(x - y);
    if (__builtin_sub_overflow(i, j, &r)) return overflow();
    return Value(r);
  }
  if (op == "*") {
    if (!ints) return Value(x * y);
    if (__builtin_mul_overflow(i, j, &r)) return overflow();
    return Value(r);
  }
  if (op == "/" || op == "//" || op == "%") {
    if (y == 0) return InvalidArgument("{} by zero", ints && op != "/" ? "integer division or modulo" : "division");
    if (op == "/") return Value(x / y);
    if (ints && i == INT64_MIN && j == -1) return op == "//" ? overflow() : Result<Value>(Value(0));
    if (op == "//") {
      if (ints) return Value(FloorDiv(i, j));
      // CPython's float floor division: from fmod, so 1 // 0.1 == 9.0 like Python.
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      if (div == 0) floordiv = std::copysign(0.0, x / y);
      return Value(floordiv);
    }
    if (ints) return Value(i - FloorDiv(i, j) * j);
    double m = std::fmod(x, y);  // Python: the result takes the divisor's sign, even for zero
    if (m != 0) {
      if ((m < 0) != (y < 0)) m += y;
    } else {
      m = std::copysign(0.0, y);
    }
    return Value(m);
  }
  if (op == "**") {
    if (ints && j >= 0) {
      int64_t base = i, e = j;
      r = 1;
      while (e > 0) {  // square-and-multiply
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow();
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
      }
      return Value(r);
    }
    double p = std::pow(x, y);
    if (std::isinf(p) && std::isfinite(x) && std::isfinite(y)) return InvalidArgument("OverflowError: result too large");
    return Value(p);
  }
  return Internal("unknown operator {}", op);
}

namespace {

// Python slice index normalisation.
int64_t SliceIndex(const Value& v, int64_t n, int64_t step, bool is_start) {
  if (v.is_none() || v.is_undefined()) {
    if (step > 0) return is_start ? 0 : n;
    return is_start ? n - 1 : -1;
  }
  int64_t i = v.int_value();
  if (i < 0) {
    i += n;
    if (i < 0) i = step > 0 ? 0 : -1;
  } else if (i >= n) {
    i = step > 0 ? n : n - 1;
  }
  return i;
}

}  // namespace

Result<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return List{};
    case Kind::kList: return v.list();
    case Kind::kDict: {
      List keys;
      for (const auto& [k, item] : v.dict().items) keys.emplace_back(k);
      return keys;
    }
    case Kind::kString: {
      List chars;
      for (char32_t c : DecodeUtf8(v.str())) {
        std::string s;
        AppendUtf8(c, &s);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: return InvalidArgument("'{}' object is not iterable", TypeName(v));
  }
}

Result<bool> Contains(const Value& container, const Value& x) {
  switch (container.kind()) {
    case Kind::kString:
      if (!x.is_string()) {
        return InvalidArgument("'in <string>' requires string as left operand, not {}", TypeName(x));
      }
      return container.str().find(x.str()) != std::string::npos;
    case Kind::kList:
      for (const Value& item : container.list()) {
        if (Equals(item, x)) return true;
      }
      return false;
    case Kind::kDict:
      if (x.is_list() && !x.is_tuple()) return InvalidArgument("unhashable type: 'list'");
      if (x.is_dict()) return InvalidArgument("unhashable type: 'dict'");
      return x.is_string() && container.dict().Find(x.str()) != nullptr;
    case Kind::kUndefined: return false;
    default: return InvalidArgument("argument of type '{}' is not iterable", TypeName(container));
  }
}

Interpreter::Interpreter(const Dict* globals, const Dict* context) : globals_(globals), context_(context) {}

Interpreter::~Interpreter() {
  for (Value& loop : loops_) loop.mutable_namespace().items.clear();
}

Status Interpreter::ErrorAt(int line, int column, const Status& cause) const {
  if (cause.message().starts_with("template")) return cause;
  return Status(cause.code(), fmt::format("template:{}:{}: {}", line, column, cause.message()));
}

Status Interpreter::Render(const Body& body, std::string* out) { return Exec(body, out); }

Value Interpreter::Lookup(const std::string& name) const {
  for (const Scope* s = scope_; s != nullptr; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = context_->Find(name)) return *v;
  if (const Value* v = globals_->Find(name)) return *v;
  return Value::Undefined("'" + name + "' is undefined");
}

// Pushes a child scope for its lifetime.
class ScopeGuard {
 public:
  ScopeGuard(Interpreter::Scope** current, Interpreter::Scope* parent) : current_(current), saved_(*current) {
    scope_.parent = parent;
    *current_ = &scope_;
  }
  ~ScopeGuard() { *current_ = saved_; }
  Interpreter::Scope& scope() { return scope_; }

 private:
  Interpreter::Scope** current_;
  Interpreter::Scope* saved_;
  Interpreter::Scope scope_;
};

Status Interpreter::Exec(const Body& body, std::string* out) {
  for (const StmtPtr& s : body) {
    DSPARK_TRY(ExecStmt(*s, out));
    if (flow_ != Flow::kNormal) break;
  }
  return Status::Ok();
}

Status Interpreter::ExecStmt(const Stmt& s, std::string* out) {
  if (++steps_ > kMaxSteps) {
    return ErrorAt(s.line, s.column, InvalidArgument("template ran more than {} steps", kMaxSteps));
  }
  if (out->size() > kMaxOutputBytes) {
    return ErrorAt(s.line, s.column, InvalidArgument("template output exceeds {} bytes", kMaxOutputBytes));
  }
  switch (s.kind) {
    case Stmt::Kind::kText: *out += s.text; return Status::Ok();
    case Stmt::Kind::kOutput: {
      DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      *out += ToStr(v);
      return Status::Ok();
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        DSPARK_ASSIGN_OR_RETURN(Value c, Eval(*cond));
        if (c.Truthy()) return Exec(body, out);
      }
      return Exec(s.else_body, out);
    case Stmt::Kind::kFor: return ExecFor(s, out);
    case Stmt::Kind::kSet: {
      DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      return Assign(s.target, v, s);
    }
    case Stmt::Kind::kSetBlock: {
      std::string text;
      DSPARK_TRY(Exec(s.body, &text));
      return Assign(s.target, Value(std::move(text)), s);
    }
    case Stmt::Kind::kMacro: scope_->vars[s.name] = MakeMacro(s, &root_); return Status::Ok();
    case Stmt::Kind::kCallBlock: {
      const Expr& call = *s.expr;
      DSPARK_ASSIGN_OR_RETURN(Value fn, Eval(*call.kids[0]));
      DSPARK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1));
      args.kwargs.emplace_back("caller", MakeMacro(s, scope_));
      auto r = CallValue(fn, args);
      if (!r.ok()) return ErrorAt(s.line, s.column, r.status());
      *out += ToStr(*r);
      return Status::Ok();
    }
    case Stmt::Kind::kFilterBlock: {
      std::string text;
      DSPARK_TRY(Exec(s.body, &text));
      ScopeGuard guard(&scope_, scope_);
      guard.scope().vars["\x01filter_body"] = Value(std::move(text));
      DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      *out += ToStr(v);
      return Status::Ok();
    }
    case Stmt::Kind::kBreak: flow_ = Flow::kBreak; return Status::Ok();
    case Stmt::Kind::kContinue: flow_ = Flow::kContinue; return Status::Ok();
    case Stmt::Kind::kScope: {
      std::vector<Value> values;
      for (const auto& [target, expr] : s.with_targets) {
        DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*expr));
        values.push_back(std::move(v));
      }
      ScopeGuard guard(&scope_, scope_);
      for (size_t i = 0; i < values.size(); ++i) DSPARK_TRY(Assign(s.with_targets[i].first, values[i], s));
      return Exec(s.body, out);
    }
  }
  return Status::Ok();
}

Status Interpreter::Assign(const Target& target, const Value& value, const Stmt& s) {
  if (!target.attr.empty()) {
    Value ns = Lookup(target.names[0]);
    if (ns.kind() != Kind::kNamespace) {
      return ErrorAt(s.line, s.column, InvalidArgument("cannot assign attribute on non-namespace object"));
    }
    ns.mutable_namespace().Set(target.attr, value);
    if (ns.depth() > kMaxValueDepth) {
      return ErrorAt(s.line, s.column, InvalidArgument("value nested deeper than {} levels", kMaxValueDepth));
    }
    return Status::Ok();
  }
  if (!target.is_tuple) {
    scope_->vars[target.names[0]] = value;
    return Status::Ok();
  }
  auto items = Iterate(value);
  if (!items.ok()) return ErrorAt(s.line, s.column, items.status());
  if (items->size() != target.names.size()) {
    return ErrorAt(s.line, s.column,
                   InvalidArgument("{} values to unpack (expected {}, got {})",
                                   items->size() < target.names.size() ? "not enough" : "too many",
                                   target.names.size(), items->size()));
  }
  for (size_t i = 0; i < items->size(); ++i) scope_->vars[target.names[i]] = (*items)[i];
  return Status::Ok();
}

Status Interpreter::ExecFor(const Stmt& s, std::string* out) {
  DSPARK_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  auto all = Iterate(iterable);
  if (!all.ok()) return ErrorAt(s.expr->line, s.expr->column, all.status());
  List items;
  if (s.cond) {
    for (const Value& item : *all) {
      ScopeGuard guard(&scope_, scope_);
      DSPARK_TRY(Assign(s.target, item, s));
      DSPARK_ASSIGN_OR_RETURN(Value keep, Eval(*s.cond));
      if (keep.Truthy()) items.push_back(item);
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) {
    ScopeGuard guard(&scope_, scope_);
    return Exec(s.else_body, out);
  }
  const auto n = static_cast<int64_t>(items.size());
  auto index = std::make_shared<int64_t>(0);
  Value cycle = Value::MakeCallable("cycle", [index](const CallArgs& a) -> Result<Value> {
    if (a.args.empty()) return InvalidArgument("no items for cycling given");
    return a.args[static_cast<size_t>(*index) % a.args.size()];
  });
  // Like jinja's LoopContext, one object advanced in place on every iteration.
  Dict loop_fields;
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                          "depth0", "previtem", "nextitem", "cycle"}) {
    loop_fields.items.emplace_back(key, Value());
  }
  loop_fields.items[6].second = Value(n);
  loop_fields.items[7].second = Value(1);
  loop_fields.items[8].second = Value(0);
  loop_fields.items[11].second = cycle;
  Value loop = Value::MakeNamespace(std::move(loop_fields));
  loops_.push_back(loop);
  for (int64_t i = 0; i < n; ++i) {
    if (++steps_ > kMaxSteps) {
      return ErrorAt(s.line, s.column, InvalidArgument("template ran more than {} steps", kMaxSteps));
    }
    *index = i;
    ScopeGuard guard(&scope_, scope_);
    DSPARK_TRY(Assign(s.target, items[i], s));
    Dict& l = loop.mutable_namespace();
    l.items[0].second = Value(i + 1);
    l.items[1].second = Value(i);
    l.items[2].second = Value(n - i);
    l.items[3].second = Value(n - i - 1);
    l.items[4].second = Value(i == 0);
    l.items[5].second = Value(i == n - 1);
    l.items[9].second = i > 0 ? items[i - 1] : Value::Undefined("'loop' has no previtem");
    l.items[10].second = i + 1 < n ? items[i + 1] : Value::Undefined("'loop' has no nextitem");
    guard.scope().vars["loop"] = loop;
    DSPARK_TRY(Exec(s.body, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::Ok();
}

Value Interpreter::MakeMacro(const Stmt& s, Scope* closure) {
  const Stmt* stmt = &s;
  std::string name = s.kind == Stmt::Kind::kMacro ? s.name : "caller";
  return Value::MakeCallable(name, [this, stmt, closure](const CallArgs& args) -> Result<Value> {
    if (depth_ >= kMaxDepth) return InvalidArgument("macro calls nested deeper than {}", kMaxDepth);
    ++depth_;
    Flow saved_flow = flow_;
    flow_ = Flow::kNormal;
    std::string text;
    Status st;
    {
      ScopeGuard guard(&scope_, closure);
      st = RunMacro(*stmt, args, &guard.scope(), &text);
    }
    flow_ = saved_flow;
    --depth_;
    DSPARK_TRY(st);
    return Value(std::move(text));
  });
}

Status Interpreter::RunMacro(const Stmt& s, const CallArgs& args, Scope* frame, std::string* out) {
  List varargs;
  for (size_t i = s.params.size(); i < args.args.size(); ++i) varargs.push_back(args.args[i]);
  Dict kwargs;
  for (const auto& [k, v] : args.kwargs) {
    if (k == "caller") {
      frame->vars["caller"] = v;
      continue;
    }
    bool is_param = false;
    for (const auto& p : s.params) is_param |= p == k;
    if (!is_param) kwargs.Set(k, v);
  }
  frame->vars["varargs"] = Value::MakeList(std::move(varargs), /*is_tuple=*/true);
  frame->vars["kwargs"] = Value::MakeDict(std::move(kwargs));
  for (size_t i = 0; i < s.params.size(); ++i) {
    const Value* v = args.Get(s.params[i], i);
    if (v != nullptr) {
      frame->vars[s.params[i]] = *v;
    } else if (i < s.defaults.size() && s.defaults[i] != nullptr) {
      DSPARK_ASSIGN_OR_RETURN(frame->vars[s.params[i]], Eval(*s.defaults[i]));
    } else {
      frame->vars[s.params[i]] = Value::Undefined("'" + s.params[i] + "' is undefined");
    }
  }
  return Exec(s.body, out);
}

Result<Value> Interpreter::Eval(const Expr& e) {
  DSPARK_ASSIGN_OR_RETURN(Value v, EvalImpl(e));
  if (v.depth() > kMaxValueDepth) {
    return ErrorAt(e.line, e.column, InvalidArgument("value nested deeper than {} levels", kMaxValueDepth));
  }
  return v;
}

Result<Value> Interpreter::EvalImpl(const Expr& e) {
  auto wrap = [&](Result<Value> r) -> Result<Value> {
    if (r.ok()) return r;
    return ErrorAt(e.line, e.column, r.status());
  };
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const ExprPtr& k : e.kids) {
        DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*k));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        DSPARK_ASSIGN_OR_RETURN(Value k, Eval(*e.kids[i]));
        DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[i + 1]));
        if (!k.is_string()) return wrap(Unimplemented("dict keys must be strings, got {}", TypeName(k)));
        d.Set(k.str(), std::move(v));
      }
      return Value::MakeDict(std::move(d));
    }
    case Expr::Kind::kAttr: {
      DSPARK_ASSIGN_OR_RETURN(Value obj, Eval(*e.kids[0]));
      return wrap(GetAttr(obj, e.name));
    }
    case Expr::Kind::kItem: {
      DSPARK_ASSIGN_OR_RETURN(Value obj, Eval(*e.kids[0]));
      DSPARK_ASSIGN_OR_RETURN(Value key, Eval(*e.kids[1]));
      return wrap(GetItem(obj, key));
    }
    case Expr::Kind::kSlice: {
      DSPARK_ASSIGN_OR_RETURN(Value obj, Eval(*e.kids[0]));
      return wrap(Slice(obj, e));
    }
    case Expr::Kind::kCall: return wrap(EvalCall(e));
    case Expr::Kind::kFilter: {
      DSPARK_ASSIGN_OR_RETURN(Value input, Eval(*e.kids[0]));
      DSPARK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      return wrap(e.filter(*this, input, args));
    }
    case Expr::Kind::kTest: {
      DSPARK_ASSIGN_OR_RETURN(Value input, Eval(*e.kids[0]));
      DSPARK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      auto r = e.test(*this, input, args);
      if (!r.ok()) return wrap(r.status());
      return Value(*r != e.negated);
    }
    case Expr::Kind::kUnary: {
      DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[0]));
      if (e.name == "not") return Value(!v.Truthy());
      if (v.is_undefined()) return wrap(UndefinedError(v));
      if (!v.is_number()) return wrap(InvalidArgument("bad operand type for unary {}: '{}'", e.name, TypeName(v)));
      if (e.name == "+") return v.kind() == Kind::kBool ? Value(v.int_value()) : v;
      if (v.kind() == Kind::kFloat) return Value(-v.float_value());
      if (v.int_value() == INT64_MIN) return wrap(InvalidArgument("integer overflow in unary -"));
      return Value(-v.int_value());
    }
    case Expr::Kind::kBinary: return wrap(EvalBinary(e));
    case Expr::Kind::kCond: {
      DSPARK_ASSIGN_OR_RETURN(Value c, Eval(*e.kids[0]));
      if (c.Truthy()) return Eval(*e.kids[1]);
      if (e.kids[2] == nullptr) return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
      return Eval(*e.kids[2]);
    }
  }
  return Internal("unknown expression kind");
}

Result<Value> Interpreter::EvalBinary(const Expr& e) {
  const std::string& op = e.name;
  DSPARK_ASSIGN_OR_RETURN(Value a, Eval(*e.kids[0]));
  if (op == "and") return a.Truthy() ? Eval(*e.kids[1]) : Result<Value>(a);
  if (op == "or") return a.Truthy() ? Result<Value>(a) : Eval(*e.kids[1]);
  DSPARK_ASSIGN_OR_RETURN(Value b, Eval(*e.kids[1]));
  if (op == "~") return Value(ToStr(a) + ToStr(b));
  if (op == "==") return Value(Equals(a, b));
  if (op == "!=") return Value(!Equals(a, b));
  if (op == "in" || op == "notin") {
    DSPARK_ASSIGN_OR_RETURN(bool in, Contains(b, a));
    return Value(in == (op == "in"));
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    auto c = Compare(a, b);
    if (!c.ok()) {
      return InvalidArgument("'{}' not supported between instances of '{}' and '{}'", op, TypeName(a), TypeName(b));
    }
    if (op == "<") return Value(*c < 0);
    if (op == "<=") return Value(*c <= 0);
    if (op == ">") return Value(*c > 0);
    return Value(*c >= 0);
  }
  return Arithmetic(op, a, b);
}

Result<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = 0; i < e.num_args; ++i) {
    DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[first + i]));
    args.args.push_back(std::move(v));
  }
  for (size_t i = 0; i < e.kwarg_names.size(); ++i) {
    DSPARK_ASSIGN_OR_RETURN(Value v, Eval(*e.kids[first + e.num_args + i]));
    args.kwargs.emplace_back(e.kwarg_names[i], std::move(v));
  }
  return args;
}

Result<Value> Interpreter::EvalCall(const Expr& e) {
  DSPARK_ASSIGN_OR_RETURN(Value fn, Eval(*e.kids[0]));
  DSPARK_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  return CallValue(fn, args);
}

Result<Value> Interpreter::CallValue(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) return UndefinedError(fn);
  if (fn.kind() != Kind::kCallable) return InvalidArgument("'{}' object is not callable", TypeName(fn));
  return fn.callable().fn(args);
}

Result<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (auto m = FindMethod(obj, name)) return *m;
  if (obj.is_dict() || obj.kind() == Kind::kNamespace) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  }
  return Value::Undefined(fmt::format("'{} object' has no attribute '{}'", TypeName(obj), name));
}

Result<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().Find(key.str())) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.int_value();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
    } else {
      std::u32string s = DecodeUtf8(obj.str());
      const auto n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(EncodeUtf8(s.substr(static_cast<size_t>(i), 1)));
    }
    return Value::Undefined(fmt::format("'{} object' has no element {}", TypeName(obj), key.int_value()));
  }
  if (key.is_string()) {
    if (obj.kind() == Kind::kNamespace || !obj.is_dict()) return GetAttr(obj, key.str());
    if (auto m = FindMethod(obj, key.str())) return *m;
  }
  return Value::Undefined(fmt::format("'{} object' has no attribute {}", TypeName(obj), Repr(key)));
}

Result<Value> Interpreter::Slice(const Value& obj, const Expr& e) {
  Value parts[3];
  for (int k = 0; k < 3; ++k) {
    if (e.kids[k + 1] == nullptr) continue;
    DSPARK_ASSIGN_OR_RETURN(parts[k], Eval(*e.kids[k + 1]));
    if (!parts[k].is_none() && !parts[k].is_integral()) {
      return InvalidArgument("slice indices must be integers or None, not {}", TypeName(parts[k]));
    }
  }
  int64_t step = parts[2].is_integral() ? parts[2].int_value() : 1;
  if (step == 0) return InvalidArgument("slice step cannot be zero");
  std::u32string chars;
  int64_t n = 0;
  if (obj.is_string()) {
    chars = DecodeUtf8(obj.str());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_undefined()) {
    return UndefinedError(obj);
  } else {
    return InvalidArgument("'{}' object is not subscriptable", TypeName(obj));
  }
  int64_t start = SliceIndex(parts[0], n, step, true);
  int64_t stop = SliceIndex(parts[1], n, step, false);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(chars[static_cast<size_t>(i)]);
    return Value(EncodeUtf8(out));
  }
  List out;
  for (int64_t i : idx) out.push_back(obj.list()[static_cast<size_t>(i)]);
  return Value::MakeList(std::move(out), obj.is_tuple());
}

Result<Value> Interpreter::ApplyFilter(const std::string& name, const Value& input, const CallArgs& args) {
  FilterFn fn = FindFilter(name);
  if (fn == nullptr) return InvalidArgument("unknown filter '{}'", name);
  return fn(*this, input, args);
}

Result<bool> Interpreter::ApplyTest(const std::string& name, const Value& input, const CallArgs& args) {
  TestFn fn = FindTest(name);
  if (fn == nullptr) return InvalidArgument("unknown test '{}'", name);
  return fn(*this, input, args);
}

}  // namespace dspark::jinja
