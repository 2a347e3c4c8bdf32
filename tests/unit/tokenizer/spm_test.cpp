#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/tokenizer/spm_tokenizer.h"
#include "ember/tokenizer/tokenizer.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ids_to_string(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

// Printable form of a test string: control and non-ASCII bytes as \xNN.
std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's llama-spm conformance suite.

// The .inp file is the test strings joined by "\n__ggml_vocab_test__\n" (the last one followed by
// it too); the .out file has one line of space-separated ids per string, in the same order.
struct VocabCase {
  std::string text;
  Ids expected;
};

std::vector<VocabCase> read_vocab_cases(const fs::path& inp, const fs::path& out) {
  std::string text = read_file(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  for (size_t next; (next = text.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    cases.push_back({text.substr(pos, next - pos), {}});
  }
  std::istringstream lines(read_file(out));
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i < cases.size()) {
      std::istringstream ids(line);
      for (int32_t id; ids >> id;) cases[i].expected.push_back(id);
    }
    ++i;
  }
  EXPECT_EQ(i, cases.size()) << "line count of " << out << " != string count of " << inp;
  return cases;
}

TEST(SpmLlamaVocab, ConformanceSuite) {
  const fs::path dir = test::fixture("tokenizer-tests");
  const fs::path gguf_path = dir / "ggml-vocab-llama-spm.gguf";
  EMBER_REQUIRE_FIXTURE(gguf_path);
  GgufFile gguf(gguf_path.string());
  auto tok = load_gguf_tokenizer(gguf);
  ASSERT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);

  const auto cases = read_vocab_cases(dir / "ggml-vocab-llama-spm.gguf.inp",
                                      dir / "ggml-vocab-llama-spm.gguf.out");
  ASSERT_GE(cases.size(), 40u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const VocabCase& c = cases[i];
    const Ids actual = tok->encode(c.text, /*add_bos=*/false);
    if (actual == c.expected) {
      ++passed;
    } else {
      ADD_FAILURE() << "string " << i << ": \"" << escape(c.text)
                    << "\"\n  expected: " << ids_to_string(c.expected)
                    << "\n  actual:   " << ids_to_string(actual);
    }
    // Every string is valid UTF-8 and the vocabulary has all byte tokens, so decoding restores
    // the input exactly (the dummy-prefix space is dropped again).
    EXPECT_EQ(tok->decode(actual), c.text) << "round trip of string " << i;
  }
  std::printf("[ llama-spm ] %zu/%zu strings encode exactly\n", passed, cases.size());
  EXPECT_EQ(passed, cases.size());
}

// ---------------------------------------------------------------------------------------------
// stories260K: the same vocabulary as GGUF metadata and as llama2.c's tok512.bin.

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "She liked to play outside in the park with her friends.",
      "Hello world",
      " Hello world",
      "  two leading spaces",
      "trailing space ",
      "multiple   inner    spaces",
      "line one\nline two\n\nline four",
      "\ttabs\tand\nnewlines\r\n",
      "Numbers: 0 1 2 3 42 1234567890 3.14159",
      "Punctuation!?.,;:'\"()[]{}<>-_=+*/\\|@#$%^&~`",
      "The cat said \"meow\" and ran away.",
      "Ünïcödé: café, naïve, Grüße, señor",
      "Русский текст и 中文字符 日本語",
      "Emoji: 😀🙂👍🏽 🚀 (rocket)",
      "<s> and </s> and <unk> typed as text",
      "<0x41> is not a byte token when typed",
      "a",
      " ",
      "\n",
      "x",
      "Tom and Ben were best friends. They liked to build things with blocks.",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "ababababababababab",
      "the the the the the the",
      "▁ literal lower one eighth block",
  };
  return texts;
}

struct Stories {
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> from_gguf;
  std::unique_ptr<Tokenizer> from_bin;
};

fs::path stories_dir() {
  return test::fixture("models/stories260K");
}

Stories load_stories() {
  Stories s;
  s.gguf = std::make_unique<GgufFile>((stories_dir() / "stories260K.gguf").string());
  s.from_gguf = load_gguf_tokenizer(*s.gguf);
  s.from_bin = load_llama2c_tokenizer((stories_dir() / "tok512.bin").string(), 512);
  return s;
}

