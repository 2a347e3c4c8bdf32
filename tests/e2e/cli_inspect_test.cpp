// `ember inspect`: architecture numbers, parameter counts and KV-cache bytes from headers alone.
#include <gtest/gtest.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ember {
namespace {

TEST(CliInspect, SmolLM2ConfigNumbersInTextAndJson) {
  auto dir = test::fixture("models/smollm2-135m-instruct");
  EMBER_REQUIRE_FIXTURE(dir / "config.json");
  auto text = test::run_ember("inspect " + test::shell_quote(dir.string()) + " --dummy");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("134,515,008"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("d_model 576, d_ffn 1536, layers 30, heads 9, kv heads 3, head_dim 64"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("23,040 bytes/token"), std::string::npos) << text.out;

  for (std::string target :
       {dir.string() + " --dummy", (dir / "config.json").string(), dir.string()}) {
    auto r = test::run_ember("inspect " + target + " --json --ctx 8192 --batch 4");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["parameters"]["total"], 134515008);
    EXPECT_EQ(j["parameters"]["embeddings"], 49152 * 576);
    EXPECT_EQ(j["parameters"]["lm_head"], 0);  // tied: counted once, as the embedding
    EXPECT_EQ(j["architecture"]["d_model"], 576);
    EXPECT_EQ(j["architecture"]["d_ffn"], 1536);
    EXPECT_EQ(j["architecture"]["n_layers"], 30);
    EXPECT_EQ(j["architecture"]["n_heads"], 9);
    EXPECT_EQ(j["architecture"]["n_kv_heads"], 3);
    EXPECT_EQ(j["architecture"]["head_dim"], 64);
    EXPECT_EQ(j["kv_cache"]["bytes_per_token"]["bf16"], 30 * 2 * 3 * 64 * 2);
    EXPECT_EQ(j["kv_cache"]["bytes_for_ctx_batch"]["bf16"], int64_t{23040} * 8192 * 4);
    EXPECT_EQ(j["tensors"].size(), 1u + 30u * 9u + 1u);
  }
}

TEST(CliInspect, Stories260KGgufListsTensorsInNaturalOrder) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  auto r = test::run_ember("inspect " + test::shell_quote(model.string()) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 48u);
  std::vector<std::string> names;
  for (const auto& t : j["tensors"]) names.push_back(t["name"]);
  auto pos = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) - names.begin();
  };
  EXPECT_LT(pos("blk.1.attn_k.weight"), pos("blk.2.attn_k.weight"));
  EXPECT_EQ(j["architecture"]["n_kv_heads"], 4);
  EXPECT_EQ(j["architecture"]["d_model"], 64);
  EXPECT_EQ(j["kv_cache"]["bytes_per_token"]["f32"], 5 * 2 * 4 * 8 * 4);
  int64_t total = 0;
  for (const auto& t : j["tensors"]) total += t["numel"].get<int64_t>();
  EXPECT_EQ(j["parameters"]["total"], total);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Each family says which forward pass runs it and what it switches on.
TEST(CliInspect, FamiliesAndTheirFeatures) {
  const auto zoo = [](const char* name) {
    return test::shell_quote(test::fixture(std::string("models/family-zoo/") + name).string());
  };
  auto r = test::run_ember("inspect " + zoo("gemma2.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: gemma2 (family gemma)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention soft-cap, logit soft-cap, sliding window 8"), std::string::npos)
      << r.out;
  r = test::run_ember("inspect " + zoo("gpt2.gguf") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"]["family"], "gpt2");
  EXPECT_NE(j["architecture"]["features"].get<std::string>().find("layernorm, gelu, learned"),
            std::string::npos);
  // 124M-class GPT-2 vocab: wte + wpe are embeddings, ln_* norms.
  EXPECT_EQ(j["parameters"]["embeddings"], 50257 * 128 + 512 * 128);
  r = test::run_ember("inspect " + zoo("phi3.gguf") + " --ctx 512");
  EXPECT_NE(r.out.find("sliding window 12 on every layer: at most 48 positions resident"),
            std::string::npos)
      << r.out;
  r = test::run_ember("inspect " + zoo("phi3_longrope.gguf"));
  EXPECT_NE(r.out.find("rope longrope"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused qkv, fused gate/up"), std::string::npos) << r.out;

  // An architecture ember does not run is refused by name, with the list of those it does.
  const auto falcon = test::fixture("tokenizer-tests/ggml-vocab-falcon.gguf");
  r = test::run_ember("inspect " + test::shell_quote(falcon.string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unsupported architecture 'falcon' (ember runs llama, mistral, mixtral, "
                       "qwen2, qwen3, qwen2moe, qwen3moe, olmoe, phi3, gemma2, gemma3, gpt2)"),
            std::string::npos)
      << r.err;
}

// A mixture of experts: its experts and routing rule, the parameters one token runs, and the
// bytes a decode step reads (the --plan's decode ceiling) counting only k of the E experts.
TEST(CliInspect, MixtureOfExpertsActiveParameters) {
  const auto olmoe = test::fixture("models/moe-zoo/olmoe.gguf");
  EMBER_REQUIRE_FIXTURE(olmoe);
  auto r = test::run_ember("inspect " + test::shell_quote(olmoe.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("16 experts (top-4), qk-norm over the projections"), std::string::npos)
      << r.out;
  // 2 layers x 3 projections x 16 experts x 64 x 128; a token runs 4 of the 16.
  const int64_t experts = 2 * 3 * 16 * 64 * 128;
  r = test::run_ember("inspect " + test::shell_quote(olmoe.string()) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["parameters"]["experts"], experts);
  EXPECT_EQ(j["parameters"]["active_per_token"],
            j["parameters"]["total"].get<int64_t>() - experts * 12 / 16);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// `inspect --plan` on a directory holding only config.json (a model not downloaded): Llama-3-70B's
// shape at 32K tokens in f16 needs 10.7 GB of KV, 85.9 GB without grouped KV.
TEST(CliInspect, PlanForAModelNotDownloaded) {
  const auto dir = test::scratch_dir("inspect-plan");
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
      "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
      "max_position_embeddings": 131072, "torch_dtype": "bfloat16"})";
  auto r = test::run_ember("inspect " + test::shell_quote(dir.string()) +
                           " --plan --ctx 32768 --batch 2 --mem 192GiB --no-probe --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out)["plan"];
  EXPECT_EQ(plan["kv_bytes_per_sequence"].get<double>(), 10'737'418'240.0);
  EXPECT_EQ(plan["kv_bytes_total_mha"].get<double>(), 2 * 8 * 10'737'418'240.0);
  // 70.6 G parameters in bf16 = 141 GB of weights; 206 GB - 141 GB leaves room for 6 sequences.
  EXPECT_EQ(plan["sequences_that_fit"], 6);
  EXPECT_TRUE(plan["decode_tokens_per_s_batch1"].is_null());  // --no-probe
  r = test::run_ember("inspect " + test::shell_quote(dir.string()) +
                      " --plan --no-probe --ctx 100");
  EXPECT_NE(r.out.find("with full multi-head KV it would be"), std::string::npos) << r.out;
  r = test::run_ember("inspect " + test::shell_quote(dir.string()) + " --plan --mem 12XB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("invalid size '12XB'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember
