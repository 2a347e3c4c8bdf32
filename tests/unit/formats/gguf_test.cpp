#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "ember/core/error.h"
#include "ember/core/half.h"
#include "ember/formats/gguf.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

using test::Bytes;
using test::error_message;
using test::GgufWriter;
namespace gt = test::gguf_t;

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kIQ3_S = 21, kBF16 = 30;

std::string fixture_gguf() {
  return test::fixture("models/stories260K/stories260K.gguf").string();
}

std::string write_file(const std::string& dir, const std::string& name, const Bytes& bytes) {
  auto path = test::scratch_dir(dir) / name;
  test::write_bytes(path, bytes);
  return path.string();
}

// Payload of an array nesting `depth` arrays around one uint8 array {7, 9}.
Bytes nested_array_payload(int depth) {
  Bytes b;
  for (int i = 0; i < depth; ++i) {
    test::put_u32(b, gt::kArray);
    test::put_u64(b, 1);
  }
  test::put_u32(b, gt::kU8);
  test::put_u64(b, 2);
  b.push_back(7);
  b.push_back(9);
  return b;
}

std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i) - 1.0f;
  return v;
}

// A small model holding one tensor of every accepted type and metadata of most value types.
GgufWriter small_writer() {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv_u32("general.alignment", 32);
  w.kv_u32("llama.embedding_length", 64);
  w.kv_i32("llama.signed", -5);
  w.kv_u64("llama.big", 1ull << 40);
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_bool("llama.flag", true);
  w.kv_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a\nb"});
  w.kv_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1});
  w.kv_raw("test.nested", gt::kArray, nested_array_payload(1));
  w.tensor("f32", kF32, {2, 3}, test::f32_bytes(iota(6, 0.5f)));
  w.tensor("f16", kF16, {4}, test::f16_bytes(iota(4, 0.25f)));
  w.tensor("bf16", kBF16, {2, 2}, test::bf16_bytes(iota(4, 2.0f)));
  Bytes q8(2 * 34);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i);
  w.tensor("q8_0", kQ8_0, {2, 32}, q8);
  Bytes q4(18, 0x5a);
  w.tensor("q4_0", kQ4_0, {1, 32}, q4);
  return w;
}

TEST(GgufParse, SmallFileRoundTrip) {
  GgufWriter w = small_writer();
  Bytes bytes = w.build();
  std::string path = write_file("gguf-roundtrip", "small.gguf", bytes);
  GgufFile f(path);

  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.metadata().size(), 10u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");  // file order is kept
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_int("llama.signed"), -5);
  EXPECT_EQ(f.get_int("llama.big"), int64_t{1} << 40);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_DOUBLE_EQ(f.get_float("llama.embedding_length"), 64.0);  // integers widen to float
  EXPECT_EQ(f.get_int("llama.flag"), 1);                          // bools read as 0/1
  EXPECT_EQ(f.find("llama.flag")->to_display(), "true");
  EXPECT_EQ(f.find("llama.signed")->to_display(), "-5");
  EXPECT_EQ(f.find("llama.attention.layer_norm_rms_epsilon")->to_display(), "1e-05");
  EXPECT_FALSE(f.find("llama.flag")->is_integer());
  EXPECT_TRUE(f.find("llama.big")->is_integer());
  EXPECT_FALSE(f.find("general.architecture")->as_int().has_value());
  EXPECT_FALSE(f.find("general.architecture")->as_float().has_value());

  const auto& tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[1].string_value, "<s>");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array_type, GgufType::String);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->to_display(2),
            "[\"<unk>\", \"<s>\", ... (4 string items)]");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->to_display(),
            "[\"<unk>\", \"<s>\", \"</s>\", \"a\\nb\"]");
  EXPECT_EQ(f.get_array("tokenizer.ggml.token_type")[0].int_value, 2);
  const auto& nested = f.get_array("test.nested");
  ASSERT_EQ(nested.size(), 1u);
  ASSERT_EQ(nested[0].type, GgufType::Array);
  ASSERT_EQ(nested[0].array.size(), 2u);
  EXPECT_EQ(nested[0].array[1].uint_value, 9u);
  EXPECT_EQ(f.find("test.nested")->to_display(), "[[7, 9]]");

  ASSERT_EQ(f.tensors().size(), 5u);
  const GgufTensorInfo* t = f.find_tensor("f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->nbytes, 24u);
  EXPECT_EQ(t->offset, w.data_start);
  TensorView v = f.view(*t);
  EXPECT_EQ(v.name, "f32");
  EXPECT_EQ(v.rows(), 2);
  EXPECT_EQ(v.cols(), 3);
  float x;
  std::memcpy(&x, v.data + 5 * 4, 4);
  EXPECT_FLOAT_EQ(x, 1.5f);

  const GgufTensorInfo* h = f.find_tensor("f16");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, DType::F16);
  EXPECT_EQ(h->shape, (std::vector<int64_t>{4}));
  uint16_t half;
  std::memcpy(&half, f.view(*h).data + 2 * 2, 2);
  EXPECT_FLOAT_EQ(f16_to_f32(half), -0.5f);

  EXPECT_EQ(f.find_tensor("bf16")->dtype, DType::BF16);
  EXPECT_EQ(f.find_tensor("q8_0")->dtype, DType::Q8_0);
  EXPECT_EQ(f.find_tensor("q8_0")->nbytes, 68u);
  EXPECT_EQ(f.find_tensor("q8_0")->ggml_type, kQ8_0);
  EXPECT_EQ(f.find_tensor("q4_0")->dtype, DType::Q4_0);
  EXPECT_EQ(f.find_tensor("q4_0")->nbytes, 18u);
  EXPECT_EQ(f.view(*f.find_tensor("q4_0")).data[17], 0x5a);
  for (const GgufTensorInfo& info : f.tensors()) {
    EXPECT_EQ(info.offset % 32, 0u) << info.name;
    EXPECT_LE(info.offset + info.nbytes, bytes.size()) << info.name;
  }
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
}