#define REQUIRE_STORIES()                                    \
  EMBER_REQUIRE_FIXTURE(stories_dir() / "stories260K.gguf"); \
  EMBER_REQUIRE_FIXTURE(stories_dir() / "tok512.bin")

TEST(SpmStories, GgufAndBinVocabulariesAgree) {
  REQUIRE_STORIES();
  Stories s = load_stories();
  ASSERT_EQ(s.from_gguf->vocab_size(), 512);
  ASSERT_EQ(s.from_bin->vocab_size(), 512);
  const auto& g = dynamic_cast<const SpmTokenizer&>(*s.from_gguf);
  const auto& b = dynamic_cast<const SpmTokenizer&>(*s.from_bin);
  for (int32_t id = 0; id < 512; ++id) {
    EXPECT_EQ(b.piece(id), g.piece(id)) << "id " << id;
    EXPECT_EQ(b.score(id), g.score(id)) << "id " << id;
    EXPECT_EQ(b.token_type(id), g.token_type(id)) << "id " << id;
    EXPECT_EQ(b.token_bytes(id), g.token_bytes(id)) << "id " << id;
  }
  EXPECT_EQ(b.bos_id(), g.bos_id());
  EXPECT_EQ(b.eos_id(), g.eos_id());
  EXPECT_EQ(b.unk_id(), g.unk_id());
}

TEST(SpmStories, GgufAndBinEncodeIdentically) {
  REQUIRE_STORIES();
  Stories s = load_stories();
  std::vector<std::string> texts = sample_texts();
  // Plus every prefix of a longer story, so merges are exercised at many cut points.
  const std::string story =
      "One day, a little boy named Tim went to the park. He saw a big red ball and wanted to "
      "play. \"Can I play too?\" asked Sue. Tim smiled and said, \"Yes!\" They were happy.";
  for (size_t n = 1; n <= story.size(); ++n) texts.push_back(story.substr(0, n));
  for (const std::string& text : texts) {
    for (bool bos : {false, true}) {
      EXPECT_EQ(ids_to_string(s.from_bin->encode(text, bos)),
                ids_to_string(s.from_gguf->encode(text, bos)))
          << "\"" << escape(text) << "\" bos=" << bos;
    }
  }
}

TEST(SpmStories, RoundTrip) {
  REQUIRE_STORIES();
  Stories s = load_stories();
  std::vector<std::string> texts = sample_texts();
  const fs::path story = stories_dir() / "expected-greedy-200.txt";
  if (fs::exists(story)) texts.push_back(read_file(story));
  for (const std::string& text : texts) {
    // A '▁' typed by the user is indistinguishable from an escaped space once encoded; it decodes
    // as ' ', exactly as in SentencePiece.
    if (text.find("\xE2\x96\x81") != std::string::npos) {
      EXPECT_EQ(s.from_gguf->decode(s.from_gguf->encode(text, true)),
                "  literal lower one eighth block");
      continue;
    }
    for (Tokenizer* tok : {s.from_gguf.get(), s.from_bin.get()}) {
      const Ids ids = tok->encode(text, true);
      EXPECT_EQ(tok->decode(ids), text) << "\"" << escape(text) << "\" -> " << ids_to_string(ids);
      EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << "\"" << escape(text) << "\"";
    }
  }
}

TEST(SpmStories, BosHandling) {
  REQUIRE_STORIES();
  Stories s = load_stories();
  const Tokenizer& tok = *s.from_gguf;
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_EQ(tok.encode("", true), Ids({1}));
  EXPECT_TRUE(tok.encode("", false).empty());
  const Ids without = tok.encode("Once upon a time", false);
  Ids with = tok.encode("Once upon a time", true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), 1);
  with.erase(with.begin());
  EXPECT_EQ(with, without);
  // The dummy prefix makes the first piece start with '▁'.
  ASSERT_FALSE(without.empty());
  EXPECT_EQ(tok.piece(without.front()).rfind("\xE2\x96\x81", 0), 0u);
  // Control tokens have no bytes; decode drops them and strips the leading space after BOS.
  EXPECT_EQ(tok.token_bytes(0), "");
  EXPECT_EQ(tok.token_bytes(1), "");
  EXPECT_EQ(tok.token_bytes(2), "");
  EXPECT_EQ(tok.token_bytes(3 + 'A'), "A");  // <0x41>
  Ids seq = {1};
  seq.insert(seq.end(), without.begin(), without.end());
  seq.push_back(2);
  EXPECT_EQ(tok.decode(seq), "Once upon a time");
  EXPECT_EQ(tok.decode(without), "Once upon a time");
  // Only the first piece loses its space: a second text after a new BOS does too.
  Ids two = seq;
  two.insert(two.end(), seq.begin(), seq.end());
  EXPECT_EQ(tok.decode(two), "Once upon a timeOnce upon a time");
}

