// Attribute, item and slice access, and the methods of str, dict and list that templates call.
// Mutating methods (list.append, dict.update, ...) are absent on purpose: transformers renders
// in Jinja's immutable sandbox, where they raise.
#include <algorithm>
#include <cctype>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/builtins.h"

namespace ember::jinja {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "chat template: " + what);
}

std::string_view arg_string(const CallArgs& a, size_t i, std::string_view name,
                            std::string_view fallback) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_string()) fail(std::string(name) + " must be a string");
  return v->as_string();
}

bool starts_or_ends(const std::string& s, const Value& affix, bool at_start) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) fail("startswith/endswith take a string or a tuple of strings");
    const std::string& x = v.as_string();
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0
                    : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  }
  return one(affix);
}

List split_whitespace(std::string_view s, int64_t maxsplit) {
  List out;
  size_t i = 0;
  auto ws = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  while (true) {
    while (i < s.size() && ws(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t end = s.size();
      while (end > i && ws(s[end - 1])) --end;
      out.push_back(Value(s.substr(i, end - i)));
      break;
    }
    size_t start = i;
    while (i < s.size() && !ws(s[i])) ++i;
    out.push_back(Value(s.substr(start, i - start)));
  }
  return out;
}

List split_on(std::string_view s, std::string_view sep, int64_t maxsplit) {
  if (sep.empty()) fail("split(): empty separator");
  List out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t p = s.find(sep, start);
    if (p == std::string_view::npos) break;
    out.push_back(Value(s.substr(start, p - start)));
    start = p + sep.size();
  }
  out.push_back(Value(s.substr(start)));
  return out;
}

List rsplit_on(std::string_view s, std::string_view sep, int64_t maxsplit) {
  if (maxsplit < 0) return split_on(s, sep, -1);
  if (sep.empty()) fail("rsplit(): empty separator");
  List out;
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t p = s.rfind(sep, end - sep.size());
    if (p == std::string_view::npos) break;
    out.insert(out.begin(), Value(s.substr(p + sep.size(), end - p - sep.size())));
    end = p;
  }
  out.insert(out.begin(), Value(s.substr(0, end)));
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    std::string out = to;
    int64_t n = 1;
    for (std::string_view cp : utf8_code_points(s)) {
      out += cp;
      if (count < 0 || n++ < count) out += to;
    }
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out += s.substr(start, p - start) + to;
    start = p + from.size();
    ++done;
  }
  return out + s.substr(start);
}

std::string title_case(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = u >= 0x80 && prev_cased;
    }
  }
  return out;
}

int64_t code_point_index(std::string_view s, size_t byte_pos) {
  return static_cast<int64_t>(utf8_code_points(s.substr(0, byte_pos)).size());
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& a) {
  auto maxsplit = [&](size_t i) {
    const Value* v = a.get(i, "maxsplit");
    return v ? v->as_int() : int64_t{-1};
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = a.get(0, "chars");
    std::string_view set = chars && chars->is_string() ? std::string_view(chars->as_string())
                                                       : std::string_view(" \t\n\r\v\f");
    return Value(python_strip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = a.get(0, "sep");
    if (!sep || sep->is_none()) return Value(split_whitespace(s, maxsplit(1)));
    if (!sep->is_string()) fail("split(): separator must be a string");
    return Value(name == "split" ? split_on(s, sep->as_string(), maxsplit(1))
                                 : rsplit_on(s, sep->as_string(), maxsplit(1)));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.get(0, "prefix");
    if (!affix) fail(name + "() needs an argument");
    return Value(starts_or_ends(s, *affix, name == "startswith"));
  }
  if (name == "replace") {
    const Value* count = a.get(2, "count");
    return Value(replace_all(s, std::string(arg_string(a, 0, "old", "")),
                             std::string(arg_string(a, 1, "new", "")),
                             count ? count->as_int() : -1));
  }
  if (name == "upper" || name == "lower") {
    std::string out = s;
    for (char& c : out) {
      c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                            : std::tolower(static_cast<unsigned char>(c)));
    }
    return Value(std::move(out));
  }
  if (name == "title") return Value(title_case(s));
  if (name == "capitalize") {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    std::string sub(arg_string(a, 0, "sub", ""));
    size_t p = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name.find("index") != std::string::npos) fail("substring not found");
      return Value(int64_t{-1});
    }
    return Value(code_point_index(s, p));
  }
  if (name == "count") {
    std::string sub(arg_string(a, 0, "sub", ""));
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_code_points(s).size() + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (!items) fail("join() needs an argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*items)) {
      if (!v.is_string()) fail("sequence item: expected str instance");
      if (!first) out += s;
      out += v.as_string();
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(Value(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.push_back(Value(s.substr(start)));
    return Value(std::move(out));
  }
  auto all_of = [&](int (*pred)(int)) {
    return Value(!s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
      return pred(static_cast<unsigned char>(c)) != 0;
    }));
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all_of(isdigit);
  if (name == "isalpha") return all_of(isalpha);
  if (name == "isalnum") return all_of(isalnum);
  if (name == "isspace") return all_of(isspace);
  if (name == "islower" || name == "isupper") {
    bool cased = false, ok = true;
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      if (std::isalpha(u)) {
        cased = true;
        ok = ok && (name == "islower" ? std::islower(u) : std::isupper(u));
      }
    }
    return Value(cased && ok);
  }
  if (name == "format") {
    // str.format with {} / {0} / {name} fields.
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
        out += '{';
        ++i;
      } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
        out += '}';
        ++i;
      } else if (s[i] == '{') {
        size_t close = s.find('}', i);
        if (close == std::string::npos) fail("format(): unmatched '{'");
        std::string field = s.substr(i + 1, close - i - 1);
        const Value* v = nullptr;
        if (field.empty()) {
          v = auto_index < a.positional.size() ? &a.positional[auto_index++] : nullptr;
        } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
          size_t k = std::stoul(field);
          v = k < a.positional.size() ? &a.positional[k] : nullptr;
        } else {
          v = a.get(SIZE_MAX, field);
        }
        if (!v) fail("format(): no value for field '{" + field + "}'");
        out += v->str();
        i = close;
      } else {
        out += s[i];
      }
    }
    return Value(std::move(out));
  }
  fail("'str' object has no attribute '" + name + "'");
}

