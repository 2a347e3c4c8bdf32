// JSON Schema -> GBNF, for response_format json_schema and forced tool calls. Every output the
// grammar allows is valid against the schema: what cannot be enforced by a grammar here is
// refused (ember::Error naming the keyword) rather than ignored.
//   Supported: type (incl. a list of types), properties / required (declared properties in
//   order, optional ones omittable; additionalProperties as a schema when there are no declared
//   properties), items, minItems / maxItems, enum, const, anyOf / oneOf (as anyOf), allOf of one,
//   $ref to #/$defs/... or #/definitions/... (recursion allowed), string minLength / maxLength,
//   formats date, time, date-time and uuid, pattern (regex_grammar.h), minimum 0 /
//   exclusiveMinimum 0 on numbers.
//   Ignored (do not constrain): title, description, examples, default, $schema, $id, $comment.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace ember::grammar {

class JsonSchemaGrammar {
 public:
  JsonSchemaGrammar();
  // Adds the rules for `schema` (whose $refs resolve against `root_document`) and returns the
  // name of the rule that matches it.
  std::string add_schema(const nlohmann::ordered_json& schema,
                         const nlohmann::ordered_json& root_document, const std::string& hint);
  // Adds a rule written in GBNF.
  void add_rule(const std::string& name, const std::string& body);
  // The whole grammar with `root ::= <root_rule>`.
  std::string gbnf(const std::string& root_rule) const;

  // A GBNF string literal matching exactly `text`.
  static std::string literal(const std::string& text);

 private:
  std::string visit(const nlohmann::ordered_json& schema, const std::string& hint);
  std::string object_rule(const nlohmann::ordered_json& schema, const std::string& hint);
  std::string array_rule(const nlohmann::ordered_json& schema, const std::string& hint);
  std::string string_rule(const nlohmann::ordered_json& schema, const std::string& hint);
  std::string number_rule(const nlohmann::ordered_json& schema, const std::string& type);
  std::string type_rule(const nlohmann::ordered_json& schema, const std::string& type,
                        const std::string& hint);
  std::string fresh(const std::string& hint);

  const nlohmann::ordered_json* document_ = nullptr;
  std::map<std::string, std::string> rules_;  // name -> body
  std::map<std::string, std::string> refs_;   // "$ref" -> rule name
  std::set<std::string> used_names_;
};

// GBNF for `schema` as a whole document (root ::= the schema's value). Throws ember::Error.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// GBNF for any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace ember::grammar
