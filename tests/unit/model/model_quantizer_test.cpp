// quantize_model end to end in-process: an HF directory written as GGUF loads to bit-identical
// logits (F32, BF16) or to what --dtype builds at load (Q8_0), with GGUF's Q/K row order, the
// architecture keys and the tokenizer; a llama2.c checkpoint becomes the GGUF llama.cpp's own
// converter made of it; a GGUF source gives llama-quantize's own file; output is deterministic.
#include "ember/model/model_quantizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ember/core/error.h"
#include "ember/core/quantize.h"
#include "ember/formats/gguf.h"
#include "ember/formats/safetensors.h"
#include "ember/model/gguf_model_metadata.h"
#include "ember/model/model_loader.h"
#include "ember/model/weights.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDim = 64, kFfn = 128, kLayers = 2, kHeads = 4, kKvHeads = 2, kVocab = 49152;

// Deterministic values in [-scale, scale) + offset.
std::vector<float> random_values(size_t n, uint64_t seed, float scale, float offset = 0.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = offset + scale * (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
  }
  return v;
}

// A random Llama (or, with `qwen2`, Qwen2: q/k/v biases) model as an HF directory (safetensors of
// `st_dtype`, "F32" or "BF16") with SmolLM2's tokenizer.json copied beside it.
fs::path write_hf_model(const std::string& name, const std::string& st_dtype, bool tied,
                        bool qwen2 = false) {
  const fs::path dir = test::scratch_dir(name);
  nlohmann::json config = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                           {"model_type", qwen2 ? "qwen2" : "llama"},
                           {"hidden_size", kDim},
                           {"intermediate_size", kFfn},
                           {"num_hidden_layers", kLayers},
                           {"num_attention_heads", kHeads},
                           {"num_key_value_heads", kKvHeads},
                           {"vocab_size", kVocab},
                           {"rms_norm_eps", 1e-5},
                           {"rope_theta", 100000.0},
                           {"max_position_embeddings", 512},
                           {"tie_word_embeddings", tied},
                           {"bos_token_id", 1},
                           {"eos_token_id", 2},
                           {"pad_token_id", 2},
                           {"torch_dtype", st_dtype == "F32" ? "float32" : "bfloat16"}};
  std::ofstream(dir / "config.json") << config.dump(2);
  fs::copy_file(test::fixture("models/smollm2-135m-instruct/tokenizer.json"),
                dir / "tokenizer.json");
  test::SafetensorsWriter st;
  uint64_t seed = 1;
  auto add = [&](const std::string& tensor, std::vector<int64_t> shape, float scale, float offset) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    const auto values = random_values(n, seed++, scale, offset);
    st.tensor(tensor, st_dtype, shape,
              st_dtype == "F32" ? test::f32_bytes(values) : test::bf16_bytes(values));
  };
  add("model.embed_tokens.weight", {kVocab, kDim}, 0.5f, 0.0f);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t kv = kKvHeads * (kDim / kHeads);
    add(p + "input_layernorm.weight", {kDim}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {kDim, kDim}, 0.2f, 0.0f);
    add(p + "self_attn.k_proj.weight", {kv, kDim}, 0.2f, 0.0f);
    add(p + "self_attn.v_proj.weight", {kv, kDim}, 0.2f, 0.0f);
    if (qwen2) {
      add(p + "self_attn.q_proj.bias", {kDim}, 0.1f, 0.0f);
      add(p + "self_attn.k_proj.bias", {kv}, 0.1f, 0.0f);
      add(p + "self_attn.v_proj.bias", {kv}, 0.1f, 0.0f);
    }
    add(p + "self_attn.o_proj.weight", {kDim, kDim}, 0.2f, 0.0f);
    add(p + "post_attention_layernorm.weight", {kDim}, 0.1f, 1.0f);
    add(p + "mlp.gate_proj.weight", {kFfn, kDim}, 0.2f, 0.0f);
    add(p + "mlp.up_proj.weight", {kFfn, kDim}, 0.2f, 0.0f);
    add(p + "mlp.down_proj.weight", {kDim, kFfn}, 0.2f, 0.0f);
  }
  add("model.norm.weight", {kDim}, 0.1f, 1.0f);
  if (!tied) add("lm_head.weight", {kVocab, kDim}, 0.2f, 0.0f);
  test::write_bytes(dir / "model.safetensors", st.build());
  return dir;
}

