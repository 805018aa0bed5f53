// Recursive-descent parser mirroring jinja2.parser. Precedence, loosest first:
// conditional (a if c else b) < or < and < not < comparisons (== != < <= > >= in, not in)
// < + - < ~ < * / // % < ** < unary - + < primary with postfix (.x [i] (...)) and filters / tests.
#include "template/parser.h"

#include <initializer_list>
#include <set>

#include "template/builtins.h"
#include "template/lexer.h"

namespace dspark::jinja {
namespace {

const std::set<std::string, std::less<>> kKnownTags = {
    "if", "elif", "else", "endif", "for", "endfor", "set", "endset", "macro", "endmacro",
    "call", "endcall", "filter", "endfilter", "break", "continue", "with", "endwith",
    "generation", "endgeneration"};

// Nesting bound for expressions and blocks: a hostile template (it ships inside a model file)
// must not exhaust the C++ stack of a server thread.
constexpr int kMaxNesting = 100;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<Body> ParseAll() {
    Body body;
    DSPARK_TRY(ParseBody({}, nullptr, &body));
    return body;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  bool IsOp(const Token& t, std::string_view op) const { return t.kind == TokenKind::kOperator && t.text == op; }
  bool IsName(const Token& t, std::string_view n) const { return t.kind == TokenKind::kName && t.text == n; }
  bool AtOp(std::string_view op) const { return IsOp(Cur(), op); }
  bool AtName(std::string_view n) const { return IsName(Cur(), n); }
  bool SkipOp(std::string_view op) {
    if (!AtOp(op)) return false;
    ++pos_;
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!AtName(n)) return false;
    ++pos_;
    return true;
  }

