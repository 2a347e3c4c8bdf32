// Reading a tokenizer's GGUF metadata keys with errors that name the file and the key; shared by
// the SentencePiece (llama) and byte-level BPE (gpt2) GGUF loaders.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ember/formats/gguf.h"

namespace ember::gguf_vocab {

// Throws ember::Error("<path>: metadata key '<key>' <what>").
[[noreturn]] void fail_key(const GgufFile& gguf, const std::string& key, const std::string& what);

// An optional integer key: absent -> nullopt; present with a non-integer type -> error.
std::optional<int64_t> optional_int(const GgufFile& gguf, const std::string& key);

}  // namespace ember::gguf_vocab