TEST(GgufParse, Version2AndWiderAlignment) {
  GgufWriter w;
  w.kv_u32("general.alignment", 64);
  w.set_alignment(64);
  w.tensor("a", kF32, {3}, test::f32_bytes({1, 2, 3}));
  w.tensor("b", kF32, {1, 2}, test::f32_bytes({4, 5}));
  GgufFile f(write_file("gguf-v2", "v2.gguf", w.build(2)));
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.find_tensor("b")->offset % 64, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, w.data_start + 64);
}

TEST(GgufParse, EmptyFileWithoutTensors) {
  GgufWriter w;
  w.kv_string("general.name", "none");
  GgufFile f(write_file("gguf-empty", "none.gguf", w.build()));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.get_string("general.name"), "none");
}

TEST(GgufParse, TypedGetterErrorsNameFileAndKey) {
  std::string path = write_file("gguf-getters", "small.gguf", small_writer().build());
  GgufFile f(path);
  std::string msg = error_message([&] { f.get_int("llama.nope"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'llama.nope' is missing"), std::string::npos) << msg;
  msg = error_message([&] { f.get_int("general.architecture"); });
  EXPECT_NE(msg.find("'general.architecture' has type string, expected integer"), std::string::npos)
      << msg;
  msg = error_message([&] { f.get_string("llama.embedding_length"); });
  EXPECT_NE(msg.find("has type uint32, expected string"), std::string::npos) << msg;
  msg = error_message([&] { f.get_array("llama.flag"); });
  EXPECT_NE(msg.find("has type bool, expected array"), std::string::npos) << msg;
  msg = error_message([&] { f.get_float("tokenizer.ggml.tokens"); });
  EXPECT_NE(msg.find("has type array"), std::string::npos) << msg;
}

TEST(GgufParse, TypeNames) {
  EXPECT_EQ(ggml_type_name(0), "F32");
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(4), "type 4");
  EXPECT_EQ(ggml_type_name(1000), "type 1000");
  EXPECT_STREQ(gguf_type_name(GgufType::Float64), "float64");
}

// ---- real fixture ----

TEST(GgufFixture, Stories260KHeader) {
  const std::string path = fixture_gguf();
  EMBER_REQUIRE_FIXTURE(path);
  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 8);
  EXPECT_NEAR(f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);

  const auto& tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  for (const GgufValue& t : tokens) ASSERT_EQ(t.type, GgufType::String);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->array_type, GgufType::String);
  EXPECT_NE(f.find("tokenizer.ggml.tokens")->to_display().find("(512 string items)"),
            std::string::npos);
}

