// A context-free grammar over bytes, parsed from GBNF (the grammar format llama.cpp users write):
//   root   ::= object
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   digit  ::= [0-9]            # classes, negated [^"\\], "." any character
//   name   ::= [a-z]+ | "x"{2,4}  # * + ? {m} {m,} {m,n}, ( groups ), comments
// Characters are Unicode code points in GBNF; the grammar is compiled to bytes (a class of code
// points becomes the UTF-8 byte sequences that encode them), so matching a token is walking its
// bytes. Repetitions and groups become helper rules; right recursion does not grow the matcher's
// stacks (see grammar_stacks.h).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::grammar {

struct Element {
  enum class Kind : uint8_t { End, Bytes, Rule };
  Kind kind = Kind::End;
  uint32_t value = 0;  // Bytes: index into Grammar::byte_classes; Rule: rule index
};

struct Grammar {
  // Every alternative of every rule, each a run of Bytes/Rule elements closed by End.
  std::vector<Element> elements;
  // Per rule: the index in `elements` where each of its alternatives starts.
  std::vector<std::vector<uint32_t>> alternatives;
  std::vector<std::string> rule_names;
  std::vector<std::bitset<256>> byte_classes;
  uint32_t root = 0;
};

// Parses GBNF with `root` as the start rule. Throws ember::Error (InvalidArgument) naming the
// line for a syntax error, an undefined rule, a missing root or a left-recursive rule (which a
// top-down matcher cannot run).
Grammar parse_gbnf(std::string_view text, std::string_view root = "root");

}  // namespace ember::grammar