// Logits for every position of `ids`, from the model at `path` (matrices as `dtype`).
std::vector<float> logits(const std::string& path, std::optional<DType> dtype = std::nullopt) {
  std::vector<int32_t> ids = {1, 504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30};
  LoadOptions o;
  o.path = path;
  o.dtype = dtype;
  o.load_tokenizer = false;
  LoadedModel m = load_model(o);
  // SmolLM2 ids for the 49152-token models, folded into the small vocabularies of the others.
  for (int32_t& id : ids) id %= static_cast<int32_t>(m.weights.config.vocab_size);
  EngineOptions eo;
  eo.max_context = 32;
  test::StepEngine engine(m.weights, eo);
  Sequence seq;
  const auto z = engine.feed(seq, ids, /*all_logits=*/true);
  return std::vector<float>(z.begin(), z.end());
}

void expect_bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "of " << a.size() << " logits";
}

QuantizeSummary quantize(const fs::path& in, const fs::path& out, QuantPreset preset,
                         int threads = 0) {
  QuantizeOptions o;
  o.input = in.string();
  o.output = out.string();
  o.preset = preset;
  o.threads = threads;
  return quantize_model(o);
}

#define REQUIRE_SMOLLM2_TOKENIZER() \
  EMBER_REQUIRE_FIXTURE(test::fixture("models/smollm2-135m-instruct/tokenizer.json"))