TEST(GgufFixture, Stories260KTensors) {
  const std::string path = fixture_gguf();
  EMBER_REQUIRE_FIXTURE(path);
  GgufFile f(path);
  auto shape_of = [&](const std::string& name) {
    const GgufTensorInfo* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->shape : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("token_embd.weight"), (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(shape_of("output_norm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape_of("blk.0.attn_q.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shape_of("blk.0.attn_k.weight"), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shape_of("blk.4.attn_v.weight"), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shape_of("blk.0.ffn_gate.weight"), (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(shape_of("blk.0.ffn_down.weight"), (std::vector<int64_t>{64, 172}));
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.dtype, DType::F32) << t.name;
    EXPECT_EQ(t.ggml_type, kF32) << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(t.offset + t.nbytes, f.mapping()->size()) << t.name;
    TensorView v = f.view(t);
    EXPECT_EQ(v.nbytes, static_cast<uint64_t>(v.numel()) * 4) << t.name;
  }
}

// ---- corrupt files ----

TEST(GgufErrors, MissingFile) {
  const std::string path = "/nonexistent/dir/model.gguf";
  std::string msg = error_message([&] { GgufFile f(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(GgufErrors, TruncatedAtEveryByte) {
  Bytes bytes = small_writer().build();
  auto dir = test::scratch_dir("gguf-truncate");
  const std::string path = (dir / "t.gguf").string();
  // Write once and shrink in place: rewriting the file for every length is much slower.
  test::write_bytes(path, bytes);
  for (size_t n = bytes.size(); n-- > 0;) {
    std::filesystem::resize_file(path, n);
    std::string msg = error_message([&] { GgufFile f(path); });
    ASSERT_EQ(msg.rfind(path, 0), 0u) << "truncated at " << n << ": " << msg;
  }
  test::write_bytes(path, bytes);
  EXPECT_NO_THROW(GgufFile f(path));
}

// Random byte flips must give a clean parse or an ember::Error, never a crash (run under ASan).
TEST(GgufErrors, RandomCorruptionNeverCrashes) {
  const Bytes good = small_writer().build();
  const std::string path = (test::scratch_dir("gguf-fuzz") / "f.gguf").string();
  test::write_bytes(path, good);
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 1500; ++iter) {
    Bytes b = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % b.size();
      // Mostly hit the header and directory, where the lengths and counts live.
      if (rng() % 4 != 0) at %= std::min<size_t>(b.size(), 400);
      b[at] = static_cast<uint8_t>(rng() % 3 == 0 ? 0xff : rng());
    }
    {
      // Same size every time, so overwrite in place (truncating rewrites are slow).
      std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    try {
      GgufFile f(path);
    } catch (const Error& e) {
      ASSERT_EQ(std::string(e.what()).rfind(path, 0), 0u) << e.what();
    } catch (const std::exception& e) {
      FAIL() << "iteration " << iter << ": non-ember exception " << e.what();
    }
  }
}

struct Case {
  const char* name;
  std::function<void(GgufWriter&)> edit_writer;
  std::function<void(Bytes&, const GgufWriter&)> edit_bytes;
  std::vector<std::string> expected;  // substrings of the message, besides the path
};

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  GgufWriter w = small_writer();
  if (c.edit_writer) c.edit_writer(w);
  Bytes bytes = w.build();
  if (c.edit_bytes) c.edit_bytes(bytes, w);
  const std::string path = write_file(std::string("gguf-case-") + c.name, "c.gguf", bytes);
  std::string msg = error_message([&] { GgufFile f(path); });
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  for (const std::string& s : c.expected) EXPECT_NE(msg.find(s), std::string::npos) << msg;
}

TEST(GgufErrors, HeaderCorruption) {
  run_case({"magic", nullptr, [](Bytes& b, const GgufWriter&) { b[0] = 'X'; }, {"bad magic"}});
  run_case({"v1",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u32(b, 4, 1); },
            {"unsupported GGUF version 1"}});
  run_case({"v4",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u32(b, 4, 4); },
            {"unsupported GGUF version 4"}});
  run_case({"tensor-count",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u64(b, 8, 1'000'000); },
            {"tensor count 1000000"}});
  run_case({"tensor-count-max",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u64(b, 8, ~0ull); },
            {"tensor count"}});
  run_case({"kv-count",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u64(b, 16, 1ull << 60); },
            {"metadata count"}});
  run_case({"kv-count-small",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u64(b, 16, 20); },
            {}});
  // The first key's length (at byte 24) claims a terabyte.
  run_case({"key-length",
            nullptr,
            [](Bytes& b, const GgufWriter&) { test::patch_u64(b, 24, 1ull << 40); },
            {"truncated", "metadata entry #0 key"}});
}

