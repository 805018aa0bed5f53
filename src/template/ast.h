// Syntax tree of a parsed Jinja template: expressions (Expr) and statements (Stmt). Built by
// parser.cc, walked by eval.cc. Filters and tests are resolved to functions at parse time, so an
// unknown name fails when the template is loaded rather than on the first request that reaches it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace dspark::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
class Interpreter;

// A filter receives the piped value; a test returns a bool. Both get the interpreter for
// filters that call other filters or tests (map, select, selectattr).
using FilterFn = Result<Value> (*)(Interpreter& interp, const Value& input, const CallArgs& args);
using TestFn = Result<bool> (*)(Interpreter& interp, const Value& input, const CallArgs& args);

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // kids: items
    kTuple,     // kids: items
    kDict,      // kids: key, value, key, value, ...
    kAttr,      // kids[0].name
    kItem,      // kids[0][kids[1]]
    kSlice,     // kids[0][kids[1]:kids[2]:kids[3]], missing parts are null
    kCall,      // kids[0](kids[1..num_args], kwargs)
    kFilter,    // kids[0] | name(kids[1..num_args], kwargs)
    kTest,      // kids[0] is [not] name(kids[1..num_args])
    kUnary,     // name in {"-", "+", "not"}
    kBinary,    // name is the operator: + - * / // % ** ~ == != < <= > >= in notin and or
    kCond,      // kids[1] if kids[0] else kids[2] (kids[2] may be null)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string name;
  Value literal;
  std::vector<ExprPtr> kids;
  size_t num_args = 0;                    // kCall/kFilter/kTest: positional args after kids[0]
  std::vector<std::string> kwarg_names;   // kCall/kFilter/kTest: names of the trailing kids
  bool negated = false;                   // kTest: "is not"
  FilterFn filter = nullptr;
  TestFn test = nullptr;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Assignment target: a name, "ns.attr", or a tuple of names ("for k, v in ...").
struct Target {
  std::vector<std::string> names;
  std::string attr;  // non-empty: names[0].attr
  bool is_tuple = false;
};

struct Stmt {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ expr }}
    kIf,          // branches: (cond, body)...; else_body
    kFor,         // for target in expr [if cond] body [else else_body]
    kSet,         // set target = expr
    kSetBlock,    // set target %}body{% endset
    kMacro,       // macro name(params = defaults) body
    kCallBlock,   // call expr(...) body: the body becomes `caller()` inside the macro
    kFilterBlock, // filter name(args) body: expr is a kFilter node applied to the rendered body
    kBreak,
    kContinue,
    kScope,       // with / generation: body in a new scope; `with` assignments in with_targets
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;                     // kMacro
  std::vector<std::string> params;      // kMacro, kCallBlock (caller's own params)
  std::vector<ExprPtr> defaults;        // kMacro: one per param, null if none
  std::vector<std::pair<Target, ExprPtr>> with_targets;  // kScope (with)
};

}  // namespace dspark::jinja
