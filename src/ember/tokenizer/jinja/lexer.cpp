#include "ember/tokenizer/jinja/lexer.h"

#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "ember/core/error.h"
#include "ember/tokenizer/byte_level.h"

namespace ember::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// "\r\n" and "\r" -> "\n"; one trailing newline dropped, as Jinja2 does by default.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  byte_level::utf8_append(static_cast<char32_t>(cp), out);
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(normalize_newlines(source)), options_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      lex_tag(tag);
    }
    push(Token::Kind::Eof, "");
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::InvalidArgument,
                "chat template: line " + std::to_string(line_) + ": " + what);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void push(Token::Kind kind, std::string text) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  void count_lines(std::string_view s) {
    for (char c : s) line_ += c == '\n';
  }

  void emit_text(std::string_view text) {
    count_lines(text);
    if (!text.empty()) push(Token::Kind::Text, std::string(text));
  }

  // The text before a tag, after its `-` modifier or lstrip_blocks removed whitespace.
  std::string_view strip_before_tag(std::string_view text, char tag_kind, char modifier) const {
    if (modifier == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      return text.substr(0, end);
    }
    if (modifier == '+' || !options_.lstrip_blocks || tag_kind == '{') return text;
    size_t nl = text.rfind('\n');
    size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
    if (line_start == 0 && !line_starting_) return text;
    if (line_start == text.size()) return text;
    for (size_t i = line_start; i < text.size(); ++i) {
      if (!is_space(text[i])) return text;
    }
    return text.substr(0, line_start);
  }

  // After a closing tag: `-` eats all whitespace, trim_blocks one newline (not after }}).
  void after_tag_end(char modifier, bool is_variable) {
    size_t start = pos_;
    if (modifier == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    } else if (modifier != '+' && !is_variable && options_.trim_blocks && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++pos_;
    }
    count_lines(std::string_view(src_).substr(start, pos_ - start));
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void lex_tag(size_t tag) {
    char kind = src_[tag + 1];
    char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
    if (modifier != '-' && modifier != '+') modifier = '\0';
    std::string_view text = std::string_view(src_).substr(pos_, tag - pos_);
    std::string_view kept = strip_before_tag(text, kind, modifier);
    emit_text(kept);
    count_lines(text.substr(kept.size()));
    pos_ = tag + 2 + (modifier ? 1 : 0);
    if (kind == '#') {
      lex_comment();
    } else if (kind == '%' && try_raw_block(modifier)) {
      return;
    } else {
      lex_expression_tag(kind == '{');
    }
  }

  void lex_comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("unterminated comment");
    char modifier =
        end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    count_lines(std::string_view(src_).substr(pos_, end - pos_));
    pos_ = end + 2;
    after_tag_end(modifier, false);
  }

  // {% raw %}...{% endraw %}: the body is text, untouched.
  bool try_raw_block(char open_modifier) {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    char close_modifier = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) close_modifier = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    (void)open_modifier;
    pos_ = p + 2;
    after_tag_end(close_modifier, false);
    // Find {%[-+]? endraw [-+]?%}
    for (size_t s = src_.find("{%", pos_); s != std::string::npos; s = src_.find("{%", s + 2)) {
      size_t q = s + 2;
      char end_open = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_open = src_[q++];
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char end_close = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_close = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string_view body = std::string_view(src_).substr(pos_, s - pos_);
      std::string_view kept = strip_before_tag(body, '%', end_open);
      emit_text(kept);
      count_lines(body.substr(kept.size()));
      pos_ = q + 2;
      after_tag_end(end_close, false);
      return true;
    }
    fail("missing {% endraw %}");
  }

  // Checks for the tag's end at pos_ (only outside brackets): "-%}", "+%}", "%}" or "-}}", "}}".
  bool at_tag_end(bool is_variable, char* modifier, size_t* length) const {
    std::string_view rest = std::string_view(src_).substr(pos_);
    std::string_view close = is_variable ? "}}" : "%}";
    if (rest.substr(0, 2) == close) {
      *modifier = '\0';
      *length = 2;
      return true;
    }
    if (rest.size() >= 3 && (rest[0] == '-' || (rest[0] == '+' && !is_variable)) &&
        rest.substr(1, 2) == close) {
      *modifier = rest[0];
      *length = 3;
      return true;
    }
    return false;
  }

  void lex_expression_tag(bool is_variable) {
    push(is_variable ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "");
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) fail(is_variable ? "unterminated {{ tag" : "unterminated {% tag");
      char modifier;
      size_t length;
      if (depth == 0 && at_tag_end(is_variable, &modifier, &length)) {
        pos_ += length;
        push(is_variable ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "");
        after_tag_end(modifier, is_variable);
        return;
      }
      char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
          ++pos_;
        }
        push(Token::Kind::Name, src_.substr(start, pos_ - start));
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(depth);
      }
    }
  }

  void lex_number() {
    size_t start = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        ++pos_;
      }
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        is_float = true;
        digits();
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t;
    t.kind = is_float ? Token::Kind::Float : Token::Kind::Int;
    t.text = text;
    t.line = line_;
    if (is_float) {
      // strtod, not stod: a literal past double's range is inf, as Python's float() makes it.
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      try {
        t.int_value = std::stoll(text);
      } catch (const std::exception&) {
        fail("integer literal out of range: " + text);
      }
    }
    tokens_.push_back(std::move(t));
  }

  // Python's unicode-escape decoding of a string literal's body.
  void lex_string(char quote) {
    ++pos_;
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal");
      char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ >= src_.size()) {
        value += c;
        continue;
      }
      char e = src_[pos_++];
      auto hex = [&](int n) -> uint32_t {
        if (pos_ + n > src_.size()) fail("truncated escape in string literal");
        uint32_t cp = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[pos_++];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad escape in string literal");
          cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                   ? h - '0'
                                                   : std::tolower(h) - 'a' + 10);
        }
        return cp;
      };
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\n':
          ++line_;
          break;  // line continuation
        case 'x':
          append_utf8(value, hex(2));
          break;
        case 'u':
          append_utf8(value, hex(4));
          break;
        case 'U':
          append_utf8(value, hex(8));
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
                 ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            }
            append_utf8(value, cp);
          } else {
            value += '\\';  // unknown escapes stay as written
            value += e;
          }
      }
    }
    // Adjacent literals ('a' 'b') are joined by the parser, as Jinja does.
    push(Token::Kind::String, std::move(value));
  }

  void lex_operator(int& depth) {
    static constexpr std::array<const char*, 27> ops = {
        "**", "//", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~", "<", ">",
        "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", ";", "!"};
    for (const char* op : ops) {
      size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) == 0) {
        if (n == 1 && (*op == '(' || *op == '[' || *op == '{')) ++depth;
        if (n == 1 && (*op == ')' || *op == ']' || *op == '}')) {
          if (depth == 0) fail(std::string("unexpected '") + op + "'");
          --depth;
        }
        if (n == 1 && (*op == ';' || *op == '!')) break;
        pos_ += n;
        push(Token::Kind::Operator, op);
        return;
      }
    }
    fail(std::string("unexpected character '") + src_[pos_] + "'");
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize_template(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace ember::jinja
