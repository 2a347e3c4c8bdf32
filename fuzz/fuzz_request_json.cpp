// OpenAI request bodies (server/openai_request.cpp): the first byte picks the endpoint and strict
// mode, the rest is the body as a client sends it. Valid or refused with the field named — never
// a crash, and never an exception of another type.
#include <string_view>

#include "ember/server/openai_api.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint = (data[0] & 1) ? ember::server::Endpoint::ChatCompletions
                                      : ember::server::Endpoint::Completions;
  const bool strict = (data[0] & 2) != 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ember::fuzz::expect_clean_refusal(
      [&] { (void)ember::server::parse_request(endpoint, body, strict); });
  return 0;
}
