#include "ember/engine/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "ember/tokenizer/tokenizer.h"

namespace ember::grammar {

std::shared_ptr<const TokenTrie> build_token_trie(const Tokenizer& tokenizer) {
  auto trie = std::make_shared<TokenTrie>();
  trie->vocab_size = tokenizer.vocab_size();
  trie->token_bytes.resize(static_cast<size_t>(trie->vocab_size));
  std::vector<int32_t> order;
  for (int32_t id = 0; id < trie->vocab_size; ++id) {
    trie->token_bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
    if (!trie->token_bytes[static_cast<size_t>(id)].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return trie->token_bytes[static_cast<size_t>(a)] < trie->token_bytes[static_cast<size_t>(b)];
  });
  // Preorder construction: `path` holds the node index at each depth of the current token.
  trie->nodes.push_back({0, 0, 0, 0});
  std::vector<uint32_t> path = {0};
  std::string prev;
  auto close_to = [&](size_t depth) {  // finish the subtrees deeper than `depth`
    while (path.size() > depth + 1) {
      trie->nodes[path.back()].subtree_end = static_cast<uint32_t>(trie->nodes.size());
      path.pop_back();
    }
  };
  for (int32_t id : order) {
    const std::string& bytes = trie->token_bytes[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < prev.size() && common < bytes.size() && prev[common] == bytes[common]) ++common;
    close_to(common);
    for (size_t d = common; d < bytes.size(); ++d) {
      TokenTrie::Node n;
      n.byte = static_cast<uint8_t>(bytes[d]);
      n.depth = static_cast<uint16_t>(std::min<size_t>(d + 1, UINT16_MAX));
      n.tokens_begin = static_cast<uint32_t>(trie->tokens.size());
      path.push_back(static_cast<uint32_t>(trie->nodes.size()));
      trie->nodes.push_back(n);
      trie->max_depth = std::max(trie->max_depth, n.depth);
    }
    trie->tokens.push_back(id);  // ends at the deepest node of the path
    prev = bytes;
  }
  close_to(0);
  trie->nodes[0].subtree_end = static_cast<uint32_t>(trie->nodes.size());
  return trie;
}

}  // namespace ember::grammar
