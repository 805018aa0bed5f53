// Tree-walking evaluator for parsed templates. Scoping follows jinja2: each for-loop iteration and
// each macro call gets a fresh scope, `set` writes to the innermost scope, `if` opens none.
// Knows no particular template or chat format.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/value.h"

namespace dspark::jinja {

class Interpreter {
 public:
  // `globals` and `context` are read-only lookups behind the template's own variables; both
  // must outlive the interpreter.
  Interpreter(const Dict* globals, const Dict* context);
  // Empties the loop objects it made, breaking any reference cycles through them.
  ~Interpreter();

  Status Render(const Body& body, std::string* out);

  Result<Value> Eval(const Expr& e);
  Result<Value> CallValue(const Value& fn, const CallArgs& args);
  // jinja2's getattr (attribute first: methods win over dict keys) and getitem (key first).
  Result<Value> GetAttr(const Value& obj, const std::string& name);
  Result<Value> GetItem(const Value& obj, const Value& key);
  // Runs a filter or test by name (for map / select / selectattr).
  Result<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args);
  Result<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args);

  struct Scope {
    std::unordered_map<std::string, Value> vars;
    Scope* parent = nullptr;
  };

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status Exec(const Body& body, std::string* out);
  Status ExecStmt(const Stmt& s, std::string* out);
  Status ExecFor(const Stmt& s, std::string* out);
  Status Assign(const Target& target, const Value& value, const Stmt& s);
  Value MakeMacro(const Stmt& s, Scope* closure);
  Status RunMacro(const Stmt& s, const CallArgs& args, Scope* frame, std::string* out);
  Value Lookup(const std::string& name) const;
  Result<Value> EvalImpl(const Expr& e);
  Result<Value> EvalBinary(const Expr& e);
  Result<Value> EvalCall(const Expr& e);
  Result<CallArgs> EvalArgs(const Expr& e, size_t first);
  Result<Value> Slice(const Value& obj, const Expr& e);
  Status ErrorAt(int line, int column, const Status& cause) const;

  const Dict* globals_;
  const Dict* context_;
  std::vector<std::unique_ptr<Scope>> scope_pool_;
  Scope root_;
  Scope* scope_ = &root_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;      // macro / call nesting, bounded to keep the C++ stack safe
  std::vector<Value> loops_;  // loop objects, emptied on destruction
  int64_t steps_ = 0;  // statements executed, bounded against runaway loops
};

// Items a `for` loop visits: list items, dict keys, string characters; undefined iterates empty.
Result<List> Iterate(const Value& v);
// Python arithmetic: + - * / // % ** on numbers, plus str/list concatenation, repetition and
// printf-style `str % args`.
Result<Value> Arithmetic(const std::string& op, const Value& a, const Value& b);
// Python `x in container`.
Result<bool> Contains(const Value& container, const Value& x);

}  // namespace dspark::jinja
