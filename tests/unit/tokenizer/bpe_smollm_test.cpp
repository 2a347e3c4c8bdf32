// SmolLM2-135M-Instruct's real tokenizer.json: known encodings from HF tokenizers, chat special
// tokens, and byte-exact round trips over a generated corpus and over arbitrary bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/byte_level.h"
#include "ember/tokenizer/tokenizer_json.h"
#include "test_util.h"
#include "unit/tokenizer/bpe_test_util.h"

namespace ember {
namespace {

using Ids = std::vector<int32_t>;

std::string smollm_path() {
  return test::fixture("models/smollm2-135m-instruct/tokenizer.json").string();
}

// Loaded once: the 49k-token vocabulary takes a moment to parse.
const BpeTokenizer& smollm() {
  static const std::unique_ptr<BpeTokenizer> tok = load_bpe_tokenizer_json(smollm_path());
  return *tok;
}

#define REQUIRE_SMOLLM() EMBER_REQUIRE_FIXTURE(smollm_path())

TEST(TokenizerJsonSmolLM2, Vocabulary) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.num_merges(), 48900u);
  EXPECT_EQ(tok.added_tokens().tokens().size(), 17u);
  EXPECT_EQ(tok.bos_id(), 1);  // from config.json beside it
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.add_bos_default());  // post_processor is null
  EXPECT_FALSE(tok.strip_space_after_bos());
}

TEST(TokenizerJsonSmolLM2, KnownEncodings) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"The quick brown fox jumps over the lazy dog.",
       {504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30}},
      {"1234567890 + 3.14159",
       {33, 34, 35, 36, 37, 38, 39, 40, 41, 32, 1232, 216, 35, 30, 33, 36, 33, 37, 41}},
      {"The capital of France is", {504, 3575, 282, 4649, 314}},
  };
  for (const auto& [text, expected] : cases) {
    const Ids actual = tok.encode(text, false);
    EXPECT_EQ(actual, expected) << "\"" << text << "\"\n  expected: " << test::join_ids(expected)
                                << "\n  actual:   " << test::join_ids(actual);
    EXPECT_EQ(tok.decode(actual), text);
  }
}

TEST(TokenizerJsonSmolLM2, ChatSpecialTokens) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  const std::string text = "<|im_start|>user\nhi<|im_end|>\n";
  const Ids ids = tok.encode_with_special(text, false, /*parse_special=*/true);
  Ids expected = {1};
  const Ids middle = tok.encode("user\nhi", false);
  expected.insert(expected.end(), middle.begin(), middle.end());
  expected.push_back(2);
  expected.push_back(198);
  EXPECT_EQ(ids, expected) << test::join_ids(ids);

  // As plain text the markers are spelled out, never turned into control tokens.
  const Ids plain = tok.encode_with_special(text, false, /*parse_special=*/false);
  EXPECT_GT(plain.size(), ids.size());
  for (int32_t id : plain) EXPECT_NE(tok.token_kind(id), BpeTokenKind::Control) << id;
  EXPECT_EQ(tok.decode(plain), text);

  // Control tokens have no bytes of their own unless rendered.
  EXPECT_EQ(tok.token_bytes(1), "");
  EXPECT_EQ(tok.token_text(1, /*render_special=*/true), "<|im_start|>");
  EXPECT_EQ(tok.token_text(1, /*render_special=*/false), "");
  EXPECT_EQ(tok.piece(1), "<|im_start|>");
  EXPECT_EQ(tok.decode(ids), "user\nhi\n");
  std::string rendered;
  for (int32_t id : ids) rendered += tok.token_text(id, true);
  EXPECT_EQ(rendered, text);
}

