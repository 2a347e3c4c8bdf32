// SentencePiece-style BPE over a scored vocabulary (GGUF tokenizer.ggml.model = "llama", and
// llama2.c's tokenizer.bin after normalisation). Encoding reproduces llama.cpp's llm_tokenizer_spm:
// '▁'-escaped text is split into UTF-8 characters, the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece is merged until no pair is a piece, and leftover characters go
// through <0xNN> byte fallback.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ember/tokenizer/tokenizer.h"

namespace ember {

// SentencePiece / GGUF token_type values.
enum class SpmTokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Everything an SpmTokenizer is built from; loaders fill it from their file format.
struct SpmVocab {
  std::vector<std::string> pieces;  // as stored, with '▁' (U+2581) for spaces
  std::vector<float> scores;        // same length as pieces
  std::vector<SpmTokenType> types;  // same length as pieces (empty: all Normal)
  int32_t bos_id = 1;               // -1 when none
  int32_t eos_id = 2;               // -1 when none
  int32_t unk_id = 0;               // -1 when none
  bool add_bos = true;
  bool add_space_prefix = true;
};

class SpmTokenizer : public Tokenizer {
 public:
  // Throws ember::Error when the vocabulary is empty or its arrays disagree in length.
  explicit SpmTokenizer(SpmVocab vocab);
  // The piece index holds views into pieces_, so copies would dangle; moves are fine.
  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
  std::string token_bytes(int32_t id) const override;
  const std::string& piece(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.pieces.size()); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  bool add_bos_default() const override { return vocab_.add_bos; }
  bool strip_space_after_bos() const override { return vocab_.add_space_prefix; }

  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_space_prefix() const { return vocab_.add_space_prefix; }
  float score(int32_t id) const;
  SpmTokenType token_type(int32_t id) const;
  // Id of the vocabulary entry spelled exactly `piece_text`, or -1.
  int32_t find_piece(std::string_view piece_text) const;

 private:
  // Id of the piece spelled `text` that segmentation may produce (not control/unknown/byte
  // entries, so "<s>" or "<0x41>" typed by a user stays plain text), or -1.
  int32_t segment_token(std::string_view text) const;
  // Appends the ids for one '▁'-escaped fragment.
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;

  SpmVocab vocab_;
  std::unordered_map<std::string_view, int32_t> index_;  // piece -> id (views into vocab_.pieces)
  std::vector<std::string> bytes_;                       // token_bytes per id, precomputed
  std::array<int32_t, 256> byte_tokens_{};               // byte fallback id per byte value
};

}  // namespace ember
