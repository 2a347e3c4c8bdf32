#include "ember/engine/grammar/grammar_stacks.h"

#include <algorithm>

#include "ember/core/error.h"

namespace ember::grammar {

namespace {

constexpr size_t kMaxStacks = 4096;

// Expands rule references on top of `s` until a Bytes element is there (or the stack is empty),
// appending every resulting stack to `out`.
void expand(const Grammar& g, Stack& s, StackSet& out, bool* hit_context) {
  if (s.empty()) {
    out.push_back(s);
    return;
  }
  const uint32_t pos = s.back();
  if (pos == kContextBelow) {
    if (hit_context) *hit_context = true;
    return;
  }
  const Element& e = g.elements[pos];
  switch (e.kind) {
    case Element::Kind::Bytes:
      out.push_back(s);
      return;
    case Element::Kind::End:
      s.pop_back();
      expand(g, s, out, hit_context);
      s.push_back(pos);
      return;
    case Element::Kind::Rule: {
      s.pop_back();
      const bool continues = g.elements[pos + 1].kind != Element::Kind::End;
      if (continues) s.push_back(pos + 1);
      for (uint32_t alt : g.alternatives[e.value]) {
        s.push_back(alt);
        expand(g, s, out, hit_context);
        s.pop_back();
      }
      if (continues) s.pop_back();
      s.push_back(pos);
      if (out.size() > kMaxStacks) {
        throw Error(ErrorKind::InvalidArgument,
                    "grammar: too ambiguous (more than 4096 ways to continue at once)");
      }
      return;
    }
  }
}

void dedupe(StackSet& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace

StackSet initial_stacks(const Grammar& g) {
  StackSet out;
  for (uint32_t alt : g.alternatives[g.root]) {
    Stack s = {alt};
    expand(g, s, out, nullptr);
  }
  dedupe(out);
  return out;
}

void advance(const Grammar& g, const StackSet& stacks, uint8_t byte, StackSet& out,
             bool* hit_context) {
  out.clear();
  Stack s;
  for (const Stack& stack : stacks) {
    if (stack.empty()) continue;
    const Element& e = g.elements[stack.back()];
    if (!g.byte_classes[e.value].test(byte)) continue;
    s = stack;
    s.back() += 1;
    expand(g, s, out, hit_context);
  }
  if (out.size() > 1) dedupe(out);
}

StackSet advance_bytes(const Grammar& g, const StackSet& stacks, std::string_view bytes) {
  StackSet cur = stacks, next;
  for (char c : bytes) {
    advance(g, cur, static_cast<uint8_t>(c), next);
    std::swap(cur, next);
    if (cur.empty()) break;
  }
  return cur;
}

bool can_end(const StackSet& stacks) {
  return std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.empty(); });
}

}  // namespace ember::grammar
