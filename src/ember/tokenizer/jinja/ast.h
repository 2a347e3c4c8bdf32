// The syntax tree of a parsed template: expressions (what {{ }} and tag arguments compute) and
// statements (text, output, if/for/set/macro/call/filter blocks).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/tokenizer/jinja/value.h"

namespace ember::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallSyntax {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // items
    Tuple,      // items (evaluates to a list)
    Dict,       // keys[i] : items[i]
    Getattr,    // object.name
    Getitem,    // object[items[0]]
    Slice,      // object[items[0] : items[1] : items[2]] (null = omitted)
    Call,       // object(args)
    Filter,     // object | name(args)
    Test,       // object is [not] name(args)
    Not,        // not object
    Negate,     // -object
    Plus,       // +object
    Binary,     // object op items[0]: + - * / // % ** ~ and or
    Compare,    // object ops[i] items[i] ...: == != < > <= >= in, not in
    Condition,  // items[0] if object else items[1] (items[1] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // Name, Getattr, Filter, Test; the operator of Binary
  ExprPtr object;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> keys;
  std::vector<std::string> ops;
  CallSyntax args;
  bool negated = false;  // Test: `is not`

  Expr(Kind k, int l) : kind(k), line(l) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Print,        // {{ expr }}
    If,           // conditions[i] -> bodies[i]; else_body
    For,          // for targets in expr [if condition]: body; else_body
    Set,          // set targets = expr, or set ns.attr = expr (attribute non-empty)
    SetBlock,     // set targets[0] %}body{% endset
    Macro,        // macro name(params) body
    CallBlock,    // call(params) expr body  (expr is the macro call)
    FilterBlock,  // filter expr body  (expr: Filter chain applied to the body's output)
    Break,
    Continue,
    Generation,  // transformers' {% generation %} marker: renders its body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
  bool recursive = false;

  Stmt(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace ember::jinja
