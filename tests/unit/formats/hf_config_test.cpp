#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "ember/core/error.h"
#include "ember/model/model_config_sources.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

using test::error_message;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A minimal valid Llama config; tests edit it.
nlohmann::json base_config() {
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", 256},
      {"intermediate_size", 688},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 2},
      {"vocab_size", 1000},
      {"rms_norm_eps", 1e-5},
  };
}

ModelConfig parse(const nlohmann::json& j) {
  return parse_hf_config(j.dump(), "test.json");
}

std::string parse_error(const nlohmann::json& j) {
  return error_message([&] { parse_hf_config(j.dump(), "cfg/config.json"); });
}

TEST(HfConfigFixture, SmolLM2) {
  const auto path = test::fixture("models/smollm2-135m-instruct/config.json");
  EMBER_REQUIRE_FIXTURE(path);
  ModelConfig c = load_hf_config(path.string());
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.d_model, 576);
  EXPECT_EQ(c.d_ffn, 1536);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_scaling, RopeScaling::None);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.q_dim(), 576);
  EXPECT_EQ(c.kv_dim(), 192);
}

TEST(HfConfigParse, DefaultsForOptionalFields) {
  nlohmann::json j = base_config();
  j.erase("num_key_value_heads");
  j.erase("rms_norm_eps");
  ModelConfig c = parse(j);
  EXPECT_EQ(c.n_kv_heads, 8);  // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 32);   // hidden / heads
  EXPECT_EQ(c.rope_dim, 32);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_GT(c.rms_norm_eps, 0.0f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope_scaling, RopeScaling::None);
}

TEST(HfConfigParse, ExplicitHeadDimAndNulls) {
  nlohmann::json j = base_config();
  j["head_dim"] = 64;  // q_dim 512 != hidden 256 is legal (e.g. Gemma-style, some Llamas)
  j["num_key_value_heads"] = nullptr;
  j["rope_scaling"] = nullptr;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.q_dim(), 512);
}

TEST(HfConfigParse, Llama3RopeScalingAndEosArray) {
  nlohmann::json j = base_config();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["bos_token_id"] = 128000;
  j["eos_token_id"] = {128001, 128008, 128009};
  j["max_position_embeddings"] = 131072;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling, RopeScaling::Llama3);
  EXPECT_FLOAT_EQ(c.rope_factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_original_max_position, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(c.max_position_embeddings, 131072);
}

TEST(HfConfigParse, OlderRopeScalingTypeKey) {
  nlohmann::json j = base_config();
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8},
                       {"low_freq_factor", 1},
                       {"high_freq_factor", 4},
                       {"original_max_position_embeddings", 8192}};
  EXPECT_EQ(parse(j).rope_scaling, RopeScaling::Llama3);
}

TEST(HfConfigParse, Qwen2HasAttentionBias) {
  nlohmann::json j = base_config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j["tie_word_embeddings"] = true;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  j["attention_bias"] = false;
  EXPECT_FALSE(parse(j).attention_bias);
}

TEST(HfConfigErrors, MissingField) {
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "vocab_size"}) {
    nlohmann::json j = base_config();
    j.erase(field);
    std::string msg = parse_error(j);
    EXPECT_EQ(msg, std::string("cfg/config.json: missing field '") + field + "'");
  }
}

TEST(HfConfigErrors, WrongType) {
  struct Case {
    const char* field;
    nlohmann::json value;
  };
  for (const Case& c : std::vector<Case>{{"hidden_size", "576"},
                                         {"num_hidden_layers", 4.5},
                                         {"num_key_value_heads", true},
                                         {"rope_theta", "big"},
                                         {"rms_norm_eps", nlohmann::json::array()},
                                         {"tie_word_embeddings", 1},
                                         {"eos_token_id", "2"},
                                         {"rope_scaling", "llama3"}}) {
    nlohmann::json j = base_config();
    j[c.field] = c.value;
    std::string msg = parse_error(j);
    EXPECT_EQ(msg.rfind("cfg/config.json: ", 0), 0u) << msg;
    EXPECT_TRUE(contains(msg, std::string("'") + c.field + "'")) << msg;
  }
}

TEST(HfConfigErrors, InconsistentNumbers) {
  nlohmann::json j = base_config();
  j["num_key_value_heads"] = 3;  // 8 heads are not a multiple of 3
  std::string msg = parse_error(j);
  EXPECT_EQ(msg.rfind("cfg/config.json: ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "num_key_value_heads")) << msg;

  j = base_config();
  j["hidden_size"] = 250;  // not divisible by 8 heads, no head_dim
  msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "hidden_size")) << msg;

  j = base_config();
  j["vocab_size"] = 0;
  msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "vocab_size")) << msg;
}

