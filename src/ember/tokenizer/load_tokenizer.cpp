// Finds a model's tokenizer from the model path alone. Mirrors open_checkpoint's format detection
// (GGUF by magic, llama2.c by .bin, HF by directory / .json) and load_checkpoint_tokenizer's
// messages, but opens nothing beyond the tokenizer, so no ModelConfig is ever built.
#include "ember/tokenizer/load_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/formats/llama2c.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/tokenizer_json.h"

namespace fs = std::filesystem;

namespace ember {

namespace {

bool has_gguf_magic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, sizeof magic) && std::string(magic, sizeof magic) == "GGUF";
}

std::unique_ptr<Tokenizer> load_llama2c_model_tokenizer(const fs::path& model_path,
                                                        const std::string& tokenizer_path) {
  // tokenizer.bin stores no vocabulary size; the checkpoint header is the only source of it.
  const int64_t vocab_size = open_llama2c_file(model_path.string()).header.vocab_size;
  const std::string path =
      tokenizer_path.empty() ? find_llama2c_tokenizer(model_path, vocab_size) : tokenizer_path;
  if (path.empty()) {
    throw Error::in_file(ErrorKind::NotFound, model_path.string(),
                         "no tokenizer found beside the model (tokenizer.bin or tok*.bin); "
                         "pass --tokenizer PATH");
  }
  return load_llama2c_tokenizer(path, static_cast<int32_t>(vocab_size));
}

// An HF directory or config.json names the model; its tokenizer.json sits beside config.json.
std::unique_ptr<Tokenizer> load_hf_model_tokenizer(const fs::path& model_path,
                                                   const std::string& tokenizer_path) {
  if (!tokenizer_path.empty()) return load_tokenizer_json(tokenizer_path);
  if (model_path.filename() == "tokenizer.json") return load_tokenizer_json(model_path.string());
  const fs::path dir = fs::is_directory(model_path) ? model_path : model_path.parent_path();
  const fs::path json = dir / "tokenizer.json";
  if (!fs::exists(json)) {
    throw Error::in_file(ErrorKind::NotFound, model_path.string(),
                         "no tokenizer.json beside the model (pass --tokenizer PATH)");
  }
  return load_tokenizer_json(json.string());
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf) {
  const GgufValue* model = gguf.find("tokenizer.ggml.model");
  if (model != nullptr && model->type == GgufType::String && model->string_value == "gpt2") {
    return load_gguf_bpe_tokenizer(gguf);
  }
  return load_gguf_tokenizer(gguf);
}

std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const std::string& path) {
  return load_tokenizer_from_gguf(GgufFile(path));
}

std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::string& model_path,
                                                    const std::string& tokenizer_path) {
  const fs::path path(model_path);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw Error::in_file(ErrorKind::NotFound, model_path, "no such file or directory");
  }
  if (fs::is_directory(path) || path.extension() == ".json") {
    return load_hf_model_tokenizer(path, tokenizer_path);
  }
  if (has_gguf_magic(path)) return load_tokenizer_from_gguf(model_path);
  if (path.extension() == ".bin") return load_llama2c_model_tokenizer(path, tokenizer_path);
  if (path.extension() == ".gguf") {
    throw Error::in_file(ErrorKind::InvalidFile, model_path, "bad GGUF magic (expected \"GGUF\")");
  }
  throw Error::in_file(ErrorKind::Unsupported, model_path,
                       "unrecognised model format (expected an HF directory, a .gguf file, a "
                       "llama2.c .bin, or a tokenizer.json / config.json)");
}

std::string find_llama2c_tokenizer(const fs::path& model_path, int64_t vocab_size) {
  fs::path dir = model_path.parent_path();
  if (dir.empty()) dir = ".";
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  const fs::path sized = dir / ("tok" + std::to_string(vocab_size) + ".bin");
  if (fs::exists(sized)) return sized.string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tok", 0) == 0 && entry.path().extension() == ".bin") {
      return entry.path().string();
    }
  }
  return "";
}

}  // namespace ember
