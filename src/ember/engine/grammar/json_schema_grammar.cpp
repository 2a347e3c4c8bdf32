#include "ember/engine/grammar/json_schema_grammar.h"

#include <cstdio>

#include "ember/core/error.h"
#include "ember/engine/grammar/regex_grammar.h"

namespace ember::grammar {

namespace {

using ojson = nlohmann::ordered_json;

// Whitespace between tokens is bounded so that a model cannot loop on it forever.
constexpr const char* kCommonRules[][2] = {
    {"ws", R"(| " " | "\n" [ \t]{0,20})"},
    {"json-char", R"([^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
    {"json-string", R"("\"" json-char* "\"")"},
    {"json-int", R"("-"? ("0" | [1-9] [0-9]{0,15}))"},
    {"json-number", R"(json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?)"},
    {"json-boolean", R"("true" | "false")"},
    {"json-null", R"("null")"},
    {"json-value",
     R"(json-object | json-array | json-string | json-number | json-boolean | json-null)"},
    {"json-object",
     R"("{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}")"},
    {"json-array", R"("[" ws (json-value ws ("," ws json-value ws)*)? "]")"},
    {"json-date",
     R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))"},
    {"json-time",
     R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
    {"json-uuid",
     R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
};

[[noreturn]] void refuse(const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "JSON schema: " + what);
}

bool is_keyword_ignored(const std::string& k) {
  static const std::set<std::string> ignored = {
      "title",    "description", "examples",    "default",  "$schema",   "$id",
      "$comment", "$defs",       "definitions", "readOnly", "writeOnly", "deprecated"};
  return ignored.count(k) != 0;
}

std::string repeat_rule(const std::string& item, int64_t min, int64_t max) {
  // item, then (sep item){min-1, max-1}; the whole may be absent when min == 0.
  std::string more = "(\",\" ws " + item + " ws)";
  std::string counts = "{" + std::to_string(std::max<int64_t>(min - 1, 0)) + "," +
                       (max < 0 ? std::string() : std::to_string(max - 1)) + "}";
  std::string list = item + " ws " + more + counts;
  if (max == 0) return R"("[" ws "]")";
  return "\"[\" ws " + (min == 0 ? "(" + list + ")?" : list) + " \"]\"";
}

}  // namespace

JsonSchemaGrammar::JsonSchemaGrammar() {
  for (const auto& rule : kCommonRules) {
    rules_[rule[0]] = rule[1];
    used_names_.insert(rule[0]);
  }
}

std::string JsonSchemaGrammar::literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonSchemaGrammar::fresh(const std::string& hint) {
  std::string base;
  for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  if (base.empty()) base = "s";
  std::string name = base;
  for (int i = 1; used_names_.count(name) != 0; ++i) name = base + "-" + std::to_string(i);
  used_names_.insert(name);
  return name;
}

void JsonSchemaGrammar::add_rule(const std::string& name, const std::string& body) {
  used_names_.insert(name);
  rules_[name] = body;
}

std::string JsonSchemaGrammar::add_schema(const ojson& schema, const ojson& root_document,
                                          const std::string& hint) {
  document_ = &root_document;
  return visit(schema, hint);
}

std::string JsonSchemaGrammar::gbnf(const std::string& root_rule) const {
  std::string out = "root ::= " + root_rule + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

std::string JsonSchemaGrammar::visit(const ojson& schema, const std::string& hint) {
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) refuse("the schema 'false' matches nothing");
    return "json-value";
  }
  if (!schema.is_object()) refuse("a schema must be an object or a boolean");
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    static const std::set<std::string> handled = {"type",      "properties",
                                                  "required",  "additionalProperties",
                                                  "items",     "minItems",
                                                  "maxItems",  "enum",
                                                  "const",     "anyOf",
                                                  "oneOf",     "allOf",
                                                  "$ref",      "minLength",
                                                  "maxLength", "format",
                                                  "minimum",   "exclusiveMinimum", "pattern",
                                                  "strict"};
    if (!handled.count(it.key()) && !is_keyword_ignored(it.key())) {
      refuse("keyword '" + it.key() + "' is not supported");
    }
  }
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    std::string path;
    if (ref.rfind("#/$defs/", 0) == 0) {
      path = ref.substr(8);
    } else if (ref.rfind("#/definitions/", 0) == 0) {
      path = ref.substr(14);
    } else {
      refuse("$ref '" + ref + "' is not a #/$defs/ or #/definitions/ reference");
    }
    const char* container = ref[2] == '$' ? "$defs" : "definitions";
    if (!document_->contains(container) || !(*document_)[container].contains(path)) {
      refuse("$ref '" + ref + "' does not resolve");
    }
    std::string name = fresh("ref-" + path);
    refs_[ref] = name;  // before visiting: recursive schemas refer back to it
    rules_[name] = visit((*document_)[container][path], path);
    return name;
  }
  std::string name = fresh(hint);
  std::string body;
  if (schema.contains("const")) {
    body = literal(schema["const"].dump());
  } else if (schema.contains("enum")) {
    if (!schema["enum"].is_array() || schema["enum"].empty())
      refuse("'enum' must be a non-empty array");
    for (const ojson& v : schema["enum"]) body += (body.empty() ? "" : " | ") + literal(v.dump());
  } else if (schema.contains("anyOf") || schema.contains("oneOf")) {
    const ojson& alts = schema.contains("anyOf") ? schema["anyOf"] : schema["oneOf"];
    if (!alts.is_array() || alts.empty()) refuse("'anyOf' / 'oneOf' must be a non-empty array");
    for (size_t i = 0; i < alts.size(); ++i) {
      body += (i ? " | " : "") + visit(alts[i], hint + "-" + std::to_string(i));
    }
  } else if (schema.contains("allOf")) {
    if (!schema["allOf"].is_array() || schema["allOf"].size() != 1) {
      refuse("'allOf' is supported with one schema only");
    }
    body = visit(schema["allOf"][0], hint);
  } else if (schema.contains("type") && schema["type"].is_array()) {
    for (size_t i = 0; i < schema["type"].size(); ++i) {
      body += (i ? " | " : "") + type_rule(schema, schema["type"][i].get<std::string>(), hint);
    }
  } else if (schema.contains("type")) {
    body = type_rule(schema, schema["type"].get<std::string>(), hint);
  } else if (schema.contains("properties")) {
    body = object_rule(schema, hint);
  } else if (schema.contains("items")) {
    body = array_rule(schema, hint);
  } else {
    body = "json-value";
  }
  rules_[name] = body;
  return name;
}