// A crafted config with absurd sizes fails at parse time naming the field (10^9 layers used to
// run the loader out of memory building its list of expected tensors).
TEST(HfConfigErrors, AbsurdSizesAreRefusedBeforeAnyAllocation) {
  nlohmann::json j = base_config();
  j["num_hidden_layers"] = 1000000000;
  std::string msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "num_hidden_layers 1000000000 is beyond")) << msg;

  j = base_config();
  j["vocab_size"] = int64_t{1} << 40;
  msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "vocab_size")) << msg;

  // Each size within its bound, their product not: 10^13+ parameters.
  j = base_config();
  j["hidden_size"] = 1 << 20;
  j["intermediate_size"] = 1 << 22;
  j["num_hidden_layers"] = 1 << 14;
  j["num_attention_heads"] = 1 << 12;
  j["num_key_value_heads"] = 1 << 12;
  msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "parameters")) << msg;

  // A real large model still parses (Llama-3-405B's sizes).
  j = base_config();
  j["hidden_size"] = 16384;
  j["intermediate_size"] = 53248;
  j["num_hidden_layers"] = 126;
  j["num_attention_heads"] = 128;
  j["num_key_value_heads"] = 8;
  j["vocab_size"] = 128256;
  EXPECT_EQ(parse(j).n_layers, 126);
}

TEST(HfConfigErrors, UnsupportedRopeScalingAndArchitecture) {
  nlohmann::json j = base_config();
  j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 4.0}};
  std::string msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "unsupported rope_scaling type 'ntk-by-parts'")) << msg;
  EXPECT_TRUE(contains(msg, "linear, llama3, yarn, longrope and dynamic")) << msg;

  j = base_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "missing field 'rope_scaling.low_freq_factor'")) << msg;

  j = base_config();
  j["architectures"] = {"FalconForCausalLM"};
  j["model_type"] = "falcon";
  msg = parse_error(j);
  EXPECT_TRUE(contains(msg, "unsupported architecture 'FalconForCausalLM'")) << msg;
  EXPECT_TRUE(contains(msg, "gemma2, gemma3, gpt2")) << msg;  // names what ember runs
}

TEST(HfConfigErrors, InvalidJsonAndMissingFile) {
  std::string msg = error_message([] { parse_hf_config("{\"hidden_size\": ", "x/config.json"); });
  EXPECT_EQ(msg.rfind("x/config.json: invalid JSON", 0), 0u) << msg;
  msg = error_message([] { parse_hf_config("[1, 2]", "x/config.json"); });
  EXPECT_TRUE(contains(msg, "not a JSON object")) << msg;

  const std::string missing = "/nonexistent/config.json";
  msg = error_message([&] { load_hf_config(missing); });
  EXPECT_EQ(msg.rfind(missing, 0), 0u) << msg;

  auto dir = test::scratch_dir("hf-config-file");
  std::ofstream(dir / "config.json") << base_config().dump();
  EXPECT_EQ(load_hf_config((dir / "config.json").string()).d_model, 256);
  msg = error_message([&] { load_hf_config(dir.string()); });  // a directory, not a file
  EXPECT_EQ(msg.rfind(dir.string(), 0), 0u) << msg;
}

TEST(HfConfigErrors, KindsSayMissingUnsupportedOrMalformed) {
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "no error";
    return Error("no error");
  };
  Error missing = error_of([] { load_hf_config("/nonexistent/config.json"); });
  EXPECT_EQ(missing.kind(), ErrorKind::NotFound);
  EXPECT_EQ(missing.file(), "/nonexistent/config.json");

  nlohmann::json j = base_config();
  j["architectures"] = {"FalconForCausalLM"};
  j["model_type"] = "falcon";
  Error arch = error_of([&] { parse_hf_config(j.dump(), "cfg/config.json"); });
  EXPECT_EQ(arch.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(arch.file(), "cfg/config.json");

  Error json = error_of([] { parse_hf_config("{\"hidden_size\": ", "x/config.json"); });
  EXPECT_EQ(json.kind(), ErrorKind::InvalidFile);

  // Checks made after the file is parsed (model_config_sources, ModelConfig::validate) keep the
  // file as context too.
  j = base_config();
  j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 4.0}};
  Error rope = error_of([&] { parse_hf_config(j.dump(), "cfg/config.json"); });
  EXPECT_EQ(rope.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(rope.file(), "cfg/config.json");

  j = base_config();
  j.erase("hidden_size");
  Error field = error_of([&] { parse_hf_config(j.dump(), "cfg/config.json"); });
  EXPECT_EQ(field.kind(), ErrorKind::InvalidFile);
  EXPECT_EQ(field.file(), "cfg/config.json");

  j = base_config();
  j["num_key_value_heads"] = 3;
  Error sizes = error_of([&] { parse_hf_config(j.dump(), "cfg/config.json"); });
  EXPECT_EQ(sizes.kind(), ErrorKind::InvalidFile);
  EXPECT_EQ(sizes.file(), "cfg/config.json");
}

}  // namespace
}  // namespace ember
