// Decode with the paged KV cache must equal full recompute: the logits of token t from
// incremental decode (one token per step) vs from one prefill over all t tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "ember/backend/cpu/kernels.h"
#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/backend/cpu/kernels_test_util.h"
#include "unit/engine/step_engine.h"
#include "unit/model/dummy_model_util.h"

namespace ember {
namespace {

// Max |a - b| / max(1, |b|) over a row: relative error with an absolute floor for tiny logits.
double max_rel_diff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]) /
               std::max(1.0, std::fabs(static_cast<double>(b[i])));
    worst = std::max(worst, d);
  }
  return worst;
}

// Prefill of 16+ tokens runs the tokens-in-lanes GEMM, which sums each dot product in k order;
// decode sums 8 lanes and reduces them: the logits differ by float reassociation only (~2e-5 on
// stories260K). A wrong KV entry, position or mask moves them by far more than this.
constexpr double kReassociationTolerance = 1e-4;
// With an f16 cache, that reassociation can round a K/V value to the neighbouring half (a step of
// 2^-11 relative), so prefill and decode agree to a few f16 steps (~7e-4 seen on stories260K).
constexpr double kF16CacheTolerance = 2e-3;

void expect_decode_matches_prefill(const ModelWeights& w, const std::vector<int32_t>& tokens,
                                   int64_t block_size, DType kv_dtype = DType::F32) {
  const int64_t V = w.config.vocab_size;
  const double tolerance = kv_dtype == DType::F16 ? kF16CacheTolerance : kReassociationTolerance;
  EngineOptions eo;
  eo.kv_dtype = kv_dtype;
  eo.max_context = 256;
  eo.block_size = block_size;
  eo.max_sequences = 2;
  test::StepEngine engine(w, eo);

  Sequence full;
  std::span<const float> all = engine.feed(full, tokens, /*all_logits=*/true);
  std::vector<float> prefill(all.begin(), all.end());
  ASSERT_EQ(prefill.size(), tokens.size() * static_cast<size_t>(V));

  Sequence inc;
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::span<const float> row = engine.feed(inc, std::span<const int32_t>(&tokens[t], 1));
    ASSERT_EQ(row.size(), static_cast<size_t>(V));
    double diff = max_rel_diff(row.data(), prefill.data() + t * V, V);
    EXPECT_LE(diff, tolerance) << "token " << t;
  }
  // Mixed: prefill half, then decode the rest, sharing the step with another sequence.
  Sequence half;
  size_t h = tokens.size() / 2;
  engine.feed(half, std::span<const int32_t>(tokens.data(), h));
  engine.release(full);
  Sequence other;
  for (size_t t = h; t < tokens.size(); ++t) {
    int32_t other_token = static_cast<int32_t>((t * 7) % V);
    test::FeedRequest reqs[2] = {{&other, std::span<const int32_t>(&other_token, 1), false},
                                 {&half, std::span<const int32_t>(&tokens[t], 1), false}};
    std::span<const float> rows = engine.feed(reqs);
    ASSERT_EQ(rows.size(), 2 * static_cast<size_t>(V));
    EXPECT_LE(max_rel_diff(rows.data() + V, prefill.data() + t * V, V), tolerance)
        << "batched token " << t;
  }
  engine.release(inc);
  engine.release(half);
  engine.release(other);
  EXPECT_EQ(engine.kv().used_blocks(), 0);
}

// A --dummy model (seeded random weights) from a config.json written to a scratch directory.
using test::load_dummy_model;

