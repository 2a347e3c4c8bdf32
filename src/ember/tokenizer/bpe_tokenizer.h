// Byte-level BPE (GPT-2 family: GPT-2, SmolLM/SmolLM2, Llama 3, Qwen2, StarCoder, Falcon,
// DeepSeek). Text is first cut at added tokens, then pre-tokenized into pieces; each piece is
// spelled in the byte-level alphabet (byte_level.h) and its characters are merged pairwise, always
// applying the lowest-ranked merge present (leftmost on ties), until no listed merge applies.
// This reproduces HF tokenizers' BPE model and llama.cpp's llm_tokenizer_bpe exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/tokenizer/pretokenizer.h"
#include "ember/tokenizer/special_tokens.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

class GgufFile;

// GGUF token_type values (shared with SentencePiece's numbering).
enum class BpeTokenKind : uint8_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,      // special token: no text of its own unless rendered
  UserDefined = 4,  // added token whose text is literal, not in the byte alphabet
  Unused = 5,
  Byte = 6,
};

// Everything a BpeTokenizer is built from; loaders fill it from tokenizer.json or GGUF metadata.
struct BpeVocab {
  std::vector<std::string> tokens;  // Normal: byte-alphabet spelling; added tokens: literal text
  std::vector<BpeTokenKind> kinds;  // same length as tokens (empty: all Normal)
  // Merge rules in rank order (rank = index), as pairs of token spellings.
  std::vector<std::pair<std::string, std::string>> merges;
  // A merge naming a spelling that is not a token is an error (HF tokenizers' rule) instead of
  // being dropped (llama.cpp's tolerance, used for GGUF).
  bool strict_merges = true;
  // Added tokens cut out before pre-tokenization. Empty: every Control/Unknown token (special)
  // and UserDefined token (not special) of `kinds`.
  std::vector<AddedToken> added_tokens;
  Pretokenizer pretokenizer;
  int32_t bos_id = -1;  // -1 when none
  int32_t eos_id = -1;
  int32_t unk_id = -1;  // emitted for characters with no token (never for byte-level text)
  bool add_bos = false;
  // A piece that is itself a vocabulary token is emitted as is, without merging (Llama 3).
  bool ignore_merges = false;
  std::string source;  // file the vocabulary came from, for error messages
};

class BpeTokenizer : public Tokenizer {
 public:
  // Throws ember::Error naming vocab.source for: an empty vocabulary, arrays of different lengths,
  // or (with strict_merges) a merge naming a spelling that is not in the vocabulary.
  explicit BpeTokenizer(BpeVocab vocab);
  ~BpeTokenizer() override;
  // The token index holds views into the token strings, so copies would dangle.
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // Plain text: special tokens' spellings are encoded as text (user-defined added tokens still
  // split out), like llama.cpp with parse_special = false.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
  // With `parse_special`, "<|im_start|>" etc. in `text` become their ids.
  std::vector<int32_t> encode_with_special(std::string_view text, bool add_bos,
                                           bool parse_special) const override;
  // Raw bytes: byte-alphabet tokens decoded, added tokens' literal text, control tokens "".
  std::string token_bytes(int32_t id) const override;
  // token_bytes, except that control tokens give their text when `render_special`.
  std::string token_text(int32_t id, bool render_special) const;
  const std::string& piece(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_bos_default() const override { return vocab_.add_bos; }
  bool strip_space_after_bos() const override { return false; }

  BpeTokenKind token_kind(int32_t id) const;
  // What the tokenizer was built from (tokens, kinds, merges in rank order, pre-tokenizer), for
  // writing it out again (GGUF metadata); added_tokens is empty here (moved into added_tokens()).
  const BpeVocab& vocab() const { return vocab_; }
  // Id of the token spelled exactly `spelling` (byte alphabet for normal tokens), or -1.
  int32_t find_token(std::string_view spelling) const;
  size_t num_merges() const { return vocab_.merges.size(); }
  const Pretokenizer& pretokenizer() const { return vocab_.pretokenizer; }
  const AddedTokenSplitter& added_tokens() const { return added_; }

 private:
  // The constructor's steps, in order.
  void validate_vocab();
  void build_index();
  void build_token_bytes();
  void build_merges();
  void build_added_tokens();
  struct MergeTable;  // (left id, right id) -> (rank, merged id)
  struct WordCache;

  // Encodes text with no added tokens in it.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  // Encodes one pre-tokenized piece: raw bytes (`raw_bytes`) or text already in the alphabet.
  void encode_piece(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const;
  void merge_piece(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const;

  BpeVocab vocab_;
  AddedTokenSplitter added_;
  std::unordered_map<std::string_view, int32_t> index_;  // spelling -> id (views into tokens)
  std::vector<std::string> bytes_;                       // token_bytes per id, precomputed
  std::vector<int32_t> byte_ids_;                        // id of each byte's one-char spelling
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<WordCache> cache_;
};

// Builds a byte-level BPE tokenizer from GGUF metadata (tokenizer.ggml.model = "gpt2"):
// tokenizer.ggml.tokens, .merges ("a b" strings), .token_type, .pre (the pre-tokenizer preset),
// .bos_token_id / .eos_token_id / .unknown_token_id, .add_bos_token. Throws ember::Error naming
// the file and key on missing or malformed metadata and for an unknown pre-tokenizer name.
std::unique_ptr<Tokenizer> load_gguf_bpe_tokenizer(const GgufFile& gguf);

}  // namespace ember
