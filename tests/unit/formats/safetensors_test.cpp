#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ember/core/error.h"
#include "ember/core/half.h"
#include "ember/formats/safetensors.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

using test::Bytes;
using test::error_message;
using test::SafetensorsWriter;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

SafetensorsWriter small_writer() {
  SafetensorsWriter w;
  w.metadata("format", "pt");
  // Deliberately not in alphabetical order: tensors() must follow the header.
  w.tensor("model.norm.weight", "F32", {3}, test::f32_bytes({1.0f, 2.0f, 3.5f}));
  w.tensor("model.embed_tokens.weight", "BF16", {2, 2},
           test::bf16_bytes({0.5f, -1.0f, 2.0f, 4.0f}));
  w.tensor("lm_head.weight", "F16", {1, 3}, test::f16_bytes({0.25f, -0.125f, 8.0f}));
  w.tensor("scalar", "F32", {}, test::f32_bytes({42.0f}));
  return w;
}

std::string write_file(const std::string& dir, const Bytes& bytes) {
  auto path = test::scratch_dir(dir) / "model.safetensors";
  test::write_bytes(path, bytes);
  return path.string();
}

TEST(SafetensorsParse, SmallFileRoundTrip) {
  const std::string path = write_file("st-roundtrip", small_writer().build());
  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "model.norm.weight");
  EXPECT_EQ(f.tensors()[1].name, "model.embed_tokens.weight");
  EXPECT_EQ(f.tensors()[2].name, "lm_head.weight");

  const TensorView& norm = f.tensors()[0];
  EXPECT_EQ(norm.dtype, DType::F32);
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(norm.nbytes, 12u);
  float x;
  std::memcpy(&x, norm.data + 8, 4);
  EXPECT_FLOAT_EQ(x, 3.5f);

  const TensorView& emb = f.tensors()[1];
  EXPECT_EQ(emb.dtype, DType::BF16);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{2, 2}));
  uint16_t h;
  std::memcpy(&h, emb.data + 6, 2);
  EXPECT_FLOAT_EQ(bf16_to_f32(h), 4.0f);

  const TensorView& head = f.tensors()[2];
  EXPECT_EQ(head.dtype, DType::F16);
  std::memcpy(&h, head.data + 2, 2);
  EXPECT_FLOAT_EQ(f16_to_f32(h), -0.125f);

  EXPECT_TRUE(f.tensors()[3].shape.empty());
  EXPECT_EQ(f.tensors()[3].nbytes, 4u);
  // Views point into the mapping.
  EXPECT_GE(norm.data, f.mapping()->data());
  EXPECT_LE(head.data + head.nbytes, f.mapping()->data() + f.mapping()->size());
}

TEST(SafetensorsParse, ZeroSizedTensor) {
  SafetensorsWriter w;
  w.tensor("empty", "F32", {0, 4}, Bytes());
  w.tensor("x", "F16", {1}, test::f16_bytes({1.0f}));
  SafetensorsFile f(write_file("st-zero", w.build()));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].nbytes, 0u);
}

TEST(SafetensorsErrors, MissingFile) {
  const std::string path = "/nonexistent/model.safetensors";
  std::string msg = error_message([&] { SafetensorsFile f(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
}

TEST(SafetensorsErrors, TruncatedAtEveryByte) {
  const Bytes bytes = small_writer().build();
  const std::string path = (test::scratch_dir("st-truncate") / "t.safetensors").string();
  // Write once and shrink in place: rewriting the file for every length is much slower.
  test::write_bytes(path, bytes);
  for (size_t n = bytes.size(); n-- > 0;) {
    std::filesystem::resize_file(path, n);
    std::string msg = error_message([&] { SafetensorsFile f(path); });
    ASSERT_EQ(msg.rfind(path, 0), 0u) << "truncated at " << n << ": " << msg;
  }
  test::write_bytes(path, bytes);
  EXPECT_NO_THROW(SafetensorsFile f(path));
}

// Builds small_writer()'s file with `from` replaced by `to` in the header, and returns the error.
std::string error_with_header_edit(const std::string& name, const std::string& from,
                                   const std::string& to, std::string* path_out) {
  SafetensorsWriter w = small_writer();
  std::string header = w.header();
  size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) header.replace(at, from.size(), to);
  *path_out = write_file("st-" + name, w.build_with_header(header));
  return error_message([&] { SafetensorsFile f(*path_out); });
}

TEST(SafetensorsErrors, HeaderCorruption) {
  struct Case {
    const char* name;
    std::string from, to;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"dtype-i8",
       "\"dtype\":\"BF16\"",
       "\"dtype\":\"I8\"",
       {"unsupported dtype I8 for tensor model.embed_tokens.weight"}},
      {"dtype-f64",
       "\"dtype\":\"F32\",\"shape\":[3]",
       "\"dtype\":\"F64\",\"shape\":[3]",
       {"unsupported dtype F64 for tensor model.norm.weight"}},
      {"dtype-unknown",
       "\"dtype\":\"F16\"",
       "\"dtype\":\"Q9\"",
       {"unsupported dtype Q9 for tensor lm_head.weight"}},
      {"offsets-past-end",
       "\"data_offsets\":[12,20]",
       "\"data_offsets\":[12,4000]",
       {"model.embed_tokens.weight", "past the end"}},
      {"offsets-reversed",
       "\"data_offsets\":[12,20]",
       "\"data_offsets\":[20,12]",
       {"model.embed_tokens.weight", "reversed"}},
      {"offsets-mismatch",
       "\"data_offsets\":[0,12]",
       "\"data_offsets\":[0,8]",
       {"model.norm.weight", "shape [3]", "span 8 bytes"}},
      {"shape-mismatch",
       "\"shape\":[2,2]",
       "\"shape\":[2,3]",
       {"model.embed_tokens.weight", "shape [2, 3]"}},
      {"shape-overflow",
       "\"shape\":[2,2]",
       "\"shape\":[4611686018427387904,4]",
       {"model.embed_tokens.weight"}},
      {"negative-dim",
       "\"shape\":[2,2]",
       "\"shape\":[-2,-2]",
       {"model.embed_tokens.weight", "non-negative"}},
      {"offsets-negative",
       "\"data_offsets\":[12,20]",
       "\"data_offsets\":[-4,20]",
       {"model.embed_tokens.weight", "non-negative"}},
      {"offsets-short",
       "\"data_offsets\":[12,20]",
       "\"data_offsets\":[12]",
       {"model.embed_tokens.weight", "[begin, end]"}},
      {"no-dtype", "\"dtype\":\"F16\",", "", {"lm_head.weight", "no 'dtype'"}},
      {"no-shape", "\"shape\":[1,3],", "", {"lm_head.weight", "no 'shape'"}},
      {"dtype-not-string", "\"dtype\":\"F16\"", "\"dtype\":16", {"lm_head.weight", "dtype"}},
      {"entry-not-object",
       "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[26,30]}",
       "\"scalar\":7",
       {"scalar", "not an object"}},
      {"metadata-not-string", "\"format\":\"pt\"", "\"format\":1", {"__metadata__", "format"}},
      {"invalid-json", "\"format\"", "format", {"invalid safetensors JSON"}},
      {"not-object", "{\"__metadata__\"", "[\"__metadata__\"", {"invalid safetensors JSON"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path;
    std::string msg = error_with_header_edit(c.name, c.from, c.to, &path);
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    for (const std::string& s : c.expected) EXPECT_TRUE(contains(msg, s)) << msg;
  }
}

TEST(SafetensorsErrors, HeaderLengthPastEnd) {
  Bytes bytes = small_writer().build();
  test::patch_u64(bytes, 0, bytes.size());  // 8 bytes more than the file holds after the length
  const std::string path = write_file("st-hlen", bytes);
  std::string msg = error_message([&] { SafetensorsFile f(path); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "header length")) << msg;

  test::patch_u64(bytes, 0, ~0ull);
  test::write_bytes(path, bytes);
  msg = error_message([&] { SafetensorsFile f(path); });
  EXPECT_TRUE(contains(msg, "header length")) << msg;
}

TEST(SafetensorsErrors, HeaderNotAnObject) {
  SafetensorsWriter w;
  const std::string path = write_file("st-array", w.build_with_header("[1, 2]"));
  std::string msg = error_message([&] { SafetensorsFile f(path); });
  EXPECT_TRUE(contains(msg, "not a JSON object")) << msg;
}

// ---- HF checkpoint directories ----

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

TEST(SafetensorsCheckpoint, SingleFile) {
  auto dir = test::scratch_dir("st-ckpt-single");
  test::write_bytes(dir / "model.safetensors", small_writer().build());
  HfCheckpoint c = open_hf_checkpoint(dir.string());
  EXPECT_EQ(c.directory, dir.string());
  EXPECT_EQ(c.mappings.size(), 1u);
  ASSERT_EQ(c.tensors.size(), 4u);
  EXPECT_EQ(c.tensors.at("model.embed_tokens.weight").dtype, DType::BF16);
}

// Two shards listed by an index; the optional "metadata" block of real indexes is ignored.
std::filesystem::path write_sharded(const std::string& name, const std::string& extra_entry) {
  auto dir = test::scratch_dir(name);
  SafetensorsWriter a, b;
  a.tensor("model.embed_tokens.weight", "F32", {2, 2}, test::f32_bytes({1, 2, 3, 4}));
  a.tensor("model.layers.0.input_layernorm.weight", "F32", {2}, test::f32_bytes({5, 6}));
  b.tensor("model.norm.weight", "BF16", {2}, test::bf16_bytes({7, 8}));
  test::write_bytes(dir / "model-00001-of-00002.safetensors", a.build());
  test::write_bytes(dir / "model-00002-of-00002.safetensors", b.build());
  write_text(dir / "model.safetensors.index.json",
             "{\"metadata\": {\"total_size\": 28}, \"weight_map\": {"
             "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
             "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"," +
                 extra_entry +
                 "\"model.layers.0.input_layernorm.weight\": \"model-00001-of-00002.safetensors\""
                 "}}");
  return dir;
}

TEST(SafetensorsCheckpoint, ShardedIndex) {
  auto dir = write_sharded("st-ckpt-sharded", "");
  HfCheckpoint c = open_hf_checkpoint(dir.string());
  EXPECT_EQ(c.mappings.size(), 2u);  // each shard opened once
  ASSERT_EQ(c.tensors.size(), 3u);
  const TensorView& norm = c.tensors.at("model.norm.weight");
  EXPECT_EQ(norm.dtype, DType::BF16);
  uint16_t h;
  std::memcpy(&h, norm.data + 2, 2);
  EXPECT_FLOAT_EQ(bf16_to_f32(h), 8.0f);
  float x;
  std::memcpy(&x, c.tensors.at("model.layers.0.input_layernorm.weight").data, 4);
  EXPECT_FLOAT_EQ(x, 5.0f);
}

TEST(SafetensorsCheckpoint, IndexNamesMissingTensor) {
  auto dir =
      write_sharded("st-ckpt-missing", "\"lm_head.weight\": \"model-00002-of-00002.safetensors\",");
  std::string msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, (dir / "model.safetensors.index.json").string())) << msg;
  EXPECT_TRUE(contains(msg, "lm_head.weight")) << msg;
  EXPECT_TRUE(contains(msg, "model-00002-of-00002.safetensors")) << msg;
}

TEST(SafetensorsCheckpoint, IndexNamesMissingShard) {
  auto dir = write_sharded("st-ckpt-noshard", "\"lm_head.weight\": \"model-00003.safetensors\",");
  std::string msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, (dir / "model-00003.safetensors").string())) << msg;
}

TEST(SafetensorsCheckpoint, IndexRejectsPathsOutsideDirectory) {
  auto dir = write_sharded("st-ckpt-escape", "\"lm_head.weight\": \"../x.safetensors\",");
  std::string msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, "invalid shard")) << msg;
}

TEST(SafetensorsCheckpoint, BrokenIndexJson) {
  auto dir = test::scratch_dir("st-ckpt-badindex");
  write_text(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  std::string msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, "model.safetensors.index.json")) << msg;
  write_text(dir / "model.safetensors.index.json", "{\"metadata\": {}}");
  msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, "weight_map")) << msg;
}

TEST(SafetensorsCheckpoint, BrokenShardNamesShard) {
  auto dir = test::scratch_dir("st-ckpt-badshard");
  test::write_bytes(dir / "model.safetensors", Bytes{1, 2, 3});
  std::string msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, (dir / "model.safetensors").string())) << msg;
}

TEST(SafetensorsCheckpoint, EmptyOrMissingDirectory) {
  auto dir = test::scratch_dir("st-ckpt-empty");
  std::string msg = error_message([&] { open_hf_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(msg, dir.string())) << msg;
  EXPECT_TRUE(contains(msg, "model.safetensors")) << msg;

  const std::string missing = "/nonexistent/hf-model";
  msg = error_message([&] { open_hf_checkpoint(missing); });
  EXPECT_TRUE(contains(msg, missing)) << msg;
}

}  // namespace
}  // namespace ember
