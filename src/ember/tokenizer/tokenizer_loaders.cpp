// Builds SentencePiece tokenizers from their on-disk forms: GGUF metadata (tokenizer.ggml.model =
// "llama") and llama2.c's tokenizer.bin. Both end up as the same SpmVocab, so a model encodes text
// identically whichever file it came from. (Byte-level BPE loaders: gguf_bpe.cpp, tokenizer_json.)
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ember/core/error.h"
#include "ember/core/mapped_file.h"
#include "ember/formats/gguf.h"
#include "ember/tokenizer/gguf_vocab_metadata.h"
#include "ember/tokenizer/spm_tokenizer.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

namespace {

using gguf_vocab::fail_key;
using gguf_vocab::optional_int;

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";

void check_array_length(const GgufFile& gguf, const std::string& key,
                        const std::vector<GgufValue>& values, size_t n_tokens) {
  if (values.size() != n_tokens) {
    fail_key(gguf, key,
             "has " + std::to_string(values.size()) + " entries but " + kTokensKey + " has " +
                 std::to_string(n_tokens));
  }
}

void check_element(const GgufFile& gguf, const std::string& key, const GgufValue& v, size_t i,
                   bool ok, const char* expected) {
  if (!ok) {
    fail_key(gguf, key,
             "element " + std::to_string(i) + " has type " + gguf_type_name(v.type) +
                 ", expected " + expected);
  }
}

bool optional_bool(const GgufFile& gguf, const std::string& key, bool fallback) {
  const std::optional<int64_t> v = optional_int(gguf, key);
  return v ? *v != 0 : fallback;
}

// Special token ids outside the vocabulary (GGUF writers use 0xFFFFFFFF for "none") mean none.
int32_t token_id_or(const GgufFile& gguf, const std::string& key, int32_t fallback,
                    size_t n_tokens) {
  const std::optional<int64_t> v = optional_int(gguf, key);
  if (!v) return fallback;
  return *v >= 0 && static_cast<uint64_t>(*v) < n_tokens ? static_cast<int32_t>(*v) : -1;
}

// Bounds-checked little-endian reader over a mapped file; every read names the file on failure.
class ByteReader {
 public:
  explicit ByteReader(const MappedFile& file) : file_(file) {}

  int32_t read_i32(const std::string& what) {
    int32_t v;
    std::memcpy(&v, take(sizeof(v), what), sizeof(v));
    return v;
  }
  float read_f32(const std::string& what) {
    float v;
    std::memcpy(&v, take(sizeof(v), what), sizeof(v));
    return v;
  }
  std::string read_bytes(size_t n, const std::string& what) {
    const uint8_t* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

 private:
  const uint8_t* take(size_t n, const std::string& what) {
    file_.check_range(pos_, n, what);
    const uint8_t* p = file_.data() + pos_;
    pos_ += n;
    return p;
  }

  const MappedFile& file_;
  size_t pos_ = 0;
};

// llama2.c's export wrote pieces with '▁' turned into ' ' and BOS/EOS as "\n<s>\n"/"\n</s>\n";
// undo both so the vocabulary matches the SentencePiece model (and the GGUF of the same model).
std::string normalise_llama2c_piece(const std::string& raw) {
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    if (c == ' ') {
      out.append("\xE2\x96\x81");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool is_byte_piece(const std::string& p) {
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& gguf) {
  const std::string model = gguf.get_string(kModelKey);
  if (model == "gpt2") {
    throw Error::in_file(
        ErrorKind::Unsupported, gguf.path(),
        "unsupported tokenizer model 'gpt2' (byte-level BPE is not implemented yet)");
  }
  if (model != "llama") {
    throw Error::in_file(ErrorKind::Unsupported, gguf.path(),
                         "unsupported tokenizer model '" + model + "'");
  }

  SpmVocab vocab;
  const std::vector<GgufValue>& tokens = gguf.get_array(kTokensKey);
  if (tokens.empty()) fail_key(gguf, kTokensKey, "is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) fail_key(gguf, kTokensKey, "is too long");
  const size_t n = tokens.size();
  vocab.pieces.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    check_element(gguf, kTokensKey, tokens[i], i, tokens[i].type == GgufType::String, "string");
    vocab.pieces.push_back(tokens[i].string_value);
  }

  // Without scores there is nothing to rank merges by, so a "llama" vocabulary must have them.
  const std::vector<GgufValue>& scores = gguf.get_array(kScoresKey);
  check_array_length(gguf, kScoresKey, scores, n);
  vocab.scores.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::optional<double> s = scores[i].as_float();
    check_element(gguf, kScoresKey, scores[i], i, s.has_value(), "float");
    vocab.scores.push_back(static_cast<float>(*s));
  }

  if (gguf.find(kTypesKey) != nullptr) {
    const std::vector<GgufValue>& types = gguf.get_array(kTypesKey);
    check_array_length(gguf, kTypesKey, types, n);
    vocab.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const std::optional<int64_t> t = types[i].as_int();
      check_element(gguf, kTypesKey, types[i], i, t.has_value(), "integer");
      // Values outside SentencePiece's enum are treated as normal text pieces.
      vocab.types.push_back(*t >= 0 && *t <= 6 ? static_cast<SpmTokenType>(*t)
                                               : SpmTokenType::Normal);
    }
  }

  // Defaults are SentencePiece's llama ids, as llama.cpp assumes when the keys are absent.
  vocab.bos_id = token_id_or(gguf, "tokenizer.ggml.bos_token_id", 1, n);
  vocab.eos_id = token_id_or(gguf, "tokenizer.ggml.eos_token_id", 2, n);
  vocab.unk_id = token_id_or(gguf, "tokenizer.ggml.unknown_token_id", 0, n);
  vocab.add_bos = optional_bool(gguf, "tokenizer.ggml.add_bos_token", true);
  vocab.add_space_prefix = optional_bool(gguf, "tokenizer.ggml.add_space_prefix", true);
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int32_t vocab_size) {
  if (vocab_size < 3) {
    throw Error::in_file(
        ErrorKind::InvalidFile, path,
        "vocab_size " + std::to_string(vocab_size) +
            " is too small for a llama2.c tokenizer (ids 0-2 are <unk>, <s>, </s>)");
  }
  const MappedFile file(path);
  ByteReader reader(file);
  const int32_t max_token_length = reader.read_i32("tokenizer header (max_token_length)");
  if (max_token_length <= 0) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "invalid max_token_length " + std::to_string(max_token_length));
  }

  SpmVocab vocab;
  vocab.pieces.reserve(vocab_size);
  vocab.scores.reserve(vocab_size);
  vocab.types.reserve(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) {
    const std::string what = "token " + std::to_string(i) + " of " + std::to_string(vocab_size);
    const float score = reader.read_f32(what + " (score)");
    const int32_t length = reader.read_i32(what + " (length)");
    if (length < 0) {
      throw Error::in_file(ErrorKind::InvalidFile, path,
                           what + " has negative length " + std::to_string(length));
    }
    std::string piece = reader.read_bytes(static_cast<size_t>(length), what + " (bytes)");
    SpmTokenType type = SpmTokenType::Normal;
    if (i == 0) {
      piece = "<unk>";
      type = SpmTokenType::Unknown;
    } else if (i == 1) {
      piece = "<s>";
      type = SpmTokenType::Control;
    } else if (i == 2) {
      piece = "</s>";
      type = SpmTokenType::Control;
    } else {
      piece = normalise_llama2c_piece(piece);
      if (is_byte_piece(piece)) type = SpmTokenType::Byte;
    }
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  }
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.unk_id = 0;
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace ember
