// HF tokenizers' tokenizer.json for byte-level BPE models (GPT-2, SmolLM2, Llama 3, Qwen2, ...):
// model (type "BPE", vocab, merges), added_tokens, pre_tokenizer (Sequence / Split / ByteLevel /
// Digits / Punctuation), post_processor (whether a BOS is prepended). tokenizer_config.json beside
// it, when present, names bos/eos and add_bos_token; config.json's bos/eos_token_id fill in ids
// still unknown after that.
#pragma once

#include <memory>
#include <string>

#include "ember/tokenizer/tokenizer.h"

namespace ember {

class BpeTokenizer;

// Throws ember::Error naming the file for: unreadable file, invalid UTF-8 or JSON, a missing
// model, an unsupported model/normalizer/pre-tokenizer type, malformed vocab/merges/added tokens,
// merges naming tokens not in the vocabulary, and invalid regexes.
std::unique_ptr<BpeTokenizer> load_bpe_tokenizer_json(const std::string& path);
// Either kind: SentencePiece-style files (BPE with byte_fallback: Llama 2, Mistral, Phi-3, Gemma)
// load into the SentencePiece tokenizer (spm_tokenizer_json.h), the rest as byte-level BPE.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);

}  // namespace ember
