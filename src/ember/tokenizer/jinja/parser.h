// Tokens -> syntax tree, by recursive descent with Jinja2's operator precedence:
// conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary - +
// < postfix (.attr, [index], (call)) and | filter / is test chains.
#pragma once

#include <string_view>

#include "ember/tokenizer/jinja/ast.h"
#include "ember/tokenizer/jinja/lexer.h"

namespace ember::jinja {

// Throws ember::Error ("chat template: line N: ...") on a syntax error or an unsupported tag
// (include, extends, import, block: a chat template is one self-contained file).
Body parse_template(std::string_view source, const LexerOptions& options = {});

}  // namespace ember::jinja
