// Text <-> token ids. Implementations: SentencePiece-style BPE (spm_tokenizer.h: GGUF `llama`
// vocab, llama2.c tokenizer.bin) and byte-level BPE (bpe_tokenizer.h: GGUF `gpt2` vocab, HF
// tokenizer.json). load_tokenizer.h picks the right loader for a file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes `text`; prepends BOS when `add_bos`. Invalid UTF-8 never crashes (bytes are encoded
  // through byte fallback or replaced with U+FFFD).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // Like encode(), but when `parse_special` is set, control/added tokens written literally in the
  // text (e.g. "<|im_start|>") become those tokens instead of being encoded as plain text.
  // Tokenizers without such tokens just encode.
  virtual std::vector<int32_t> encode_with_special(std::string_view text, bool add_bos,
                                                   bool parse_special) const {
    (void)parse_special;
    return encode(text, add_bos);
  }
  // Raw bytes this token stands for (SPM: '▁' -> ' ', <0xNN> -> the byte; control tokens -> "").
  virtual std::string token_bytes(int32_t id) const = 0;
  // The vocabulary entry as stored (for `ember tokenize` / inspect).
  virtual const std::string& piece(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;  // -1 when none
  virtual bool add_bos_default() const { return true; }
  // Whether decode() drops the space of a leading '▁' on the first token after BOS (SentencePiece
  // with add_space_prefix); byte-level BPE vocabularies override this to false.
  virtual bool strip_space_after_bos() const { return true; }

  // Decodes a whole sequence, applying the SentencePiece rule that the space a leading '▁' stands
  // for is dropped on the first token after BOS.
  std::string decode(const std::vector<int32_t>& ids) const;

 protected:
  // Throws ember::Error unless 0 <= id < vocab_size().
  void check_token_id(int32_t id) const;
};

// Loads the SentencePiece tokenizer embedded in a GGUF file (tokenizer.ggml.model = "llama":
// tokens, scores, token_type, bos/eos ids, add_bos_token, add_space_prefix). Throws ember::Error
// naming the file and key on missing/malformed metadata or any other tokenizer model (for a
// "gpt2" vocabulary use load_tokenizer_from_gguf, which dispatches on the model).
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& gguf);
// Loads a llama2.c tokenizer.bin (int32 max_token_length, then per token: float32 score, int32
// length, bytes). `vocab_size` comes from the checkpoint header. BOS = 1, EOS = 2.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int32_t vocab_size);

}  // namespace ember
