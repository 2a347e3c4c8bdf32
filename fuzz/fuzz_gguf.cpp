// GGUF: the header, metadata and tensor directory (formats/gguf.cpp), then what a model load reads
// from them before any weight: the model config (model/checkpoint.cpp) and the tokenizer
// (tokenizer/load_tokenizer.cpp), which is then run on a short text.
#include "ember/formats/gguf.h"
#include "ember/model/checkpoint.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "ember/tokenizer/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ember::fuzz::InputFile file(data, size);
  ember::fuzz::expect_clean_refusal([&] {
    const ember::GgufFile gguf(file.path());
    for (const auto& [key, value] : gguf.metadata()) (void)value.to_display();
    ember::fuzz::expect_clean_refusal([&] { (void)ember::config_from_gguf(gguf); });
    const auto tokenizer = ember::load_tokenizer_from_gguf(gguf);
    const auto ids = tokenizer->encode("Once upon a time <s> \xe2\x96\x81\xff", true);
    for (int32_t id : ids) (void)tokenizer->token_bytes(id);
  });
  return 0;
}
