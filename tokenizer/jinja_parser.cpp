// Recursive-descent parser for the chat template Jinja subset (see jinja_ast.hpp), on jinja_lexer tokens.
#include <set>

#include "tokenizer/jinja_ast.hpp"
#include "tokenizer/jinja_lexer.hpp"

namespace actord::jinja {
namespace {

const std::set<std::string, std::less<>> kFilters = {
    "abs",  "capitalize", "count",      "d",       "default", "dictsort", "first",  "float",  "indent",
    "int",  "items",      "join",       "last",    "length",  "list",     "lower",  "map",    "max",
    "min",  "reject",     "rejectattr", "replace", "reverse", "round",    "safe",   "select", "selectattr",
    "sort", "string",     "sum",        "title",   "tojson",  "trim",     "unique", "upper",  "wordcount"};

const std::set<std::string, std::less<>> kTests = {
    "defined", "undefined", "none",  "string",   "mapping",  "iterable", "number", "integer",     "float",
    "boolean", "true",      "false", "sequence", "callable", "even",     "odd",    "divisibleby", "equalto",
    "eq",      "==",        "ne",    "!=",       "lt",       "<",        "gt",     ">",           "le",
    "<=",      "ge",        ">=",    "in",       "sameas",   "lower",    "upper"};

const std::set<std::string, std::less<>> kMethods = {
    "strip",   "lstrip",     "rstrip",  "startswith", "endswith", "split", "rsplit", "upper",      "lower",   "replace",
    "title",   "capitalize", "join",    "find",       "rfind",    "count", "index",  "splitlines", "isdigit", "isalpha",
    "isalnum", "isspace",    "isupper", "islower",    "get",      "items", "keys",   "values",     "cycle"};

const std::set<std::string, std::less<>> kGlobals = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

const std::set<std::string, std::less<>> kUnsupportedTags = {
    "include", "extends", "block", "import", "from", "call", "filter", "with", "autoescape", "do", "trans"};

StmtPtr new_stmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse() {
    std::string end;
    Body body = parse_body({}, &end);
    for (const auto& [name, line] : called_names_)
      if (!kGlobals.count(name) && !macros_.count(name))
        fail(Errc::unsupported, line, "function '" + name + "' is not supported");
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& tok = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return tok;
  }
  bool is_op(std::string_view op, size_t k = 0) const { return peek(k).type == T::op && peek(k).s == op; }
  bool is_name(std::string_view nm, size_t k = 0) const { return peek(k).type == T::name && peek(k).s == nm; }
  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case T::eof:
        return "end of template";
      case T::var_end:
        return "'}}'";
      case T::block_end:
        return "'%}'";
      case T::string:
        return "string";
      case T::integer:
      case T::floating:
        return "number";
      case T::text:
        return "template text";
      default:
        return "'" + tok.s + "'";
    }
  }
  [[noreturn]] void unexpected(std::string_view expected) const {
    fail(Errc::parse_error, peek().line, "expected " + std::string(expected) + ", got " + describe(peek()));
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) unexpected("'" + std::string(op) + "'");
    next();
  }
  void expect_block_end() {
    if (peek().type != T::block_end) unexpected("'%}'");
    next();
  }
  std::string expect_name() {
    if (peek().type != T::name) unexpected("a name");
    return next().s;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > 200) fail(Errc::parse_error, p_.peek().line, "template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // Parses statements until a block tag whose keyword is in `ends` (consumed: begin and keyword).
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* found) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.type == T::eof) {
        if (ends.size() == 0) return body;
        fail(Errc::parse_error, tok.line, "unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
      }
      if (tok.type == T::text) {
        auto s = new_stmt(StmtKind::text, tok.line);
        s->text = tok.s;
        next();
        body.push_back(std::move(s));
      } else if (tok.type == T::var_begin) {
        next();
        auto s = new_stmt(StmtKind::output, tok.line);
        s->expr = parse_tuple(true);
        if (peek().type != T::var_end) unexpected("'}}'");
        next();
        body.push_back(std::move(s));
      } else if (tok.type == T::block_begin) {
        const Token& kw = peek(1);
        if (kw.type != T::name) fail(Errc::parse_error, kw.line, "expected a tag name, got " + describe(kw));
        for (auto e : ends)
          if (kw.s == e) {
            next();
            next();
            *found = kw.s;
            return body;
          }
        next();
        body.push_back(parse_statement());
      } else {
        unexpected("template text or a tag");
      }
    }
  }

  StmtPtr parse_statement() {
    const Token kw = next();
    const int line = kw.line;
    const std::string& k = kw.s;
    if (k == "for") return parse_for(line);
    if (k == "if") return parse_if(line);
    if (k == "set") return parse_set(line);
    if (k == "macro") return parse_macro(line);
    if (k == "break" || k == "continue") {
      expect_block_end();
      if (loop_depth_ == 0) fail(Errc::parse_error, line, "'" + k + "' outside of a loop");
      return new_stmt(k == "break" ? StmtKind::break_ : StmtKind::continue_, line);
    }
    if (k == "generation") {
      expect_block_end();
      auto s = new_stmt(StmtKind::block, line);
      std::string end;
      s->body = parse_body({"endgeneration"}, &end);
      expect_block_end();
      return s;
    }
    if (kUnsupportedTags.count(k)) fail(Errc::unsupported, line, "tag '" + k + "' is not supported");
    fail(Errc::parse_error, line, "unknown tag '" + k + "'");
  }

  StmtPtr parse_for(int line) {
    auto s = new_stmt(StmtKind::for_, line);
    const bool paren = is_op("(");
    if (paren) next();
    s->names.push_back(expect_name());
    while (is_op(",")) {
      next();
      s->names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    if (!is_name("in")) unexpected("'in'");
    next();
    s->expr = parse_tuple(false);
    if (is_name("if")) {
      next();
      s->cond = parse_expression(true);
    }
    if (is_name("recursive")) fail(Errc::unsupported, peek().line, "recursive loops are not supported");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_if(int line) {
    auto s = new_stmt(StmtKind::if_, line);
    std::string end = "if";
    while (end == "if" || end == "elif") {
      ExprPtr cond = parse_tuple(true);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(body));
    }
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    auto s = new_stmt(StmtKind::set, line);
    const std::string first = expect_name();
    if (is_op(".")) {
      next();
      s->text = first;
      s->attr = expect_name();
    } else {
      s->names.push_back(first);
      while (is_op(",")) {
        next();
        s->names.push_back(expect_name());
      }
    }
    if (is_op("=")) {
      next();
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (is_op("|")) fail(Errc::unsupported, peek().line, "filtered block set is not supported");
    if (s->names.size() != 1) unexpected("'='");
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(int line) {
    auto s = new_stmt(StmtKind::macro, line);
    s->text = expect_name();
    macros_.insert(s->text);
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string pname = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = parse_expression(true);
      }
      s->params.emplace_back(std::move(pname), std::move(def));
    }
    next();
    expect_block_end();
    std::string end;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved;
    if (peek().type == T::name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // expression (',' expression)* -> tuple when there is a comma.
  ExprPtr parse_tuple(bool with_cond) {
    const int line = peek().line;
    ExprPtr first = parse_expression(with_cond);
    if (!is_op(",")) return first;
    auto tup = make(ExprKind::tuple, line);
    tup->items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().type == T::block_end || peek().type == T::var_end || is_op(")")) break;
      tup->items.push_back(parse_expression(with_cond));
    }
    return tup;
  }

  ExprPtr parse_expression(bool with_cond) {
    DepthGuard guard(*this);
    if (!with_cond) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto c = make(ExprKind::cond, line);
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expression(true);
      }
      c->items.push_back(std::move(e));
      c->items.push_back(std::move(cond));
      c->items.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = make(ExprKind::binary, line);
    b->name = std::move(op);
    b->items.push_back(std::move(l));
    b->items.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      auto u = make(ExprKind::unary, line);
      u->name = "not";
      u->items.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().type == T::op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" ||
                                   peek().s == "<=" || peek().s == ">=")) {
        op = next().s;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::compare, line);
        cmp->items.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      e = binary(op.s, std::move(e), parse_concat(), op.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      e = binary(op.s, std::move(e), parse_pow(), op.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      e = make(ExprKind::unary, op.line);
      e->name = op.s;
      e->items.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = peek();
    const int line = tok.line;
    if (tok.type == T::name) {
      next();
      if (tok.s == "true" || tok.s == "True" || tok.s == "false" || tok.s == "False") {
        auto e = make(ExprKind::literal, line);
        e->value = Value(tok.s[0] == 't' || tok.s[0] == 'T');
        return e;
      }
      if (tok.s == "none" || tok.s == "None") {
        auto e = make(ExprKind::literal, line);
        e->value = Value(None{});
        return e;
      }
      auto e = make(ExprKind::name, line);
      e->name = tok.s;
      return e;
    }
    if (tok.type == T::string) {
      std::string s;
      while (peek().type == T::string) s += next().s;
      auto e = make(ExprKind::literal, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (tok.type == T::integer || tok.type == T::floating) {
      next();
      auto e = make(ExprKind::literal, line);
      e->value = tok.type == T::integer ? Value(tok.i) : Value(tok.f);
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return make(ExprKind::tuple, line);
      }
      ExprPtr e = parse_expression(true);
      if (is_op(",")) {
        auto tup = make(ExprKind::tuple, line);
        tup->items.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          tup->items.push_back(parse_expression(true));
        }
        e = std::move(tup);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(ExprKind::list, line);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(ExprKind::dict, line);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    unexpected("an expression");
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(Errc::unsupported, peek().line, "*args / **kwargs are not supported");
      if (peek().type == T::name && is_op("=", 1)) {
        call.arg_names.push_back(next().s);
        next();
      } else {
        call.arg_names.emplace_back();
      }
      call.items.push_back(parse_expression(true));
    }
    next();
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (is_op(".")) {
        next();
        if (peek().type == T::integer) {
          auto s = make(ExprKind::subscript, line);
          auto idx = make(ExprKind::literal, line);
          idx->value = Value(next().i);
          s->items.push_back(std::move(e));
          s->items.push_back(std::move(idx));
          e = std::move(s);
          continue;
        }
        auto a = make(ExprKind::attr, line);
        a->name = expect_name();
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        ExprPtr parts[3];
        int colons = 0;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expression(true);
          if (k < 2 && is_op(":")) {
            next();
            ++colons;
          } else {
            break;
          }
        }
        expect_op("]");
        if (colons == 0) {
          if (!parts[0]) fail(Errc::parse_error, line, "expected an expression, got ']'");
          auto s = make(ExprKind::subscript, line);
          s->items.push_back(std::move(e));
          s->items.push_back(std::move(parts[0]));
          e = std::move(s);
        } else {
          auto s = make(ExprKind::slice, line);
          s->items.push_back(std::move(e));
          for (auto& p : parts) s->items.push_back(std::move(p));
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = make(ExprKind::call, line);
        if (e->kind == ExprKind::name) {
          called_names_.emplace_back(e->name, line);
        } else if (e->kind == ExprKind::attr) {
          if (!kMethods.count(e->name)) fail(Errc::unsupported, line, "method '" + e->name + "' is not supported");
        } else {
          fail(Errc::unsupported, line, "calling this expression is not supported");
        }
        c->items.push_back(std::move(e));
        c->arg_names.emplace_back();
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        auto f = make(ExprKind::filter, line);
        f->name = expect_name();
        if (!kFilters.count(f->name)) fail(Errc::unsupported, line, "filter '" + f->name + "' is not supported");
        f->items.push_back(std::move(e));
        f->arg_names.emplace_back();
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(ExprKind::test, line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        if (peek().type == T::op && (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" ||
                                     peek().s == "<=" || peek().s == ">=")) {
          t->name = next().s;
        } else {
          t->name = expect_name();
        }
        if (!kTests.count(t->name)) fail(Errc::unsupported, line, "test '" + t->name + "' is not supported");
        t->items.push_back(std::move(e));
        t->arg_names.emplace_back();
        if (is_op("(")) {
          parse_call_args(*t);
        } else {
          const Token& a = peek();
          const bool starts_arg = a.type == T::name || a.type == T::string || a.type == T::integer ||
                                  a.type == T::floating || (a.type == T::op && (a.s == "[" || a.s == "{"));
          if (starts_arg && !(a.type == T::name && (a.s == "else" || a.s == "or" || a.s == "and" || a.s == "if" ||
                                                    a.s == "in" || a.s == "not" || a.s == "is"))) {
            t->arg_names.emplace_back();
            t->items.push_back(parse_postfix(parse_primary()));
          }
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::set<std::string, std::less<>> macros_;
  std::vector<std::pair<std::string, int>> called_names_;
};

}  // namespace

Body parse_template(std::string_view source) {
  Parser parser(lex_template(source));
  return parser.parse();
}

}  // namespace actord::jinja
