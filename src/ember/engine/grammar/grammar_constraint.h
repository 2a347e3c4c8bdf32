// Grammar-constrained decoding: a TokenConstraint that allows exactly the tokens whose bytes
// continue a match of the grammar. Grammar states (stack sets) are interned as the states of a
// lazily built DFA over bytes: a transition is computed once, then every walk that passes the
// same (state, byte) is an array lookup. The token mask is a walk of the vocabulary trie from the
// current state, skipping a whole subtree at the first byte the grammar rejects; masks are cached
// per state, so the steps inside one JSON string (the same state each time) cost one walk.
#pragma once

#include <array>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/engine/grammar/grammar.h"
#include "ember/engine/grammar/grammar_stacks.h"
#include "ember/engine/grammar/token_trie.h"
#include "ember/engine/token_constraint.h"

namespace ember::grammar {

// A grammar ready to constrain a vocabulary, with its DFA and mask cache; shared by the requests
// that use the same grammar (thread-safe).
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie);

  const Grammar& grammar() const { return grammar_; }
  const TokenTrie& trie() const { return *trie_; }

  // allowed[id] for the grammar state `stacks` (see TokenConstraint::allowed_tokens).
  void allowed_tokens(const StackSet& stacks, std::vector<uint8_t>& allowed) const;

  // Masks walked, cache hits, DFA states so far (benchmarks and tests).
  size_t walks() const;
  size_t hits() const;
  size_t states() const;

 private:
  struct State {
    StackSet stacks;
    std::array<int32_t, 256> next;  // kUnknown, kDead or a state
  };
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kDead = -1;
  int32_t intern(StackSet stacks) const;
  int32_t step(int32_t state, uint8_t byte) const;
  std::vector<uint64_t> walk(int32_t state) const;
  void reset_if_too_big() const;

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  mutable std::mutex mutex_;
  mutable std::vector<State> states_;
  mutable std::unordered_map<std::string, int32_t> state_index_;
  mutable std::list<int32_t> lru_;
  mutable std::unordered_map<int32_t, std::pair<std::vector<uint64_t>, std::list<int32_t>::iterator>> masks_;
  mutable std::vector<int32_t> levels_;  // walk scratch: the state at each trie depth
  mutable size_t walks_ = 0;
  mutable size_t hits_ = 0;
};

class GrammarConstraint : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar);
  void allowed_tokens(std::vector<uint8_t>& allowed) override;
  bool can_end() const override;
  void accept(int32_t token) override;
  const StackSet& stacks() const { return stacks_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  StackSet stacks_;
};

}  // namespace ember::grammar
