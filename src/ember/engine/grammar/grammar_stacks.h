// Where a grammar match stands: a set of stacks (the grammar can be ambiguous), each a list of
// element indices with the next element to match at the back, always a Bytes element once
// expanded; an empty stack means the grammar is complete. A rule's continuation is not pushed
// when it is the end of its alternative, so right recursion (x* ::= x x* | ε) keeps the depth
// constant instead of growing a frame per repetition.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ember/engine/grammar/grammar.h"

namespace ember::grammar {

using Stack = std::vector<uint32_t>;
using StackSet = std::vector<Stack>;

// An entry below which the context is unknown (a truncated stack, see advance()).
constexpr uint32_t kContextBelow = UINT32_MAX;

// The stacks at the start of `root`.
StackSet initial_stacks(const Grammar& g);

// The stacks after one more byte, expanded and deduplicated (sorted). A stack whose match pops
// into a kContextBelow entry is dropped and reported in `*hit_context` (the caller decides what
// that means); the others continue. Throws ember::Error when the grammar forks into more than
// 4096 live stacks (a grammar too ambiguous to follow).
void advance(const Grammar& g, const StackSet& stacks, uint8_t byte, StackSet& out,
             bool* hit_context = nullptr);

// The stacks after `bytes`; empty when some byte cannot follow.
StackSet advance_bytes(const Grammar& g, const StackSet& stacks, std::string_view bytes);

// Whether the grammar may end here (some stack is empty).
bool can_end(const StackSet& stacks);

}  // namespace ember::grammar
