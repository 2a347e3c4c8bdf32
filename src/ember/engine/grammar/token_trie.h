// The vocabulary as a byte trie, stored in preorder so that a depth-first walk is a scan and a
// rejected prefix skips its whole subtree at once. Built once per tokenizer; grammar masks walk it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ember {
class Tokenizer;
}

namespace ember::grammar {

struct TokenTrie {
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;         // the root is 0
    uint32_t subtree_end = 0;   // one past the last node of this node's subtree
    uint32_t tokens_begin = 0;  // tokens[tokens_begin, next node's tokens_begin) end here
  };
  std::vector<Node> nodes;
  std::vector<int32_t> tokens;  // token ids in node order (a subtree's tokens are contiguous)
  std::vector<std::string> token_bytes;  // per id; empty for control tokens (never matchable)
  int32_t vocab_size = 0;
  uint16_t max_depth = 0;

  // Token ids of the subtree of node i (including i itself).
  std::pair<uint32_t, uint32_t> subtree_tokens(uint32_t i) const {
    uint32_t end = nodes[i].subtree_end;
    return {nodes[i].tokens_begin,
            end < nodes.size() ? nodes[end].tokens_begin : static_cast<uint32_t>(tokens.size())};
  }
  uint32_t tokens_end(uint32_t i) const {
    return i + 1 < nodes.size() ? nodes[i + 1].tokens_begin : static_cast<uint32_t>(tokens.size());
  }
};

std::shared_ptr<const TokenTrie> build_token_trie(const Tokenizer& tokenizer);

}  // namespace ember::grammar
