// GgufWriter: what it writes, GgufFile reads back value for value and byte for byte.
#include "ember/formats/gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

namespace gv = gguf_value;

std::vector<uint8_t> pattern_bytes(uint64_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// One value of every type, arrays of strings/ints/floats, an empty array and an array of arrays.
std::vector<std::pair<std::string, GgufValue>> every_value_type() {
  std::vector<GgufValue> nested = {gv::i32_array({1, 2}), gv::i32_array({}), gv::i32_array({-3})};
  return {
      {"t.u8", gv::u8(250)},
      {"t.i8", gv::i8(-120)},
      {"t.u16", gv::u16(65000)},
      {"t.i16", gv::i16(-32000)},
      {"t.u32", gv::u32(4000000000u)},
      {"t.i32", gv::i32(-2000000000)},
      {"t.u64", gv::u64(18000000000000000000ull)},
      {"t.i64", gv::i64(-9000000000000000000ll)},
      {"t.f32", gv::f32(1e-5f)},
      {"t.f64", gv::f64(3.141592653589793)},
      {"t.bool_true", gv::boolean(true)},
      {"t.bool_false", gv::boolean(false)},
      {"t.string", gv::string("héllo \"world\"\n")},
      {"t.empty_string", gv::string("")},
      {"t.strings", gv::string_array({"<unk>", "", "▁the", "a b"})},
      {"t.ints", gv::i32_array({0, -1, 7, 2147483647})},
      {"t.floats", gv::f32_array({0.0f, -1.5f, 1e30f, -0.0f})},
      {"t.u8s", gv::array(GgufType::Uint8, {gv::u8(1), gv::u8(255)})},
      {"t.bools", gv::array(GgufType::Bool, {gv::boolean(true), gv::boolean(false)})},
      {"t.empty", gv::array(GgufType::Float64, {})},
      {"t.nested", gv::array(GgufType::Array, nested)},
  };
}

void expect_same_value(const GgufValue& a, const GgufValue& b, const std::string& key) {
  SCOPED_TRACE(key);
  ASSERT_EQ(a.type, b.type);
  EXPECT_EQ(a.uint_value, b.uint_value);
  EXPECT_EQ(a.int_value, b.int_value);
  if (a.type == GgufType::Float32) {
    EXPECT_EQ(static_cast<float>(a.float_value), static_cast<float>(b.float_value));
  } else {
    // Bit for bit (so -0.0 stays -0.0).
    EXPECT_EQ(std::memcmp(&a.float_value, &b.float_value, sizeof(double)), 0);
  }
  EXPECT_EQ(a.string_value, b.string_value);
  if (a.type == GgufType::Array) {
    EXPECT_EQ(a.array_type, b.array_type);
    ASSERT_EQ(a.array.size(), b.array.size());
    for (size_t i = 0; i < a.array.size(); ++i) expect_same_value(a.array[i], b.array[i], key);
  }
}

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

void write_and_check(const std::filesystem::path& path, GgufWriter& w,
                     const std::vector<TensorSpec>& specs, uint64_t chunk) {
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < specs.size(); ++i) {
    w.add_tensor(specs[i].name, specs[i].dtype, specs[i].shape);
    data.push_back(pattern_bytes(w.tensors().back().nbytes, static_cast<uint8_t>(i * 31)));
  }
  w.open(path.string());
  for (const auto& bytes : data) {
    // In pieces of `chunk` bytes, as a quantizer streams rows.
    for (uint64_t at = 0; at < bytes.size(); at += chunk) {
      w.write_tensor_data(bytes.data() + at, std::min<uint64_t>(chunk, bytes.size() - at));
    }
  }
  w.close();

  GgufFile f(path.string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), w.alignment());
  ASSERT_EQ(f.metadata().size(), w.metadata().size());
  for (size_t i = 0; i < w.metadata().size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, w.metadata()[i].first);
    expect_same_value(f.metadata()[i].second, w.metadata()[i].second, w.metadata()[i].first);
  }
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.dtype, specs[i].dtype);
    EXPECT_EQ(t.shape, specs[i].shape);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    ASSERT_EQ(t.nbytes, data[i].size());
    EXPECT_EQ(std::memcmp(f.view(t).data, data[i].data(), data[i].size()), 0);
  }
  // Every tensor is padded, the last one included.
  EXPECT_EQ(std::filesystem::file_size(path) % f.alignment(), 0u);
}

