// A tokenizer written as GGUF metadata and read back tokenizes every test string exactly as the
// original: SmolLM2's tokenizer.json (byte-level BPE, 17 added tokens) and llama.cpp's vocab
// suites (gpt-2, starcoder, falcon, deepseek-coder BPE; llama SentencePiece), whose pre-tokenizer
// must also be recognised by name.
#include "ember/tokenizer/gguf_tokenizer_metadata.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/formats/gguf_writer.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "ember/tokenizer/tokenizer_json.h"
#include "test_util.h"
#include "unit/tokenizer/bpe_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

// Writes `tok` as a vocab-only GGUF and loads it back.
std::unique_ptr<Tokenizer> round_trip(const Tokenizer& tok, const fs::path& path,
                                      const TokenizerExportOptions& options) {
  GgufWriter w;
  add_tokenizer_metadata(w, tok, options);
  w.open(path.string());
  w.close();
  return load_tokenizer_from_gguf(path.string());
}

// The strings of a llama.cpp .inp file (separated by "\n__ggml_vocab_test__\n").
std::vector<std::string> inp_strings(const fs::path& inp) {
  const std::string text = test::read_text_file(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t next; (next = text.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    out.push_back(text.substr(pos, next - pos));
  }
  return out;
}

void expect_same_encodings(const Tokenizer& a, const Tokenizer& b,
                           const std::vector<std::string>& texts) {
  ASSERT_EQ(a.vocab_size(), b.vocab_size());
  EXPECT_EQ(a.bos_id(), b.bos_id());
  EXPECT_EQ(a.eos_id(), b.eos_id());
  EXPECT_EQ(a.add_bos_default(), b.add_bos_default());
  for (const std::string& t : texts) {
    EXPECT_EQ(test::join_ids(a.encode(t, true)), test::join_ids(b.encode(t, true)))
        << "\"" << test::escape_bytes(t) << "\"";
    EXPECT_EQ(test::join_ids(a.encode_with_special(t, false, true)),
              test::join_ids(b.encode_with_special(t, false, true)))
        << "\"" << test::escape_bytes(t) << "\" (special tokens parsed)";
  }
}

class VocabSuiteRoundTrip : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VocabSuiteRoundTrip, SameIdsAndPreTokenizerName) {
  const auto& [suite, group_name] = GetParam();
  const fs::path gguf = test::fixture("tokenizer-tests/ggml-vocab-" + suite + ".gguf");
  EMBER_REQUIRE_FIXTURE(gguf);
  const std::unique_ptr<Tokenizer> original = load_tokenizer_from_gguf(gguf.string());
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(original.get())) {
    // A name of the same preset group as the suite's own (the group's canonical name).
    EXPECT_EQ(gguf_pretokenizer_name(bpe->pretokenizer(), bpe->vocab().ignore_merges), group_name);
  }
  const auto dir = test::scratch_dir("tok-export-" + suite);
  TokenizerExportOptions o;
  o.vocab_size = original->vocab_size();
  const auto copy = round_trip(*original, dir / "vocab.gguf", o);
  expect_same_encodings(*original, *copy, inp_strings(gguf.string() + ".inp"));
}

INSTANTIATE_TEST_SUITE_P(LlamaCppSuites, VocabSuiteRoundTrip,
                         ::testing::Values(std::make_pair("gpt-2", "gpt-2"),
                                           std::make_pair("starcoder", "smollm"),
                                           std::make_pair("falcon", "falcon"),
                                           std::make_pair("deepseek-coder", "deepseek-coder"),
                                           std::make_pair("llama-spm", "")));

TEST(GgufTokenizerMetadata, SmolLM2TokenizerJsonBecomesGpt2Vocab) {
  const fs::path json = test::fixture("models/smollm2-135m-instruct/tokenizer.json");
  EMBER_REQUIRE_FIXTURE(json);
  const std::unique_ptr<BpeTokenizer> original = load_bpe_tokenizer_json(json.string());
  const auto dir = test::scratch_dir("tok-export-smollm2");
  TokenizerExportOptions o;
  o.vocab_size = 49152 + 8;  // embedding rows beyond the vocabulary become [PAD<id>] tokens
  o.pad_id = 2;
  o.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  const auto copy = round_trip(*original, dir / "vocab.gguf", o);

  const GgufFile f((dir / "vocab.gguf").string());
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f.get_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").size(), 49160u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens")[49155].string_value, "[PAD49155]");
  EXPECT_EQ(f.get_array("tokenizer.ggml.token_type")[49155].as_int(), 5);
  EXPECT_EQ(f.get_array("tokenizer.ggml.token_type")[1].as_int(), 3);  // <|im_start|>: control
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 2);
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), o.chat_template);

  // FIXTURES.md's reference encodings, and special tokens typed in text.
  const std::vector<std::string> texts = {
      "The quick brown fox jumps over the lazy dog.",
      "1234567890 + 3.14159",
      "The capital of France is",
      "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
      "  spaces\n\n\ttabs and ünïcödé 中文 🦙 it's DON'T",
  };
  EXPECT_EQ(test::join_ids(copy->encode(texts[0], false)),
            "504 2365 6354 16438 27003 690 260 23790 2767 30");
  ASSERT_EQ(copy->vocab_size(), 49160);
  EXPECT_EQ(copy->bos_id(), original->bos_id());
  for (const std::string& t : texts) {
    EXPECT_EQ(test::join_ids(original->encode_with_special(t, false, true)),
              test::join_ids(copy->encode_with_special(t, false, true)))
        << t;
  }
}

TEST(GgufTokenizerMetadata, RefusesMoreTokensThanEmbeddingRows) {
  const fs::path gguf = test::fixture("tokenizer-tests/ggml-vocab-gpt-2.gguf");
  EMBER_REQUIRE_FIXTURE(gguf);
  const auto tok = load_tokenizer_from_gguf(gguf.string());
  GgufWriter w;
  TokenizerExportOptions o;
  o.vocab_size = 100;
  try {
    add_tokenizer_metadata(w, *tok, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 100 rows"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember
