// Loading a model's tokenizer on its own, without opening the model: from a GGUF's metadata (any
// general.architecture; vocab-only files included), an HF tokenizer.json (or the directory /
// config.json beside it), or a llama2.c tokenizer.bin found beside its .bin checkpoint. This is
// what `ember tokenize` uses, so it works on files whose architecture ember cannot run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "ember/tokenizer/tokenizer.h"

namespace ember {

class GgufFile;

// The tokenizer in a GGUF's metadata: byte-level BPE when tokenizer.ggml.model is "gpt2",
// SentencePiece otherwise (which names the file and key when that fails too). Reads only
// tokenizer.ggml.* keys, never general.architecture or any model hyperparameter.
std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf);
// Same, opening the file at `path` first.
std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const std::string& path);

// The tokenizer of the model at `model_path`: a GGUF file (its embedded tokenizer), an HF
// directory or config.json (the tokenizer.json beside it), a tokenizer.json itself, or a llama2.c
// .bin (tokenizer.bin / tok*.bin beside it; the vocabulary size comes from the .bin's header).
// A non-empty `tokenizer_path` replaces the file found beside the model, as --tokenizer does; a
// GGUF always uses its own (like load_checkpoint_tokenizer). Throws ember::Error naming the path
// when there is no file, its format is not recognised, or no tokenizer can be found.
std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::string& model_path,
                                                    const std::string& tokenizer_path = "");

// The tokenizer file beside a llama2.c checkpoint: tokenizer.bin, else tok<vocab_size>.bin, else
// any tok*.bin in the same directory; "" when there is none.
std::string find_llama2c_tokenizer(const std::filesystem::path& model_path, int64_t vocab_size);

}  // namespace ember
