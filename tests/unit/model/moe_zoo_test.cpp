// Mixtures of experts as llama.cpp's converter writes them (../shared/models/moe-zoo: Mixtral as
// llama with experts, Qwen2-MoE with its gated shared expert, OLMoE with Q/K norms over the whole
// projections; see its README). Each file runs on the cpu and the reference backend and its logits
// are held to the exact answer (a float64 forward pass written from the HF model definitions) and
// compared with llama.cpp's; the routing is checked to pick every expert somewhere in the run.
//
// The ids go in as one prefill of kPrefill and then single-token decode steps, so both the grouped
// (many tokens per expert) and the batch-1 path (only the k chosen experts read) are held to it.
// Tolerance: 1e-4 of the largest |logit| of the exact answer at each position, as the family zoo.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/model/decoder.h"
#include "ember/model/model_config_sources.h"
#include "ember/model/model_loader.h"
#include "ember/model/moe_routing.h"
#include "ember/model/tensor_names.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

constexpr double kTolerance = 1e-4;
constexpr double kVsLlamaCpp = 5e-4;
constexpr size_t kPrefill = 20;

std::filesystem::path zoo(const std::string& name) {
  return test::fixture("models/moe-zoo/" + name);
}

LoadedModel load(const std::string& name, const std::string& backend) {
  LoadOptions o;
  o.path = zoo(name + ".gguf").string();
  o.load_tokenizer = false;
  o.backend.name = backend;
  return load_model(o);
}

// All positions' logits, row-major [n_ids, vocab]: a prefill of kPrefill ids, then one per step;
// the tokens each layer routed to each expert in `load`.
std::vector<float> run(const LoadedModel& model, const std::vector<int32_t>& ids,
                       std::vector<int64_t>* load) {
  EngineOptions eo;
  eo.max_context = 512;
  eo.block_size = 16;
  test::StepEngine engine(model.weights, eo);
  std::vector<float> out = engine.prefill_then_decode(ids, kPrefill);
  const std::span<const int64_t> l = engine.runner().expert_load();
  load->assign(l.begin(), l.end());
  return out;
}

class MoeZoo : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(MoeZoo, MatchesTheExactForwardPass) {
  const auto& [name, backend] = GetParam();
  EMBER_REQUIRE_BACKEND(backend);
  EMBER_REQUIRE_FIXTURE(zoo(name + ".gguf"));
  const std::vector<int32_t> ids = test::read_ids_file(zoo(name + ".ids"));
  const std::vector<float> exact = test::read_f32_file(zoo(name + ".f64ref.f32"));
  const std::vector<float> llama_cpp = test::read_f32_file(zoo(name + ".logits.f32"));
  const LoadedModel model = load(name, backend);
  ASSERT_TRUE(model.weights.config.is_moe());
  const int64_t V = model.weights.config.vocab_size;
  std::vector<int64_t> load;
  const std::vector<float> ours = run(model, ids, &load);
  // Every token went to k experts in every layer, and every expert of every layer ran somewhere.
  const ModelConfig& c = model.weights.config;
  ASSERT_EQ(load.size(), static_cast<size_t>(c.n_layers * c.n_experts));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto first = load.begin() + l * c.n_experts;
    EXPECT_EQ(std::accumulate(first, first + c.n_experts, int64_t{0}),
              static_cast<int64_t>(ids.size()) * c.n_experts_used)
        << "layer " << l;
    EXPECT_EQ(std::count(first, first + c.n_experts, 0), 0) << "layer " << l << ": an expert idle";
  }
  ASSERT_EQ(ours.size(), exact.size());
  ASSERT_EQ(llama_cpp.size(), exact.size());
  const double vs_exact = test::worst_relative_logit_error(ours, exact, exact, V);
  const double vs_llama = test::worst_relative_logit_error(ours, llama_cpp, exact, V);
  std::printf("[ moe ] %-10s %-9s vs exact %.2e  vs llama.cpp %.2e\n", name.c_str(),
              backend.c_str(), vs_exact, vs_llama);
  EXPECT_LE(vs_exact, kTolerance);
  EXPECT_LE(vs_llama, kVsLlamaCpp);
}

