// The values a Jinja template computes with, with Python's semantics where chat templates can
// observe them: truthiness, str() and repr() spelling (None, True, 'a', 1.0), == across int and
// float, ordering, and json.dumps output as transformers' `tojson` writes it. Lists and dicts are
// shared and never mutated by a template (transformers renders in an immutable sandbox); the one
// mutable object is a namespace(), which `{% set ns.attr = ... %}` writes through.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ember::jinja {

class Value;

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument named `name`, else the positional one at `index`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

// Insertion-ordered string-keyed map, as Python dicts keep order.
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

using List = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string name);
  static Value none();
  Value(bool b) : data_(b) {}
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(int64_t{i}) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  Value(List items) : data_(std::make_shared<List>(std::move(items))) {}
  Value(std::shared_ptr<List> items) : data_(std::move(items)) {}
  Value(Dict dict) : data_(std::make_shared<Dict>(std::move(dict))) {}
  Value(std::shared_ptr<Dict> dict) : data_(std::move(dict)) {}
  Value(Callable fn) : data_(std::make_shared<Callable>(std::move(fn))) {}

  // A Python tuple: a list that prints as (a, b) (dict.items() pairs, (a, b) literals).
  static Value tuple(List items);
  // A markupsafe.Markup string (what |safe and |escape return): `+` with a plain string
  // HTML-escapes the plain one, as Python's Markup.__add__ does.
  static Value markup(std::string text);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_callable() const { return kind() == Kind::Callable; }
  bool is_tuple() const { return is_tuple_; }
  bool is_markup() const { return is_markup_; }

  // The value as one type. The wrong type is the template's mistake, not ours: ember::Error
  // ("chat template: expected a list, got str"), as Jinja raises a TypeError.
  bool as_bool() const { return get_as<bool>("a boolean"); }
  int64_t as_int() const;    // bool or int
  double as_double() const;  // bool, int or float
  const std::string& as_string() const { return get_as<std::string>("a string"); }
  const List& as_list() const { return *get_as<std::shared_ptr<List>>("a list"); }
  const Dict& as_dict() const { return *get_as<std::shared_ptr<Dict>>("a dict"); }
  Dict& mutable_dict() const { return *get_as<std::shared_ptr<Dict>>("a dict"); }
  const Callable& as_callable() const { return *get_as<std::shared_ptr<Callable>>("a callable"); }
  // For an undefined value: the name that was looked up, for error messages.
  const std::string& undefined_name() const { return undefined_name_; }

  bool truthy() const;
  // Python's str(): what {{ value }} prints (undefined prints nothing).
  std::string str() const;
  // Python's repr(): how values print inside a list or dict.
  std::string repr() const;
  // "str", "int", "list", "dict", ...: Python's type names, for error messages.
  const char* type_name() const;

 private:
  [[noreturn]] void wrong_type(const char* wanted) const;
  template <typename T>
  const T& get_as(const char* wanted) const {
    if (const T* value = std::get_if<T>(&data_)) return *value;
    wrong_type(wanted);
  }

  std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<Callable>>
      data_;
  std::string undefined_name_;
  bool is_tuple_ = false;
  bool is_markup_ = false;
};

// markupsafe's escape(): & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

// Python ==: numbers compare by value (True == 1), containers element-wise.
bool values_equal(const Value& a, const Value& b);
// Python's <, for numbers, strings and lists; throws ember::Error for other pairs.
bool value_less(const Value& a, const Value& b);
// Python's repr() of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16".
std::string python_float_repr(double d);
// Python's repr() of a str: single quotes unless the text holds one and no double quote.
std::string python_string_repr(std::string_view s);

// json.dumps(value, ensure_ascii=False, indent=..., separators=..., sort_keys=...) as
// transformers' tojson calls it. `indent` < 0 means None.
struct JsonDumpOptions {
  int indent = -1;
  std::optional<std::string> item_separator;  // default ", " (or "," when indented)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};
std::string python_json_dumps(const Value& value, const JsonDumpOptions& options = {});

// UTF-8 helpers: Python indexes strings by code point.
std::vector<std::string_view> utf8_code_points(std::string_view s);

}  // namespace ember::jinja
