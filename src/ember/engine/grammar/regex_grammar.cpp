#include "ember/engine/grammar/regex_grammar.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "ember/core/error.h"
#include "ember/engine/grammar/json_schema_grammar.h"
#include "ember/tokenizer/byte_level.h"

namespace ember::grammar {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

[[noreturn]] void refuse(const std::string& pattern, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "JSON schema: pattern '" + pattern + "': " + what);
}

Ranges complement(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = std::max(next, hi + 1);
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

// How a code point appears inside a JSON string: '"', '\' and controls are escaped.
std::string json_text(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  char buf[8];
  if (cp < 0x20) {
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    return buf;
  }
  std::string out;
  byte_level::utf8_append(static_cast<char32_t>(cp), out);
  return out;
}

std::string class_escape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, cp < 0x10000 ? "\\u%04X" : "\\U%08X", cp);
  return buf;
}

// A set of code points as GBNF over their JSON text: one class for the plain ones, an
// alternative per escaped one ('"', '\', controls).
std::string ranges_gbnf(const Ranges& ranges) {
  std::string cls;
  std::vector<std::string> alts;
  for (auto [lo, hi] : ranges) {
    for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x5C); ++cp) {
      if (cp < 0x20 || cp == '"' || cp == '\\')
        alts.push_back(JsonSchemaGrammar::literal(json_text(cp)));
    }
    // The plain part of [lo, hi]: without 0x00-0x1F, '"' and '\'.
    Ranges plain;
    uint32_t a = std::max<uint32_t>(lo, 0x20);
    for (uint32_t cut : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (a <= hi && a <= cut && cut <= hi) {
        if (a < cut) plain.emplace_back(a, cut - 1);
        a = cut + 1;
      }
    }
    if (a <= hi) plain.emplace_back(a, hi);
    for (auto [x, y] : plain) {
      if (x >= 0xD800 && y <= 0xDFFF) continue;  // surrogates are no characters
      cls += class_escape(x);
      if (y > x) cls.append(1, '-').append(class_escape(y));
    }
  }
  if (!cls.empty()) alts.insert(alts.begin(), "[" + cls + "]");
  if (alts.empty())
    throw Error(ErrorKind::InvalidArgument, "JSON schema: a pattern class matches nothing");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

class RegexConverter {
 public:
  RegexConverter(const std::string& pattern) : p_(pattern) {}

  std::string run() {
    size_t end = p_.size();
    bool anchored_start = !p_.empty() && p_[0] == '^';
    bool anchored_end = end > 0 && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\');
    pos_ = anchored_start ? 1 : 0;
    end_ = anchored_end ? end - 1 : end;
    std::string body = alternation();
    if (pos_ != end_) refuse(p_, "unexpected ')'");
    if (!anchored_start) body = "json-char* " + body;
    if (!anchored_end) body += " json-char*";
    return body;
  }

 private:
  bool at_end() const { return pos_ >= end_; }

  std::string alternation() {
    std::vector<std::string> alts = {sequence()};
    while (!at_end() && p_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i)
      out += (i ? " | " : "") + (alts[i].empty() ? "\"\"" : alts[i]);
    return out + ")";
  }

  std::string sequence() {
    std::string out;
    while (!at_end() && p_[pos_] != '|' && p_[pos_] != ')') {
      std::string item = atom();
      item = quantified(item);
      out += (out.empty() ? "" : " ") + item;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantified(const std::string& atom) {
    if (at_end()) return atom;
    char c = p_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      size_t close = p_.find('}', pos_);
      if (close == std::string::npos || close >= end_) refuse(p_, "unterminated {m,n}");
      q = p_.substr(pos_, close - pos_ + 1);
      for (char d : q.substr(1, q.size() - 2)) {
        if (!std::isdigit(static_cast<unsigned char>(d)) && d != ',')
          refuse(p_, "bad quantifier " + q);
      }
      pos_ = close + 1;
    } else {
      return atom;
    }
    if (!at_end() && p_[pos_] == '?') ++pos_;  // lazy: the same strings
    return "(" + atom + ")" + q;
  }

  uint32_t code_point() {
    unsigned char c = static_cast<unsigned char>(p_[pos_]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (pos_ + static_cast<size_t>(n) > p_.size()) refuse(p_, "invalid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int i = 1; i < n; ++i)
      cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + static_cast<size_t>(i)]) & 0x3F);
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  // After a '\': a class escape (\d \w \s and negations) as ranges, or one code point.
  Ranges escape() {
    if (at_end()) refuse(p_, "trailing '\\'");
    char e = p_[pos_++];
    const Ranges digits = {{'0', '9'}};
    const Ranges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space = {{'\t', '\r'}, {' ', ' '}};
    switch (e) {
      case 'd':
        return digits;
      case 'D':
        return complement(digits);
      case 'w':
        return word;
      case 'W':
        return complement(word);
      case 's':
        return space;
      case 'S':
        return complement(space);
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case 'u': {
        if (pos_ + 4 > end_) refuse(p_, "bad \\u escape");
        uint32_t cp = static_cast<uint32_t>(std::stoul(p_.substr(pos_, 4), nullptr, 16));
        pos_ += 4;
        return {{cp, cp}};
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) {
          refuse(p_,
                 std::string("\\") + e + " (backreferences, word boundaries) cannot be generated");
        }
        return {{static_cast<uint32_t>(static_cast<unsigned char>(e)),
                 static_cast<uint32_t>(static_cast<unsigned char>(e))}};
    }
  }

  std::string char_class() {
    ++pos_;  // [
    bool negated = !at_end() && p_[pos_] == '^';
    if (negated) ++pos_;
    Ranges ranges;
    bool first = true;
    while (true) {
      if (at_end()) refuse(p_, "unterminated [class]");
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      Ranges item;
      if (p_[pos_] == '\\') {
        ++pos_;
        item = escape();
      } else {
        uint32_t cp = code_point();
        item = {{cp, cp}};
      }
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < end_ &&
          p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (p_[pos_] == '\\') {
          ++pos_;
          Ranges r = escape();
          if (r.size() != 1 || r[0].first != r[0].second)
            refuse(p_, "a class escape cannot end a range");
          hi = r[0].first;
        } else {
          hi = code_point();
        }
        if (hi < item[0].first) refuse(p_, "reversed range in [class]");
        item[0].second = hi;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    return ranges_gbnf(negated ? complement(ranges) : ranges);
  }

  std::string atom() {
    char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (p_.compare(pos_, 2, "?:") == 0) {
        pos_ += 2;
      } else if (pos_ < end_ && p_[pos_] == '?') {
        refuse(p_, "lookaround and named groups cannot be generated");
      }
      std::string inner = alternation();
      if (at_end() || p_[pos_] != ')') refuse(p_, "missing ')'");
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return ranges_gbnf(complement({{'\n', '\n'}}));
    }
    if (c == '\\') {
      ++pos_;
      Ranges r = escape();
      if (r.size() == 1 && r[0].first == r[0].second)
        return JsonSchemaGrammar::literal(json_text(r[0].first));
      return ranges_gbnf(r);
    }
    if (c == '^' || c == '$') refuse(p_, "anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{')
      refuse(p_, std::string("nothing to repeat before '") + c + "'");
    return JsonSchemaGrammar::literal(json_text(code_point()));
  }

  const std::string& p_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

std::string regex_to_gbnf(const std::string& pattern) {
  return RegexConverter(pattern).run();
}

}  // namespace ember::grammar