INSTANTIATE_TEST_SUITE_P(Files, MoeZoo,
                         ::testing::Combine(::testing::Values("mixtral", "qwen2moe", "olmoe"),
                                            ::testing::ValuesIn(test::backends_under_test())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// The experts of a step run one by one (a prefill of more than kGroupedExpertRows token-expert
// rows) or all together (decode: one matmul_groups call per projection, on cpu one parallel
// region over every active expert's rows): the same tokens through both agree. The OLMoE file's
// ids repeated to 300 tokens (1,200 rows at top-4) as one prefill, against a prefill of 20 and
// single-token steps; weights as stored (f32) and converted to q8_0 (the cpu's grouped 8-bit
// path). Both paths also meet the exact answer in MoeZoo (prefill and decode there are grouped).
TEST(MoeZooPaths, ExpertsOneByOneAndTogetherAgree) {
  EMBER_REQUIRE_FIXTURE(zoo("olmoe.gguf"));
  std::vector<int32_t> ids;
  const std::vector<int32_t> zoo_ids = test::read_ids_file(zoo("olmoe.ids"));
  while (ids.size() < 300) ids.push_back(zoo_ids[ids.size() % zoo_ids.size()]);
  for (const std::optional<DType> dtype : {std::optional<DType>{}, std::optional(DType::Q8_0)}) {
    SCOPED_TRACE(dtype ? "q8_0" : "f32");
    LoadOptions o;
    o.path = zoo("olmoe.gguf").string();
    o.load_tokenizer = false;
    o.dtype = dtype;
    o.backend.n_threads = 2;
    const LoadedModel model = load_model(o);
    const ModelConfig& c = model.weights.config;
    ASSERT_GT(static_cast<int64_t>(ids.size()) * c.n_experts_used,
              DecoderModel::kGroupedExpertRows);
    EngineOptions eo;
    eo.max_context = 512;
    eo.block_size = 16;
    test::StepEngine whole(model.weights, eo), steps(model.weights, eo);
    const std::vector<float> one_by_one = whole.prefill_then_decode(ids, ids.size());
    const std::vector<float> together = steps.prefill_then_decode(ids, 20);
    ASSERT_EQ(one_by_one.size(), together.size());
    const double error =
        test::worst_relative_logit_error(together, one_by_one, one_by_one, c.vocab_size);
    // The first 20 positions: both prefills (1,200 rows one by one; 80 rows together).
    const auto first = static_cast<std::ptrdiff_t>(20 * c.vocab_size);
    const std::vector<float> a(together.begin(), together.begin() + first),
        b(one_by_one.begin(), one_by_one.begin() + first);
    const double prefill_error = test::worst_relative_logit_error(a, b, b, c.vocab_size);
    std::printf("[ moe ] one by one vs together (%s): %.2e, first 20 positions %.2e\n",
                dtype ? "q8_0" : "f32", error, prefill_error);
    EXPECT_LE(prefill_error, 1e-5);
    // Decode steps against one prefill: f32 to rounding; with 8-bit activations the two drift
    // apart over 280 steps (1.1e-2 on Zen 3; a missed or misplaced expert costs ~0.3).
    EXPECT_LE(error, dtype ? 5e-2 : 1e-5);
  }
}

// HF's name for a zoo file's GGUF tensor, and for the experts (one tensor each in HF layout).
std::string hf_dense_name(const std::string& gguf, const std::string& arch) {
  return hf_name_from_gguf(gguf, arch).value();
}

std::string hf_expert_name(const std::string& arch, int64_t layer, int64_t expert,
                           const std::string& proj) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  if (arch != "llama") return p + "mlp.experts." + std::to_string(expert) + "." + proj + ".weight";
  const char* w = proj == "gate_proj" ? "w1" : proj == "up_proj" ? "w3" : "w2";  // Mixtral's
  return p + "block_sparse_moe.experts." + std::to_string(expert) + "." + w + ".weight";
}

// The zoo file rewritten as an HF checkpoint: config.json with the family's HF class and keys,
// model.safetensors with HF's tensor names, each expert its own tensor, Mixtral's Q/K rows back in
// HF's half-rotation order (llama.cpp's converter interleaved them).
// `experts_in_config`: the expert count config.json claims (0: the file's).
std::filesystem::path write_hf_checkpoint(const std::string& name, int64_t experts_in_config = 0,
                                          bool short_router = false) {
  const GgufFile gguf(zoo(name + ".gguf").string());
  const test::Bytes file = test::read_bytes(zoo(name + ".gguf"));
  const std::string arch = gguf.get_string("general.architecture");
  const std::string a = arch + ".";
  const int64_t D = gguf.get_int(a + "embedding_length"),
                heads = gguf.get_int(a + "attention.head_count");
  const int64_t head_dim = D / heads;
  nlohmann::json config = {{"hidden_size", D},
                           {"num_hidden_layers", gguf.get_int(a + "block_count")},
                           {"num_attention_heads", heads},
                           {"num_key_value_heads", gguf.get_int(a + "attention.head_count_kv")},
                           {"vocab_size", 512},
                           {"max_position_embeddings", gguf.get_int(a + "context_length")},
                           {"rms_norm_eps", gguf.get_float(a + "attention.layer_norm_rms_epsilon")},
                           {"rope_theta", gguf.get_float(a + "rope.freq_base")},
                           {"num_experts_per_tok", gguf.get_int(a + "expert_used_count")},
                           {"tie_word_embeddings", gguf.find_tensor("output.weight") == nullptr}};
  const int64_t E = gguf.get_int(a + "expert_count");
  const int64_t claimed = experts_in_config > 0 ? experts_in_config : E;
  if (arch == "llama") {
    config["architectures"] = {"MixtralForCausalLM"};
    config["num_local_experts"] = claimed;
    config["intermediate_size"] = gguf.get_int(a + "feed_forward_length");
  } else {
    config["architectures"] = {arch == "olmoe" ? "OlmoeForCausalLM" : "Qwen2MoeForCausalLM"};
    config["num_experts"] = claimed;
    config["intermediate_size"] = gguf.get_int(a + "feed_forward_length");
  }
  if (arch == "qwen2moe") {
    config["moe_intermediate_size"] = gguf.get_int(a + "expert_feed_forward_length");
    config["shared_expert_intermediate_size"] =
        gguf.get_int(a + "expert_shared_feed_forward_length");
  }
  test::SafetensorsWriter w;
  w.metadata("format", "pt");
  for (const GgufTensorInfo& t : gguf.tensors()) {
    std::vector<float> v(t.nbytes / sizeof(float));
    std::memcpy(v.data(), file.data() + t.offset, t.nbytes);
    const bool experts = t.name.find("_exps.") != std::string::npos;
    if (!experts) {
      std::vector<int64_t> shape = t.shape;
      if (t.name.ends_with("ffn_gate_inp_shexp.weight")) shape = {1, D};
      const bool qk = t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight");
      if (arch == "llama" && qk) {  // HF row c * hd/2 + i <- interleaved row 2i + c, per head
        std::vector<float> hf(v.size());
        for (int64_t r = 0; r < t.shape[0]; ++r) {
          const int64_t head = r / head_dim, j = r % head_dim, half = head_dim / 2;
          const int64_t src = head * head_dim + 2 * (j % half) + j / half;
          std::copy_n(v.begin() + src * D, D, hf.begin() + r * D);
        }
        v = hf;
      }
      if (short_router && t.name.ends_with("ffn_gate_inp.weight")) {
        shape[0] -= 1;  // a router row short of the expert count
        v.resize(static_cast<size_t>(shape[0] * shape[1]));
      }
      std::string hf = hf_dense_name(t.name, arch);
      if (arch == "llama" && t.name.ends_with("ffn_gate_inp.weight")) {
        hf.replace(hf.find("mlp.gate"), 8, "block_sparse_moe.gate");
      }
      w.tensor(hf, "F32", shape, test::f32_bytes(v));
      continue;
    }
    // blk.N.ffn_{gate,up,down}_exps.weight [E, rows, cols] -> E tensors [rows, cols].
    const int64_t layer = std::stoll(t.name.substr(4, t.name.find('.', 4) - 4));
    const std::string proj = t.name.find("gate_exps") != std::string::npos ? "gate_proj"
                             : t.name.find("up_exps") != std::string::npos ? "up_proj"
                                                                           : "down_proj";
    const int64_t per = t.shape[1] * t.shape[2];
    for (int64_t e = 0; e < E; ++e) {
      w.tensor(hf_expert_name(arch, layer, e, proj), "F32", {t.shape[1], t.shape[2]},
               test::f32_bytes(std::vector<float>(v.begin() + e * per, v.begin() + (e + 1) * per)));
    }
  }
  const auto dir = test::scratch_dir("moe-hf-" + name + std::to_string(claimed) +
                                     (short_router ? "-short" : ""));
  std::ofstream(dir / "config.json") << config.dump(2);
  test::write_bytes(dir / "model.safetensors", w.build());
  return dir;
}

// The same weights in HF layout (per-expert tensors, HF names and config) give the GGUF file's
// logits: held to the exact answer with the same tolerance.
TEST(MoeZooHf, HfLayoutMatchesTheExactForwardPass) {
  for (const std::string name : {"mixtral", "qwen2moe", "olmoe"}) {
    SCOPED_TRACE(name);
    EMBER_REQUIRE_FIXTURE(zoo(name + ".gguf"));
    LoadOptions o;
    o.path = write_hf_checkpoint(name).string();
    o.load_tokenizer = false;
    const LoadedModel model = load_model(o);
    ASSERT_TRUE(model.weights.config.is_moe());
    const std::vector<int32_t> ids = test::read_ids_file(zoo(name + ".ids"));
    const std::vector<float> exact = test::read_f32_file(zoo(name + ".f64ref.f32"));
    std::vector<int64_t> load;
    const std::vector<float> ours = run(model, ids, &load);
    ASSERT_EQ(ours.size(), exact.size());
    const double vs_exact =
        test::worst_relative_logit_error(ours, exact, exact, model.weights.config.vocab_size);
    std::printf("[ moe ] %-10s HF layout vs exact %.2e\n", name.c_str(), vs_exact);
    EXPECT_LE(vs_exact, kTolerance);
  }
}

// A router with a row short of the expert count, and a config claiming more experts than the
// checkpoint holds: one error naming the file and the tensor.
TEST(MoeZooHf, ExpertsInconsistentWithTheTensorsAreRefused) {
  EMBER_REQUIRE_FIXTURE(zoo("qwen2moe.gguf"));
  const auto expect_error = [](const std::filesystem::path& dir, const std::string& what) {
    LoadOptions o;
    o.path = dir.string();
    o.load_tokenizer = false;
    try {
      load_model(o);
      ADD_FAILURE() << "loaded; expected an error naming " << what;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(dir.string()), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
  };
  expect_error(write_hf_checkpoint("qwen2moe", 0, /*short_router=*/true),
               "model.layers.0.mlp.gate.weight has shape [7, 128], expected [8, 128]");
  expect_error(write_hf_checkpoint("qwen2moe", 9), "mlp.gate.weight has shape [8, 128]");
}

// The active bytes per token count k of the E experts of each layer, and the config reads the
// file's facts.
TEST(MoeZooConfig, ExpertsAndActiveBytes) {
  EMBER_REQUIRE_FIXTURE(zoo("olmoe.gguf"));
  const LoadedModel olmoe = load("olmoe", "cpu");
  const ModelConfig& c = olmoe.weights.config;
  EXPECT_EQ(c.n_experts, 16);
  EXPECT_EQ(c.n_experts_used, 4);
  EXPECT_FALSE(c.expert_weights_normalized);
  EXPECT_TRUE(c.qk_norm_whole);
  const LayerWeights& l = olmoe.weights.layers[0];
  ASSERT_EQ(l.expert_gate.size(), 16u);
  const int64_t experts = 16 * (l.expert_gate[0].bytes() * 3) * c.n_layers;
  EXPECT_EQ(olmoe.weights.matrix_bytes() - olmoe.weights.active_matrix_bytes(), experts * 12 / 16);
  const LoadedModel mixtral = load("mixtral", "cpu");
  EXPECT_TRUE(mixtral.weights.config.expert_weights_normalized);
  const LoadedModel qwen = load("qwen2moe", "cpu");
  EXPECT_EQ(qwen.weights.config.d_shared_expert_ffn, 256);
  EXPECT_NE(qwen.weights.layers[0].shared_expert_gate.data, nullptr);
}

TEST(MoeRouting, TopKOfTheSoftmaxGroupedByExpert) {
  // 3 tokens over 4 experts, k = 2.
  const std::vector<float> logits = {
      0.0f, 2.0f, 1.0f, -1.0f,  // token 0: experts 1, 2
      3.0f, 3.0f, 0.0f, 0.0f,   // token 1: a tie, experts 0, 1
      0.0f, 0.0f, 0.0f, 5.0f};  // token 2: expert 3, then 0 (the lowest of a three-way tie)
  ExpertRoutes r;
  route_tokens(logits, 3, 4, 2, /*normalize=*/false, r);
  EXPECT_EQ(r.rows[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.rows[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.rows[2], (std::vector<int32_t>{0}));
  EXPECT_EQ(r.rows[3], (std::vector<int32_t>{2}));
  const double z0 = std::exp(0.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(r.weights[1][0], std::exp(2.0) / z0, 1e-6);  // the softmax probability as it is
  route_tokens(logits, 3, 4, 2, /*normalize=*/true, r);
  EXPECT_NEAR(r.weights[1][0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(r.weights[2][0], std::exp(1.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(r.weights[0][0] + r.weights[1][1], 1.0, 1e-6);  // token 1's pair sums to 1
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Expert counts that contradict each other are one error naming the file and the fields.
TEST(MoeConfig, InconsistentExpertCountsAreRefused) {
  const std::string base = R"({"architectures": ["OlmoeForCausalLM"], "hidden_size": 64,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 512, )";
  const ModelConfig ok =
      parse_hf_config(base + R"("num_experts": 8, "num_experts_per_tok": 2})", "ok/config.json");
  EXPECT_EQ(ok.n_experts, 8);
  EXPECT_TRUE(ok.qk_norm_whole);
  for (const std::string bad : {R"("num_experts": 8, "num_experts_per_tok": 9})",
                                R"("num_experts": 8, "num_experts_per_tok": 0})"}) {
    try {
      parse_hf_config(base + bad, "bad/config.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad/config.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("experts used per token"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parse_hf_config(base + R"("num_experts_per_tok": 2})", "x/config.json"), Error);
}

}  // namespace
}  // namespace ember