bool is_string_method(const std::string& name) {
  static const char* const names[] = {
      "strip",     "lstrip",  "rstrip",  "split",   "rsplit",     "startswith", "endswith",
      "replace",   "upper",   "lower",   "title",   "capitalize", "find",       "rfind",
      "index",     "rindex",  "count",   "join",    "splitlines", "isdigit",    "isnumeric",
      "isdecimal", "isalpha", "isalnum", "isspace", "islower",    "isupper",    "format"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value dict_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const Dict& d = obj.as_dict();
  if (name == "items") {
    List out;
    for (const auto& [k, v] : d.entries) out.push_back(Value::tuple(List{Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "keys") {
    List out;
    for (const auto& [k, v] : d.entries) out.push_back(Value(k));
    return Value(std::move(out));
  }
  if (name == "values") {
    List out;
    for (const auto& [k, v] : d.entries) out.push_back(v);
    return Value(std::move(out));
  }
  // get(key, default=None)
  const Value* key = a.get(0, "key");
  if (!key) fail("get() needs a key");
  if (key->is_string()) {
    if (const Value* v = d.find(key->as_string())) return *v;
  }
  const Value* fallback = a.get(1, "default");
  return fallback ? *fallback : Value::none();
}

Value list_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const Value* x = a.get(0, "value");
  if (!x) fail(name + "() needs an argument");
  const List& items = obj.as_list();
  if (name == "count") {
    return Value(static_cast<int64_t>(std::count_if(
        items.begin(), items.end(), [&](const Value& v) { return values_equal(v, *x); })));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], *x)) return Value(static_cast<int64_t>(i));
  }
  fail("value is not in list");
}

Value bind_method(const Value& obj, const std::string& name,
                  Value (*method)(const Value&, const std::string&, const CallArgs&)) {
  return Value(
      Callable{name, [obj, name, method](const CallArgs& a) { return method(obj, name, a); }});
}

}  // namespace

std::string python_strip(std::string_view s, std::string_view chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && chars.find(s[b]) != std::string_view::npos) ++b;
  }
  if (right) {
    while (e > b && chars.find(s[e - 1]) != std::string_view::npos) --e;
  }
  return std::string(s.substr(b, e - b));
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail("'" + obj.undefined_name() + "' is undefined");
  if (obj.is_dict()) {
    const Dict& d = obj.as_dict();
    if (!d.is_namespace &&
        (name == "items" || name == "keys" || name == "values" || name == "get")) {
      return bind_method(obj, name, dict_method);
    }
    if (const Value* v = d.find(name)) return *v;
    return Value::undefined(name);
  }
  if (obj.is_string() && is_string_method(name)) {
    return bind_method(obj, name, [](const Value& o, const std::string& n, const CallArgs& a) {
      return string_method(o.as_string(), n, a);
    });
  }
  if (obj.is_list() && (name == "index" || name == "count"))
    return bind_method(obj, name, list_method);
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail("'" + obj.undefined_name() + "' is undefined");
  if (obj.is_list() && (key.is_int() || key.is_bool())) {
    const List& items = obj.as_list();
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value::undefined(key.str());
    return items[static_cast<size_t>(i)];
  }
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    return get_attribute(obj, key.as_string());
  }
  if (obj.is_string() && (key.is_int() || key.is_bool())) {
    auto cps = utf8_code_points(obj.as_string());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(cps.size());
    if (i < 0 || i >= static_cast<int64_t>(cps.size())) return Value::undefined(key.str());
    return Value(cps[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined(key.str());
}

Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step_opt) {
  if (obj.is_undefined()) fail("'" + obj.undefined_name() + "' is undefined");
  if (!obj.is_list() && !obj.is_string())
    fail(std::string("'") + obj.type_name() + "' object is not subscriptable");
  int64_t step = step_opt.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  std::vector<std::string_view> cps;
  if (obj.is_string()) cps = utf8_code_points(obj.as_string());
  const int64_t n =
      obj.is_list() ? static_cast<int64_t>(obj.as_list().size()) : static_cast<int64_t>(cps.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t if_missing, int64_t lo, int64_t hi) {
    if (!v) return if_missing;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, lo, hi);
  };
  int64_t b = step > 0 ? clamp(start, 0, 0, n) : clamp(start, n - 1, -1, n - 1);
  int64_t e = step > 0 ? clamp(stop, n, 0, n) : clamp(stop, -1, -1, n - 1);
  if (obj.is_list()) {
    List out;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
      out.push_back(obj.as_list()[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  std::string out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out += cps[static_cast<size_t>(i)];
  return Value(std::move(out));
}

bool value_contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) fail("'in <string>' requires string as left operand");
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (values_equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string());
  if (container.is_undefined()) return false;
  fail(std::string("argument of type '") + container.type_name() + "' is not iterable");
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
      return v.as_list();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& [k, x] : v.as_dict().entries) keys.push_back(Value(k));
      return keys;
    }
    case Value::Kind::String: {
      List out;
      for (std::string_view cp : utf8_code_points(v.as_string())) out.push_back(Value(cp));
      return out;
    }
    case Value::Kind::Undefined:
      return {};
    default:
      fail(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

}  // namespace ember::jinja
