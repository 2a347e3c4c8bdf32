// Jinja2's built-in filters and tests, as chat templates use them. `tojson` is transformers'
// json.dumps(ensure_ascii=False) rather than Jinja's HTML-safe one.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/builtins.h"

namespace ember::jinja {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "chat template: " + what);
}

// Python's int(x) of a float: truncated toward zero; inf, NaN and values past int64 are errors
// (C++'s conversion of those is undefined).
int64_t float_to_int(double d) {
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
    fail("cannot convert float " + std::to_string(d) + " to integer");
  return static_cast<int64_t>(d);
}

CallArgs drop_first(const CallArgs& a) {
  CallArgs rest;
  if (a.positional.size() > 1) rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  return rest;
}

bool flag(const CallArgs& a, size_t i, std::string_view name, bool fallback) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : fallback;
}

// "a.b.0" -> obj.a.b[0], as Jinja's make_attrgetter resolves dotted attributes.
Value attribute_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      if (part.size() > 18) fail("attribute index out of range: " + part);
      cur = get_item(cur, Value(static_cast<int64_t>(std::stoll(part))));
    } else {
      cur = cur.is_undefined() ? cur : get_item(cur, Value(part));
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

std::string lowered(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Sort/min/max key: case-insensitive strings unless asked otherwise.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(lowered(v.as_string()));
  return v;
}

std::string ascii_escape_json(const std::string& s) {
  std::string out;
  auto cps = utf8_code_points(s);
  for (std::string_view cp : cps) {
    if (cp.size() == 1) {
      out += cp;
      continue;
    }
    uint32_t c = static_cast<unsigned char>(cp[0]) & (cp.size() == 2   ? 0x1F
                                                      : cp.size() == 3 ? 0x0F
                                                                       : 0x07);
    for (size_t i = 1; i < cp.size(); ++i)
      c = (c << 6) | (static_cast<unsigned char>(cp[i]) & 0x3F);
    char buf[16];
    if (c >= 0x10000) {
      c -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
    }
    out += buf;
  }
  return out;
}

Value tojson(const Value& v, const CallArgs& a) {
  JsonDumpOptions o;
  if (const Value* indent = a.get(1, "indent"); indent && !indent->is_none())
    o.indent = static_cast<int>(indent->as_int());
  if (const Value* seps = a.get(2, "separators");
      seps && seps->is_list() && seps->as_list().size() == 2) {
    o.item_separator = seps->as_list()[0].str();
    o.key_separator = seps->as_list()[1].str();
  }
  o.sort_keys = flag(a, 3, "sort_keys", false);
  std::string out = python_json_dumps(v, o);
  return Value(flag(a, 0, "ensure_ascii", false) ? ascii_escape_json(out) : out);
}

// Python's printf-style formatting: "%s" % x, with %s %r %d %i %f %x %%.
Value percent_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::strchr("-+ #0123456789.", fmt[j])) spec += fmt[j++];
    if (j >= fmt.size()) fail("format: incomplete format");
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= a.positional.size()) fail("format: not enough arguments for format string");
    const Value& v = a.positional[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? v.str() : v.repr();
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), s.c_str());
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X') {
      // Python truncates a float toward zero; one outside int64 (or NaN) is refused rather
      // than converted (undefined behaviour in C++).
      const double d = v.as_double();
      if (!v.is_float()) {
        std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(),
                      static_cast<long long>(v.as_int()));
      } else if (std::isfinite(d) && std::fabs(d) < 9.2e18) {
        std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), static_cast<long long>(d));
      } else {
        fail("format: %" + std::string(1, conv) + " of a float outside the integer range");
      }
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
    } else {
      fail(std::string("format: unsupported conversion '%") + conv + "'");
    }
    out += buf;
  }
  return Value(std::move(out));
}

Value indent_filter(const std::string& s, const CallArgs& a) {
  const Value* w = a.get(0, "width");
  std::string pad = w && w->is_string()
                        ? w->as_string()
                        : std::string(w ? static_cast<size_t>(w->as_int()) : 4, ' ');
  bool first = flag(a, 1, "first", false);
  bool blank = flag(a, 2, "blank", false);
  std::vector<std::string> lines;
  size_t start = 0;
  std::string text = s + "\n";
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') {
      lines.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value(std::move(out));
}

