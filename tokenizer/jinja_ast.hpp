// Internal to the chat template engine: the syntax tree of the supported Jinja subset and the parser that
// builds it (jinja_parser.cpp: recursive descent with jinja2's operator precedence over jinja_lexer's tokens).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.hpp"

namespace actord::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  literal,    // value
  name,       // name
  list,       // items
  tuple,      // items
  dict,       // items: key0, value0, key1, value1, ...
  attr,       // items[0] . name
  subscript,  // items[0] [ items[1] ]
  slice,      // items[0] [ a : b : c ]  (items[1..3], null when absent)
  call,       // items[0] ( items[1..] ), arg_names aligned with items[1..] ("" = positional)
  filter,     // items[0] | name ( items[1..] ), arg_names as for call
  test,       // items[0] is [not] name ( items[1..] ), negated
  unary,      // op: "-", "+", "not"; items[0]
  binary,     // op: + - * / // % ** ~ and or; items[0], items[1]
  compare,    // items[0] (ops[i] items[i+1])...; ops: == != < > <= >= in notin
  cond,       // items[0] if items[1] else items[2] (items[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::literal;
  int line = 0;
  Value value;
  std::string name;  // name / attribute / filter / test / operator
  bool negated = false;
  std::vector<ExprPtr> items;
  std::vector<std::string> arg_names;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  text,    // text
  output,  // {{ expr }}
  if_,     // branches (cond, body)..., else_body
  for_,    // names (loop targets), expr (iterable), cond (filter, may be null), body, else_body
  set,     // names (targets) or ns_name.attr; expr, or body for a block set
  macro,   // name, params (name, default or null), body
  break_,
  continue_,
  block,  // a plain body ({% generation %})
};

struct Stmt {
  StmtKind kind = StmtKind::text;
  int line = 0;
  std::string text;  // text / macro name / namespace name of `set ns.attr`
  std::string attr;  // `set ns.attr`
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, ExprPtr>> params;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

// Throws TemplateError (parse_error / unsupported, with the line).
Body parse_template(std::string_view source);

}  // namespace actord::jinja
