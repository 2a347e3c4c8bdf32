// What a template can apply to values: attribute and item lookup (with the methods of str and
// dict that chat templates call: strip, split, startswith, items, get, ...), slicing, Jinja's
// filters (trim, tojson, map, selectattr, ...) and tests (defined, string, mapping, ...).
#pragma once

#include <optional>
#include <string>

#include "ember/tokenizer/jinja/value.h"

namespace ember::jinja {

// obj.name, as Jinja's sandbox resolves it: a method of obj first, then the item obj["name"];
// undefined when neither exists. Throws when obj is itself undefined.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: list index (negative from the end), dict key, str code point; then attribute.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list or str (by code point), Python's rules for omitted and
// negative bounds.
Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step);
// `item in container`: substring, list element or dict key.
bool value_contains(const Value& container, const Value& item);
// The values `for x in v` iterates: list items, dict keys, str code points; none for undefined.
List iterate(const Value& v);

// Throws ember::Error naming an unknown filter or test.
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// Python's str methods used as filters too (trim = strip()).
std::string python_strip(std::string_view s, std::string_view chars, bool left, bool right);

}  // namespace ember::jinja