TEST(ForwardKv, DecodeEqualsPrefillOnStories260K) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  o.load_tokenizer = false;
  LoadedModel m = load_model(o);
  ASSERT_EQ(m.weights.matrix_dtype(), DType::F32);
  std::vector<int32_t> tokens = {1,   403, 407, 261, 378, 434, 267, 339, 365, 272, 30,  405, 289,
                                 263, 360, 285, 398, 416, 271, 300, 47,  280, 59,  261, 322, 11};
  expect_decode_matches_prefill(m.weights, tokens, 4);  // many block boundaries
  expect_decode_matches_prefill(m.weights, tokens, 16);
  // An f16 cache: prefill and decode read the same stored halves.
  expect_decode_matches_prefill(m.weights, tokens, 4, DType::F16);
  expect_decode_matches_prefill(m.weights, tokens, 16, DType::F16);
}

TEST(ForwardKv, DecodeEqualsPrefillOnDummyGqaModel) {
  // A small GQA model (6 query heads over 2 KV heads) with llama3 RoPE scaling, random f32 weights.
  LoadedModel m = load_dummy_model("dummy-gqa", R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 3,
    "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 300,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 512,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "tie_word_embeddings": false, "torch_dtype": "float32"})",
                                   DType::F32);
  EXPECT_EQ(m.weights.config.n_kv_heads, 2);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 300);
  expect_decode_matches_prefill(m.weights, tokens, 16);
}

TEST(ForwardKv, DecodeEqualsPrefillOnDummyQwen2WithBiasAndTiedEmbeddings) {
  LoadedModel m = load_dummy_model("dummy-qwen2", R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 200,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 256,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16"})",
                                   DType::F32);
  ASSERT_TRUE(m.weights.config.attention_bias);
  ASSERT_NE(m.weights.layers[0].bq, nullptr);
  EXPECT_EQ(m.weights.lm_head.data, m.weights.embed.data);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 21; ++i) tokens.push_back((i * 13 + 5) % 200);
  expect_decode_matches_prefill(m.weights, tokens, 8);
}

// Every KV dtype: the cached blocks hold the bits the cold run wrote, so a warm run that reads them
// gives the cold run's logits, up to float reassociation (f32), and for a narrow cache the rounding
// of the 5 recomputed tokens' K/V (a 5-token matmul, not the 45-token GEMM, computed them: a value
// can round to the neighbouring step; 1.9e-4 seen with f16).
TEST(ForwardKv, PrefixCachedBlocksGiveTheSameLogitsAsRecompute) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  o.load_tokenizer = false;
  LoadedModel m = load_model(o);
  // Q4_0 twice: K per channel (the default) and in q4_0's per-token groups.
  const DType dtypes[] = {DType::F32,  DType::F16,  DType::BF16,
                          DType::Q8_0, DType::Q4_0, DType::Q4_0};
  for (size_t i = 0; i < std::size(dtypes); ++i) {
    const DType kv_dtype = dtypes[i];
    SCOPED_TRACE(std::string(dtype_name(kv_dtype)) + (i == 5 ? " K per token" : ""));
    EngineOptions eo;
    eo.max_context = 128;
    eo.max_sequences = 3;
    eo.block_size = 8;
    eo.prefix_caching = true;
    eo.kv_dtype = kv_dtype;
    if (i == 5) eo.kv_k_channel = false;
    test::StepEngine engine(m.weights, eo);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 45; ++i) prompt.push_back(1 + (i * 29) % 500);
    const int64_t V = m.weights.config.vocab_size;

    Sequence cold;
    EXPECT_EQ(engine.attach_cached_prefix(cold, prompt), 0);
    auto z = engine.feed(cold, std::span<const int32_t>(prompt).subspan(cold.tokens.size()));
    std::vector<float> cold_logits(z.begin(), z.end());
    engine.release(cold);  // blocks stay cached

    Sequence warm;
    EXPECT_EQ(engine.attach_cached_prefix(warm, prompt), 40);  // 5 full blocks of 8
    EXPECT_EQ(engine.kv().stats().hit_blocks, 5);
    auto w = engine.feed(warm, std::span<const int32_t>(prompt).subspan(warm.tokens.size()));
    EXPECT_LE(max_rel_diff(w.data(), cold_logits.data(), V),
              kv_dtype == DType::F32 ? 1e-5 : kF16CacheTolerance);
    engine.release(warm);
    EXPECT_EQ(engine.kv().used_blocks(), 0);
  }
}