Value select_filter(const Value& input, const CallArgs& a, bool by_attribute, bool keep) {
  List out;
  std::string attr;
  CallArgs test_args = a;
  if (by_attribute) {
    const Value* name = a.get(0, "attribute");
    if (!name || !name->is_string()) fail("selectattr/rejectattr need an attribute name");
    attr = name->as_string();
    test_args = drop_first(a);
  }
  std::string test;
  if (!test_args.positional.empty()) {
    test = test_args.positional[0].str();
    test_args = drop_first(test_args);
  }
  if (!input.truthy()) return Value(List{});  // jinja2: `if seq:` (none selects nothing)
  for (const Value& item : iterate(input)) {
    Value subject = by_attribute ? attribute_path(item, attr) : item;
    bool r = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (r == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_filter(const Value& input, const CallArgs& a) {
  List out;
  if (!input.truthy()) return Value(std::move(out));  // jinja2: `if seq:` (none maps to nothing)
  if (const Value* attr = a.get(SIZE_MAX, "attribute")) {
    const Value* fallback = a.get(SIZE_MAX, "default");
    for (const Value& item : iterate(input)) {
      Value v = attribute_path(item, attr->str());
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty()) fail("map() needs a filter name or attribute=");
  std::string filter = a.positional[0].str();
  CallArgs rest = drop_first(a);
  for (const Value& item : iterate(input)) out.push_back(apply_filter(filter, item, rest));
  return Value(std::move(out));
}

Value sort_filter(const Value& input, const CallArgs& a) {
  bool reverse = flag(a, 0, "reverse", false);
  bool case_sensitive = flag(a, 1, "case_sensitive", false);
  const Value* attr = a.get(2, "attribute");
  List items = iterate(input);
  auto key = [&](const Value& v) {
    return sort_key(attr && !attr->is_none() ? attribute_path(v, attr->str()) : v, case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? value_less(key(y), key(x)) : value_less(key(x), key(y));
  });
  return Value(std::move(items));
}

Value min_max(const Value& input, const CallArgs& a, bool want_max) {
  bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const Value* attr = a.get(1, "attribute");
  List items = iterate(input);
  if (items.empty()) return Value::undefined("min/max of an empty sequence");
  auto key = [&](const Value& v) {
    return sort_key(attr && !attr->is_none() ? attribute_path(v, attr->str()) : v, case_sensitive);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    bool better = want_max ? value_less(key(items[best]), key(items[i]))
                           : value_less(key(items[i]), key(items[best]));
    if (better) best = i;
  }
  return items[best];
}

int64_t length_of(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(utf8_code_points(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().entries.size());
  if (v.is_undefined()) return 0;
  fail(std::string("object of type '") + v.type_name() + "' has no len()");
}

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

using FilterTable = std::map<std::string, FilterFn>;

// trim, upper, lower, title, capitalize, replace, tojson, length/count, string, safe, escape/e,
// indent, format, wordcount.
void add_text_filters(FilterTable& t) {
  auto str_method = [](const char* method) {
    return [method](const Value& v, const CallArgs& a) {
      return get_attribute(Value(v.str()), method).as_callable().call(a);
    };
  };
  t["trim"] = [](const Value& v, const CallArgs& a) {
    const Value* chars = a.get(0, "chars");
    return Value(python_strip(
        v.str(), chars && chars->is_string() ? std::string_view(chars->as_string()) : " \t\n\r\v\f",
        true, true));
  };
  t["upper"] = str_method("upper");
  t["lower"] = str_method("lower");
  t["title"] = str_method("title");
  t["capitalize"] = str_method("capitalize");
  t["replace"] = [](const Value& v, const CallArgs& a) {
    return get_attribute(Value(v.str()), "replace").as_callable().call(a);
  };
  t["tojson"] = tojson;
  t["length"] = [](const Value& v, const CallArgs&) { return Value(length_of(v)); };
  t["count"] = t["length"];
  t["string"] = [](const Value& v, const CallArgs&) { return Value(v.str()); };
  t["safe"] = [](const Value& v, const CallArgs&) { return Value::markup(v.str()); };
  t["escape"] = [](const Value& v, const CallArgs&) {
    return v.is_markup() ? v : Value::markup(html_escape(v.str()));
  };
  t["e"] = t["escape"];
  t["indent"] = [](const Value& v, const CallArgs& a) { return indent_filter(v.str(), a); };
  t["format"] = [](const Value& v, const CallArgs& a) { return percent_format(v.str(), a); };
  t["wordcount"] = [](const Value& v, const CallArgs&) {
    return Value(static_cast<int64_t>(
        get_attribute(Value(v.str()), "split").as_callable().call({}).as_list().size()));
  };
}

// list, items, join, default/d, first, last, reverse, map, select/reject(attr), sort, min, max,
// unique, attr, dictsort.
void add_sequence_filters(FilterTable& t) {
  t["list"] = [](const Value& v, const CallArgs&) { return Value(iterate(v)); };
  t["items"] = [](const Value& v, const CallArgs&) {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) fail("items filter needs a mapping");
    return get_attribute(v, "items").as_callable().call({});
  };
  t["join"] = [](const Value& v, const CallArgs& a) {
    std::string sep = a.get(0, "d") ? a.get(0, "d")->str() : "";
    const Value* attr = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      out += (attr ? attribute_path(item, attr->str()) : item).str();
      first = false;
    }
    return Value(std::move(out));
  };
  t["default"] = [](const Value& v, const CallArgs& a) {
    const Value* fallback = a.get(0, "default_value");
    bool boolean = flag(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback ? *fallback : Value("");
    return v;
  };
  t["d"] = t["default"];
  t["first"] = [](const Value& v, const CallArgs&) {
    List items = iterate(v);
    return items.empty() ? Value::undefined("first") : items.front();
  };
  t["last"] = [](const Value& v, const CallArgs&) {
    List items = iterate(v);
    return items.empty() ? Value::undefined("last") : items.back();
  };
  t["reverse"] = [](const Value& v, const CallArgs&) {
    if (v.is_string()) return get_slice(v, std::nullopt, std::nullopt, -1);
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  };
  t["map"] = map_filter;
  t["select"] = [](const Value& v, const CallArgs& a) { return select_filter(v, a, false, true); };
  t["reject"] = [](const Value& v, const CallArgs& a) { return select_filter(v, a, false, false); };
  t["selectattr"] = [](const Value& v, const CallArgs& a) {
    return select_filter(v, a, true, true);
  };
  t["rejectattr"] = [](const Value& v, const CallArgs& a) {
    return select_filter(v, a, true, false);
  };
  t["sort"] = sort_filter;
  t["min"] = [](const Value& v, const CallArgs& a) { return min_max(v, a, false); };
  t["max"] = [](const Value& v, const CallArgs& a) { return min_max(v, a, true); };
  t["unique"] = [](const Value& v, const CallArgs& a) {
    bool case_sensitive = flag(a, 0, "case_sensitive", false);
    List out, seen;
    for (const Value& item : iterate(v)) {
      Value key = sort_key(item, case_sensitive);
      if (std::none_of(seen.begin(), seen.end(),
                       [&](const Value& s) { return values_equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value(std::move(out));
  };
  t["attr"] = [](const Value& v, const CallArgs& a) {
    const Value* name = a.get(0, "name");
    return name ? get_attribute(v, name->str()) : Value::undefined("attr");
  };
  t["dictsort"] = [](const Value& v, const CallArgs& a) {
    if (!v.is_dict()) fail("dictsort needs a mapping");
    bool case_sensitive = flag(a, 0, "case_sensitive", false);
    bool by_value = a.get(1, "by") && a.get(1, "by")->str() == "value";
    bool reverse = flag(a, 2, "reverse", false);
    List items = get_attribute(v, "items").as_callable().call({}).as_list();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      Value kx = sort_key(x.as_list()[by_value ? 1 : 0], case_sensitive);
      Value ky = sort_key(y.as_list()[by_value ? 1 : 0], case_sensitive);
      return reverse ? value_less(ky, kx) : value_less(kx, ky);
    });
    return Value(std::move(items));
  };
}

// sum, abs, int, float, round.
void add_number_filters(FilterTable& t) {
  t["sum"] = [](const Value& v, const CallArgs& a) {
    const Value* attr = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value total = start ? *start : Value(int64_t{0});
    for (const Value& item : iterate(v)) {
      Value x = attr && !attr->is_none() ? attribute_path(item, attr->str()) : item;
      if (!x.is_number() || !total.is_number()) fail("sum() needs numbers");
      int64_t sum = 0;
      if (total.is_float() || x.is_float()) {
        total = Value(total.as_double() + x.as_double());
      } else if (__builtin_add_overflow(total.as_int(), x.as_int(), &sum)) {
        fail("integer overflow in sum()");
      } else {
        total = Value(sum);
      }
    }
    return total;
  };
  t["abs"] = [](const Value& v, const CallArgs&) {
    if (!v.is_number()) fail("abs() needs a number");
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    const int64_t i = v.as_int();
    if (i == INT64_MIN) fail("abs() of the smallest integer overflows");
    return Value(static_cast<int64_t>(std::llabs(i)));
  };
  t["int"] = [](const Value& v, const CallArgs& a) {
    const Value* fallback = a.get(0, "default");
    if (v.is_number()) return Value(v.is_float() ? float_to_int(v.as_double()) : v.as_int());
    try {
      if (v.is_string()) return Value(static_cast<int64_t>(std::stoll(v.as_string())));
    } catch (const std::exception&) {
    }
    return fallback ? *fallback : Value(int64_t{0});
  };
  t["float"] = [](const Value& v, const CallArgs& a) {
    const Value* fallback = a.get(0, "default");
    if (v.is_number()) return Value(v.as_double());
    try {
      if (v.is_string()) return Value(std::stod(v.as_string()));
    } catch (const std::exception&) {
    }
    return fallback ? *fallback : Value(0.0);
  };
  t["round"] = [](const Value& v, const CallArgs& a) {
    int64_t precision = a.get(0, "precision") ? a.get(0, "precision")->as_int() : 0;
    std::string method = a.get(1, "method") ? a.get(1, "method")->str() : "common";
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * scale;
    x = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);
    return Value(x / scale);
  };
}

const FilterTable& filters() {
  static const FilterTable table = [] {
    FilterTable t;
    add_text_filters(t);
    add_sequence_filters(t);
    add_number_filters(t);
    return t;
  }();
  return table;
}

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    auto arg = [](const CallArgs& a) -> const Value& {
      if (a.positional.empty()) fail("this test needs an argument");
      return a.positional[0];
    };
    t["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    t["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict(); };
    t["iterable"] = [](const Value& v, const CallArgs&) {
      return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    };
    t["sequence"] = [](const Value& v, const CallArgs&) {
      return v.is_list() || v.is_dict() || v.is_string();
    };
    t["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };
    t["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
    t["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["callable"] = [](const Value& v, const CallArgs&) { return v.is_callable(); };
    t["odd"] = [](const Value& v, const CallArgs&) { return v.as_int() % 2 != 0; };
    t["even"] = [](const Value& v, const CallArgs&) { return v.as_int() % 2 == 0; };
    t["divisibleby"] = [arg](const Value& v, const CallArgs& a) {
      return arg(a).as_int() != 0 && v.as_int() % arg(a).as_int() == 0;
    };
    t["eq"] = [arg](const Value& v, const CallArgs& a) { return values_equal(v, arg(a)); };
    t["ne"] = [arg](const Value& v, const CallArgs& a) { return !values_equal(v, arg(a)); };
    t["lt"] = [arg](const Value& v, const CallArgs& a) { return value_less(v, arg(a)); };
    t["gt"] = [arg](const Value& v, const CallArgs& a) { return value_less(arg(a), v); };
    t["le"] = [arg](const Value& v, const CallArgs& a) { return !value_less(arg(a), v); };
    t["ge"] = [arg](const Value& v, const CallArgs& a) { return !value_less(v, arg(a)); };
    t["in"] = [arg](const Value& v, const CallArgs& a) { return value_contains(arg(a), v); };
    t["sameas"] = [arg](const Value& v, const CallArgs& a) {
      const Value& o = arg(a);
      if (v.kind() != o.kind()) return false;
      return v.is_none() || v.is_undefined() ||
             ((v.is_bool() || v.is_int()) && v.as_int() == o.as_int()) || values_equal(v, o);
    };
    t["lower"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && get_attribute(v, "islower").as_callable().call({}).truthy();
    };
    t["upper"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && get_attribute(v, "isupper").as_callable().call({}).truthy();
    };
    t["escaped"] = [](const Value&, const CallArgs&) { return false; };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["!="] = t["ne"];
    t["<"] = t["lt"];
    t["lessthan"] = t["lt"];
    t[">"] = t["gt"];
    t["greaterthan"] = t["gt"];
    t["<="] = t["le"];
    t[">="] = t["ge"];
    return t;
  }();
  return table;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '" + name + "'");
  if (input.is_undefined() && name != "default" && name != "d" && name != "length" &&
      name != "count" && name != "list" && name != "items" && name != "string" && name != "join" &&
      name != "first" && name != "last" && name != "trim" && name != "upper" && name != "lower" &&
      name != "safe" && name != "tojson") {
    fail("'" + input.undefined_name() + "' is undefined");
  }
  return it->second(input, args);
}

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("no test named '" + name + "'");
  return it->second(input, args);
}

}  // namespace ember::jinja