TEST(ModelQuantizer, HfF32ToF32GivesBitIdenticalLogitsAndGgufLayout) {
  REQUIRE_SMOLLM2_TOKENIZER();
  const fs::path hf = write_hf_model("mq-hf-f32", "F32", /*tied=*/true);
  const fs::path out = hf / "model-f32.gguf";
  const QuantizeSummary s = quantize(hf, out, QuantPreset::F32);
  EXPECT_EQ(s.n_tensors, 1u + kLayers * 9u + 1u);  // tied: no output.weight
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  expect_bit_identical(logits(hf.string()), logits(out.string()));

  const GgufFile g(out.string());
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), kLayers);
  EXPECT_EQ(g.get_int("llama.embedding_length"), kDim);
  EXPECT_EQ(g.get_int("llama.feed_forward_length"), kFfn);
  EXPECT_EQ(g.get_int("llama.attention.head_count"), kHeads);
  EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), kKvHeads);
  EXPECT_EQ(g.get_int("llama.rope.dimension_count"), kDim / kHeads);
  EXPECT_EQ(g.get_int("llama.context_length"), 512);
  EXPECT_EQ(g.get_int("llama.vocab_size"), kVocab);
  EXPECT_FLOAT_EQ(static_cast<float>(g.get_float("llama.rope.freq_base")), 100000.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(g.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(g.get_int("general.file_type"), 0);
  EXPECT_EQ(g.get_int("general.quantization_version"), 2);
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(g.get_int("tokenizer.ggml.padding_token_id"), 2);
  EXPECT_EQ(g.find_tensor("output.weight"), nullptr);

  // Q/K rows in GGUF's interleaved-pair order: row 2i + c of a head is HF row c * 8 + i.
  const SafetensorsFile st((hf / "model.safetensors").string());
  for (const char* which : {"q", "k"}) {
    const std::string hf_name = std::string("model.layers.1.self_attn.") + which + "_proj.weight";
    const GgufTensorInfo* t = g.find_tensor(std::string("blk.1.attn_") + which + ".weight");
    ASSERT_NE(t, nullptr);
    const TensorView src = *std::find_if(st.tensors().begin(), st.tensors().end(),
                                         [&](const TensorView& v) { return v.name == hf_name; });
    const int64_t hd = kDim / kHeads, row_bytes = kDim * 4;
    for (int64_t r = 0; r < t->shape[0]; ++r) {
      const int64_t head = r / hd, j = r % hd;
      const int64_t from = head * hd + (j % 2) * (hd / 2) + j / 2;
      EXPECT_EQ(
          std::memcmp(g.view(*t).data + r * row_bytes, src.data + from * row_bytes, row_bytes), 0)
          << which << " row " << r;
    }
  }

  // The tokenizer tokenizes as tokenizer.json does.
  const auto from_json = load_tokenizer_for_model(hf.string());
  const auto from_gguf = load_tokenizer_from_gguf(out.string());
  const std::string text = "<|im_start|>user\nThe capital of France is 1234?<|im_end|>";
  EXPECT_EQ(from_json->encode_with_special(text, true, true),
            from_gguf->encode_with_special(text, true, true));
}

TEST(ModelQuantizer, HfBf16ToBf16GivesBitIdenticalLogits) {
  REQUIRE_SMOLLM2_TOKENIZER();
  const fs::path hf = write_hf_model("mq-hf-bf16", "BF16", /*tied=*/true);
  const fs::path out = hf / "model-bf16.gguf";
  quantize(hf, out, QuantPreset::BF16);
  expect_bit_identical(logits(hf.string()), logits(out.string()));
  const GgufFile g(out.string());
  EXPECT_EQ(g.find_tensor("blk.0.attn_q.weight")->dtype, DType::BF16);
  EXPECT_EQ(g.find_tensor("blk.0.attn_norm.weight")->dtype, DType::F32);  // norms stay f32
  EXPECT_EQ(g.get_int("general.file_type"), 32);
}

// Qwen2 from HF: qwen2.* keys, q/k/v biases, rows as stored (GGUF's Qwen2 uses NEOX RoPE).
TEST(ModelQuantizer, HfQwen2ToF32KeepsRowsAndBiases) {
  REQUIRE_SMOLLM2_TOKENIZER();
  const fs::path hf = write_hf_model("mq-hf-qwen2", "F32", /*tied=*/true, /*qwen2=*/true);
  const fs::path out = hf / "qwen2.gguf";
  quantize(hf, out, QuantPreset::F32);
  expect_bit_identical(logits(hf.string()), logits(out.string()));
  const GgufFile g(out.string());
  EXPECT_EQ(g.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(g.get_int("qwen2.block_count"), kLayers);
  EXPECT_EQ(g.find_tensor("blk.1.attn_k.bias")->shape, (std::vector<int64_t>{kKvHeads * 16}));
  const SafetensorsFile st((hf / "model.safetensors").string());
  for (const TensorView& v : st.tensors()) {
    if (v.name != "model.layers.1.self_attn.q_proj.weight") continue;
    EXPECT_EQ(std::memcmp(g.view(*g.find_tensor("blk.1.attn_q.weight")).data, v.data, v.nbytes), 0);
  }
}

// Q8_0 rounds each row on its own, so the file holds what `--dtype q8_0` builds from the HF
// directory at load: the same logits, bit for bit.
TEST(ModelQuantizer, HfF32ToQ8_0MatchesQuantizingAtLoad) {
  REQUIRE_SMOLLM2_TOKENIZER();
  const fs::path hf = write_hf_model("mq-hf-q8", "F32", /*tied=*/false);
  const fs::path out = hf / "model-q8_0.gguf";
  const QuantizeSummary s = quantize(hf, out, QuantPreset::Q8_0);
  EXPECT_EQ(s.tensors_by_type.at("Q8_0"), 2 + kLayers * 7);
  EXPECT_EQ(s.tensors_by_type.at("F32"), 1 + kLayers * 2);
  EXPECT_NEAR(s.bits_per_weight(), 8.5, 0.05);
  expect_bit_identical(logits(hf.string(), DType::Q8_0), logits(out.string()));
}

// llama.cpp's convert-llama2c made stories260K.gguf from stories260K.bin; ours matches it tensor
// for tensor and token for token (it also wrote an untied output.weight copy; ours stays tied).
TEST(ModelQuantizer, Llama2cBinBecomesTheConvertedGguf) {
  const fs::path bin = test::fixture("models/stories260K/stories260K.bin");
  const fs::path ref_path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(bin);
  EMBER_REQUIRE_FIXTURE(ref_path);
  const fs::path out = test::scratch_dir("mq-l2c") / "stories.gguf";
  quantize(bin, out, QuantPreset::F32);
  const GgufFile ours(out.string()), ref(ref_path.string());
  for (const GgufTensorInfo& t : ours.tensors()) {
    const GgufTensorInfo* r = ref.find_tensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    EXPECT_EQ(t.shape, r->shape) << t.name;
    ASSERT_EQ(t.nbytes, r->nbytes) << t.name;
    EXPECT_EQ(std::memcmp(ours.view(t).data, ref.view(*r).data, t.nbytes), 0) << t.name;
  }
  for (const char* key :
       {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    EXPECT_EQ(ours.find(key)->to_display(1000000), ref.find(key)->to_display(1000000)) << key;
  }
  for (const char* key :
       {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
        "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.dimension_count",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id"}) {
    EXPECT_EQ(ours.get_int(key), ref.get_int(key)) << key;
  }
  EXPECT_EQ(ours.get_string("tokenizer.ggml.model"), "llama");
  expect_bit_identical(logits(ref_path.string()), logits(out.string()));
}

// A GGUF source keeps every key, as llama.cpp's quantizer does, and its tensors go out in the
// same order: quantizing zoo-f32.gguf gives the file llama.cpp wrote, byte for byte, for every
// preset whose types ember quantizes exactly as ggml does (the float types and Q8_0).
class GgufSourceVsLlamaCpp : public ::testing::TestWithParam<QuantPreset> {};

TEST_P(GgufSourceVsLlamaCpp, ByteIdenticalToLlamaQuantize) {
  const fs::path zoo = test::fixture("models/quant-zoo");
  EMBER_REQUIRE_FIXTURE(zoo / "zoo-f32.gguf");
  std::string lower = quant_preset_info(GetParam()).name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const fs::path out = test::scratch_dir("mq-zoo-" + lower) / "out.gguf";
  const fs::path ref_path = zoo / ("zoo-" + lower + ".gguf");
  quantize(zoo / "zoo-f32.gguf", out, GetParam());
  const GgufFile ours(out.string()), ref(ref_path.string());
  ASSERT_EQ(ours.metadata().size(), ref.metadata().size());
  for (size_t i = 0; i < ref.metadata().size(); ++i) {
    EXPECT_EQ(ours.metadata()[i].first, ref.metadata()[i].first);
    EXPECT_EQ(ours.metadata()[i].second.to_display(1000000),
              ref.metadata()[i].second.to_display(1000000))
        << ref.metadata()[i].first;
  }
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const GgufTensorInfo &t = ours.tensors()[i], &r = ref.tensors()[i];
    EXPECT_EQ(t.name, r.name);
    EXPECT_EQ(t.ggml_type, r.ggml_type) << t.name;
    ASSERT_EQ(t.nbytes, r.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(ours.view(t).data, ref.view(r).data, t.nbytes), 0) << t.name;
  }
  EXPECT_TRUE(test::read_bytes(out) == test::read_bytes(ref_path)) << "files differ";
}

INSTANTIATE_TEST_SUITE_P(ExactTypes, GgufSourceVsLlamaCpp,
                         ::testing::Values(QuantPreset::F16, QuantPreset::BF16, QuantPreset::Q8_0));

TEST(ModelQuantizer, SameBytesWhateverTheThreadCount) {
  const fs::path src = test::fixture("models/quant-zoo/zoo-f32.gguf");
  EMBER_REQUIRE_FIXTURE(src);
  const fs::path dir = test::scratch_dir("mq-determinism");
  quantize(src, dir / "a.gguf", QuantPreset::Q8_0, 1);
  quantize(src, dir / "b.gguf", QuantPreset::Q8_0, 3);
  quantize(src, dir / "c.gguf", QuantPreset::Q8_0, 0);
  const auto a = test::read_bytes(dir / "a.gguf");
  EXPECT_EQ(a, test::read_bytes(dir / "b.gguf"));
  EXPECT_EQ(a, test::read_bytes(dir / "c.gguf"));
}

// A GGUF Q8_0 source re-typed to F16: dequantized, then converted; loads as --dtype f16 would.
TEST(ModelQuantizer, QuantizedSourceRetypedToF16) {
  const fs::path src = test::fixture("models/quant-zoo/zoo-q8_0.gguf");
  EMBER_REQUIRE_FIXTURE(src);
  const fs::path out = test::scratch_dir("mq-retype") / "f16.gguf";
  quantize(src, out, QuantPreset::F16);
  EXPECT_EQ(GgufFile(out.string()).find_tensor("blk.0.ffn_up.weight")->dtype, DType::F16);
  expect_bit_identical(logits(src.string(), DType::F16), logits(out.string()));
}

// Any architecture's GGUF is re-typed: Mixtral's 3-D expert tensors are quantized expert by
// expert, row by row; its router (ffn_gate_inp) and norms stay F32; every key is kept.
TEST(ModelQuantizer, MixtralExpertsRetypedRowByRow) {
  const fs::path src = test::fixture("models/moe-zoo/mixtral.gguf");
  EMBER_REQUIRE_FIXTURE(src);
  const fs::path out = test::scratch_dir("mq-mixtral") / "q8.gguf";
  quantize(src, out, QuantPreset::Q8_0);
  const GgufFile in(src.string()), g(out.string());
  EXPECT_EQ(g.get_int("llama.expert_count"), 8);
  EXPECT_EQ(g.metadata().size(), in.metadata().size() + 1);  // + general.quantization_version
  ASSERT_EQ(g.tensors().size(), in.tensors().size());
  EXPECT_EQ(g.find_tensor("blk.1.ffn_gate_inp.weight")->dtype, DType::F32);
  EXPECT_EQ(g.find_tensor("blk.1.ffn_norm.weight")->dtype, DType::F32);
  for (const GgufTensorInfo& t : g.tensors()) {
    const GgufTensorInfo* s = in.find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(t.shape, s->shape) << t.name;
    if (t.dtype != DType::Q8_0) continue;
    const int64_t cols = t.shape.back(), rows = in.view(*s).numel() / cols;
    const int64_t row_bytes = dtype_row_bytes(DType::Q8_0, cols);
    std::vector<uint8_t> expected(static_cast<size_t>(row_bytes));
    const auto* x = reinterpret_cast<const float*>(in.view(*s).data);
    for (int64_t r = 0; r < rows; ++r) {
      convert_row(x + r * cols, DType::Q8_0, expected.data(), cols);
      ASSERT_EQ(std::memcmp(g.view(t).data + r * row_bytes, expected.data(), row_bytes), 0)
          << t.name << " row " << r;
    }
  }
}

// Qwen2 (NEOX RoPE: rows are never reordered) through the same path, loading as --dtype would.
TEST(ModelQuantizer, Qwen2GgufToF16LoadsAsLoadTimeConversion) {
  const fs::path src = test::fixture("models/family-zoo/qwen2.gguf");
  EMBER_REQUIRE_FIXTURE(src);
  const fs::path out = test::scratch_dir("mq-qwen2") / "f16.gguf";
  quantize(src, out, QuantPreset::F16);
  EXPECT_EQ(GgufFile(out.string()).find_tensor("blk.0.attn_q.bias")->dtype, DType::F32);
  expect_bit_identical(logits(src.string(), DType::F16), logits(out.string()));
}

// Llama 3 RoPE scaling goes into rope_freqs.weight as GGUF stores it: divisors of the plain
// inverse frequencies, 1 for short wavelengths, `factor` for long ones, smooth in between.
TEST(ModelQuantizer, Llama3RopeFreqFactors) {
  ModelConfig c;
  c.rope_dim = 64;
  c.rope_theta = 500000.0f;
  EXPECT_TRUE(rope_freq_factors(c).empty());
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_factor = 32.0f;
  const std::vector<float> factors = rope_freq_factors(c);
  ASSERT_EQ(factors.size(), 32u);
  EXPECT_FLOAT_EQ(factors.front(), 1.0f);
  EXPECT_FLOAT_EQ(factors.back(), 32.0f);
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling::None;
  const auto scaled = rope_inverse_frequencies(c), unscaled = rope_inverse_frequencies(plain);
  for (size_t i = 0; i < factors.size(); ++i) {
    EXPECT_GE(factors[i], 1.0f);
    EXPECT_NEAR(unscaled[i] / factors[i], scaled[i], 1e-6 * scaled[i]) << i;
  }
}

// A preset whose quantizer this build lacks fails before writing anything, naming the type.
TEST(ModelQuantizer, MissingQuantizerFailsWithoutAFile) {
  const fs::path src = test::fixture("models/quant-zoo/zoo-f32.gguf");
  EMBER_REQUIRE_FIXTURE(src);
  if (can_quantize_to(DType::Q4_K)) GTEST_SKIP() << "q4_k is implemented in this build";
  const fs::path out = test::scratch_dir("mq-missing") / "q4km.gguf";
  try {
    quantize(src, out, QuantPreset::Q4_K_M);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("preset Q4_K_M needs quantizing to q4_k"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}

}  // namespace
}  // namespace ember