const std::vector<TensorSpec> kTensors = {
    {"token_embd.weight", DType::Q8_0, {5, 64}},
    {"blk.0.attn_norm.weight", DType::F32, {7}},  // 28 bytes: the next tensor needs padding
    {"blk.0.attn_q.weight", DType::F16, {3, 5}},
    {"blk.0.ffn_down.weight", DType::Q4_K, {2, 256}},
    {"blk.0.ffn_up.weight", DType::BF16, {1, 1, 3}},
    {"output.weight", DType::IQ4_NL, {4, 32}},
};

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensorByteForByte) {
  auto dir = test::scratch_dir("gguf-writer");
  GgufWriter w;
  for (auto& [k, v] : every_value_type()) w.set(k, v);
  write_and_check(dir / "all.gguf", w, kTensors, 13);
}

TEST(GgufWriter, HonoursGeneralAlignment) {
  auto dir = test::scratch_dir("gguf-writer-align");
  GgufWriter w;
  w.set("general.alignment", gguf_value::u32(256));
  w.set("general.architecture", gguf_value::string("llama"));
  write_and_check(dir / "aligned.gguf", w, kTensors, 1 << 20);
  EXPECT_EQ(GgufFile((dir / "aligned.gguf").string()).alignment(), 256u);
}

TEST(GgufWriter, MetadataOnlyFileReadsBack) {
  auto dir = test::scratch_dir("gguf-writer-empty");
  GgufWriter w;
  w.set("tokenizer.ggml.model", gguf_value::string("llama"));
  write_and_check(dir / "vocab.gguf", w, {}, 1);
}

TEST(GgufWriter, SetReplacesInPlaceAndEraseRemoves) {
  GgufWriter w;
  w.set("a", gguf_value::u32(1));
  w.set("b", gguf_value::u32(2));
  w.set("a", gguf_value::string("x"));
  ASSERT_EQ(w.metadata().size(), 2u);
  EXPECT_EQ(w.metadata()[0].first, "a");
  EXPECT_EQ(w.metadata()[0].second.string_value, "x");
  EXPECT_TRUE(w.erase("a"));
  EXPECT_FALSE(w.erase("a"));
  EXPECT_EQ(w.find("a"), nullptr);
  ASSERT_NE(w.find("b"), nullptr);
}

TEST(GgufWriter, RefusesMalformedInputWithClearErrors) {
  auto dir = test::scratch_dir("gguf-writer-errors");
  {
    GgufWriter w;
    w.set("bad", gguf_value::array(GgufType::Int32, {gguf_value::string("no")}));
    EXPECT_NE(test::error_message([&] {
                w.open((dir / "a.gguf").string());
              }).find("array element 0 has type string, expected int32"),
              std::string::npos);
  }
  {
    GgufWriter w;
    w.set("general.alignment", gguf_value::u32(24));
    EXPECT_NE(test::error_message([&] { w.open((dir / "b.gguf").string()); }).find("power of two"),
              std::string::npos);
  }
  {
    GgufWriter w;
    EXPECT_NE(test::error_message([&] {
                w.add_tensor("x", DType::Q4_K, {2, 100});
              }).find("multiple"),
              std::string::npos);
  }
  {
    GgufWriter w;
    w.add_tensor("x", DType::F32, {4});
    w.open((dir / "c.gguf").string());
    const float four[4] = {};
    w.write_tensor_data(four, 8);
    EXPECT_NE(test::error_message([&] { w.close(); }).find("tensor x got 8 of its 16 bytes"),
              std::string::npos);
  }
  {
    GgufWriter w;
    w.add_tensor("x", DType::F32, {1});
    w.open((dir / "d.gguf").string());
    const float two[2] = {};
    EXPECT_NE(test::error_message([&] { w.write_tensor_data(two, 8); }).find("past the last"),
              std::string::npos);
  }
  {
    GgufWriter w;
    EXPECT_NE(test::error_message([&] {
                w.open((dir / "missing" / "e.gguf").string());
              }).find("cannot create file"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace ember
