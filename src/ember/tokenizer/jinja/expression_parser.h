// The expression half of the template parser, and the token cursor both halves share:
// recursive descent with Jinja2's operator precedence (see parser.h). Included by parser.cpp only.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/ast.h"
#include "ember/tokenizer/jinja/lexer.h"

namespace ember::jinja {

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

 protected:
  using K = Token::Kind;

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::InvalidArgument,
                "chat template: line " + std::to_string(cur().line) + ": " + what);
  }

  bool is_op(std::string_view op) const { return cur().kind == K::Operator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == K::Name && cur().text == name; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail("expected '" + std::string(op) + "'" + got());
  }
  void expect_name(std::string_view name) {
    if (!accept_name(name)) fail("expected '" + std::string(name) + "'" + got());
  }
  std::string expect_identifier() {
    if (cur().kind != K::Name) fail("expected a name" + got());
    std::string name = cur().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (cur().kind != K::BlockEnd) fail("expected end of tag" + got());
    advance();
  }
  std::string got() const {
    switch (cur().kind) {
      case K::BlockEnd:
        return ", got '%}'";
      case K::VarEnd:
        return ", got '}}'";
      case K::Eof:
        return ", got end of template";
      default:
        return ", got '" + cur().text + "'";
    }
  }

  ExprPtr make(Expr::Kind kind) { return std::make_unique<Expr>(kind, cur().line); }

  // expr (, expr)* as a tuple when there is a comma; `with_condexpr` false inside `for ... in`.
  ExprPtr parse_tuple(bool with_condexpr = true) {
    auto first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::Tuple);
    t->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().kind == K::BlockEnd || cur().kind == K::VarEnd || is_op(")")) break;
      t->items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return t;
  }

  ExprPtr parse_expression() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      advance();
      auto c = make(Expr::Kind::Condition);
      c->object = parse_or();
      c->items.push_back(std::move(expr));
      c->items.push_back(accept_name("else") ? parse_expression() : nullptr);
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right) {
    auto b = std::make_unique<Expr>(Expr::Kind::Binary, left->line);
    b->name = std::move(op);
    b->object = std::move(left);
    b->items.push_back(std::move(right));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (accept_name("or")) left = binary("or", std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (accept_name("and")) left = binary("and", std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto n = make(Expr::Kind::Not);
      advance();
      n->object = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == K::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == K::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare);
        cmp->object = std::move(left);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(left);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      advance();
      left = binary(op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (accept_op("~")) left = binary("~", std::move(left), parse_math2());
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      advance();
      left = binary(op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (accept_op("**")) left = binary("**", std::move(left), parse_unary());
    return left;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? Expr::Kind::Negate : Expr::Kind::Plus);
      advance();
      node->object = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.kind == K::Name) {
      auto e = make(Expr::Kind::Literal);
      if (t.text == "true" || t.text == "True") {
        e->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::Name;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.kind == K::String) {
      auto e = make(Expr::Kind::Literal);
      std::string s;
      while (cur().kind == K::String) {
        s += cur().text;
        advance();
      }
      e->value = Value(std::move(s));
      return e;
    }
    if (t.kind == K::Int || t.kind == K::Float) {
      auto e = make(Expr::Kind::Literal);
      e->value = t.kind == K::Int ? Value(t.int_value) : Value(t.float_value);
      advance();
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::Kind::Tuple);
      ExprPtr inner = parse_expression();
      if (is_op(",")) {
        auto tuple = make(Expr::Kind::Tuple);
        tuple->items.push_back(std::move(inner));
        while (accept_op(",")) {
          if (is_op(")")) break;
          tuple->items.push_back(parse_expression());
        }
        inner = std::move(tuple);
      }
      expect_op(")");
      return inner;
    }
    if (accept_op("[")) {
      auto list = make(Expr::Kind::List);
      while (!is_op("]")) {
        if (!list->items.empty()) expect_op(",");
        if (is_op("]")) break;
        list->items.push_back(parse_expression());
      }
      expect_op("]");
      return list;
    }
    if (accept_op("{")) {
      auto dict = make(Expr::Kind::Dict);
      while (!is_op("}")) {
        if (!dict->keys.empty()) expect_op(",");
        if (is_op("}")) break;
        dict->keys.push_back(parse_expression());
        expect_op(":");
        dict->items.push_back(parse_expression());
      }
      expect_op("}");
      return dict;
    }
    fail("unexpected token" + got());
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        advance();
        if (cur().kind == K::Int) {
          auto e = std::make_unique<Expr>(Expr::Kind::Getitem, node->line);
          auto index = make(Expr::Kind::Literal);
          index->value = Value(cur().int_value);
          advance();
          e->object = std::move(node);
          e->items.push_back(std::move(index));
          node = std::move(e);
        } else {
          auto e = std::make_unique<Expr>(Expr::Kind::Getattr, node->line);
          e->name = expect_identifier();
          e->object = std::move(node);
          node = std::move(e);
        }
      } else if (is_op("[")) {
        advance();
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    auto slice_part = [&](std::initializer_list<std::string_view> stops) -> ExprPtr {
      for (auto s : stops) {
        if (is_op(s)) return nullptr;
      }
      return parse_expression();
    };
    ExprPtr start = slice_part({":", "]"});
    if (!is_op(":")) {
      if (!start) fail("expected an index or a slice inside []");
      expect_op("]");
      auto e = std::make_unique<Expr>(Expr::Kind::Getitem, object->line);
      e->object = std::move(object);
      e->items.push_back(std::move(start));
      return e;
    }
    advance();  // :
    auto e = std::make_unique<Expr>(Expr::Kind::Slice, object->line);
    e->object = std::move(object);
    e->items.push_back(std::move(start));
    e->items.push_back(slice_part({":", "]"}));
    e->items.push_back(accept_op(":") ? slice_part({"]"}) : nullptr);
    expect_op("]");
    return e;
  }

  CallSyntax parse_call_args() {
    CallSyntax args;
    expect_op("(");
    while (!is_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) expect_op(",");
      if (is_op(")")) break;
      if (cur().kind == K::Name && peek().kind == K::Operator && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        args.keyword.emplace_back(key, parse_expression());
      } else {
        if (!args.keyword.empty()) fail("positional argument after keyword argument");
        args.positional.push_back(parse_expression());
      }
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = std::make_unique<Expr>(Expr::Kind::Call, callee->line);
    e->object = std::move(callee);
    e->args = parse_call_args();
    return e;
  }

  // | name(args) | name ... applied to `object` (null for a filter block's placeholder).
  ExprPtr parse_filter_chain(ExprPtr object, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || accept_op("|")) {
      first = false;
      auto f = make(Expr::Kind::Filter);
      f->name = expect_identifier();
      while (accept_op(".")) f->name.append(".").append(expect_identifier());
      if (is_op("(")) f->args = parse_call_args();
      f->object = std::move(object);
      object = std::move(f);
      if (!is_op("|")) break;
    }
    return object;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        advance();
        auto t = std::make_unique<Expr>(Expr::Kind::Test, node->line);
        t->negated = accept_name("not");
        t->name = expect_identifier();
        while (accept_op(".")) t->name.append(".").append(expect_identifier());
        if (is_op("(")) {
          t->args = parse_call_args();
        } else if ((cur().kind == K::Name || cur().kind == K::String || cur().kind == K::Int ||
                    cur().kind == K::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("cannot chain multiple tests with 'is'");
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        t->object = std::move(node);
        node = std::move(t);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
};

}  // namespace ember::jinja