  Status ErrorAt(const Token& t, const std::string& message) const {
    return InvalidArgument("template:{}:{}: {}", t.line, t.column, message);
  }
  static std::string Describe(const Token& t) {
    if (t.kind == TokenKind::kName || t.kind == TokenKind::kOperator) return "'" + t.text + "'";
    return TokenKindName(t.kind);
  }
  Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return Status::Ok();
    return ErrorAt(Cur(), fmt::format("expected '{}', got {}", op, Describe(Cur())));
  }
  Result<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return ErrorAt(Cur(), "expected a name, got " + Describe(Cur()));
    return toks_[pos_++].text;
  }
  Status ExpectBlockEnd() {
    if (Cur().kind == TokenKind::kBlockEnd) {
      ++pos_;
      return Status::Ok();
    }
    return ErrorAt(Cur(), "expected end of statement '%}', got " + Describe(Cur()));
  }

  // ------------------------------------------------------------------------------ statements

  // Parses statements until a "{% name" with name in `ends` (left at the name token) or EOF.
  Status ParseBody(std::initializer_list<std::string_view> ends, const Token* opener, Body* body) {
    while (true) {
      const Token& t = Cur();
      switch (t.kind) {
        case TokenKind::kEof: {
          if (ends.size() == 0) return Status::Ok();
          return ErrorAt(*opener, fmt::format("unclosed '{}' block: missing '{{% {} %}}' before the end "
                                              "of the template", opener->text, *(ends.end() - 1)));
        }
        case TokenKind::kData: {
          auto s = NewStmt(Stmt::Kind::kText, t);
          s->text = t.text;
          body->push_back(std::move(s));
          ++pos_;
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = NewStmt(Stmt::Kind::kOutput, t);
          ++pos_;
          DSPARK_ASSIGN_OR_RETURN(s->expr, ParseTuple(true));
          if (Cur().kind != TokenKind::kVarEnd) return ErrorAt(Cur(), "expected '}}', got " + Describe(Cur()));
          ++pos_;
          body->push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          ++pos_;
          const Token& name = Cur();
          if (name.kind != TokenKind::kName) return ErrorAt(name, "expected a tag name, got " + Describe(name));
          for (std::string_view end : ends) {
            if (name.text == end) return Status::Ok();
          }
          DSPARK_TRY(ParseStatement(ends, body));
          break;
        }
        default: return ErrorAt(t, "unexpected " + Describe(t));
      }
    }
  }

  StmtPtr NewStmt(Stmt::Kind kind, const Token& t) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = t.line;
    s->column = t.column;
    return s;
  }

  Status ParseStatement(std::initializer_list<std::string_view> ends, Body* body) {
    const Token& tag = Cur();
    const std::string& n = tag.text;
    if (!kKnownTags.contains(n)) return ErrorAt(tag, "unknown tag '" + n + "'");
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(tag, fmt::format("blocks nested deeper than {}", kMaxNesting));
    ++pos_;
    StmtPtr s;
    if (n == "if") {
      DSPARK_ASSIGN_OR_RETURN(s, ParseIf(tag));
    } else if (n == "for") {
      DSPARK_ASSIGN_OR_RETURN(s, ParseFor(tag));
    } else if (n == "set") {
      DSPARK_ASSIGN_OR_RETURN(s, ParseSet(tag));
    } else if (n == "macro" || n == "call") {
      DSPARK_ASSIGN_OR_RETURN(s, ParseMacroOrCall(tag));
    } else if (n == "filter") {
      DSPARK_ASSIGN_OR_RETURN(s, ParseFilterBlock(tag));
    } else if (n == "with" || n == "generation") {
      DSPARK_ASSIGN_OR_RETURN(s, ParseScope(tag));
    } else if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) return ErrorAt(tag, "'" + n + "' outside of a loop");
      s = NewStmt(n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, tag);
      DSPARK_TRY(ExpectBlockEnd());
    } else {
      std::string expected;
      for (std::string_view e : ends) expected += (expected.empty() ? "'" : ", '") + std::string(e) + "'";
      return ErrorAt(tag, "unexpected '" + n + "'" +
                              (expected.empty() ? "" : "; expected " + expected));
    }
    body->push_back(std::move(s));
    return Status::Ok();
  }

  // Consumes "{% end... %}" after ParseBody stopped at its name.
  Status CloseBlock() {
    ++pos_;
    return ExpectBlockEnd();
  }

  Result<StmtPtr> ParseIf(const Token& tag) {
    auto s = NewStmt(Stmt::Kind::kIf, tag);
    while (true) {
      DSPARK_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(true));
      DSPARK_TRY(ExpectBlockEnd());
      Body branch;
      DSPARK_TRY(ParseBody({"elif", "else", "endif"}, &tag, &branch));
      s->branches.emplace_back(std::move(cond), std::move(branch));
      if (SkipName("elif")) continue;
      if (SkipName("else")) {
        DSPARK_TRY(ExpectBlockEnd());
        DSPARK_TRY(ParseBody({"endif"}, &tag, &s->else_body));
      }
      DSPARK_TRY(CloseBlock());
      return s;
    }
  }

  Result<Target> ParseTarget(bool allow_tuple, bool allow_attr) {
    Target target;
    bool paren = SkipOp("(");
    DSPARK_ASSIGN_OR_RETURN(std::string first, ExpectName());
    target.names.push_back(first);
    if (allow_attr && !paren && AtOp(".")) {
      ++pos_;
      DSPARK_ASSIGN_OR_RETURN(target.attr, ExpectName());
      return target;
    }
    while ((allow_tuple || paren) && SkipOp(",")) {
      target.is_tuple = true;
      if (Cur().kind != TokenKind::kName) break;
      DSPARK_ASSIGN_OR_RETURN(std::string next, ExpectName());
      target.names.push_back(next);
    }
    if (paren) DSPARK_TRY(ExpectOp(")"));
    return target;
  }

  Result<StmtPtr> ParseFor(const Token& tag) {
    auto s = NewStmt(Stmt::Kind::kFor, tag);
    DSPARK_ASSIGN_OR_RETURN(s->target, ParseTarget(true, false));
    if (!SkipName("in")) return ErrorAt(Cur(), "expected 'in', got " + Describe(Cur()));
    DSPARK_ASSIGN_OR_RETURN(s->expr, ParseTuple(false));
    if (SkipName("if")) {
      DSPARK_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (AtName("recursive")) return ErrorAt(Cur(), "recursive for loops are not supported");
    DSPARK_TRY(ExpectBlockEnd());
    ++loop_depth_;
    DSPARK_TRY(ParseBody({"else", "endfor"}, &tag, &s->body));
    --loop_depth_;
    if (SkipName("else")) {
      DSPARK_TRY(ExpectBlockEnd());
      DSPARK_TRY(ParseBody({"endfor"}, &tag, &s->else_body));
    }
    DSPARK_TRY(CloseBlock());
    return s;
  }

  Result<StmtPtr> ParseSet(const Token& tag) {
    auto s = NewStmt(Stmt::Kind::kSet, tag);
    DSPARK_ASSIGN_OR_RETURN(s->target, ParseTarget(true, true));
    if (SkipOp("=")) {
      DSPARK_ASSIGN_OR_RETURN(s->expr, ParseTuple(true));
      DSPARK_TRY(ExpectBlockEnd());
      return s;
    }
    if (s->target.is_tuple || !s->target.attr.empty()) return ErrorAt(Cur(), "expected '='");
    s->kind = Stmt::Kind::kSetBlock;
    DSPARK_TRY(ExpectBlockEnd());
    DSPARK_TRY(ParseBody({"endset"}, &tag, &s->body));
    DSPARK_TRY(CloseBlock());
    return s;
  }

  // "macro name(a, b=1)" or "call[(params)] expr(...)".
  Result<StmtPtr> ParseMacroOrCall(const Token& tag) {
    bool is_macro = tag.text == "macro";
    auto s = NewStmt(is_macro ? Stmt::Kind::kMacro : Stmt::Kind::kCallBlock, tag);
    if (is_macro) {
      DSPARK_ASSIGN_OR_RETURN(s->name, ExpectName());
    }
    if (is_macro || AtOp("(")) {
      DSPARK_TRY(ExpectOp("("));
      while (!AtOp(")")) {
        if (!s->params.empty()) DSPARK_TRY(ExpectOp(","));
        if (AtOp(")")) break;
        DSPARK_ASSIGN_OR_RETURN(std::string param, ExpectName());
        s->params.push_back(param);
        ExprPtr def;
        if (SkipOp("=")) {
          DSPARK_ASSIGN_OR_RETURN(def, ParseExpression(true));
        }
        s->defaults.push_back(std::move(def));
      }
      ++pos_;
    }
    if (!is_macro) {
      DSPARK_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
      if (s->expr->kind != Expr::Kind::kCall) return ErrorAt(tag, "expected a call after 'call'");
    }
    DSPARK_TRY(ExpectBlockEnd());
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    DSPARK_TRY(ParseBody({is_macro ? "endmacro" : "endcall"}, &tag, &s->body));
    loop_depth_ = saved_depth;
    DSPARK_TRY(CloseBlock());
    return s;
  }

  Result<StmtPtr> ParseFilterBlock(const Token& tag) {
    auto s = NewStmt(Stmt::Kind::kFilterBlock, tag);
    ExprPtr input = NewExpr(Expr::Kind::kName, tag);
    input->name = "\x01filter_body";
    DSPARK_ASSIGN_OR_RETURN(s->expr, ParseFilters(std::move(input), /*first_without_pipe=*/true));
    DSPARK_TRY(ExpectBlockEnd());
    DSPARK_TRY(ParseBody({"endfilter"}, &tag, &s->body));
    DSPARK_TRY(CloseBlock());
    return s;
  }

  Result<StmtPtr> ParseScope(const Token& tag) {
    auto s = NewStmt(Stmt::Kind::kScope, tag);
    bool is_with = tag.text == "with";
    while (is_with && Cur().kind != TokenKind::kBlockEnd) {
      if (!s->with_targets.empty()) DSPARK_TRY(ExpectOp(","));
      DSPARK_ASSIGN_OR_RETURN(Target t, ParseTarget(false, false));
      DSPARK_TRY(ExpectOp("="));
      DSPARK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      s->with_targets.emplace_back(std::move(t), std::move(value));
    }
    DSPARK_TRY(ExpectBlockEnd());
    DSPARK_TRY(ParseBody({is_with ? "endwith" : "endgeneration"}, &tag, &s->body));
    DSPARK_TRY(CloseBlock());
    return s;
  }

  // ----------------------------------------------------------------------------- expressions

  ExprPtr NewExpr(Expr::Kind kind, const Token& t) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = t.line;
    e->column = t.column;
    return e;
  }

  ExprPtr Binary(const Token& t, std::string op, ExprPtr l, ExprPtr r) {
    auto e = NewExpr(Expr::Kind::kBinary, t);
    e->name = std::move(op);
    e->kids.push_back(std::move(l));
    e->kids.push_back(std::move(r));
    return e;
  }

  // Comma-separated expressions become a tuple ("{{ a, b }}", "for x in a, b").
  Result<ExprPtr> ParseTuple(bool with_condexpr) {
    const Token& start = Cur();
    DSPARK_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!AtOp(",")) return first;
    auto tuple = NewExpr(Expr::Kind::kTuple, start);
    tuple->kids.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Cur().kind == TokenKind::kVarEnd || Cur().kind == TokenKind::kBlockEnd || AtOp("=") || AtOp(")")) break;
      DSPARK_ASSIGN_OR_RETURN(ExprPtr next, ParseExpression(with_condexpr));
      tuple->kids.push_back(std::move(next));
    }
    return tuple;
  }

  // Counts nesting for the lifetime of one recursive parse call.
  struct DepthGuard {
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    int* depth_;
  };

  Result<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), fmt::format("expression nested deeper than {}", kMaxNesting));
    if (!with_condexpr) return ParseOr();
    const Token& start = Cur();
    DSPARK_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (SkipName("if")) {
      auto cond = NewExpr(Expr::Kind::kCond, start);
      DSPARK_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr other;
      if (SkipName("else")) {
        DSPARK_ASSIGN_OR_RETURN(other, ParseExpression(true));
      }
      cond->kids.push_back(std::move(test));
      cond->kids.push_back(std::move(expr));
      cond->kids.push_back(std::move(other));
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> ParseOr() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (AtName("or")) {
      const Token& t = toks_[pos_++];
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = Binary(t, "or", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (AtName("and")) {
      const Token& t = toks_[pos_++];
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = Binary(t, "and", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), fmt::format("expression nested deeper than {}", kMaxNesting));
    if (AtName("not")) {
      auto e = NewExpr(Expr::Kind::kUnary, toks_[pos_++]);
      e->name = "not";
      DSPARK_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->kids.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParseMath1());
    // Chained comparisons (a < b < c) are folded pairwise with "and" semantics in eval.
    while (true) {
      const Token& t = Cur();
      std::string op;
      if (t.kind == TokenKind::kOperator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        ++pos_;
      } else if (IsName(t, "in")) {
        op = "in";
        ++pos_;
      } else if (IsName(t, "not") && IsName(Peek(), "in")) {
        op = "notin";
        pos_ += 2;
      } else {
        return left;
      }
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      left = Binary(t, op, std::move(left), std::move(right));
    }
  }

  Result<ExprPtr> ParseMath1() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (AtOp("+") || AtOp("-")) {
      const Token& t = toks_[pos_++];
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = Binary(t, t.text, std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> ParseConcat() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (AtOp("~")) {
      const Token& t = toks_[pos_++];
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = Binary(t, "~", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> ParseMath2() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (AtOp("*") || AtOp("/") || AtOp("//") || AtOp("%")) {
      const Token& t = toks_[pos_++];
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = Binary(t, t.text, std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> ParsePow() {
    DSPARK_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (AtOp("**")) {
      const Token& t = toks_[pos_++];
      DSPARK_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = Binary(t, "**", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxNesting) return ErrorAt(Cur(), fmt::format("expression nested deeper than {}", kMaxNesting));
    ExprPtr node;
    if (AtOp("-") || AtOp("+")) {
      node = NewExpr(Expr::Kind::kUnary, Cur());
      node->name = toks_[pos_++].text;
      DSPARK_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->kids.push_back(std::move(operand));
    } else {
      DSPARK_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    DSPARK_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      DSPARK_ASSIGN_OR_RETURN(node, ParseFilters(std::move(node), false));
    }
    return node;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    switch (t.kind) {
      case TokenKind::kName: {
        ++pos_;
        auto e = NewExpr(Expr::Kind::kLiteral, t);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::kString: {
        auto e = NewExpr(Expr::Kind::kLiteral, t);
        std::string s;
        while (Cur().kind == TokenKind::kString) s += toks_[pos_++].text;
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        auto e = NewExpr(Expr::Kind::kLiteral, t);
        e->literal = t.kind == TokenKind::kInt ? Value(t.int_value) : Value(t.float_value);
        ++pos_;
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          ++pos_;
          if (SkipOp(")")) return NewExpr(Expr::Kind::kTuple, t);
          DSPARK_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true));
          DSPARK_TRY(ExpectOp(")"));
          return inner;
        }
        if (t.text == "[" || t.text == "{") {
          bool is_list = t.text == "[";
          auto e = NewExpr(is_list ? Expr::Kind::kList : Expr::Kind::kDict, t);
          ++pos_;
          const char* close = is_list ? "]" : "}";
          while (!AtOp(close)) {
            if (!e->kids.empty()) DSPARK_TRY(ExpectOp(","));
            if (AtOp(close)) break;
            DSPARK_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            e->kids.push_back(std::move(item));
            if (!is_list) {
              DSPARK_TRY(ExpectOp(":"));
              DSPARK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
              e->kids.push_back(std::move(value));
            }
          }
          ++pos_;
          return e;
        }
        break;
      default: break;
    }
    return ErrorAt(t, "unexpected " + Describe(t) + " in expression");
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const Token& t = Cur();
      if (IsOp(t, ".")) {
        ++pos_;
        if (Cur().kind == TokenKind::kInt) {
          auto e = NewExpr(Expr::Kind::kItem, t);
          auto key = NewExpr(Expr::Kind::kLiteral, Cur());
          key->literal = Value(toks_[pos_++].int_value);
          e->kids.push_back(std::move(node));
          e->kids.push_back(std::move(key));
          node = std::move(e);
          continue;
        }
        auto e = NewExpr(Expr::Kind::kAttr, t);
        DSPARK_ASSIGN_OR_RETURN(e->name, ExpectName());
        e->kids.push_back(std::move(node));
        node = std::move(e);
      } else if (IsOp(t, "[")) {
        ++pos_;
        DSPARK_ASSIGN_OR_RETURN(node, ParseSubscript(t, std::move(node)));
      } else if (IsOp(t, "(")) {
        auto e = NewExpr(Expr::Kind::kCall, t);
        e->kids.push_back(std::move(node));
        DSPARK_TRY(ParseCallArgs(e.get()));
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(const Token& t, ExprPtr node) {
    ExprPtr parts[3];
    bool is_slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!AtOp(":") && !AtOp("]")) {
        DSPARK_ASSIGN_OR_RETURN(parts[k], ParseExpression(true));
      }
      if (k < 2 && SkipOp(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    DSPARK_TRY(ExpectOp("]"));
    auto e = NewExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, t);
    e->kids.push_back(std::move(node));
    if (!is_slice && parts[0] == nullptr) return ErrorAt(t, "empty subscript");
    e->kids.push_back(std::move(parts[0]));
    if (is_slice) {
      e->kids.push_back(std::move(parts[1]));
      e->kids.push_back(std::move(parts[2]));
    }
    return e;
  }

  // "(" positional, ..., name=value, ... ")" appended to e->kids.
  Status ParseCallArgs(Expr* e) {
    DSPARK_TRY(ExpectOp("("));
    bool first = true;
    while (!AtOp(")")) {
      if (!first) DSPARK_TRY(ExpectOp(","));
      first = false;
      if (AtOp(")")) break;
      if (AtOp("*") || AtOp("**")) return ErrorAt(Cur(), "*args / **kwargs in calls are not supported");
      if (Cur().kind == TokenKind::kName && IsOp(Peek(), "=")) {
        e->kwarg_names.push_back(Cur().text);
        pos_ += 2;
        DSPARK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->kids.push_back(std::move(value));
      } else {
        if (!e->kwarg_names.empty()) return ErrorAt(Cur(), "positional argument follows keyword argument");
        DSPARK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->kids.push_back(std::move(value));
        ++e->num_args;
      }
    }
    ++pos_;
    return Status::Ok();
  }

  // "| filter(args)" and "is [not] test args" chains; `first_without_pipe` parses the
  // "{% filter name %}" form, whose first filter has no leading "|".
  Result<ExprPtr> ParseFilters(ExprPtr node, bool first_without_pipe) {
    while (true) {
      const Token& t = Cur();
      if (IsOp(t, "|") || first_without_pipe) {
        if (!first_without_pipe) ++pos_;
        first_without_pipe = false;
        const Token& name_tok = Cur();
        DSPARK_ASSIGN_OR_RETURN(std::string name, ExpectName());
        while (AtOp(".")) {
          ++pos_;
          DSPARK_ASSIGN_OR_RETURN(std::string part, ExpectName());
          name += "." + part;
        }
        auto e = NewExpr(Expr::Kind::kFilter, name_tok);
        e->filter = FindFilter(name);
        if (e->filter == nullptr) return ErrorAt(name_tok, "unknown filter '" + name + "'");
        e->name = name;
        e->kids.push_back(std::move(node));
        if (AtOp("(")) DSPARK_TRY(ParseCallArgs(e.get()));
        node = std::move(e);
      } else if (IsName(t, "is")) {
        ++pos_;
        auto e = NewExpr(Expr::Kind::kTest, t);
        e->negated = SkipName("not");
        const Token& name_tok = Cur();
        DSPARK_ASSIGN_OR_RETURN(e->name, ExpectName());
        e->test = FindTest(e->name);
        if (e->test == nullptr) return ErrorAt(name_tok, "unknown test '" + e->name + "'");
        e->kids.push_back(std::move(node));
        const Token& c = Cur();
        if (IsOp(c, "(")) {
          DSPARK_TRY(ParseCallArgs(e.get()));
        } else if ((c.kind == TokenKind::kName || c.kind == TokenKind::kString || c.kind == TokenKind::kInt ||
                    c.kind == TokenKind::kFloat || IsOp(c, "[") || IsOp(c, "{")) &&
                   !IsName(c, "else") && !IsName(c, "or") && !IsName(c, "and")) {
          if (IsName(c, "is")) return ErrorAt(c, "you cannot chain multiple tests with 'is'");
          DSPARK_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          DSPARK_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          e->kids.push_back(std::move(arg));
          e->num_args = 1;
        }
        node = std::move(e);
      } else if (IsOp(t, "(")) {
        auto e = NewExpr(Expr::Kind::kCall, t);
        e->kids.push_back(std::move(node));
        DSPARK_TRY(ParseCallArgs(e.get()));
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> ParseTemplate(std::string_view source) {
  DSPARK_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).ParseAll();
}

}  // namespace dspark::jinja
