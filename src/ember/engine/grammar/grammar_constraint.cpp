#include "ember/engine/grammar/grammar_constraint.h"

#include <algorithm>

#include "ember/core/error.h"

namespace ember::grammar {

namespace {

constexpr size_t kMaskCacheSize = 256;
constexpr size_t kMaxStates = 1u << 16;  // past this the DFA starts over (memory bound)

std::string key_of(const StackSet& stacks) {
  std::string key;
  for (const Stack& s : stacks) {
    auto n = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
  }
  return key;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)) {}

int32_t CompiledGrammar::intern(StackSet stacks) const {
  std::string key = key_of(stacks);
  auto it = state_index_.find(key);
  if (it != state_index_.end()) return it->second;
  auto id = static_cast<int32_t>(states_.size());
  states_.push_back({std::move(stacks), {}});
  states_.back().next.fill(kUnknown);
  state_index_.emplace(std::move(key), id);
  return id;
}

int32_t CompiledGrammar::step(int32_t state, uint8_t byte) const {
  int32_t next = states_[static_cast<size_t>(state)].next[byte];
  if (next != kUnknown) return next;
  StackSet out;
  advance(grammar_, states_[static_cast<size_t>(state)].stacks, byte, out);
  next = out.empty() ? kDead : intern(std::move(out));
  states_[static_cast<size_t>(state)].next[byte] = next;  // (states_ may have grown: index again)
  return next;
}

void CompiledGrammar::reset_if_too_big() const {
  if (states_.size() < kMaxStates) return;
  states_.clear();
  state_index_.clear();
  masks_.clear();
  lru_.clear();
}

std::vector<uint64_t> CompiledGrammar::walk(int32_t start) const {
  const TokenTrie& t = *trie_;
  std::vector<uint64_t> accepted((static_cast<size_t>(t.vocab_size) + 63) / 64, 0);
  levels_.assign(static_cast<size_t>(t.max_depth) + 1, kDead);
  levels_[0] = start;
  const auto n = static_cast<uint32_t>(t.nodes.size());
  for (uint32_t i = 1; i < n;) {
    const TokenTrie::Node& node = t.nodes[i];
    const int32_t s = step(levels_[node.depth - 1u], node.byte);
    if (s == kDead) {
      i = node.subtree_end;  // no token with this prefix continues the grammar
      continue;
    }
    levels_[node.depth] = s;
    for (uint32_t k = node.tokens_begin; k < t.tokens_end(i); ++k) {
      const auto id = static_cast<uint32_t>(t.tokens[k]);
      accepted[id / 64] |= uint64_t{1} << (id % 64);
    }
    ++i;
  }
  return accepted;
}

void CompiledGrammar::allowed_tokens(const StackSet& stacks, std::vector<uint8_t>& allowed) const {
  std::lock_guard<std::mutex> lock(mutex_);
  reset_if_too_big();
  const int32_t state = intern(stacks);
  auto it = masks_.find(state);
  if (it != masks_.end()) {
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second.second);
  } else {
    ++walks_;
    lru_.push_front(state);
    it = masks_.emplace(state, std::make_pair(walk(state), lru_.begin())).first;
    if (masks_.size() > kMaskCacheSize) {
      masks_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  const std::vector<uint64_t>& bits = it->second.first;
  const size_t vocab = static_cast<size_t>(trie_->vocab_size);
  allowed.resize(vocab);
  for (size_t id = 0; id < vocab; ++id) allowed[id] = static_cast<uint8_t>((bits[id / 64] >> (id % 64)) & 1);
}

size_t CompiledGrammar::walks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return walks_;
}

size_t CompiledGrammar::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

size_t CompiledGrammar::states() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return states_.size();
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(initial_stacks(grammar_->grammar())) {}

void GrammarConstraint::allowed_tokens(std::vector<uint8_t>& allowed) {
  grammar_->allowed_tokens(stacks_, allowed);
}

bool GrammarConstraint::can_end() const { return grammar::can_end(stacks_); }

void GrammarConstraint::accept(int32_t token) {
  const TokenTrie& t = grammar_->trie();
  if (token < 0 || token >= t.vocab_size) throw Error("grammar: token id out of range");
  const std::string& bytes = t.token_bytes[static_cast<size_t>(token)];
  StackSet next = advance_bytes(grammar_->grammar(), stacks_, bytes);
  if (next.empty() || bytes.empty()) {
    throw Error("grammar: token " + std::to_string(token) + " does not continue the grammar");
  }
  stacks_ = std::move(next);
}

}  // namespace ember::grammar