TEST(SpmStories, TruncatedTokenizerBinIsAnError) {
  REQUIRE_STORIES();
  const std::string full = read_file(stories_dir() / "tok512.bin");
  ASSERT_GT(full.size(), 100u);
  const fs::path dir = test::scratch_dir("tok512-truncated");
  for (size_t keep : {size_t{0}, size_t{2}, size_t{4}, size_t{6}, size_t{9}, size_t{13},
                      full.size() / 2, full.size() - 1}) {
    const fs::path path = dir / ("tok512-" + std::to_string(keep) + ".bin");
    std::ofstream(path, std::ios::binary).write(full.data(), static_cast<std::streamsize>(keep));
    try {
      load_llama2c_tokenizer(path.string(), 512);
      ADD_FAILURE() << "no error for a copy truncated to " << keep << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
  }
  // A vocabulary larger than the file holds is the same kind of error.
  EXPECT_THROW(load_llama2c_tokenizer((stories_dir() / "tok512.bin").string(), 513), Error);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Hand-built vocabularies: merge order, ties, control tokens, byte fallback.

SpmVocab small_vocab(bool with_bytes) {
  SpmVocab v;
  const auto add = [&v](const std::string& p, float score, SpmTokenType type) {
    v.pieces.push_back(p);
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, SpmTokenType::Unknown);
  add("<s>", 0, SpmTokenType::Control);
  add("</s>", 0, SpmTokenType::Control);
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      add(name, 0, SpmTokenType::Byte);
    }
  }
  for (const char* p : {"\xE2\x96\x81", "a", "b", "c", "<", "s", ">", "/"}) {
    add(p, -10, SpmTokenType::Normal);
  }
  add("ab", -1, SpmTokenType::Normal);
  add("bc", -1, SpmTokenType::Normal);
  add("<s", -1, SpmTokenType::Normal);
  add("s>", -2, SpmTokenType::Normal);
  v.add_space_prefix = false;
  return v;
}

std::vector<std::string> pieces_of(const SpmTokenizer& tok, const Ids& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.piece(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  SpmTokenizer tok(small_vocab(true));
  EXPECT_EQ(pieces_of(tok, tok.encode("abc", false)), Pieces({"ab", "c"}));
  EXPECT_EQ(pieces_of(tok, tok.encode("cabc", false)), Pieces({"c", "ab", "c"}));
}

TEST(SpmTokenizer, HigherScoreWins) {
  SpmVocab v = small_vocab(true);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.pieces[i] == "bc") v.scores[i] = 0.5f;
  }
  SpmTokenizer tok(std::move(v));
  EXPECT_EQ(pieces_of(tok, tok.encode("abc", false)), Pieces({"a", "bc"}));
}

TEST(SpmTokenizer, ControlTokensAreNeverProducedByMerging) {
  SpmVocab v = small_vocab(true);
  v.pieces.push_back("<s>x");  // would need the control piece "<s>" as an intermediate
  v.scores.push_back(5);
  v.types.push_back(SpmTokenType::Normal);
  SpmTokenizer tok(std::move(v));
  EXPECT_EQ(pieces_of(tok, tok.encode("<s>", false)), Pieces({"<s", ">"}));
  EXPECT_EQ(pieces_of(tok, tok.encode("</s>", false)), Pieces({"<", "/", "s>"}));
}