TEST(ForwardKv, QuantizedWeightsStayCloseToF32OnStories260K) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  // Real text the model was trained on, so perplexity is meaningful (low single digits).
  std::vector<int32_t> tokens;
  {
    LoadOptions o;
    o.path = path.string();
    LoadedModel m = load_model(o);
    tokens = m.tokenizer->encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.",
        true);
  }
  auto perplexity = [&](std::optional<DType> dtype, DType kv_dtype = DType::F32) {
    LoadOptions o;
    o.path = path.string();
    o.dtype = dtype;
    o.load_tokenizer = false;
    LoadedModel m = load_model(o);
    EngineOptions eo;
    eo.kv_dtype = kv_dtype;
    test::StepEngine engine(m.weights, eo);
    Sequence seq;
    auto z = engine.feed(seq, tokens, true);
    const int64_t V = m.weights.config.vocab_size;
    double nll = 0;
    for (size_t t = 0; t + 1 < tokens.size(); ++t) {
      const float* row = z.data() + t * V;
      double mx = *std::max_element(row, row + V), s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] - mx);
      nll += std::log(s) + mx - row[tokens[t + 1]];
    }
    return std::exp(nll / static_cast<double>(tokens.size() - 1));
  };
  double f32 = perplexity(std::nullopt);
  EXPECT_NEAR(perplexity(DType::F16), f32, 0.01 * f32);
  const double f16_cache = perplexity(std::nullopt, DType::F16);
  EXPECT_NE(f16_cache, f32);  // the cache really holds halves
  EXPECT_NEAR(f16_cache, f32, 0.005 * f32);
  EXPECT_NEAR(perplexity(DType::BF16), f32, 0.02 * f32);
  EXPECT_NEAR(perplexity(DType::Q8_0), f32, 0.02 * f32);
  EXPECT_NEAR(perplexity(DType::Q4_0), f32, 0.25 * f32);
}

// The threads split a prefill's matmuls over 16-token groups (64+ tokens) or output rows (fewer),
// and attention over (query tile, kv head): the logits must not depend on how many threads ran.
TEST(ForwardKv, PrefillLogitsDoNotDependOnThreadCount) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  for (DType dtype : {DType::F32, DType::Q4_0}) {
    LoadOptions o;
    o.path = path.string();
    o.dtype = dtype;
    o.load_tokenizer = false;
    for (int64_t n_tokens : {20, 70}) {  // row split; token split with a partial last group
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " T=" + std::to_string(n_tokens));
      std::vector<int32_t> tokens;
      for (int64_t i = 0; i < n_tokens; ++i)
        tokens.push_back(static_cast<int32_t>(1 + (i * 37) % 500));
      std::vector<float> logits[3];
      for (int threads = 1; threads <= 3; ++threads) {
        o.backend.n_threads = threads;  // threads belong to the backend, chosen at load
        LoadedModel m = load_model(o);
        test::StepEngine engine(m.weights, EngineOptions{});
        Sequence seq;
        auto z = engine.feed(seq, tokens, /*all_logits=*/true);
        logits[threads - 1].assign(z.begin(), z.end());
      }
      for (int i = 1; i < 3; ++i) {
        ASSERT_EQ(logits[i].size(), logits[0].size());
        EXPECT_EQ(std::memcmp(logits[i].data(), logits[0].data(), logits[0].size() * sizeof(float)),
                  0)
            << i + 1 << " threads";
      }
    }
  }
}

