#include <gtest/gtest.h>

#include <cstring>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/formats/llama2c.h"
#include "ember/model/model_config_sources.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

using test::Bytes;
using test::error_message;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

float float_at(const TensorView& v, int64_t i) {
  float x;
  std::memcpy(&x, v.data + i * 4, 4);
  return x;
}

struct Header {
  int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 10, seq_len = 4;
};

// Float count of every tensor after the header, in file order (see llama2c.cpp).
int64_t total_floats(const Header& h) {
  int64_t d = h.dim, hd = h.hidden, L = h.layers, v = h.vocab < 0 ? -h.vocab : h.vocab;
  int64_t kv = d / h.heads * h.kv_heads, half = d / h.heads / 2;
  int64_t n =
      v * d + L * (d + d * d + 2 * kv * d + d * d + d + 3 * hd * d) + d + 2 * h.seq_len * half;
  if (h.vocab < 0) n += v * d;
  return n;
}

// A synthetic checkpoint whose i-th float is i, so a view's first value gives its file offset.
Bytes build_bin(const Header& h) {
  Bytes b;
  for (int32_t x : {h.dim, h.hidden, h.layers, h.heads, h.kv_heads, h.vocab, h.seq_len}) {
    test::put_u32(b, static_cast<uint32_t>(x));
  }
  std::vector<float> f(static_cast<size_t>(total_floats(h)));
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i);
  Bytes data = test::f32_bytes(f);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string write_bin(const std::string& dir, const Bytes& bytes) {
  auto path = test::scratch_dir(dir) / "model.bin";
  test::write_bytes(path, bytes);
  return path.string();
}

TEST(Llama2cParse, SharedClassifierLayout) {
  Header h;
  Llama2cCheckpoint c = load_llama2c_checkpoint(write_bin("l2c-shared", build_bin(h)));
  EXPECT_EQ(c.config.d_model, 8);
  EXPECT_EQ(c.config.d_ffn, 12);
  EXPECT_EQ(c.config.n_layers, 2);
  EXPECT_EQ(c.config.n_heads, 2);
  EXPECT_EQ(c.config.n_kv_heads, 1);
  EXPECT_EQ(c.config.head_dim, 4);
  EXPECT_EQ(c.config.rope_dim, 4);
  EXPECT_EQ(c.config.vocab_size, 10);
  EXPECT_EQ(c.config.max_position_embeddings, 4);
  EXPECT_TRUE(c.config.tie_word_embeddings);
  EXPECT_EQ(c.tensors.size(), 1u + 2 * 9 + 1);
  EXPECT_EQ(c.tensors.count("lm_head.weight"), 0u);

  // Expected first-float index of each view, following the file order.
  const int64_t d = 8, hd = 12, kv = 4, L = 2, V = 10;
  int64_t at = 0;
  auto expect = [&](const std::string& name, std::vector<int64_t> shape, int64_t first) {
    SCOPED_TRACE(name);
    ASSERT_EQ(c.tensors.count(name), 1u);
    const TensorView& v = c.tensors.at(name);
    EXPECT_EQ(v.name, name);
    EXPECT_EQ(v.dtype, DType::F32);
    EXPECT_EQ(v.shape, shape);
    EXPECT_EQ(v.nbytes, static_cast<uint64_t>(v.numel()) * 4);
    EXPECT_EQ(float_at(v, 0), static_cast<float>(first));
    EXPECT_EQ(float_at(v, v.numel() - 1), static_cast<float>(first + v.numel() - 1));
  };
  expect("model.embed_tokens.weight", {V, d}, at);
  at += V * d;
  struct Stack {
    const char* suffix;
    std::vector<int64_t> shape;
  };
  const std::vector<Stack> stacks = {
      {"input_layernorm.weight", {d}},      {"self_attn.q_proj.weight", {d, d}},
      {"self_attn.k_proj.weight", {kv, d}}, {"self_attn.v_proj.weight", {kv, d}},
      {"self_attn.o_proj.weight", {d, d}},  {"post_attention_layernorm.weight", {d}},
      {"mlp.gate_proj.weight", {hd, d}},    {"mlp.down_proj.weight", {d, hd}},
      {"mlp.up_proj.weight", {hd, d}},
  };
  for (const Stack& s : stacks) {
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    for (int64_t l = 0; l < L; ++l) {
      expect("model.layers." + std::to_string(l) + "." + s.suffix, s.shape, at + l * n);
    }
    at += L * n;
  }
  expect("model.norm.weight", {d}, at);
}

TEST(Llama2cParse, SeparateClassifier) {
  Header h;
  h.vocab = -10;
  Bytes bytes = build_bin(h);
  Llama2cCheckpoint c = load_llama2c_checkpoint(write_bin("l2c-wcls", bytes));
  EXPECT_EQ(c.config.vocab_size, 10);
  EXPECT_FALSE(c.config.tie_word_embeddings);
  ASSERT_EQ(c.tensors.count("lm_head.weight"), 1u);
  const TensorView& w = c.tensors.at("lm_head.weight");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{10, 8}));
  EXPECT_EQ(w.data + w.nbytes, c.mapping->data() + c.mapping->size());  // wcls is last

  // Without the classifier's bytes the file is too short.
  bytes.resize(bytes.size() - 4);
  const std::string path = write_bin("l2c-wcls-short", bytes);
  std::string msg = error_message([&] { load_llama2c_checkpoint(path); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "wcls")) << msg;
}

TEST(Llama2cErrors, TruncatedAtEveryByte) {
  Header h;
  const Bytes bytes = build_bin(h);
  const std::string path = (test::scratch_dir("l2c-truncate") / "t.bin").string();
  // Write once and shrink in place: rewriting the file for every length is much slower.
  test::write_bytes(path, bytes);
  for (size_t n = bytes.size(); n-- > 0;) {
    std::filesystem::resize_file(path, n);
    std::string msg = error_message([&] { load_llama2c_checkpoint(path); });
    ASSERT_EQ(msg.rfind(path, 0), 0u) << "truncated at " << n << ": " << msg;
  }
}