TEST(GgufErrors, MetadataCorruption) {
  run_case({"unknown-type",
            [](GgufWriter& w) {
              w.kv_raw("x.weird", 13, Bytes{1, 2, 3, 4});
            },
            nullptr,
            {"x.weird", "unknown value type 13"}});
  run_case({"unknown-elem-type",
            [](GgufWriter& w) {
              Bytes p;
              test::put_u32(p, 99);
              test::put_u64(p, 1);
              w.kv_raw("x.arr", gt::kArray, p);
            },
            nullptr,
            {"x.arr", "unknown array element type 99"}});
  run_case({"huge-array",
            [](GgufWriter& w) {
              Bytes p;
              test::put_u32(p, gt::kU64);
              test::put_u64(p, 1ull << 50);
              w.kv_raw("x.huge", gt::kArray, p);
            },
            nullptr,
            {"x.huge", "1125899906842624 elements"}});
  run_case({"huge-string",
            [](GgufWriter& w) {
              Bytes p;
              test::put_u64(p, 1ull << 62);
              w.kv_raw("x.str", gt::kString, p);
            },
            nullptr,
            {"x.str", "truncated"}});
  run_case({"deep-nesting",
            [](GgufWriter& w) { w.kv_raw("x.deep", gt::kArray, nested_array_payload(20)); },
            nullptr,
            {"x.deep", "nests arrays"}});
  run_case({"bad-bool",
            [](GgufWriter& w) { w.kv_raw("x.bool", gt::kBool, Bytes{7}); },
            nullptr,
            {"x.bool", "invalid value 7"}});
  run_case({"duplicate-key",
            [](GgufWriter& w) { w.kv_u32("llama.embedding_length", 3); },
            nullptr,
            {"duplicate metadata key 'llama.embedding_length'"}});
  run_case({"dup-alignment",
            [](GgufWriter& w) { w.kv_u32("general.alignment", 24); },
            nullptr,
            {"duplicate metadata key 'general.alignment'"}});
}

TEST(GgufErrors, BadAlignmentValue) {
  GgufWriter w;
  w.kv_u32("general.alignment", 24);
  w.tensor("a", kF32, {2}, test::f32_bytes({1, 2}));
  const std::string path = write_file("gguf-align", "a.gguf", w.build());
  std::string msg = error_message([&] { GgufFile f(path); });
  EXPECT_NE(msg.find("general.alignment must be a positive power of two"), std::string::npos)
      << msg;
}