// With every matrix quantized and interleaved, nothing in the forward pass depends on how many
// tokens share a step: prefill, token-by-token decode and batched decode give the same bits.
TEST(ForwardKv, InterleavedQuantizedModelDecodesBitIdenticallyToPrefill) {
  const std::string config = R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 300,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
    "tie_word_embeddings": true, "torch_dtype": "float32"})";
  // The AMX set multiplies q8_0 / q4_0 by bf16 activations on its tiles from 16 tokens on
  // (kernels_amx_test.cpp): the contract is the AVX-512 set's and below.
  test::IsaScope scope(std::min(cpu::active_isa(), cpu::Isa::Avx512));
  // Q4_0 twice: K per channel (the default; a block is read exact by its own tokens and sealed by
  // later ones, which must not depend on how the steps were cut) and per token.
  const DType kv_dtypes[] = {DType::F32,  DType::F16,  DType::BF16,
                             DType::Q8_0, DType::Q4_0, DType::Q4_0};
  for (size_t k = 0; k < std::size(kv_dtypes); ++k)
    for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
      const DType kv_dtype = kv_dtypes[k];
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " kv " + dtype_name(kv_dtype) +
                   (k == 5 ? " K per token" : ""));
      LoadedModel m = load_dummy_model("dummy-q4", config, dtype);
      ASSERT_EQ(m.weights.lm_head.layout, WeightLayout::Interleaved8);  // 300 rows: padded
      std::vector<int32_t> tokens;
      for (int i = 0; i < 70; ++i) tokens.push_back((i * 41 + 3) % 300);
      EngineOptions eo;
      eo.kv_dtype = kv_dtype;
      if (k == 5) eo.kv_k_channel = false;
      test::StepEngine engine(m.weights, eo);
      ASSERT_EQ(engine.runner().kv_shape().k_channel_scales, k == 4);
      const auto V = static_cast<size_t>(m.weights.config.vocab_size);
      Sequence whole, stepwise, other;
      auto z = engine.feed(whole, tokens, /*all_logits=*/true);
      std::vector<float> prefill(z.begin(), z.end());
      for (size_t t = 0; t < tokens.size(); ++t) {
        // Every other step shares the batch with a second sequence.
        int32_t other_token = static_cast<int32_t>(t % 300);
        std::span<const float> row;
        if (t % 2 == 0) {
          row = engine.feed(stepwise, std::span<const int32_t>(&tokens[t], 1));
        } else {
          test::FeedRequest reqs[2] = {{&other, std::span<const int32_t>(&other_token, 1), false},
                                       {&stepwise, std::span<const int32_t>(&tokens[t], 1), false}};
          row = engine.feed(reqs).subspan(V);
        }
        ASSERT_EQ(std::memcmp(row.data(), prefill.data() + t * V, V * sizeof(float)), 0)
            << "token " << t;
      }
    }
}

// --no-mmap (backend.copy_weights) copies matrices stored in the compute dtype out of the file into
// the weights' own huge-page arena instead of pointing into the mapping; the numbers are the same
// bytes, so the logits are the same bits.
TEST(ForwardKv, CopiedWeightsGiveTheSameLogitsAsMappedOnes) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 434, 267, 339, 365, 272, 30, 405};
  std::vector<float> logits[2];
  for (int mapped = 0; mapped < 2; ++mapped) {
    LoadOptions o;
    o.path = path.string();
    o.load_tokenizer = false;
    o.backend.copy_weights = mapped == 0;
    LoadedModel m = load_model(o);
    ASSERT_EQ(m.weights.matrix_dtype(), DType::F32);
    ASSERT_FALSE(m.checkpoint.mappings.empty());
    const MappedFile& file = *m.checkpoint.mappings[0];
    auto in_file = [&](const WeightMatrix& w) {
      const auto* p = static_cast<const uint8_t*>(w.data);
      return p >= file.data() && p < file.data() + file.size();
    };
    for (const auto& layer : m.weights.layers) {
      // (wq and wk are copied either way: GGUF stores their rows permuted.)
      EXPECT_FALSE(in_file(layer.wq));
      for (const auto* w : {&layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down})
        EXPECT_EQ(in_file(*w), mapped == 1);
    }
    EXPECT_EQ(in_file(m.weights.embed), mapped == 1);
    EXPECT_GT(m.weights.backend->info().weight_bytes_owned, 0);  // norm vectors are always copied
    test::StepEngine engine(m.weights, EngineOptions{});
    Sequence seq;
    auto z = engine.feed(seq, tokens, /*all_logits=*/true);
    logits[mapped].assign(z.begin(), z.end());
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
}