TEST(SpmTokenizer, SpacePrefixAndEscaping) {
  SpmVocab v = small_vocab(true);
  v.add_space_prefix = true;
  SpmTokenizer tok(std::move(v));
  EXPECT_EQ(pieces_of(tok, tok.encode("a b", false)),
            Pieces({"\xE2\x96\x81", "a", "\xE2\x96\x81", "b"}));
  EXPECT_EQ(tok.decode(tok.encode("a b", true)), "a b");
  EXPECT_TRUE(tok.strip_space_after_bos());
}

TEST(SpmTokenizer, ByteFallbackAndInvalidUtf8) {
  SpmTokenizer tok(small_vocab(true));
  const auto byte_id = [&tok](int b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    return tok.find_piece(name);
  };
  // 'é' is not in the vocabulary: its two UTF-8 bytes come out as byte tokens.
  EXPECT_EQ(tok.encode("\xC3\xA9", false), Ids({byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(tok.decode(tok.encode("a\xC3\xA9z", false)), "a\xC3\xA9z");
  // Malformed UTF-8 never crashes and still round-trips byte for byte.
  for (const std::string bad : {"\xFF", "a\x80z", "\xE2\x82", "\xF0\x9F\x98", "\xC3"}) {
    const Ids ids = tok.encode(bad, false);
    EXPECT_EQ(tok.decode(ids), bad) << escape(bad);
  }
  // Without byte tokens the unknown character becomes <unk> (one per byte).
  SpmTokenizer no_bytes(small_vocab(false));
  EXPECT_EQ(no_bytes.encode("a\xC3\xA9", false), Ids({no_bytes.find_piece("a"), 0, 0}));
}

TEST(SpmTokenizer, RejectsInconsistentVocab) {
  SpmVocab v = small_vocab(true);
  v.scores.pop_back();
  EXPECT_THROW(SpmTokenizer{std::move(v)}, Error);
  EXPECT_THROW(SpmTokenizer{SpmVocab{}}, Error);
  SpmTokenizer tok(small_vocab(true));
  EXPECT_THROW(tok.piece(-1), Error);
  EXPECT_THROW(tok.token_bytes(tok.vocab_size()), Error);
}

// ---------------------------------------------------------------------------------------------
// GGUF metadata errors, from small GGUF files written here.

class GgufBuilder {
 public:
  void add_string(const std::string& key, const std::string& value) {
    key_header(key, 8);
    str(value);
  }
  void add_u32(const std::string& key, uint32_t value) {
    key_header(key, 4);
    pod(value);
  }
  void add_strings(const std::string& key, const std::vector<std::string>& values) {
    array_header(key, 8, values.size());
    for (const auto& v : values) str(v);
  }
  void add_f32s(const std::string& key, const std::vector<float>& values) {
    array_header(key, 6, values.size());
    for (float v : values) pod(v);
  }
  void add_i32s(const std::string& key, const std::vector<int32_t>& values) {
    array_header(key, 5, values.size());
    for (int32_t v : values) pod(v);
  }
  fs::path write(const fs::path& path) const {
    std::string out = "GGUF";
    const auto put = [&out](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(uint64_t{count_});
    out += body_;
    std::ofstream(path, std::ios::binary)
        .write(out.data(), static_cast<std::streamsize>(out.size()));
    return path;
  }

 private:
  template <typename T>
  void pod(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void str(const std::string& s) {
    pod(uint64_t{s.size()});
    body_ += s;
  }
  void key_header(const std::string& key, uint32_t type) {
    str(key);
    pod(type);
    ++count_;
  }
  void array_header(const std::string& key, uint32_t elem_type, size_t n) {
    key_header(key, 9);
    pod(elem_type);
    pod(uint64_t{n});
  }

  std::string body_;
  uint64_t count_ = 0;
};

const std::vector<std::string> kTinyTokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b"};

std::string load_error(const fs::path& path) {
  try {
    GgufFile gguf(path.string());
    load_gguf_tokenizer(gguf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerGguf, LoadsMinimalVocabAndDefaults) {
  const fs::path dir = test::scratch_dir("tok-gguf-ok");
  GgufBuilder b;
  b.add_string("tokenizer.ggml.model", "llama");
  b.add_strings("tokenizer.ggml.tokens", kTinyTokens);
  b.add_f32s("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -1});
  b.add_u32("tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);  // "none"
  const fs::path path = b.write(dir / "ok.gguf");
  GgufFile gguf(path.string());
  auto tok = load_gguf_tokenizer(gguf);
  EXPECT_EQ(tok->vocab_size(), 6);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), -1);
  EXPECT_EQ(tok->encode("ab", true), Ids({1, 3, 4, 5}));  // no token_type: all normal
  fs::remove_all(dir);
}

TEST(TokenizerGguf, MalformedMetadataNamesFileAndKey) {
  const fs::path dir = test::scratch_dir("tok-gguf-bad");
  struct Case {
    std::string name;
    std::function<void(GgufBuilder&)> build;
    std::string expect_in_message;
  };
  const std::vector<float> scores6 = {0, 0, 0, -1, -1, -1};
  const std::vector<Case> cases = {
      {"gpt2",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "gpt2");
         b.add_strings("tokenizer.ggml.tokens", kTinyTokens);
       },
       "unsupported tokenizer model 'gpt2' (byte-level BPE is not implemented yet)"},
      {"no-model", [&](GgufBuilder& b) { b.add_strings("tokenizer.ggml.tokens", kTinyTokens); },
       "tokenizer.ggml.model"},
      {"no-tokens",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "llama");
         b.add_f32s("tokenizer.ggml.scores", scores6);
       },
       "tokenizer.ggml.tokens"},
      {"tokens-wrong-type",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "llama");
         b.add_i32s("tokenizer.ggml.tokens", {1, 2, 3});
         b.add_f32s("tokenizer.ggml.scores", {0, 0, 0});
       },
       "tokenizer.ggml.tokens"},
      {"scores-short",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "llama");
         b.add_strings("tokenizer.ggml.tokens", kTinyTokens);
         b.add_f32s("tokenizer.ggml.scores", {0, 0, 0});
       },
       "tokenizer.ggml.scores"},
      {"scores-wrong-type",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "llama");
         b.add_strings("tokenizer.ggml.tokens", kTinyTokens);
         b.add_strings("tokenizer.ggml.scores", kTinyTokens);
       },
       "tokenizer.ggml.scores"},
      {"types-short",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "llama");
         b.add_strings("tokenizer.ggml.tokens", kTinyTokens);
         b.add_f32s("tokenizer.ggml.scores", scores6);
         b.add_i32s("tokenizer.ggml.token_type", {2, 3, 3});
       },
       "tokenizer.ggml.token_type"},
      {"bos-wrong-type",
       [&](GgufBuilder& b) {
         b.add_string("tokenizer.ggml.model", "llama");
         b.add_strings("tokenizer.ggml.tokens", kTinyTokens);
         b.add_f32s("tokenizer.ggml.scores", scores6);
         b.add_string("tokenizer.ggml.bos_token_id", "1");
       },
       "tokenizer.ggml.bos_token_id"},
  };
  for (const Case& c : cases) {
    GgufBuilder b;
    c.build(b);
    const fs::path path = b.write(dir / (c.name + ".gguf"));
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find(path.string()), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect_in_message), std::string::npos) << c.name << ": " << msg;
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer::decode on its own.

TEST(TokenizerDecode, DropsOnlyTheDummyPrefixSpace) {
  SpmVocab v = small_vocab(true);
  v.add_space_prefix = true;
  SpmTokenizer tok(std::move(v));
  const int32_t sp = tok.find_piece("\xE2\x96\x81");
  const int32_t a = tok.find_piece("a");
  EXPECT_EQ(tok.decode({sp, a}), "a");          // first token
  EXPECT_EQ(tok.decode({1, sp, a}), "a");       // first after BOS
  EXPECT_EQ(tok.decode({1, sp, sp, a}), " a");  // only one space goes
  EXPECT_EQ(tok.decode({a, sp, a}), "a a");
  EXPECT_EQ(tok.decode({a, 1, sp, a, 2}), "aa");
  EXPECT_EQ(tok.decode({}), "");

  SpmVocab raw = small_vocab(true);
  raw.add_space_prefix = false;  // nothing was prepended, so nothing is stripped
  SpmTokenizer tok2(std::move(raw));
  EXPECT_EQ(tok2.decode({1, sp, a}), " a");
}

}  // namespace
}  // namespace ember
