// JSON nested absurdly deep is refused before parsing, by every loader and request parser
// (it used to exhaust the stack and memory in recursive copies of the parsed tree).
#include "ember/core/json_depth.h"

#include <gtest/gtest.h>

#include <fstream>

#include "ember/core/error.h"
#include "ember/formats/hf_config.h"
#include "ember/formats/safetensors.h"
#include "ember/server/openai_api.h"
#include "ember/tokenizer/tokenizer_json.h"
#include "test_util.h"

namespace ember {
namespace {

std::string nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonDepth, DeepNestingIsRefusedAndStringsDoNotCount) {
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth), "x", true));
  EXPECT_THROW(check_json_depth(nested(kMaxJsonDepth + 1), "x", true), Error);
  // Brackets inside strings (with escaped quotes) are text.
  EXPECT_NO_THROW(
      check_json_depth("{\"a\": \"[[[[\\\"[[[[" + std::string(500, '[') + "\"}", "x", true));
  try {
    check_json_depth(nested(100000), "model/config.json", true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFile);
    EXPECT_NE(std::string(e.what()).find("model/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128"), std::string::npos) << e.what();
  }
}

TEST(JsonDepth, EveryLoaderAndRequestRefusesIt) {
  const std::string deep = "{\"a\": " + nested(100000) + "}";
  const auto dir = test::scratch_dir("json-depth");
  EXPECT_THROW(parse_hf_config_json(deep, "config.json"), Error);
  {
    std::ofstream out(dir / "t.json", std::ios::binary);
    out << deep;
  }
  EXPECT_THROW(load_tokenizer_json((dir / "t.json").string()), Error);
  {
    std::ofstream out(dir / "m.safetensors", std::ios::binary);
    const uint64_t n = deep.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << deep;
  }
  EXPECT_THROW(SafetensorsFile((dir / "m.safetensors").string()), Error);
  auto r = server::parse_request(server::Endpoint::Completions,
                                 "{\"prompt\": \"x\", \"stop\": " + nested(100000) + "}");
  ASSERT_TRUE(std::holds_alternative<Error>(r));
  EXPECT_NE(std::string(std::get<Error>(r).what()).find("nested deeper"), std::string::npos);
}

}  // namespace
}  // namespace ember
