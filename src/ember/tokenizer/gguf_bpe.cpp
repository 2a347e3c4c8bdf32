// Byte-level BPE vocabularies stored in GGUF metadata (tokenizer.ggml.model = "gpt2"), as
// llama.cpp's convert scripts write them: token spellings in the byte alphabet, merges as
// "left right" strings in rank order, and the pre-tokenizer named by tokenizer.ggml.pre.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/gguf_vocab_metadata.h"
#include "ember/tokenizer/pretokenizer.h"

namespace ember {

namespace {

using gguf_vocab::fail_key;
using gguf_vocab::optional_int;

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kMergesKey = "tokenizer.ggml.merges";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";
constexpr const char* kPreKey = "tokenizer.ggml.pre";

// The array under `key`, checked to hold only `type` elements.
const std::vector<GgufValue>& typed_array(const GgufFile& gguf, const std::string& key,
                                          bool (*ok)(const GgufValue&), const char* expected) {
  const std::vector<GgufValue>& values = gguf.get_array(key);
  for (size_t i = 0; i < values.size(); ++i) {
    if (!ok(values[i])) {
      fail_key(gguf, key,
               "element " + std::to_string(i) + " has type " + gguf_type_name(values[i].type) +
                   ", expected " + expected);
    }
  }
  return values;
}

bool is_string(const GgufValue& v) {
  return v.type == GgufType::String;
}
bool is_integer(const GgufValue& v) {
  return v.as_int().has_value();
}

// Special token ids outside the vocabulary (writers use 0xFFFFFFFF for "none") mean none.
int32_t token_id(const GgufFile& gguf, const std::string& key, size_t n_tokens) {
  const std::optional<int64_t> v = optional_int(gguf, key);
  if (!v) return -1;
  return *v >= 0 && static_cast<uint64_t>(*v) < n_tokens ? static_cast<int32_t>(*v) : -1;
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_bpe_tokenizer(const GgufFile& gguf) {
  const std::string model = gguf.get_string(kModelKey);
  if (model != "gpt2") {
    fail_key(gguf, kModelKey,
             "is '" + model + "', expected 'gpt2' for a byte-level BPE vocabulary");
  }

  BpeVocab vocab;
  vocab.source = gguf.path();
  vocab.strict_merges = false;  // llama.cpp ignores merges it cannot use; so do we

  const std::vector<GgufValue>& tokens = typed_array(gguf, kTokensKey, is_string, "string");
  if (tokens.empty()) fail_key(gguf, kTokensKey, "is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) fail_key(gguf, kTokensKey, "is too long");
  const size_t n = tokens.size();
  vocab.tokens.reserve(n);
  for (const GgufValue& t : tokens) vocab.tokens.push_back(t.string_value);

  const std::vector<GgufValue>& merges = typed_array(gguf, kMergesKey, is_string, "string");
  vocab.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i].string_value;
    // Split at the first space after the first character, so a left side that is itself a
    // space (possible in non-byte-level vocabularies) survives.
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) {
      fail_key(gguf, kMergesKey,
               "element " + std::to_string(i) + " '" + m + "' is not of the form 'left right'");
    }
    vocab.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }

  if (gguf.find(kTypesKey) != nullptr) {
    const std::vector<GgufValue>& types = typed_array(gguf, kTypesKey, is_integer, "integer");
    if (types.size() != n) {
      fail_key(gguf, kTypesKey,
               "has " + std::to_string(types.size()) + " entries but " + kTokensKey + " has " +
                   std::to_string(n));
    }
    vocab.kinds.reserve(n);
    for (const GgufValue& t : types) {
      const int64_t v = *t.as_int();
      // Undefined (0) and values outside the enum are treated as normal tokens.
      vocab.kinds.push_back(v >= 1 && v <= 6 ? static_cast<BpeTokenKind>(v) : BpeTokenKind::Normal);
    }
  }

  // llama.cpp falls back to its "default" regexes when the key is absent (older conversions).
  const std::string pre = gguf.find(kPreKey) != nullptr ? gguf.get_string(kPreKey) : "default";
  std::optional<GgufPretokenizerPreset> preset = gguf_pretokenizer_preset(pre);
  if (!preset) {
    throw Error::in_file(ErrorKind::Unsupported, gguf.path(),
                         "unknown pre-tokenizer '" + pre + "' (" + kPreKey + ")");
  }
  vocab.pretokenizer = std::move(preset->pretokenizer);
  vocab.ignore_merges = preset->ignore_merges;

  vocab.bos_id = token_id(gguf, "tokenizer.ggml.bos_token_id", n);
  vocab.eos_id = token_id(gguf, "tokenizer.ggml.eos_token_id", n);
  vocab.unk_id = token_id(gguf, "tokenizer.ggml.unknown_token_id", n);
  const std::optional<int64_t> add_bos = optional_int(gguf, "tokenizer.ggml.add_bos_token");
  vocab.add_bos = add_bos ? *add_bos != 0 : preset->add_bos;
  return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace ember
