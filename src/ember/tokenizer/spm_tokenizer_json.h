// HF tokenizer.json of SentencePiece-style BPE (Llama 2, Mistral, Phi-3, Gemma: model.type "BPE"
// with byte_fallback, '▁' for spaces) read into the SentencePiece tokenizer ember already runs for
// GGUF files. HF ranks merges; SentencePiece BPE merges the adjacent pair whose piece scores
// highest. Giving each piece the score -(rank of the first merge that makes it) makes the two
// agree: HF's converter wrote the merges in the order of SentencePiece's scores.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ember/tokenizer/spm_tokenizer.h"

namespace ember {

// Whether a parsed tokenizer.json is SentencePiece-style (BPE with byte_fallback).
bool is_sentencepiece_style_json(const nlohmann::json& root);

// Reads `root` (parsed from `path`, named in errors): vocab, merges (for scores), added tokens
// (control / user-defined), unk / byte pieces, the space handling (normalizer Prepend + Replace,
// Replace alone, or a Metaspace pre-tokenizer that does not split), and bos / eos / add_bos from
// tokenizer_config.json beside it. Throws ember::Error naming the file for anything else.
std::unique_ptr<SpmTokenizer> load_spm_tokenizer_json(const nlohmann::json& root,
                                                      const std::string& path);

// Both tokenizer.json readers lay the tokens out by id, so the largest id sizes the vocabulary:
// a file whose ids are mostly holes (one id of 2^30 among ten tokens asked for tens of GB) is
// refused, naming `path`. Allowed: max_id < 2 * entries + 1024.
void check_dense_ids(int32_t max_id, size_t entries, const std::string& path);

}  // namespace ember
