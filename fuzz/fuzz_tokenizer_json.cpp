// tokenizer.json (HF tokenizers): the model section (BPE merges or Unigram/SPM pieces), added
// tokens, normalizer and pre-tokenizer (tokenizer/tokenizer_json.cpp), then the tokenizer it
// builds on a short text with special tokens, and every id back to bytes.
#include "ember/tokenizer/tokenizer.h"
#include "ember/tokenizer/tokenizer_json.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ember::fuzz::InputFile file(data, size);
  ember::fuzz::expect_clean_refusal([&] {
    const auto tokenizer = ember::load_tokenizer_json(file.path());
    const auto ids =
        tokenizer->encode_with_special("Hello <|im_start|> w\xc3\xb6rld 12345 \xff!", true, true);
    for (int32_t id : ids) (void)tokenizer->token_bytes(id);
  });
  return 0;
}
