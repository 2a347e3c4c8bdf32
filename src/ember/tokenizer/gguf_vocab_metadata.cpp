#include "ember/tokenizer/gguf_vocab_metadata.h"

#include "ember/core/error.h"

namespace ember::gguf_vocab {

void fail_key(const GgufFile& gguf, const std::string& key, const std::string& what) {
  throw Error::in_file(ErrorKind::InvalidFile, gguf.path(), "metadata key '" + key + "' " + what);
}

std::optional<int64_t> optional_int(const GgufFile& gguf, const std::string& key) {
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return std::nullopt;
  const std::optional<int64_t> i = v->as_int();
  if (!i) {
    fail_key(gguf, key,
             std::string("has type ") + gguf_type_name(v->type) + ", expected an integer");
  }
  return i;
}

}  // namespace ember::gguf_vocab
