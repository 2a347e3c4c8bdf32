// tokenizer.json loading on small synthetic files: merge formats, post-processors and
// tokenizer_config.json, added-token flags, pre-tokenizer types, and clear errors for malformed
// files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/byte_level.h"
#include "ember/tokenizer/tokenizer_json.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"
#include "unit/tokenizer/bpe_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

// A byte-level vocabulary: the 256 byte spellings (id = byte value), then a few merges.
json tiny_tokenizer(bool merges_as_pairs = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(byte_level::byte_to_utf8(b))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"\xC4\xA0", "w"}, {"o", "r"}};
  json merges_json = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    if (merges_as_pairs) {
      merges_json.push_back(json::array({a, b}));
    } else {
      merges_json.push_back(a + " " + b);
    }
  }
  json root;
  root["version"] = "1.0";
  root["added_tokens"] = json::array(
      {{{"id", 300}, {"content", "<s>"}, {"special", true}},
       {{"id", 301}, {"content", "</s>"}, {"special", true}},
       {{"id", 302}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
       {{"id", 303}, {"content", "[word]"}, {"special", false}, {"single_word", true}},
       {{"id", 304}, {"content", "<plain>"}, {"special", false}}});
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"}};
  root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_json}};
  return root;
}

fs::path write_json(const fs::path& dir, const json& j,
                    const std::string& name = "tokenizer.json") {
  const fs::path path = dir / name;
  std::ofstream(path, std::ios::binary) << j.dump();
  return path;
}

TEST(TokenizerJson, MergesAsStringsOrPairs) {
  const fs::path dir = test::scratch_dir("bpe-json-merges");
  for (bool pairs : {false, true}) {
    const auto tok = load_bpe_tokenizer_json(write_json(dir, tiny_tokenizer(pairs)).string());
    EXPECT_EQ(tok->vocab_size(), 305);
    EXPECT_EQ(tok->num_merges(), 6u);
    const Ids ids = tok->encode("hello world", false);
    // "hello" merges fully; " world" -> "Ġw" "or" "l" "d".
    EXPECT_EQ(ids, (Ids{259, 260, 261, 'l', 'd'})) << test::join_ids(ids);
    EXPECT_EQ(tok->decode(ids), "hello world");
    EXPECT_EQ(tok->bos_id(), -1);
    EXPECT_FALSE(tok->add_bos_default());
  }
}

TEST(TokenizerJson, TemplateProcessingAddsBos) {
  const fs::path dir = test::scratch_dir("bpe-json-template");
  json j = tiny_tokenizer();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}}}}};
  const auto tok = load_bpe_tokenizer_json(write_json(dir, j).string());
  EXPECT_TRUE(tok->add_bos_default());
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->encode("he", true), (Ids{300, 256}));
  EXPECT_EQ(tok->decode({300, 256}), "he");

  // tokenizer_config.json beside it has the last word.
  write_json(dir,
             {{"add_bos_token", false}, {"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}},
             "tokenizer_config.json");
  const auto tok2 = load_bpe_tokenizer_json((dir / "tokenizer.json").string());
  EXPECT_FALSE(tok2->add_bos_default());
  EXPECT_EQ(tok2->bos_id(), 300);
  EXPECT_EQ(tok2->eos_id(), 301);
}

TEST(TokenizerJson, AddedTokenFlags) {
  const fs::path dir = test::scratch_dir("bpe-json-added");
  const auto tok = load_bpe_tokenizer_json(write_json(dir, tiny_tokenizer()).string());
  // Special tokens split only with special parsing.
  EXPECT_EQ(tok->encode_with_special("<s>he", false, true), (Ids{300, 256}));
  EXPECT_EQ(tok->encode_with_special("<s>he", false, false), (Ids{'<', 's', '>', 256}));
  // lstrip/rstrip swallow the surrounding whitespace.
  EXPECT_EQ(tok->encode_with_special("he <mask> he", false, true), (Ids{256, 302, 256}));
  // Non-special added tokens split even without special parsing; their text is literal.
  EXPECT_EQ(tok->encode_with_special("he<plain>he", false, false), (Ids{256, 304, 256}));
  EXPECT_EQ(tok->token_bytes(304), "<plain>");
  EXPECT_EQ(tok->token_bytes(300), "");
  // single_word: not inside a word.
  EXPECT_EQ(tok->encode("he [word] he", false), (Ids{256, ' ', 303, ' ', 256}));
  const Ids inside = tok->encode("he[word]he", false);
  EXPECT_EQ(std::count(inside.begin(), inside.end(), 303), 0) << test::join_ids(inside);
}

TEST(TokenizerJson, PreTokenizerSequenceWithSplitAndDigits) {
  const fs::path dir = test::scratch_dir("bpe-json-pre");
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"String", "-"}}},
                     {"behavior", "Removed"},
                     {"invert", false}},
                    {{"type", "Digits"}, {"individual_digits", true}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}})}};
  const auto tok = load_bpe_tokenizer_json(write_json(dir, j).string());
  // "-" is removed; the prefix space is added to every piece; digits are separate.
  const Ids ids = tok->encode("hello-12", false);
  EXPECT_EQ(ids, (Ids{' ', 259, ' ', '1', ' ', '2'})) << test::join_ids(ids);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: every error names the file and says what is wrong.

void expect_error(const fs::path& path, const std::string& fragment) {
  const std::string message = test::error_message([&] { load_tokenizer_json(path.string()); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

TEST(TokenizerJsonErrors, MalformedFiles) {
  const fs::path dir = test::scratch_dir("bpe-json-errors");
  expect_error(dir / "absent.json", "cannot open");

  const fs::path not_json = dir / "not_json.json";
  std::ofstream(not_json) << "{\"model\": ";
  expect_error(not_json, "invalid JSON");

  const fs::path bad_utf8 = dir / "bad_utf8.json";
  std::ofstream(bad_utf8, std::ios::binary) << "{\"model\": \"\xFF\xFE\"}";
  expect_error(bad_utf8, "not valid UTF-8");

  json j = tiny_tokenizer();
  j.erase("model");
  expect_error(write_json(dir, j, "no_model.json"), "missing \"model\"");

  j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect_error(write_json(dir, j, "wordpiece.json"), "unsupported model type 'WordPiece'");

  j = tiny_tokenizer();
  j["model"]["merges"].push_back("h zz");
  expect_error(write_json(dir, j, "bad_merge.json"), "names token 'zz'");

  j = tiny_tokenizer();
  j["model"]["merges"].push_back("nospace");
  expect_error(write_json(dir, j, "bad_merge_form.json"), "model.merges[6]");

  j = tiny_tokenizer();
  j["model"].erase("vocab");
  expect_error(write_json(dir, j, "no_vocab.json"), "model.vocab");

  j = tiny_tokenizer();
  j["model"]["vocab"]["x"] = "seven";
  expect_error(write_json(dir, j, "bad_id.json"), "not a valid token id");

  j = tiny_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(write_json(dir, j, "bad_regex.json"), "invalid regex '(unclosed'");

  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(write_json(dir, j, "metaspace.json"), "unsupported pre-tokenizer type 'Metaspace'");

  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_error(write_json(dir, j, "bad_behavior.json"), "unsupported split behavior 'Sideways'");

  j = tiny_tokenizer();
  j["added_tokens"].push_back({{"id", -4}, {"content", "<bad>"}});
  expect_error(write_json(dir, j, "bad_added.json"), "added_tokens[5].id");

  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(write_json(dir, j, "normalizer.json"), "unsupported normalizer type 'Lowercase'");
}

}  // namespace
}  // namespace ember