// A corpus of varied strings built from fragments by a seeded generator.
std::vector<std::string> generate_corpus(size_t count) {
  static const std::vector<std::string> fragments = {
      "the",
      "The",
      "quick",
      "brown",
      "fox",
      "jumps",
      "over",
      "lazy",
      "dog",
      "Hello",
      "world",
      "don't",
      "I'M",
      "we'll",
      "she's",
      "they've",
      "It'S",
      "n't",
      "you'd",
      "日本語",
      "中文字符",
      "한국어",
      "テキスト",
      "Русский",
      "Ελληνικά",
      "עברית",
      "العربية",
      "हिन्दी",
      "😀",
      "👍🏽",
      "👨‍👩‍👧‍👦",
      "🚀",
      "🇫🇷",
      "❤️",
      "e\xCC\x81",
      "a\xCC\x88\xCC\x81",
      "n\xCC\x83",
      "\xCC\x81",  // combining marks
      " ",
      "  ",
      "   ",
      "\t",
      "\n",
      "\n\n",
      "\r\n",
      " \n ",
      "\xC2\xA0",
      "\xE3\x80\x80",
      "\t\t  ",
      "0",
      "7",
      "42",
      "1234567890",
      "3.14159",
      "1,000,000",
      "٣٤٥",
      "²",
      "Ⅻ",
      "int main() {",
      "return 0;",
      "}",
      "x += 1;",
      "if (a != b) {",
      "std::vector<int>",
      "def f(x):",
      "    pass",
      "#include <stdio.h>",
      "// comment",
      "/* block */",
      "a->b",
      "i++",
      "!",
      "?",
      ".",
      ",",
      "...",
      "—",
      "–",
      "«",
      "»",
      "\"",
      "'",
      "`",
      "~",
      "$",
      "%",
      "@",
      "#",
      "<|im_start|>",
      "<|im_end|>",
      "<",
      ">",
      "|",
  };
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> pick(0, fragments.size() - 1);
  std::uniform_int_distribution<int> length(1, 24);
  std::uniform_int_distribution<int> sep(0, 3);
  std::vector<std::string> corpus;
  corpus.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    std::string s;
    const int n = length(rng);
    for (int k = 0; k < n; ++k) {
      s += fragments[pick(rng)];
      if (sep(rng) == 0) s += ' ';
    }
    corpus.push_back(std::move(s));
  }
  return corpus;
}

TEST(TokenizerJsonSmolLM2, RoundTripCorpus) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  const std::vector<std::string> corpus = generate_corpus(1500);
  size_t ok = 0;
  for (const std::string& s : corpus) {
    const Ids ids = tok.encode(s, false);
    const std::string back = tok.decode(ids);
    if (back == s) {
      ++ok;
    } else {
      ADD_FAILURE() << "round trip failed for \"" << test::escape_bytes(s) << "\"\n  got \""
                    << test::escape_bytes(back) << "\"";
    }
    // With BOS the text is the same (BOS has no text and no space is stripped after it).
    EXPECT_EQ(tok.decode(tok.encode(s, true)), s);
  }
  EXPECT_EQ(ok, corpus.size());
}

TEST(TokenizerJsonSmolLM2, InvalidUtf8NeverCrashesAndRoundTrips) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  std::vector<std::string> inputs = {
      "\xFF",
      "\xFE\xFF",
      "abc\xC3",
      "\xC3(",
      "\xE2\x82",
      "\xE2\x82(",
      "\xED\xA0\x80",
      "\xC0\xAF",
      "\xF4\x90\x80\x80",
      "\x80\x80\x80",
      "word \xF0\x9F\x98 word",
      "12\xFF"
      "34",
      std::string("nul\0byte", 8),
      "<|im_start|>\xFF<|im_end|>",
  };
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 200; ++i) {
    std::string s(static_cast<size_t>(1 + i % 40), '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    inputs.push_back(std::move(s));
  }
  for (const std::string& s : inputs) {
    const Ids ids = tok.encode(s, false);
    // SmolLM2 has a token for every byte except those that never occur in UTF-8 (and a few
    // controls); as in HF tokenizers, those are dropped and everything else survives exactly.
    std::string expected;
    for (char c : s) {
      if (tok.find_token(byte_level::byte_to_utf8(static_cast<uint8_t>(c))) >= 0) expected += c;
    }
    EXPECT_EQ(tok.decode(ids), expected) << test::escape_bytes(s);
    const Ids special = tok.encode_with_special(s, true, true);
    EXPECT_FALSE(special.empty());
  }
}

TEST(TokenizerJsonSmolLM2, LongRunsRoundTrip) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  // Long runs stress the regex engine's backtracking (\s+(?!\S)) and the merge queue.
  for (const std::string& s :
       {std::string(200000, ' ') + "x", std::string(100000, '7'), std::string(100000, 'a'),
        std::string(50000, '\n') + "end", std::string(30000, '!')}) {
    EXPECT_EQ(tok.decode(tok.encode(s, false)), s) << s.size();
  }
}

TEST(TokenizerJsonSmolLM2, CacheIsConsistentAcrossThreads) {
  REQUIRE_SMOLLM();
  const BpeTokenizer& tok = smollm();
  const std::vector<std::string> corpus = generate_corpus(200);
  std::vector<Ids> expected;
  for (const std::string& s : corpus) expected.push_back(tok.encode(s, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t i = 0; i < corpus.size(); ++i) {
          if (tok.encode(corpus[i], false) != expected[i]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(TokenizerJsonSmolLM2, LoadTokenizerJsonGivesTokenizerInterface) {
  REQUIRE_SMOLLM();
  const std::unique_ptr<Tokenizer> tok = load_tokenizer_json(smollm_path());
  EXPECT_EQ(tok->encode("The capital of France is", false), (Ids{504, 3575, 282, 4649, 314}));
}

}  // namespace
}  // namespace ember
