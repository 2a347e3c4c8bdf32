// Preset rules vs what llama.cpp's quantizer chose: the quant-zoo files (reference.json's
// types_by_tensor, every tensor of a 2-layer GQA model) and, for deeper models, the type mixes
// llama.cpp reports for Llama-2-7B and the fallbacks SmolLM2-135M's 576-wide rows force.
#include "ember/model/quant_presets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/formats/gguf.h"
#include "test_util.h"

namespace ember {
namespace {

std::string type_name(DType d) {
  return ggml_type_name(ggml_type_of(d));
}

// A Llama model's GGUF tensor directory (llama.cpp's names, row-major shapes).
std::vector<QuantTensorShape> llama_tensors(int64_t layers, int64_t d, int64_t ffn, int64_t heads,
                                            int64_t kv_heads, int64_t vocab, bool tied) {
  const int64_t hd = d / heads;
  std::vector<QuantTensorShape> t = {{"token_embd.weight", {vocab, d}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm.weight", {d}});
    t.push_back({p + "attn_q.weight", {heads * hd, d}});
    t.push_back({p + "attn_k.weight", {kv_heads * hd, d}});
    t.push_back({p + "attn_v.weight", {kv_heads * hd, d}});
    t.push_back({p + "attn_output.weight", {d, heads * hd}});
    t.push_back({p + "ffn_norm.weight", {d}});
    t.push_back({p + "ffn_gate.weight", {ffn, d}});
    t.push_back({p + "ffn_up.weight", {ffn, d}});
    t.push_back({p + "ffn_down.weight", {d, ffn}});
  }
  t.push_back({"output_norm.weight", {d}});
  if (!tied) t.push_back({"output.weight", {vocab, d}});
  return t;
}

std::map<std::string, int> type_counts(const std::vector<std::optional<DType>>& types) {
  std::map<std::string, int> counts;
  for (const auto& t : types) ++counts[t ? type_name(*t) : "kept"];
  return counts;
}

TEST(QuantPresets, NamesRoundTripCaseInsensitively) {
  EXPECT_EQ(quant_preset_from_name("q4_k_m"), QuantPreset::Q4_K_M);
  EXPECT_EQ(quant_preset_from_name("IQ4_XS"), QuantPreset::IQ4_XS);
  EXPECT_EQ(quant_preset_from_name("bf16"), QuantPreset::BF16);
  EXPECT_EQ(quant_preset_from_name("Q4_K"), std::nullopt);
  EXPECT_EQ(quant_preset_from_name("q3_k_xl"), std::nullopt);
  for (const QuantPresetInfo& info : quant_presets()) {
    EXPECT_EQ(quant_preset_from_name(info.name), info.preset);
    EXPECT_EQ(&quant_preset_info(info.preset), &info);
  }
  EXPECT_EQ(quant_presets().size(), 20u);
  EXPECT_NE(quant_preset_names().find("Q4_K_M"), std::string::npos);
}

TEST(QuantPresets, FileTypesAreLlamaCppNumbers) {
  const std::map<std::string, uint32_t> expected = {
      {"F32", 0},     {"F16", 1},     {"Q4_0", 2},    {"Q4_1", 3},    {"Q8_0", 7},
      {"Q5_0", 8},    {"Q5_1", 9},    {"Q2_K", 10},   {"Q3_K_S", 11}, {"Q3_K_M", 12},
      {"Q3_K_L", 13}, {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16}, {"Q5_K_M", 17},
      {"Q6_K", 18},   {"Q2_K_S", 21}, {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"BF16", 32}};
  for (const QuantPresetInfo& info : quant_presets()) {
    EXPECT_EQ(info.file_type, expected.at(info.name)) << info.name;
  }
}

TEST(QuantPresets, QuantizableTensors) {
  EXPECT_TRUE(tensor_is_quantizable("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(tensor_is_quantizable("token_embd.weight", 2));
  EXPECT_FALSE(tensor_is_quantizable("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(tensor_is_quantizable("blk.0.attn_norm.weight", 2));
  EXPECT_FALSE(tensor_is_quantizable("blk.0.attn_q.bias", 1));
  EXPECT_FALSE(tensor_is_quantizable("rope_freqs.weight", 1));
  EXPECT_FALSE(tensor_is_quantizable("blk.0.ffn_gate_inp.weight", 2));
}

// Every tensor of zoo-f32.gguf under each preset = the type llama.cpp wrote into zoo-<preset>.gguf.
class QuantPresetZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantPresetZoo, RulesGiveLlamaCppsTypes) {
  const auto zoo = test::fixture("models/quant-zoo");
  EMBER_REQUIRE_FIXTURE(zoo / "reference.json");
  std::ifstream in(zoo / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const nlohmann::json& expected = ref["files"]["zoo-" + GetParam() + ".gguf"]["types_by_tensor"];
  ASSERT_FALSE(expected.is_null());

  const GgufFile f32((zoo / "zoo-f32.gguf").string());
  std::vector<QuantTensorShape> tensors;
  for (const GgufTensorInfo& t : f32.tensors()) tensors.push_back({t.name, t.shape});
  QuantModelShape model;
  model.n_layers = f32.get_int("llama.block_count");
  model.n_heads = f32.get_int("llama.attention.head_count");
  model.n_kv_heads = f32.get_int("llama.attention.head_count_kv");
  const auto preset = quant_preset_from_name(GetParam());
  ASSERT_TRUE(preset);
  const auto types = plan_preset_types(*preset, tensors, model, DType::F16);
  ASSERT_EQ(expected.size(), tensors.size());
  std::vector<DType> as_written;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string got = types[i] ? type_name(*types[i]) : type_name(f32.tensors()[i].dtype);
    EXPECT_EQ(got, expected[tensors[i].gguf_name].get<std::string>()) << tensors[i].gguf_name;
    as_written.push_back(types[i].value_or(f32.tensors()[i].dtype));
  }
  // And the file's types identify the preset (as `ember inspect` reports it).
  const auto matches = matching_presets(tensors, as_written, model);
  EXPECT_NE(std::find(matches.begin(), matches.end(), *preset), matches.end());
  EXPECT_EQ(matches.size(), 1u) << "ambiguous: " << matches.size() << " presets match";
}

INSTANTIATE_TEST_SUITE_P(EveryZooPreset, QuantPresetZoo,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                                           "q8_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s",
                                           "q4_k_m", "q5_k_s", "q5_k_m", "q6_k", "iq4_nl",
                                           "iq4_xs"));

// Q2_K_S is not in the zoo (llama.cpp refuses it without an importance matrix): its rules give
// ffn_down of the first eighth of the layers Q4_K and attn_v Q4_K only with GQA >= 4.
TEST(QuantPresets, Q2KSmall) {
  const auto tensors = llama_tensors(16, 256, 768, 8, 2, 512, false);
  QuantModelShape model{16, 8, 2};
  const auto types = plan_preset_types(QuantPreset::Q2_K_S, tensors, model, DType::F16);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& n = tensors[i].gguf_name;
    if (!types[i]) continue;
    std::string want = "Q2_K";
    if (n == "output.weight") want = "Q6_K";
    if (n.find("attn_v") != std::string::npos) want = "Q4_K";
    if (n == "blk.0.ffn_down.weight" || n == "blk.1.ffn_down.weight") want = "Q4_K";
    EXPECT_EQ(type_name(*types[i]), want) << n;
  }
}

// Llama-2-7B (32 layers, no GQA, rows of 4096 and 11008 = 43 x 256): llama.cpp's loader reports
// "q4_K: 193, q6_K: 33" for Q4_K_M, "q3_K: 129, q4_K: 92, q5_K: 4, q6_K: 1" for Q3_K_M and
// "q4_K: 217, q5_K: 8, q6_K: 1" for Q4_K_S, with the 65 norms left in F32.
TEST(QuantPresets, Llama2SevenBTypeMixes) {
  const auto tensors = llama_tensors(32, 4096, 11008, 32, 32, 32000, false);
  QuantModelShape model{32, 32, 32};
  using Counts = std::map<std::string, int>;
  EXPECT_EQ(type_counts(plan_preset_types(QuantPreset::Q4_K_M, tensors, model, DType::F16)),
            (Counts{{"Q4_K", 193}, {"Q6_K", 33}, {"kept", 65}}));
  EXPECT_EQ(type_counts(plan_preset_types(QuantPreset::Q3_K_M, tensors, model, DType::F16)),
            (Counts{{"Q3_K", 129}, {"Q4_K", 92}, {"Q5_K", 4}, {"Q6_K", 1}, {"kept", 65}}));
  EXPECT_EQ(type_counts(plan_preset_types(QuantPreset::Q4_K_S, tensors, model, DType::F16)),
            (Counts{{"Q4_K", 217}, {"Q5_K", 8}, {"Q6_K", 1}, {"kept", 65}}));
}

// SmolLM2-135M: 30 layers, 9 heads / 3 KV heads, d_model 576 (not a multiple of 256, a multiple
// of 32), ffn 1536, tied embeddings. Every matrix reading 576-wide rows falls back: Q4_K -> Q5_0,
// Q6_K -> Q8_0; ffn_down (1536-wide rows) keeps K-quants. token_embd is the output too: Q8_0.
TEST(QuantPresets, SmolLM2FallbacksAndMoreBitsLayers) {
  const auto tensors = llama_tensors(30, 576, 1536, 9, 3, 49152, true);
  QuantModelShape model{30, 9, 3};
  const auto types = plan_preset_types(QuantPreset::Q4_K_M, tensors, model, DType::F16);
  // more-bits layers for 30: the first 3, the last 4 (from 26) and every third from 3: 5, 8, ...
  const std::vector<int> more = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& n = tensors[i].gguf_name;
    SCOPED_TRACE(n);
    if (!types[i]) continue;
    const int layer = n.rfind("blk.", 0) == 0 ? std::stoi(n.substr(4)) : -1;
    const bool more_bits = std::find(more.begin(), more.end(), layer) != more.end();
    std::string want = "Q5_0";
    if (n == "token_embd.weight") want = "Q8_0";
    if (n.find("attn_v") != std::string::npos) want = more_bits ? "Q8_0" : "Q5_0";
    if (n.find("ffn_down") != std::string::npos) want = more_bits ? "Q6_K" : "Q4_K";
    EXPECT_EQ(type_name(*types[i]), want);
  }
  // Q3_K_M: Q3_K -> IQ4_NL, Q5_K -> Q5_1 on the 576-wide rows; ffn_down Q5_K in layer 0 only.
  const auto q3 = plan_preset_types(QuantPreset::Q3_K_M, tensors, model, DType::F16);
  std::map<std::string, std::string> got;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (q3[i]) got[tensors[i].gguf_name] = type_name(*q3[i]);
  }
  EXPECT_EQ(got["token_embd.weight"], "Q8_0");
  EXPECT_EQ(got["blk.0.attn_q.weight"], "IQ4_NL");
  EXPECT_EQ(got["blk.1.attn_v.weight"], "Q5_1");
  EXPECT_EQ(got["blk.2.attn_v.weight"], "Q5_0");
  EXPECT_EQ(got["blk.7.attn_output.weight"], "Q5_0");
  EXPECT_EQ(got["blk.0.ffn_down.weight"], "Q5_K");
  EXPECT_EQ(got["blk.1.ffn_down.weight"], "Q4_K");
  EXPECT_EQ(got["blk.9.ffn_up.weight"], "IQ4_NL");
}

// Rows that no quantized type tiles (stories260K's ffn of 172) take the float fallback given.
TEST(QuantPresets, RowsNoBlockTilesTakeTheFloatFallback) {
  QuantModelShape model{5, 8, 4};
  EXPECT_EQ(
      preset_tensor_type(QuantPreset::Q4_K_M, "blk.0.ffn_down.weight", 2, 172, model, DType::F16),
      DType::F16);
  EXPECT_EQ(
      preset_tensor_type(QuantPreset::Q8_0, "blk.0.ffn_down.weight", 2, 172, model, DType::F32),
      DType::F32);
  EXPECT_EQ(preset_tensor_type(QuantPreset::Q8_0, "blk.0.ffn_up.weight", 2, 64, model, DType::F32),
            DType::Q8_0);
  EXPECT_EQ(
      preset_tensor_type(QuantPreset::Q4_K_M, "blk.0.attn_norm.weight", 1, 64, model, DType::F32),
      std::nullopt);
}

// Mixtures of eight experts and 70B-class models bump attn_v / attn_k / attn_output.
TEST(QuantPresets, ExpertAnd70BBumps) {
  QuantModelShape moe{32, 32, 8, 8};
  EXPECT_EQ(
      preset_tensor_type(QuantPreset::Q4_K_M, "blk.10.attn_v.weight", 2, 4096, moe, DType::F16),
      DType::Q8_0);
  EXPECT_EQ(
      preset_tensor_type(QuantPreset::Q4_K_M, "blk.10.attn_k.weight", 2, 4096, moe, DType::F16),
      DType::Q8_0);
  EXPECT_EQ(preset_tensor_type(QuantPreset::Q4_K_M, "blk.10.attn_output.weight", 2, 4096, moe,
                               DType::F16),
            DType::Q5_K);
  QuantModelShape big{80, 64, 8};
  big.is_70b = true;
  EXPECT_EQ(
      preset_tensor_type(QuantPreset::Q4_K_M, "blk.40.attn_v.weight", 2, 8192, big, DType::F16),
      DType::Q5_K);
  EXPECT_EQ(preset_tensor_type(QuantPreset::Q2_K, "blk.40.attn_v.weight", 2, 8192, big, DType::F16),
            DType::Q5_K);  // GQA 8 gives Q4_K, the 70B rule lifts it
}

}  // namespace
}  // namespace ember
