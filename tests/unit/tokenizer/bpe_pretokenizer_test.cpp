// The byte-level alphabet, pre-tokenizer steps and presets, the added-token splitter, and GGUF
// metadata errors for byte-level BPE vocabularies.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/byte_level.h"
#include "ember/tokenizer/pretokenizer.h"
#include "ember/tokenizer/special_tokens.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"
#include "unit/tokenizer/bpe_test_util.h"

namespace ember {
namespace {

using Pieces = std::vector<std::string>;

Pieces run(const Pretokenizer& pre, std::string_view text) {
  PretokenizedText out;
  pre.run(text, out);
  Pieces pieces;
  for (size_t i = 0; i < out.pieces.size(); ++i) pieces.emplace_back(out.piece(i));
  return pieces;
}

TEST(BpeByteLevel, AlphabetIsABijection) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_level::byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << b;
    EXPECT_EQ(byte_level::codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(byte_level::byte_to_codepoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level::byte_to_codepoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level::byte_to_codepoint('a'), static_cast<char32_t>('a'));
  EXPECT_EQ(byte_level::byte_to_codepoint(0xAD), 0x143u);  // the last remapped byte
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level::decode(byte_level::encode(all)), all);
  EXPECT_EQ(byte_level::encode("hi there\n"), "hi\xC4\xA0there\xC4\x8A");
  EXPECT_FALSE(byte_level::decode("\xE2\x82\xAC").has_value());  // '€' is not in the alphabet
}

TEST(BpeByteLevel, Utf8Validation) {
  EXPECT_TRUE(byte_level::is_valid_utf8("plain ascii"));
  EXPECT_TRUE(byte_level::is_valid_utf8("\xE6\x97\xA5\xF0\x9F\x98\x80"));
  EXPECT_FALSE(byte_level::is_valid_utf8("\xFF"));
  EXPECT_FALSE(byte_level::is_valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(byte_level::is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(byte_level::is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(byte_level::is_valid_utf8("\xE2\x82"));          // truncated
}

TEST(PretokenizerGpt2, SplitsLikeGpt2) {
  Pretokenizer pre;
  pre.add_byte_level(false, true);
  EXPECT_EQ(run(pre, "Hello world's  test\n"),
            (Pieces{"Hello", " world", "'s", " ", " test", "\n"}));
  // \s+(?!\S): a space run before a word leaves its last space to the word.
  EXPECT_EQ(run(pre, "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(run(pre, "x = 10;  \n\n  y"), (Pieces{"x", " =", " 10", ";", "  \n\n ", " y"}));
  EXPECT_EQ(run(pre, "I'M"), (Pieces{"I", "'", "M"}));  // GPT-2 contractions are lowercase only
}

TEST(PretokenizerGpt2, ByteLevelMappingIsLeftToTheModelWhenLast) {
  Pretokenizer pre;
  pre.add_byte_level(false, true);
  PretokenizedText out;
  pre.run("a b", out);
  EXPECT_TRUE(out.needs_byte_level);
  // A step after ByteLevel sees the spelled text, as in HF.
  Pretokenizer after;
  after.add_byte_level(false, false);
  after.add_split("\xC4\xA0", SplitBehavior::MergedWithNext, false, true);
  after.run("a b", out);
  EXPECT_FALSE(out.needs_byte_level);
  ASSERT_EQ(out.pieces.size(), 2u);
  EXPECT_EQ(out.piece(0), "a");
  EXPECT_EQ(out.piece(1),
            "\xC4\xA0"
            "b");
}

TEST(PretokenizerSplit, Behaviors) {
  const auto split = [](SplitBehavior b, bool invert = false) {
    Pretokenizer pre;
    pre.add_split("-", b, invert);
    return run(pre, "a--b-c-");
  };
  EXPECT_EQ(split(SplitBehavior::Removed), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(split(SplitBehavior::Isolated), (Pieces{"a", "-", "-", "b", "-", "c", "-"}));
  EXPECT_EQ(split(SplitBehavior::MergedWithPrevious), (Pieces{"a-", "-", "b-", "c-"}));
  EXPECT_EQ(split(SplitBehavior::MergedWithNext), (Pieces{"a", "-", "-b", "-c", "-"}));
  EXPECT_EQ(split(SplitBehavior::Contiguous), (Pieces{"a", "--", "b", "-", "c", "-"}));
  // Inverted: the pattern matches what to keep; the rest is the delimiter.
  EXPECT_EQ(split(SplitBehavior::Removed, true), (Pieces{"--", "-", "-"}));
}

TEST(PretokenizerSplit, DigitsAndPunctuation) {
  Pretokenizer individual;
  individual.add_digits(true);
  EXPECT_EQ(run(individual, "ab123c٣4"), (Pieces{"ab", "1", "2", "3", "c", "٣", "4"}));
  Pretokenizer runs;
  runs.add_digits(false);
  EXPECT_EQ(run(runs, "ab123c٣4"), (Pieces{"ab", "123", "c", "٣4"}));
  Pretokenizer punct;
  punct.add_punctuation(SplitBehavior::Contiguous);
  EXPECT_EQ(run(punct, "a+=b, «c»"), (Pieces{"a", "+=", "b", ",", " ", "«", "c", "»"}));
}

TEST(PretokenizerSplit, InvalidUtf8PassesThrough) {
  Pretokenizer pre;
  pre.add_digits(true);
  pre.add_byte_level(false, true);
  for (const std::string& text : {std::string("ab\xFF"
                                              "cd 12"),
                                  std::string("\xC3"), std::string("x\xE2\x82 y\xED\xA0\x80"),
                                  std::string("\x80\x80  \xF0\x9F\x98")}) {
    std::string joined;
    for (const std::string& p : run(pre, text)) joined += p;
    EXPECT_EQ(joined, text) << test::escape_bytes(text);
  }
}

TEST(PretokenizerSplit, InvalidRegexIsAnError) {
  Pretokenizer pre;
  EXPECT_THROW(pre.add_split("[unclosed", SplitBehavior::Isolated), Error);
  EXPECT_NO_THROW(pre.add_split("[unclosed", SplitBehavior::Isolated, false, /*literal=*/true));
}

TEST(PretokenizerPresets, AllPresetsCompile) {
  for (const char* name :
       {"default",     "gpt-2",      "mpt",        "olmo",        "phi-2",          "starcoder",
        "refact",      "smollm",     "command-r",  "llama3",      "llama-bpe",      "llama-v3",
        "dbrx",        "qwen2",      "stablelm2",  "falcon",      "deepseek-coder", "deepseek-llm",
        "deepseek-v3", "poro-chat",  "bloom",      "viking",      "tekken",         "gpt-4o",
        "llama4",      "seed-coder", "bailingmoe", "chatglm-bpe", "jais",           "exaone"}) {
    const auto preset = gguf_pretokenizer_preset(name);
    ASSERT_TRUE(preset.has_value()) << name;
    EXPECT_TRUE(preset->pretokenizer.has_byte_level()) << name;
    // Smoke: a mixed string splits without losing bytes.
    const std::string text = "Hello, I'M 12345 日本語 😀\n\n  x";
    std::string joined;
    for (const std::string& p : run(preset->pretokenizer, text)) joined += p;
    EXPECT_EQ(joined, text) << name;
  }
  EXPECT_FALSE(gguf_pretokenizer_preset("xyz").has_value());
  EXPECT_TRUE(gguf_pretokenizer_preset("llama-bpe")->ignore_merges);
  EXPECT_TRUE(gguf_pretokenizer_preset("llama-bpe")->add_bos);
}

TEST(PretokenizerPresets, Llama3AndQwen2Regexes) {
  const auto llama3 = gguf_pretokenizer_preset("llama3");
  // Case-insensitive contractions, numbers in runs of up to three, a single non-letter prefix.
  EXPECT_EQ(run(llama3->pretokenizer, "I'M here's 1234567 $abc\n\n"),
            (Pieces{"I", "'M", " here", "'s", " ", "123", "456", "7", " $", "abc", "\n\n"}));
  const auto qwen2 = gguf_pretokenizer_preset("qwen2");
  EXPECT_EQ(run(qwen2->pretokenizer, "x 123"), (Pieces{"x", " ", "1", "2", "3"}));
  const auto smollm = gguf_pretokenizer_preset("smollm");
  EXPECT_EQ(run(smollm->pretokenizer, "a 12"), (Pieces{"a", " ", "1", "2"}));
}

// ---------------------------------------------------------------------------------------------

TEST(BpeAddedTokens, LeftmostLongestMatch) {
  AddedTokenSplitter splitter({{"<a>", 1, true}, {"<a><b>", 2, true}, {"<b>", 3, false}});
  const auto segs = splitter.split("x<a><b>y<a>z<b>", true);
  std::vector<std::pair<std::string, int32_t>> got;
  for (const TextSegment& s : segs) got.emplace_back(std::string(s.text), s.token);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int32_t>>{
                     {"x", -1}, {"<a><b>", 2}, {"y", -1}, {"<a>", 1}, {"z", -1}, {"<b>", 3}}));
  // Without special parsing only the non-special token splits.
  const auto plain = splitter.split("x<a><b>y", false);
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[0].text, "x<a>");
  EXPECT_EQ(plain[1].token, 3);
  EXPECT_EQ(plain[2].text, "y");
}

TEST(BpeAddedTokens, StripAndSingleWord) {
  AddedToken mask{"<mask>", 5, true, /*lstrip=*/true, /*rstrip=*/false};
  AddedToken word{"tok", 6, false, false, false, /*single_word=*/true};
  AddedTokenSplitter splitter({mask, word});
  const auto segs = splitter.split("a  <mask> b", true);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].text, "a");
  EXPECT_EQ(segs[1].text, "  <mask>");
  EXPECT_EQ(segs[2].text, " b");
  EXPECT_EQ(splitter.split("tokens tok", true).size(), 2u);  // "tokens " + "tok"
  EXPECT_EQ(splitter.split("tokens tok", true)[1].token, 6);
  EXPECT_EQ(splitter.split("atok", true).size(), 1u);
}

// ---------------------------------------------------------------------------------------------

struct TinyGguf {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::string pre = "gpt-2";
  std::string model = "gpt2";
};

std::filesystem::path write_gguf(const std::string& name, const TinyGguf& g,
                                 const std::function<void(test::GgufWriter&)>& extra = {}) {
  test::GgufWriter w;
  w.kv_string("general.architecture", "gpt2");
  w.kv_string("tokenizer.ggml.model", g.model);
  w.kv_string("tokenizer.ggml.pre", g.pre);
  w.kv_string_array("tokenizer.ggml.tokens", g.tokens);
  w.kv_string_array("tokenizer.ggml.merges", g.merges);
  if (extra) extra(w);
  const auto path = test::scratch_dir("bpe-gguf-" + name) / "vocab.gguf";
  test::write_bytes(path, w.build());
  return path;
}

TinyGguf tiny_gguf() {
  TinyGguf g;
  for (int b = 0; b < 256; ++b) g.tokens.emplace_back(byte_level::byte_to_utf8(b));
  g.tokens.push_back("he");
  g.tokens.push_back("<|end|>");
  g.merges = {"h e"};
  return g;
}

TEST(BpeGguf, LoadsTinyVocabulary) {
  const auto path = write_gguf("ok", tiny_gguf(), [](test::GgufWriter& w) {
    std::vector<int32_t> types(258, 1);
    types[257] = 3;
    w.kv_i32_array("tokenizer.ggml.token_type", types);
    w.kv_u32("tokenizer.ggml.eos_token_id", 257);
  });
  GgufFile gguf(path.string());
  const auto tok = load_gguf_bpe_tokenizer(gguf);
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->eos_id(), 257);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->encode("hehe", false), (std::vector<int32_t>{256, 256}));
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(tok.get());
  ASSERT_NE(bpe, nullptr);
  EXPECT_EQ(bpe->encode_with_special("he<|end|>", false, true), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(tok->token_bytes(257), "");
}

void expect_gguf_error(const std::filesystem::path& path, const std::string& fragment) {
  const std::string message = test::error_message([&] {
    GgufFile gguf(path.string());
    load_gguf_bpe_tokenizer(gguf);
  });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

TEST(BpeGguf, MalformedMetadata) {
  TinyGguf g = tiny_gguf();
  g.pre = "xyz";
  expect_gguf_error(write_gguf("pre", g), ": unknown pre-tokenizer 'xyz' (tokenizer.ggml.pre)");

  g = tiny_gguf();
  g.merges = {"h e", "nospace"};
  expect_gguf_error(write_gguf("merge", g), "'tokenizer.ggml.merges' element 1 'nospace'");

  g = tiny_gguf();
  g.model = "llama";
  expect_gguf_error(write_gguf("model", g), "'tokenizer.ggml.model'");

  expect_gguf_error(write_gguf("types", tiny_gguf(),
                               [](test::GgufWriter& w) {
                                 w.kv_i32_array("tokenizer.ggml.token_type", {1, 1});
                               }),
                    "'tokenizer.ggml.token_type' has 2 entries");

  expect_gguf_error(
      write_gguf("bos", tiny_gguf(),
                 [](test::GgufWriter& w) { w.kv_string("tokenizer.ggml.bos_token_id", "one"); }),
      "'tokenizer.ggml.bos_token_id' has type");

  g = tiny_gguf();
  g.tokens.clear();
  expect_gguf_error(write_gguf("empty", g), "'tokenizer.ggml.tokens' is empty");
}

}  // namespace
}  // namespace ember
