// Statements: text, {{ }} output, and the if/for/set/macro/call/filter blocks; expressions are
// parsed by ExpressionParser (expression_parser.h).
#include "ember/tokenizer/jinja/parser.h"

#include <initializer_list>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/expression_parser.h"

namespace ember::jinja {

namespace {

class Parser : ExpressionParser {
 public:
  explicit Parser(std::vector<Token> tokens) : ExpressionParser(std::move(tokens)) {}

  Body parse_all() {
    std::string found;
    Body body = parse_until({}, &found);
    if (!found.empty()) fail("unexpected '" + found + "'");
    return body;
  }

 private:
  StmtPtr make_stmt(Stmt::Kind kind) { return std::make_unique<Stmt>(kind, cur().line); }

  // Statements up to a {% name %} in `ends` (consumed through the name), or the end.
  Body parse_until(std::initializer_list<std::string_view> ends, std::string* found) {
    Body body;
    found->clear();
    while (cur().kind != K::Eof) {
      if (cur().kind == K::Text) {
        auto s = make_stmt(Stmt::Kind::Text);
        s->text = cur().text;
        advance();
        body.push_back(std::move(s));
      } else if (cur().kind == K::VarBegin) {
        advance();
        auto s = make_stmt(Stmt::Kind::Print);
        s->expr = parse_tuple();
        if (cur().kind != K::VarEnd) fail("expected '}}'" + got());
        advance();
        body.push_back(std::move(s));
      } else if (cur().kind == K::BlockBegin) {
        advance();
        if (cur().kind != K::Name) fail("expected a tag name" + got());
        std::string name = cur().text;
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          advance();
          *found = name;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected token" + got());
      }
    }
    if (ends.size() > 0) {
      fail("unexpected end of template: missing {% " + std::string(*(ends.end() - 1)) + " %}");
    }
    return body;
  }

  Body parse_block_body(std::string_view end) {
    std::string found;
    Body body = parse_until({end}, &found);
    expect_block_end();
    return body;
  }

  StmtPtr parse_statement() {
    std::string name = cur().text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "generation") {
      auto s = make_stmt(Stmt::Kind::Generation);
      advance();
      expect_block_end();
      s->body = parse_block_body("endgeneration");
      return s;
    }
    if (name == "break" || name == "continue") {
      auto s = make_stmt(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue);
      advance();
      expect_block_end();
      return s;
    }
    fail("unsupported tag '" + name + "'");
  }

  StmtPtr parse_if() {
    auto s = make_stmt(Stmt::Kind::If);
    advance();  // if
    while (true) {
      s->conditions.push_back(parse_tuple());
      expect_block_end();
      std::string found;
      s->bodies.push_back(parse_until({"elif", "else", "endif"}, &found));
      if (found == "elif") continue;
      if (found == "else") {
        expect_block_end();
        s->else_body = parse_block_body("endif");
      } else {
        expect_block_end();
      }
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    bool paren = accept_op("(");
    do {
      targets.push_back(expect_identifier());
    } while (accept_op(","));
    if (paren) expect_op(")");
    return targets;
  }

  StmtPtr parse_for() {
    auto s = make_stmt(Stmt::Kind::For);
    advance();  // for
    s->targets = parse_targets();
    expect_name("in");
    s->expr = parse_tuple(/*with_condexpr=*/false);
    if (accept_name("if")) s->condition = parse_expression();
    if (accept_name("recursive")) s->recursive = true;
    expect_block_end();
    std::string found;
    s->body = parse_until({"else", "endfor"}, &found);
    expect_block_end();
    if (found == "else") s->else_body = parse_block_body("endfor");
    return s;
  }

  StmtPtr parse_set() {
    int line = cur().line;
    advance();  // set
    std::string first = expect_identifier();
    if (accept_op(".")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
      s->targets = {first};
      s->attribute = expect_identifier();
      expect_op("=");
      s->expr = parse_tuple();
      expect_block_end();
      return s;
    }
    std::vector<std::string> targets = {first};
    while (accept_op(",")) targets.push_back(expect_identifier());
    if (accept_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple();
      expect_block_end();
      return s;
    }
    if (targets.size() != 1) fail("a block set takes one name");
    auto s = std::make_unique<Stmt>(Stmt::Kind::SetBlock, line);
    s->targets = std::move(targets);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_block_body("endset");
    return s;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_identifier();
      if (accept_op("=")) p.default_value = parse_expression();
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(Stmt::Kind::Macro);
    advance();  // macro
    s->text = expect_identifier();
    s->params = parse_params();
    expect_block_end();
    s->body = parse_block_body("endmacro");
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(Stmt::Kind::CallBlock);
    advance();  // call
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::Call) fail("{% call %} needs a macro call");
    expect_block_end();
    s->body = parse_block_body("endcall");
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(Stmt::Kind::FilterBlock);
    advance();  // filter
    s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    s->body = parse_block_body("endfilter");
    return s;
  }
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize_template(source, options)).parse_all();
}

}  // namespace ember::jinja
