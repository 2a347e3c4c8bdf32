// load_tokenizer.h: tokenizers loaded from a file alone, with no model config built, so GGUFs of
// architectures ember cannot run (and vocab-only GGUFs) still give their tokenizer.
#include "ember/tokenizer/load_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

test::Bytes f32_array(const std::vector<float>& values) {
  test::Bytes b;
  test::put_u32(b, test::gguf_t::kF32);
  test::put_u64(b, values.size());
  const test::Bytes data = test::f32_bytes(values);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// A SentencePiece vocabulary in a GGUF whose architecture ember has no config mapping for and
// which carries none of the hyperparameters a ModelConfig needs.
fs::path write_foreign_spm_gguf(const fs::path& dir) {
  test::GgufWriter w;
  w.kv_string("general.architecture", "mamba");
  w.kv_string("tokenizer.ggml.model", "llama");
  w.kv_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b"});
  w.kv_raw("tokenizer.ggml.scores", test::gguf_t::kArray, f32_array({0, 0, 0, -1, -1, -1}));
  const fs::path path = dir / "mamba-vocab.gguf";
  test::write_bytes(path, w.build());
  return path;
}

TEST(LoadTokenizer, SpmFromGgufOfAnotherArchitecture) {
  const fs::path path = write_foreign_spm_gguf(test::scratch_dir("load-tok-mamba"));
  const auto tok = load_tokenizer_from_gguf(path.string());
  EXPECT_EQ(tok->vocab_size(), 6);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->encode("ab", true), Ids({1, 3, 4, 5}));
  EXPECT_EQ(load_tokenizer_for_model(path.string())->encode("ab", true), Ids({1, 3, 4, 5}));
}

TEST(LoadTokenizer, BpeFromVocabOnlyGgufs) {
  for (const char* name : {"falcon", "starcoder", "gpt-2"}) {
    SCOPED_TRACE(name);
    const fs::path path =
        test::fixture(std::string("tokenizer-tests/ggml-vocab-") + name + ".gguf");
    EMBER_REQUIRE_FIXTURE(path);
    GgufFile gguf(path.string());
    EXPECT_NE(gguf.get_string("general.architecture"), "llama");
    const auto tok = load_tokenizer_from_gguf(gguf);
    ASSERT_NE(dynamic_cast<const BpeTokenizer*>(tok.get()), nullptr);
    EXPECT_EQ(static_cast<size_t>(tok->vocab_size()),
              gguf.get_array("tokenizer.ggml.tokens").size());
    EXPECT_EQ(tok->decode(tok->encode("Hello world", false)), "Hello world");
  }
}

TEST(LoadTokenizer, FindsTheTokenizerBesideEachModelKind) {
  const fs::path smollm = test::fixture("models/smollm2-135m-instruct");
  const fs::path stories = test::fixture("models/stories260K");
  EMBER_REQUIRE_FIXTURE(smollm / "tokenizer.json");
  EMBER_REQUIRE_FIXTURE(stories / "tok512.bin");
  const Ids smollm_ids = {504, 3575, 282, 4649, 314};
  for (const fs::path& p : {smollm, smollm / "config.json", smollm / "tokenizer.json"}) {
    SCOPED_TRACE(p.string());
    EXPECT_EQ(load_tokenizer_for_model(p.string())->encode("The capital of France is", false),
              smollm_ids);
  }
  const auto from_bin = load_tokenizer_for_model((stories / "stories260K.bin").string());
  const auto from_gguf = load_tokenizer_for_model((stories / "stories260K.gguf").string());
  EXPECT_EQ(from_bin->vocab_size(), 512);
  EXPECT_EQ(from_bin->encode("Lily saw a ball.", true),
            from_gguf->encode("Lily saw a ball.", true));
  EXPECT_EQ(find_llama2c_tokenizer(stories / "stories260K.bin", 512),
            (stories / "tok512.bin").string());
}

TEST(LoadTokenizer, ErrorsNameThePath) {
  const fs::path dir = test::scratch_dir("load-tok-errors");
  const std::string missing = (dir / "nope.gguf").string();
  EXPECT_EQ(test::error_message([&] { load_tokenizer_for_model(missing); }),
            missing + ": no such file or directory");

  std::ofstream(dir / "model.txt") << "hello";
  std::string msg =
      test::error_message([&] { load_tokenizer_for_model((dir / "model.txt").string()); });
  EXPECT_NE(msg.find("unrecognised model format"), std::string::npos) << msg;

  std::ofstream(dir / "config.json") << "{}";
  msg = test::error_message([&] { load_tokenizer_for_model(dir.string()); });
  EXPECT_EQ(msg, dir.string() + ": no tokenizer.json beside the model (pass --tokenizer PATH)");
}

TEST(LoadTokenizer, ErrorKinds) {
  const fs::path dir = test::scratch_dir("load-tok-kinds");
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "no error";
    return Error("no error");
  };
  const std::string missing = (dir / "nope.gguf").string();
  Error e = error_of([&] { load_tokenizer_for_model(missing); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.file(), missing);

  std::ofstream(dir / "model.txt") << "hello";
  e = error_of([&] { load_tokenizer_for_model((dir / "model.txt").string()); });
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);

  std::ofstream(dir / "bad.gguf") << "nope";
  e = error_of([&] { load_tokenizer_for_model((dir / "bad.gguf").string()); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidFile);
  EXPECT_EQ(e.file(), (dir / "bad.gguf").string());

  std::ofstream(dir / "config.json") << "{}";
  e = error_of([&] { load_tokenizer_for_model(dir.string()); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.file(), dir.string());
}

}  // namespace
}  // namespace ember