std::string JsonSchemaGrammar::type_rule(const ojson& schema, const std::string& type,
                                         const std::string& hint) {
  if (type == "object") return object_rule(schema, hint);
  if (type == "array") return array_rule(schema, hint);
  if (type == "string") return string_rule(schema, hint);
  if (type == "number" || type == "integer") return number_rule(schema, type);
  if (type == "boolean") return "json-boolean";
  if (type == "null") return "json-null";
  refuse("unknown type '" + type + "'");
}

std::string JsonSchemaGrammar::object_rule(const ojson& schema, const std::string& hint) {
  const ojson empty = ojson::object();
  const ojson& props = schema.contains("properties") ? schema["properties"] : empty;
  if (!props.is_object()) refuse("'properties' must be an object");
  std::set<std::string> required;
  if (schema.contains("required")) {
    for (const ojson& r : schema["required"]) {
      if (!props.contains(r.get<std::string>())) {
        refuse("required property '" + r.get<std::string>() + "' is not among 'properties'");
      }
      required.insert(r.get<std::string>());
    }
  }
  if (props.empty()) {
    const ojson* extra =
        schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    if (extra == nullptr || extra->is_boolean()) {
      return extra && !extra->get<bool>() ? R"("{" ws "}")" : "json-object";
    }
    std::string value = visit(*extra, hint + "-value");
    std::string kv = "json-string ws \":\" ws " + value + " ws";
    return "\"{\" ws (" + kv + " (\",\" ws " + kv + ")*)? \"}\"";
  }
  // rest(i, first): the properties from i on, in order; optional ones may be left out.
  std::vector<std::string> kv;
  std::vector<bool> is_required;
  for (auto it = props.begin(); it != props.end(); ++it) {
    std::string value = visit(it.value(), hint + "-" + it.key());
    kv.push_back(literal(ojson(it.key()).dump()) + " ws \":\" ws " + value + " ws");
    is_required.push_back(required.count(it.key()) != 0);
  }
  const std::string base = fresh(hint + "-rest");
  auto rest_name = [&](size_t i, bool first) {
    return base + "-" + std::to_string(i) + (first ? "-first" : "");
  };
  for (size_t i = kv.size() + 1; i-- > 0;) {
    for (bool first : {true, false}) {
      std::string body;
      if (i == kv.size()) {
        body = "\"\"";
      } else {
        std::string take =
            std::string(first ? "" : "\",\" ws ") + kv[i] + " " + rest_name(i + 1, false);
        body = is_required[i] ? take : "(" + take + ") | " + rest_name(i + 1, first);
      }
      add_rule(rest_name(i, first), body);
    }
  }
  return "\"{\" ws " + rest_name(0, true) + " \"}\"";
}

