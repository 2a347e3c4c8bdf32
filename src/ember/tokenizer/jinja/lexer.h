// Template source -> tokens, with Jinja2's whitespace rules as transformers configures them:
// trim_blocks (the newline after a block or comment tag is dropped), lstrip_blocks (spaces before
// a block or comment tag on its own line are dropped), `-` / `+` modifiers on tags, newlines
// normalised to "\n" and one trailing newline of the template removed (keep_trailing_newline off).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::jinja {

struct Token {
  enum class Kind : uint8_t {
    Text,        // literal template text (after whitespace control)
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,  // text holds the unescaped value
    Int,
    Float,
    Operator,  // text holds the operator: "==", "(", "|", ...
    Eof,
  };
  Kind kind = Kind::Eof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws ember::Error ("chat template: line N: ...") on an unterminated tag or string.
std::vector<Token> tokenize_template(std::string_view source, const LexerOptions& options = {});

}  // namespace ember::jinja
