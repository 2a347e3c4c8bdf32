// config.json: JSON (depth-checked), then every field a family reads, with its defaults and
// range checks (model/model_config_sources.cpp), for every architecture ember supports.
#include <string>

#include "ember/model/model_config_sources.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ember::fuzz::expect_clean_refusal([&] { (void)ember::parse_hf_config(text, "config.json"); });
  return 0;
}
