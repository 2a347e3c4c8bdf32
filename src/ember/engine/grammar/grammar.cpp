#include "ember/engine/grammar/grammar.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <utility>

#include "ember/core/error.h"

namespace ember::grammar {

namespace {

// One symbol of an alternative while the grammar is being built.
struct Sym {
  bool is_rule = false;
  uint32_t value = 0;
};
using Alt = std::vector<Sym>;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// [lo, hi] code points -> UTF-8 byte-range sequences that encode exactly them.
void utf8_sequences(uint32_t lo, uint32_t hi,
                    std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (uint32_t end : kLengthEnds) {  // split where the encoded length changes
    if (lo <= end && hi > end) {
      utf8_sequences(lo, end, out);
      utf8_sequences(end + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  const int n = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {  // split until each continuation byte spans a full or exact range
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [n](uint32_t cp) {
    std::vector<uint8_t> b(static_cast<size_t>(n));
    for (int k = n - 1; k > 0; --k) {
      b[static_cast<size_t>(k)] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      cp >>= 6;
    }
    b[0] = static_cast<uint8_t>((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | cp);
    return b;
  };
  std::vector<uint8_t> a = encode(lo), b = encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < n; ++k)
    seq.emplace_back(a[static_cast<size_t>(k)], b[static_cast<size_t>(k)]);
  out.push_back(std::move(seq));
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : src_(text) {}

  Grammar run(std::string_view root_name) {
    skip_space(true);
    while (pos_ < src_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (!defined_[r]) fail("rule '" + names_[r] + "' is used but never defined");
    }
    auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) fail("the grammar has no '" + std::string(root_name) + "' rule");
    check_left_recursion();
    return flatten(root->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line =
        1 + static_cast<int>(std::count(
                src_.begin(),
                src_.begin() + static_cast<std::ptrdiff_t>(std::min(pos_, src_.size())), '\n'));
    throw Error(ErrorKind::InvalidArgument, "grammar: line " + std::to_string(line) + ": " + what);
  }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  }

  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < src_.size() && name_char(src_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(src_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(rules_.size());
    ids_[name] = id;
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    return id;
  }

  uint32_t new_rule(const std::string& hint, std::vector<Alt> alts) {
    uint32_t id = rule_id(hint + "-" + std::to_string(rules_.size()));
    rules_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }

  uint32_t byte_class(const std::bitset<256>& bits) {
    for (size_t i = 0; i < classes_.size(); ++i) {
      if (classes_[i] == bits) return static_cast<uint32_t>(i);
    }
    classes_.push_back(bits);
    return static_cast<uint32_t>(classes_.size() - 1);
  }

  Sym byte_sym(uint8_t lo, uint8_t hi) {
    std::bitset<256> bits;
    for (unsigned b = lo; b <= hi; ++b) bits.set(b);
    return {false, byte_class(bits)};
  }

  void parse_rule() {
    std::string name = parse_name();
    skip_space(false);
    if (src_.compare(pos_, 3, "::=") != 0) fail("expected '::=' after '" + name + "'");
    pos_ += 3;
    uint32_t id = rule_id(name);
    if (defined_[id]) fail("rule '" + name + "' is defined twice");
    defined_[id] = true;
    rules_[id] = parse_alternatives(name, false);
  }

  // Is a rule definition ("name ::=") next? Decides where a rule ends at a newline.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < src_.size() && name_char(src_[p])) ++p;
    if (p == pos_) return false;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
    return src_.compare(p, 3, "::=") == 0;
  }

  std::vector<Alt> parse_alternatives(const std::string& name, bool nested) {
    std::vector<Alt> alts;
    alts.push_back(parse_sequence(name, nested));
    while (true) {
      skip_space(nested);
      if (pos_ < src_.size() && src_[pos_] == '|') {
        ++pos_;
        skip_space(true);
        alts.push_back(parse_sequence(name, nested));
      } else {
        break;
      }
    }
    return alts;
  }

  Alt parse_sequence(const std::string& name, bool nested) {
    Alt seq;
    while (true) {
      skip_space(nested);
      if (!nested && pos_ < src_.size() && src_[pos_] == '\n') {
        // A newline ends the rule unless the next line continues it (with '|' or more items).
        size_t save = pos_;
        skip_space(true);
        if (pos_ >= src_.size() || at_rule_start()) {
          pos_ = save;
          return seq;
        }
        if (src_[pos_] == '|') return seq;  // parse_alternatives takes the next alternative
        continue;
      }
      if (pos_ >= src_.size() || src_[pos_] == '|' || src_[pos_] == ')') return seq;
      Alt item = parse_item(name);
      seq.insert(seq.end(), item.begin(), item.end());
    }
  }

  uint32_t read_code_point(bool in_class) {
    if (pos_ >= src_.size()) fail("unexpected end of grammar");
    unsigned char c = static_cast<unsigned char>(src_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= src_.size()) fail("unexpected end after '\\'");
      char e = src_[pos_++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_])))
            fail("bad escape");
          char h = src_[pos_++];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                 ? h - '0'
                                                 : std::tolower(h) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case 'n':
          return '\n';
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'':
          return static_cast<uint32_t>(e);
        default:
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    (void)in_class;
    // A UTF-8 encoded code point of the grammar text.
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > src_.size()) fail("invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int i = 1; i < n; ++i)
      cp = (cp << 6) | (static_cast<unsigned char>(src_[pos_ + static_cast<size_t>(i)]) & 0x3F);
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  // A set of code-point ranges as one symbol: a byte class when it is ASCII only, else a rule
  // whose alternatives are its UTF-8 byte sequences.
  Sym class_symbol(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated,
                   const std::string& name) {
    std::sort(ranges.begin(), ranges.end());
    if (negated) {
      std::vector<std::pair<uint32_t, uint32_t>> inv;
      uint32_t next = 0;
      for (auto [lo, hi] : ranges) {
        if (lo > next) inv.emplace_back(next, lo - 1);
        next = std::max(next, hi + 1);
      }
      if (next <= kMaxCodePoint) inv.emplace_back(next, kMaxCodePoint);
      ranges.clear();
      for (auto [lo, hi] : inv) {  // surrogates are not characters
        if (hi < 0xD800 || lo > 0xDFFF) {
          ranges.emplace_back(lo, hi);
        } else {
          if (lo < 0xD800) ranges.emplace_back(lo, 0xD7FF);
          if (hi > 0xDFFF) ranges.emplace_back(0xE000, hi);
        }
      }
    }
    std::bitset<256> ascii;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (auto [lo, hi] : ranges) utf8_sequences(lo, hi, seqs);
    std::vector<Alt> alts;
    for (const auto& seq : seqs) {
      if (seq.size() == 1) {
        for (unsigned b = seq[0].first; b <= seq[0].second; ++b) ascii.set(b);
        continue;
      }
      Alt alt;
      for (auto [lo, hi] : seq) alt.push_back(byte_sym(lo, hi));
      alts.push_back(std::move(alt));
    }
    if (alts.empty()) {
      if (ascii.none()) fail("empty character class");
      return {false, byte_class(ascii)};
    }
    if (ascii.any()) alts.insert(alts.begin(), Alt{Sym{false, byte_class(ascii)}});
    return {true, new_rule(name + "-char", std::move(alts))};
  }

  Alt parse_primary(const std::string& name) {
    char c = src_[pos_];
    if (c == '"') {
      ++pos_;
      Alt seq;
      while (true) {
        if (pos_ >= src_.size() || src_[pos_] == '\n') fail("unterminated string literal");
        if (src_[pos_] == '"') {
          ++pos_;
          return seq;
        }
        uint32_t cp = read_code_point(false);
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> enc;
        utf8_sequences(cp, cp, enc);
        for (auto [lo, hi] : enc[0]) seq.push_back(byte_sym(lo, hi));
      }
    }
    if (c == '[') {
      ++pos_;
      bool negated = pos_ < src_.size() && src_[pos_] == '^';
      if (negated) ++pos_;
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      while (true) {
        if (pos_ >= src_.size()) fail("unterminated character class");
        if (src_[pos_] == ']') {
          ++pos_;
          break;
        }
        uint32_t lo = read_code_point(true), hi = lo;
        if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
          ++pos_;
          hi = read_code_point(true);
          if (hi < lo) fail("character range is reversed");
        }
        ranges.emplace_back(lo, hi);
      }
      return {class_symbol(std::move(ranges), negated, name)};
    }
    if (c == '.') {
      ++pos_;
      return {class_symbol({{0, kMaxCodePoint}}, false, name)};
    }
    if (c == '(') {
      ++pos_;
      skip_space(true);
      std::vector<Alt> alts = parse_alternatives(name, true);
      skip_space(true);
      if (pos_ >= src_.size() || src_[pos_] != ')') fail("expected ')'");
      ++pos_;
      return {{true, new_rule(name + "-group", std::move(alts))}};
    }
    if (name_char(c)) return {{true, rule_id(parse_name())}};
    fail(std::string("unexpected '") + c + "'");
  }

  int parse_int() {
    size_t start = pos_;
    while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
    if (pos_ == start) fail("expected a number in {m,n}");
    return std::stoi(std::string(src_.substr(start, pos_ - start)));
  }

  Alt parse_item(const std::string& name) {
    Alt primary = parse_primary(name);
    if (pos_ >= src_.size()) return primary;
    char op = src_[pos_];
    if (op != '*' && op != '+' && op != '?' && op != '{') return primary;
    ++pos_;
    int min = 0, max = -1;  // -1: unbounded
    if (op == '+') min = 1;
    if (op == '?') max = 1;
    if (op == '{') {
      skip_space(false);
      min = parse_int();
      skip_space(false);
      max = min;
      if (pos_ < src_.size() && src_[pos_] == ',') {
        ++pos_;
        skip_space(false);
        max = pos_ < src_.size() && src_[pos_] == '}' ? -1 : parse_int();
        skip_space(false);
      }
      if (pos_ >= src_.size() || src_[pos_] != '}') fail("expected '}'");
      ++pos_;
      if (max >= 0 && max < min) fail("{m,n} with n < m");
      if (min > 1000 || max > 1000) fail("repetition counts above 1000 are not supported");
    }
    Alt out;
    for (int i = 0; i < min; ++i) out.insert(out.end(), primary.begin(), primary.end());
    if (max < 0) {  // star ::= primary star | ε  (right recursion: constant stack depth)
      uint32_t star = rule_id(name + "-star-" + std::to_string(rules_.size()));
      defined_[star] = true;
      Alt loop = primary;
      loop.push_back({true, star});
      rules_[star] = {loop, Alt{}};
      out.push_back({true, star});
    } else if (max > min) {  // opt_k ::= primary opt_{k-1} | ε
      uint32_t inner = 0;
      bool have_inner = false;
      for (int k = 0; k < max - min; ++k) {
        Alt once = primary;
        if (have_inner) once.push_back({true, inner});
        inner = new_rule(name + "-opt", {once, Alt{}});
        have_inner = true;
      }
      out.push_back({true, inner});
    }
    return out;
  }

  void check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Alt& a : rules_[r]) {
          if (std::all_of(a.begin(), a.end(),
                          [&](const Sym& s) { return s.is_rule && nullable[s.value]; })) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // left[r]: rules r can reach without consuming a byte.
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Alt& a : rules_[r]) {
        for (const Sym& s : a) {
          if (!s.is_rule) break;
          left[r].push_back(s.value);
          if (!nullable[s.value]) break;
        }
      }
    }
    std::vector<int> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::function<void(uint32_t)> visit = [&](uint32_t r) {
      state[r] = 1;
      for (uint32_t s : left[r]) {
        if (state[s] == 1) {
          throw Error(ErrorKind::InvalidArgument,
                      "grammar: rule '" + names_[s] + "' is left-recursive");
        }
        if (state[s] == 0) visit(s);
      }
      state[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r) {
      if (state[r] == 0) visit(r);
    }
  }

  Grammar flatten(uint32_t root) {
    Grammar g;
    g.root = root;
    g.rule_names = names_;
    g.byte_classes = classes_;
    g.alternatives.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Alt& a : rules_[r]) {
        g.alternatives[r].push_back(static_cast<uint32_t>(g.elements.size()));
        for (const Sym& s : a) {
          g.elements.push_back({s.is_rule ? Element::Kind::Rule : Element::Kind::Bytes, s.value});
        }
        g.elements.push_back({Element::Kind::End, 0});
      }
    }
    return g;
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Alt>> rules_;
  std::vector<bool> defined_;
  std::vector<std::bitset<256>> classes_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root) {
  return GbnfParser(text).run(root);
}

}  // namespace ember::grammar