TEST(Llama2cErrors, BadHeaders) {
  struct Case {
    const char* name;
    Header h;
    const char* expected;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, auto edit, const char* expected) {
    Header h;
    edit(h);
    cases.push_back({name, h, expected});
  };
  add(
      "zero-dim", [](Header& h) { h.dim = 0; }, "dim = 0");
  add(
      "negative-layers", [](Header& h) { h.layers = -3; }, "n_layers = -3");
  add(
      "zero-vocab", [](Header& h) { h.vocab = 0; }, "vocab_size = 0");
  add(
      "heads-dim", [](Header& h) { h.heads = 3; }, "not a multiple of n_heads");
  add(
      "kv-heads",
      [](Header& h) {
        h.kv_heads = 3;
        h.heads = 2;
      },
      "num_key_value_heads");
  add(
      "huge",
      [](Header& h) {
        h.dim = 1 << 30;
        h.heads = 1;
        h.kv_heads = 1;
        h.layers = 1 << 30;
      },
      "");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Bytes b;
    for (int32_t x :
         {c.h.dim, c.h.hidden, c.h.layers, c.h.heads, c.h.kv_heads, c.h.vocab, c.h.seq_len}) {
      test::put_u32(b, static_cast<uint32_t>(x));
    }
    b.resize(b.size() + 4096, 0);
    const std::string path = write_bin(std::string("l2c-") + c.name, b);
    std::string msg = error_message([&] { load_llama2c_checkpoint(path); });
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_TRUE(contains(msg, c.expected)) << msg;
  }
}

TEST(Llama2cErrors, NewerExportFormatAndMissingFile) {
  Bytes b;
  test::put_u32(b, 0x616b3432);  // "ak42"
  test::put_u32(b, 1);
  b.resize(256, 0);
  const std::string path = write_bin("l2c-v1", b);
  std::string msg = error_message([&] { load_llama2c_checkpoint(path); });
  EXPECT_TRUE(contains(msg, "export version 1")) << msg;

  const std::string missing = "/nonexistent/stories.bin";
  msg = error_message([&] { load_llama2c_checkpoint(missing); });
  EXPECT_EQ(msg.rfind(missing, 0), 0u) << msg;
}

// ---- real fixture ----

TEST(Llama2cFixture, Stories260KConfig) {
  const auto path = test::fixture("models/stories260K/stories260K.bin");
  EMBER_REQUIRE_FIXTURE(path);
  Llama2cCheckpoint c = load_llama2c_checkpoint(path.string());
  EXPECT_EQ(c.config.architecture, "llama");
  EXPECT_EQ(c.config.d_model, 64);
  EXPECT_EQ(c.config.d_ffn, 172);
  EXPECT_EQ(c.config.n_layers, 5);
  EXPECT_EQ(c.config.n_heads, 8);
  EXPECT_EQ(c.config.n_kv_heads, 4);
  EXPECT_EQ(c.config.head_dim, 8);
  EXPECT_EQ(c.config.rope_dim, 8);
  EXPECT_EQ(c.config.vocab_size, 512);
  EXPECT_FLOAT_EQ(c.config.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.config.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.config.bos_token_id, 1);
  EXPECT_EQ(c.config.eos_token_id, 2);
  EXPECT_EQ(c.tensors.at("model.embed_tokens.weight").shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(c.tensors.at("model.layers.4.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(c.tensors.at("model.layers.0.mlp.down_proj.weight").shape,
            (std::vector<int64_t>{64, 172}));
}

// The .bin and the .gguf hold the same weights; tensors without a layout quirk (embeddings,
// norms, MLP; not Q/K, which GGUF permutes) must match value for value.
TEST(Llama2cFixture, MatchesGguf) {
  const auto bin_path = test::fixture("models/stories260K/stories260K.bin");
  const auto gguf_path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(bin_path);
  EMBER_REQUIRE_FIXTURE(gguf_path);
  Llama2cCheckpoint bin = load_llama2c_checkpoint(bin_path.string());
  GgufFile gguf(gguf_path.string());

  auto same = [&](const std::string& bin_name, const std::string& gguf_name, int64_t first,
                  int64_t count) {
    SCOPED_TRACE(bin_name + " vs " + gguf_name);
    ASSERT_EQ(bin.tensors.count(bin_name), 1u);
    const GgufTensorInfo* info = gguf.find_tensor(gguf_name);
    ASSERT_NE(info, nullptr);
    const TensorView a = bin.tensors.at(bin_name);
    const TensorView b = gguf.view(*info);
    ASSERT_EQ(a.shape, b.shape);
    ASSERT_LE(first + count, a.numel());
    for (int64_t i = first; i < first + count; ++i) {
      ASSERT_EQ(float_at(a, i), float_at(b, i)) << "element " << i;
    }
  };
  same("model.embed_tokens.weight", "token_embd.weight", 0, 64);         // row 0
  same("model.embed_tokens.weight", "token_embd.weight", 300 * 64, 64);  // row 300
  same("model.norm.weight", "output_norm.weight", 0, 64);
  same("model.layers.2.input_layernorm.weight", "blk.2.attn_norm.weight", 0, 64);
  same("model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight", 0, 172 * 64);
  same("model.layers.4.mlp.down_proj.weight", "blk.4.ffn_down.weight", 0, 64 * 172);
  same("model.layers.1.self_attn.v_proj.weight", "blk.1.attn_v.weight", 0, 32 * 64);
}

}  // namespace
}  // namespace ember
