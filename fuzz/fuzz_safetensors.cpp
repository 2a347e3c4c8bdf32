// safetensors: the 8-byte header length, the JSON header (dtypes, shapes, data offsets against the
// file's size) and the tensor views over the data (formats/safetensors.cpp).
#include "ember/formats/safetensors.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ember::fuzz::InputFile file(data, size);
  ember::fuzz::expect_clean_refusal([&] {
    const ember::SafetensorsFile st(file.path());
    uint64_t sum = 0;
    for (const auto& t : st.tensors()) {
      // Every view must lie inside the mapping: touch its first and last byte.
      if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
      sum += static_cast<uint64_t>(t.numel());
    }
    if (sum == 1) std::fputc(' ', stderr);  // keeps the reads
  });
  return 0;
}