// The loader interleaves q8_0/q4_0 matrices 8 rows at a time (--no-interleave keeps the file's
// blocks); interleaved matrices take 8-bit activations at every T, the file layout only below 16
// tokens. stories260K keeps one float matrix (w_down, 172 inputs): its float reassociation between
// prefill and decode can flip the rounding of an 8-bit activation downstream, so on this model the
// paths agree to the 8-bit activation error (one rounding step moves a tiny model's logits by up to
// ~0.15), not bit for bit (the all-quantized model above is). Mean NLL is the quality check.
TEST(ForwardKv, InterleavedQuantizedWeightsMatchTheFileLayout) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 24; ++i) tokens.push_back(1 + (i * 53) % 500);
  for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> prefill[2], decode[2];
    for (int interleave = 0; interleave < 2; ++interleave) {
      LoadOptions o;
      o.path = path.string();
      o.dtype = dtype;
      o.load_tokenizer = false;
      o.backend.interleave_quantized = interleave == 1;
      LoadedModel m = load_model(o);
      ASSERT_EQ(m.weights.layers[0].wq.layout,
                interleave == 1 ? WeightLayout::Interleaved8 : WeightLayout::Rows);
      EngineOptions eo;
      test::StepEngine engine(m.weights, eo);
      Sequence whole, stepwise;
      auto z = engine.feed(whole, tokens, /*all_logits=*/true);
      prefill[interleave].assign(z.begin(), z.end());
      for (int32_t token : tokens) {
        auto row = engine.feed(stepwise, std::span<const int32_t>(&token, 1));
        decode[interleave].insert(decode[interleave].end(), row.begin(), row.end());
      }
    }
    const auto n = static_cast<int64_t>(decode[0].size());
    ASSERT_EQ(static_cast<int64_t>(prefill[1].size()), n);
    constexpr double kActivationTolerance = 0.3;
    EXPECT_LE(max_rel_diff(prefill[1].data(), decode[1].data(), n), kActivationTolerance);
    EXPECT_LE(max_rel_diff(decode[1].data(), decode[0].data(), n), kActivationTolerance);
    // Not trivially equal: the two decode kernels do sum differently.
    EXPECT_NE(std::memcmp(decode[0].data(), decode[1].data(), n * sizeof(float)), 0);
    const double activation_error = max_rel_diff(prefill[1].data(), prefill[0].data(), n);
    EXPECT_LE(activation_error, kActivationTolerance);
    EXPECT_GT(activation_error, kReassociationTolerance);  // the file layout's prefill is f32
    // Mean next-token NLL over the sequence, from each path's logits: within 1% of each other.
    const int64_t V = n / static_cast<int64_t>(tokens.size());
    auto mean_nll = [&](const std::vector<float>& z) {
      double nll = 0;
      for (size_t t = 0; t + 1 < tokens.size(); ++t) {
        const float* row = z.data() + static_cast<int64_t>(t) * V;
        double mx = *std::max_element(row, row + V), sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
        nll += std::log(sum) + mx - row[tokens[t + 1]];
      }
      return nll / static_cast<double>(tokens.size() - 1);
    };
    const double reference = mean_nll(prefill[0]);
    for (const auto* z : {&prefill[1], &decode[0], &decode[1]}) {
      EXPECT_NEAR(mean_nll(*z), reference, 0.01 * reference);
    }
  }
}

}  // namespace
}  // namespace ember