TEST(GgufErrors, TensorDirectoryCorruption) {
  run_case({"iq3_s",
            [](GgufWriter& w) {
              w.tensor("blk.0.attn_q.weight", kIQ3_S, {2, 256}, Bytes(220));
            },
            nullptr,
            {"unsupported tensor type IQ3_S for tensor blk.0.attn_q.weight"}});
  // A K-quant tensor whose bytes do not cover its shape (144 bytes per 256 values).
  run_case({"q4_k-short",
            [](GgufWriter& w) {
              w.tensor("blk.0.attn_q.weight", kQ4_K, {2, 256}, Bytes(100));
            },
            nullptr,
            {"blk.0.attn_q.weight"}});
  // A K-quant row that is not a whole number of 256-value blocks.
  run_case(
      {"q4_k-row",
       [](GgufWriter& w) {
         w.tensor("blk.0.attn_q.weight", kQ4_K, {2, 160}, Bytes(288));
       },
       nullptr,
       {"blk.0.attn_q.weight has inner dimension 160, not a multiple of the q4_k block size 256"}});
  run_case({"unknown-ggml-type",
            [](GgufWriter& w) { w.tensor("odd", 77, {4}, Bytes(16)); },
            nullptr,
            {"unsupported tensor type type 77 for tensor odd"}});
  run_case({"offset-past-end",
            nullptr,
            [](Bytes& b, const GgufWriter& w) {
              test::patch_u64(b, w.tensor_offset_fields.back(), 1 << 20);
            },
            {"tensor q4_0", "past the end"}});
  run_case({"offset-wraps",
            nullptr,
            [](Bytes& b, const GgufWriter& w) {
              test::patch_u64(b, w.tensor_offset_fields[0], ~0ull - 31);
            },
            {"tensor f32", "past the end"}});
  run_case({"offset-misaligned",
            nullptr,
            [](Bytes& b, const GgufWriter& w) { test::patch_u64(b, w.tensor_offset_fields[1], 4); },
            {"tensor f16", "not a multiple of the alignment 32"}});
  run_case({"duplicate-tensor",
            [](GgufWriter& w) { w.tensor("f32", kF32, {1}, Bytes(4)); },
            nullptr,
            {"duplicate tensor name f32"}});
  run_case({"q8-inner-dim",
            [](GgufWriter& w) {
              w.tensor("q8_bad", kQ8_0, {2, 16}, Bytes(68));
            },
            nullptr,
            {"tensor q8_bad", "inner dimension 16", "block size 32"}});
  run_case({"five-dims",
            [](GgufWriter& w) {
              w.tensor("t5", kF32, {1, 1, 1, 1, 2}, Bytes(8));
            },
            nullptr,
            {"tensor t5", "5 dimensions"}});
  run_case({"zero-dim",
            [](GgufWriter& w) {
              w.tensor("t0", kF32, {0, 2}, Bytes());
            },
            nullptr,
            {"tensor t0", "invalid dimension 0"}});
  run_case({"huge-shape",
            [](GgufWriter& w) {
              w.tensor("big", kF32, {int64_t{1} << 40, int64_t{1} << 40}, Bytes(4));
            },
            nullptr,
            {"tensor big", "larger than the file"}});
}

// The error a corrupted small file gives, whole (kind and context, not just the message).
Error case_error(const Case& c) {
  GgufWriter w = small_writer();
  if (c.edit_writer) c.edit_writer(w);
  Bytes bytes = w.build();
  if (c.edit_bytes) c.edit_bytes(bytes, w);
  const std::string path = write_file(std::string("gguf-kind-") + c.name, "c.gguf", bytes);
  try {
    GgufFile f(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << c.name << ": no error";
  return Error("no error");
}

TEST(GgufErrors, KindFileAndTensorTravelWithTheMessage) {
  Error magic = case_error({"magic", nullptr, [](Bytes& b, const GgufWriter&) { b[0] = 'X'; }, {}});
  EXPECT_EQ(magic.kind(), ErrorKind::InvalidFile);
  EXPECT_NE(magic.file().find("c.gguf"), std::string::npos) << magic.file();
  EXPECT_EQ(std::string(magic.what()), magic.file() + ": not a GGUF file (bad magic)");
  EXPECT_EQ(magic.tensor(), "");

  Error v4 = case_error(
      {"v4", nullptr, [](Bytes& b, const GgufWriter&) { test::patch_u32(b, 4, 4); }, {}});
  EXPECT_EQ(v4.kind(), ErrorKind::Unsupported);

  Error q4k = case_error({"iq3_s",
                          [](GgufWriter& w) {
                            w.tensor("blk.0.attn_q.weight", kIQ3_S, {2, 256}, Bytes(220));
                          },
                          nullptr,
                          {}});
  EXPECT_EQ(q4k.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(q4k.tensor(), "blk.0.attn_q.weight");
  EXPECT_NE(q4k.file().find("c.gguf"), std::string::npos) << q4k.file();

  Error misaligned = case_error(
      {"misaligned",
       nullptr,
       [](Bytes& b, const GgufWriter& w) { test::patch_u64(b, w.tensor_offset_fields[1], 4); },
       {}});
  EXPECT_EQ(misaligned.kind(), ErrorKind::InvalidFile);
  EXPECT_EQ(misaligned.tensor(), "f16");
}

}  // namespace
}  // namespace ember
