// llama2.c .bin: the 7 x int32 header, the config it implies (model/model_config_sources.cpp) and
// the tensor views sized from it against the file (formats/llama2c.cpp).
#include "ember/formats/llama2c.h"
#include "ember/model/model_config_sources.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ember::fuzz::InputFile file(data, size);
  ember::fuzz::expect_clean_refusal([&] {
    const ember::Llama2cFile bin = ember::open_llama2c_file(file.path());
    (void)ember::config_from_llama2c(bin.header, file.path());
    uint64_t sum = 0;
    for (const auto& [name, t] : ember::llama2c_tensor_views(bin)) {
      if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
    }
    if (sum == 1) std::fputc(' ', stderr);
  });
  return 0;
}
