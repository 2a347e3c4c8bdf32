// `ember inspect`: architecture numbers, parameter counts and KV-cache bytes from headers alone.
#include <gtest/gtest.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

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
  // 13 sliding layers hold the window (8 -> 16) plus 32 positions, the 13 global ones the 512
  // of the context: 13 x (512 + 48) x 2 x 2 kv heads x 32 x 4 bytes.
  EXPECT_NE(r.out.find("sliding window 8 on 13 of 26 layers, kept in a pool of their own: at most "
                       "48 positions resident there per sequence; the global layers keep the "
                       "whole context: 7,454,720 bytes (f32) for ctx 512 x batch 1"),
            std::string::npos)
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

// A scratch directory holding only the config.json of Llama-3-70B's shape.
std::filesystem::path seventy_b_config(const std::string& name) {
  const auto dir = test::scratch_dir(name);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
      "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
      "max_position_embeddings": 131072, "torch_dtype": "bfloat16"})";
  return dir;
}

// `inspect --plan` on a directory holding only config.json (a model not downloaded): Llama-3-70B's
// shape at 32K tokens in f16 needs 10.7 GB of KV, 85.9 GB without grouped KV.
TEST(CliInspect, PlanForAModelNotDownloaded) {
  const auto dir = seventy_b_config("inspect-plan");
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

// The same model split over 8 tensor ranks in 2 stages (`--tp 4 --pp 2`) of hosts reading at
// 200 GB/s over a 25 GB/s, 5 us link: per rank a quarter of each stage's 40 layers and an eighth
// of the KV; the planner's decode prediction; shapes that do not split are one error each.
TEST(CliInspect, ParallelPlanPerRank) {
  const auto dir = seventy_b_config("inspect-parallel-plan");
  const std::string base = "inspect " + test::shell_quote(dir.string()) +
                           " --plan --ctx 32768 --batch 8 --mem 64GiB --bandwidth 200GB/s";
  auto r = test::run_ember(base + " --tp 4 --pp 2 --link 25GB/s,5us --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out)["plan"];
  const auto parallel = plan["parallel"];
  ASSERT_EQ(parallel["stages"].size(), 2u);
  EXPECT_EQ(parallel["kv_heads_per_rank"], 2);
  EXPECT_EQ(parallel["stages"][1]["first_layer"], 40);
  // 10.7 GB of KV per sequence over 4 ranks x 2 stages.
  EXPECT_DOUBLE_EQ(parallel["stages"][0]["kv_bytes_per_sequence_per_rank"].get<double>(),
                   10'737'418'240.0 / 8);
  EXPECT_EQ(parallel["all_reduces_per_step"], 160);
  const double per_rank = parallel["stages"][0]["weight_bytes_per_rank"].get<double>();
  EXPECT_GT(per_rank, 141e9 / 8 * 0.98);
  EXPECT_LT(per_rank, 141e9 / 8 * 1.05);
  // Batch 1 crosses both stages in turn, each rank of a stage reading its ~17.6 GB at 200 GB/s.
  const double tps = parallel["decode_tokens_per_s_batch1"].get<double>();
  EXPECT_GT(tps, 0.8 * 200e9 / (2 * per_rank));
  EXPECT_LT(tps, 200e9 / (2 * per_rank));
  EXPECT_EQ(plan["bandwidth_gb_per_s"], 200.0);
  r = test::run_ember(base + " --tp 4 --pp 2");
  EXPECT_NE(r.out.find("parallel plan (tp 4 x pp 2 = 8 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV heads per rank    2 of 8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("200.0 GB/s given (--bandwidth)"), std::string::npos) << r.out;
  for (const auto& [flags, why] : std::vector<std::pair<std::string, std::string>>{
           {" --tp 3", "--tp 3 does not divide the 64 attention heads"},
           {" --pp 81", "--pp 81 is more stages than the 80 layers"},
           {" --tp 2 --link 25GB/s", "expected BANDWIDTH,LATENCY like 25GB/s,5us"}}) {
    r = test::run_ember(base + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.err.find(why), std::string::npos) << flags << ": " << r.err;
  }
  r = test::run_ember("inspect " + test::shell_quote(dir.string()) + " --tp 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("add --plan"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember
