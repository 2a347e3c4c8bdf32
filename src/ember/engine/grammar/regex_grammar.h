// A JSON Schema "pattern" (an ECMA-262 regular expression) -> a GBNF expression for the JSON
// string content it matches, written as it appears inside the quotes (a '"' in the text is \" in
// JSON, a newline \n): literals and escapes (\d \w \s \. ...), classes [a-z] [^...], '.', groups
// (...) and (?:...), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms generate alike),
// and the anchors ^ and $ (a pattern without them may match inside the string: any text around).
// Backreferences, lookaround and other features a grammar cannot express throw ember::Error.
#pragma once

#include <string>

namespace ember::grammar {

// The GBNF expression (it refers to the rule json-char of JsonSchemaGrammar's common rules).
std::string regex_to_gbnf(const std::string& pattern);

}  // namespace ember::grammar
