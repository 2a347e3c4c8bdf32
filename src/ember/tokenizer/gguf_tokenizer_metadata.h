// A tokenizer written out as GGUF tokenizer.ggml.* metadata, the form llama.cpp and ember's GGUF
// loaders read back: SentencePiece vocabularies (llama2.c tokenizer.bin) as model "llama"
// (tokens, scores, token_type), byte-level BPE (HF tokenizer.json) as model "gpt2" (tokens,
// token_type, merges and the pre-tokenizer's name in tokenizer.ggml.pre).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ember/tokenizer/tokenizer.h"

namespace ember {

class GgufWriter;
class Pretokenizer;

struct TokenizerExportOptions {
  // The model's embedding rows: the vocabulary is padded to this many entries with unused
  // "[PAD<id>]" tokens (GGUF readers take the vocabulary size from the token list).
  int64_t vocab_size = 0;
  std::optional<int32_t> pad_id;  // tokenizer.ggml.padding_token_id, when the source names one
  std::string chat_template;      // tokenizer.chat_template, when non-empty
};

// Adds the tokenizer.ggml.* keys for `tokenizer`. Throws ember::Error (Unsupported) for a
// tokenizer GGUF cannot describe (a byte-level pre-tokenizer that matches no tokenizer.ggml.pre
// preset) and (InvalidArgument) when the tokenizer has more tokens than vocab_size.
void add_tokenizer_metadata(GgufWriter& writer, const Tokenizer& tokenizer,
                            const TokenizerExportOptions& options);

// The tokenizer.ggml.pre name whose preset splits text exactly as `pretokenizer` does (tried on
// a set of probe texts: words, contractions, digit runs, punctuation, whitespace and newline runs,
// non-Latin scripts) and agrees on `ignore_merges`; nullopt when none does.
std::optional<std::string> gguf_pretokenizer_name(const Pretokenizer& pretokenizer,
                                                  bool ignore_merges);

}  // namespace ember