std::string JsonSchemaGrammar::array_rule(const ojson& schema, const std::string& hint) {
  std::string item =
      schema.contains("items") ? visit(schema["items"], hint + "-item") : "json-value";
  int64_t min = schema.value("minItems", int64_t{0});
  int64_t max = schema.contains("maxItems") ? schema["maxItems"].get<int64_t>() : -1;
  if (min < 0 || (max >= 0 && max < min) || min > 1000 || max > 1000) {
    refuse("minItems / maxItems must satisfy 0 <= minItems <= maxItems <= 1000");
  }
  return repeat_rule(item, min, max);
}

std::string JsonSchemaGrammar::string_rule(const ojson& schema, const std::string&) {
  if (schema.contains("pattern")) {
    if (schema.contains("format") || schema.contains("minLength") || schema.contains("maxLength")) {
      refuse("'pattern' together with 'format' / 'minLength' / 'maxLength' is not supported");
    }
    return "\"\\\"\" " + regex_to_gbnf(schema["pattern"].get<std::string>()) + " \"\\\"\"";
  }
  if (schema.contains("format")) {
    const std::string f = schema["format"];
    if (f == "date") return R"("\"" json-date "\"")";
    if (f == "time") return R"("\"" json-time "\"")";
    if (f == "date-time") return R"("\"" json-date "T" json-time "\"")";
    if (f == "uuid") return R"("\"" json-uuid "\"")";
    refuse("string format '" + f + "' is not supported (date, time, date-time, uuid are)");
  }
  if (!schema.contains("minLength") && !schema.contains("maxLength")) return "json-string";
  int64_t min = schema.value("minLength", int64_t{0});
  int64_t max = schema.contains("maxLength") ? schema["maxLength"].get<int64_t>() : -1;
  if (min < 0 || (max >= 0 && max < min) || min > 1000 || max > 1000) {
    refuse("minLength / maxLength must satisfy 0 <= minLength <= maxLength <= 1000");
  }
  return "\"\\\"\" json-char{" + std::to_string(min) + "," + (max < 0 ? "" : std::to_string(max)) +
         "} \"\\\"\"";
}

std::string JsonSchemaGrammar::number_rule(const ojson& schema, const std::string& type) {
  const bool integer = type == "integer";
  const bool has_min = schema.contains("minimum"), has_xmin = schema.contains("exclusiveMinimum");
  if ((has_min && schema["minimum"] != 0) || (has_xmin && schema["exclusiveMinimum"] != 0)) {
    refuse("'minimum' / 'exclusiveMinimum' are supported with the value 0 only");
  }
  const std::string digits = "[0-9]{0,15}";
  if (has_xmin) {  // > 0
    return integer ? "[1-9] " + digits
                   : "([1-9] " + digits + " (\".\" [0-9]{1,16})? | \"0.\" [0-9]{0,15} [1-9])";
  }
  if (has_min) {  // >= 0
    return integer ? "(\"0\" | [1-9] " + digits + ")"
                   : "(\"0\" | [1-9] " + digits + ") (\".\" [0-9]{1,16})?";
  }
  return integer ? "json-int" : "json-number";
}

std::string json_schema_to_gbnf(const ojson& schema) {
  JsonSchemaGrammar g;
  std::string root = g.add_schema(schema, schema, "schema");
  return g.gbnf(root);
}

std::string json_object_gbnf() {
  return JsonSchemaGrammar().gbnf("json-object");
}

}  // namespace ember::grammar
