// A nesting limit for every JSON ember parses (model configs, safetensors headers, tokenizer
// files, HTTP requests): JSON nested 100,000 deep made recursive copies of the parsed tree run out
// of stack and memory. The text is scanned before it is parsed, in O(n) without recursion.
#pragma once

#include <string>
#include <string_view>

namespace ember {

// No real model file or request nests deeper than this.
constexpr int kMaxJsonDepth = 128;

// Throws ember::Error (InvalidFile when `what` names a file, else InvalidArgument) naming `what`
// when arrays/objects in `text` nest deeper than `max_depth`.
void check_json_depth(std::string_view text, const std::string& what, bool is_file,
                      int max_depth = kMaxJsonDepth);

}  // namespace ember
