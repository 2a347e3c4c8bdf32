// SentencePiece-style tokenizer.json (Llama 2 / Mistral / Phi-3 / Gemma: BPE with byte_fallback)
// runs on the SentencePiece tokenizer. The test writes llama.cpp's llama-spm vocabulary (the
// ../shared GGUF) as HF's converter would — vocab, merges in SentencePiece score order, added
// tokens, normalizer Prepend + Replace — and holds the JSON-loaded tokenizer to the same
// conformance suite as the GGUF one.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "ember/formats/gguf.h"
#include "ember/model/model_quantizer.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "ember/tokenizer/tokenizer_json.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Byte offsets of the UTF-8 character boundaries inside s (excluding 0 and s.size()).
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 1; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  }
  return out;
}

// llama-spm's GGUF vocabulary as an HF tokenizer.json in `dir`.
fs::path write_spm_json(const GgufFile& gguf, const fs::path& dir) {
  const auto& tokens = gguf.find("tokenizer.ggml.tokens")->array;
  const auto& scores = gguf.find("tokenizer.ggml.scores")->array;
  const auto& types = gguf.find("tokenizer.ggml.token_type")->array;
  json vocab = json::object();
  std::unordered_set<std::string> normal;
  json added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& piece = tokens[i].string_value;
    const int64_t type = types[i].as_int().value_or(1);
    vocab[piece] = i;
    if (type == 1) normal.insert(piece);
    if (type == 3) added.push_back({{"id", i}, {"content", piece}, {"special", true}});
  }
  // Merges in SentencePiece score order: every split of a piece into two vocabulary pieces.
  std::vector<size_t> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return *scores[a].as_float() > *scores[b].as_float();
  });
  json merges = json::array();
  for (size_t i : order) {
    const std::string& piece = tokens[i].string_value;
    if (!normal.count(piece)) continue;
    for (size_t cut : char_boundaries(piece)) {
      const std::string left = piece.substr(0, cut), right = piece.substr(cut);
      if (vocab.contains(left) && vocab.contains(right)) merges.push_back(left + " " + right);
    }
  }
  const std::string space = "\xE2\x96\x81";
  json root = {
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", merges},
        {"byte_fallback", true},
        {"unk_token", "<unk>"}}},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array(
             {{{"type", "Prepend"}, {"prepend", space}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}})}}},
      {"pre_tokenizer", nullptr}};
  std::ofstream(dir / "tokenizer.json") << root.dump();
  return dir / "tokenizer.json";
}

TEST(SpmTokenizerJson, LlamaSpmSuiteThroughHfJson) {
  const fs::path dir = test::fixture("tokenizer-tests");
  const fs::path gguf_path = dir / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(gguf_path)) GTEST_SKIP() << "no tokenizer-tests fixture";
  const GgufFile gguf(gguf_path.string());
  const fs::path json_path = write_spm_json(gguf, test::scratch_dir("spm-json"));
  const auto tok = load_tokenizer_json(json_path.string());
  ASSERT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);

  const std::string inp = read_text(dir / "ggml-vocab-llama-spm.gguf.inp");
  std::istringstream out(read_text(dir / "ggml-vocab-llama-spm.gguf.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0, checked = 0, passed = 0;
  for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    const std::string text = inp.substr(pos, next - pos);
    std::string line;
    std::getline(out, line);
    std::istringstream ids_in(line);
    std::vector<int32_t> expected;
    for (int32_t id; ids_in >> id;) expected.push_back(id);
    const std::vector<int32_t> got = tok->encode(text, /*add_bos=*/false);
    ++checked;
    if (got == expected) {
      ++passed;
    } else {
      ADD_FAILURE() << "string " << checked - 1 << " differs";
    }
  }
  EXPECT_GE(checked, 40u);
  EXPECT_EQ(passed, checked);
}

// `ember quantize` of an HF directory with such a tokenizer.json writes it as a `llama` GGUF
// vocabulary that tokenizes the same (a 1-layer Llama with the 32,000-piece vocabulary).
TEST(SpmTokenizerJson, QuantizedGgufKeepsTheTokenizer) {
  const fs::path fixtures = test::fixture("tokenizer-tests");
  const fs::path gguf_path = fixtures / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(gguf_path)) GTEST_SKIP() << "no tokenizer-tests fixture";
  const fs::path dir = test::scratch_dir("spm-json-quantize");
  write_spm_json(GgufFile(gguf_path.string()), dir);
  std::ofstream(dir / "config.json") << json{
      {"architectures", {"LlamaForCausalLM"}},
      {"hidden_size", 64},
      {"intermediate_size", 128},
      {"num_hidden_layers", 1},
      {"num_attention_heads", 2},
      {"vocab_size", 32000},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"}}.dump();
  test::SafetensorsWriter w;
  auto zeros = [](int64_t n) { return test::f32_bytes(std::vector<float>(n, 0.01f)); };
  w.tensor("model.embed_tokens.weight", "F32", {32000, 64}, zeros(32000 * 64));
  w.tensor("model.norm.weight", "F32", {64}, zeros(64));
  const std::string p = "model.layers.0.";
  for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
    w.tensor(p + n, "F32", {64}, zeros(64));
  }
  for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                        "self_attn.v_proj.weight", "self_attn.o_proj.weight"}) {
    w.tensor(p + n, "F32", {64, 64}, zeros(64 * 64));
  }
  w.tensor(p + "mlp.gate_proj.weight", "F32", {128, 64}, zeros(128 * 64));
  w.tensor(p + "mlp.up_proj.weight", "F32", {128, 64}, zeros(128 * 64));
  w.tensor(p + "mlp.down_proj.weight", "F32", {64, 128}, zeros(64 * 128));
  test::write_bytes(dir / "model.safetensors", w.build());
  QuantizeOptions q;
  q.input = dir.string();
  q.output = (dir / "out.gguf").string();
  q.preset = QuantPreset::Q8_0;
  quantize_model(q);
  const GgufFile out(q.output);
  EXPECT_EQ(out.get_string("tokenizer.ggml.model"), "llama");
  const auto from_json = load_tokenizer_json((dir / "tokenizer.json").string());
  const auto from_gguf = load_tokenizer_from_gguf(out);
  for (const char* text :
       {"Hello world", " leading space", "Ünïcödé 🦙 and\ttabs\n\nnewlines"}) {
    EXPECT_EQ(from_gguf->encode(text, true), from_json->encode(text, true)) << text;
  }
}

// Other SentencePiece-style spellings are refused by name.
TEST(SpmTokenizerJson, UnsupportedNormalizerIsNamed) {
  const fs::path dir = test::scratch_dir("spm-json-bad");
  json root = {{"model",
                {{"type", "BPE"},
                 {"vocab", {{"<unk>", 0}, {"a", 1}}},
                 {"merges", json::array()},
                 {"byte_fallback", true}}},
               {"normalizer", {{"type", "NFKC"}}}};
  std::ofstream(dir / "tokenizer.json") << root.dump();
  const std::string msg =
      test::error_message([&] { load_tokenizer_json((dir / "tokenizer.json").string()); });
  EXPECT_NE(msg.find("unsupported normalizer for SentencePiece-style BPE"), std::string::npos)
      << msg;
}

// Found by fuzzing (fuzz/corpus/tokenizer_json/crash-null-section.json): a section that is null
// or of the wrong JSON type escaped as nlohmann's exception; now one error naming the file.
TEST(SpmTokenizerJson, SectionsOfTheWrongTypeAreNamedErrors) {
  const fs::path dir = test::scratch_dir("spm-json-types");
  const json model = {{"type", "BPE"},
                      {"vocab", {{"<unk>", 0}, {"a", 1}}},
                      {"merges", json::array()},
                      {"byte_fallback", true}};
  for (const json& root : {json{{"model", model}, {"normalizer", nullptr}},
                           json{{"model", model}, {"normalizer", {{"type", 7}}}},
                           json{{"model", model}, {"pre_tokenizer", json::array({1})}}}) {
    std::ofstream(dir / "tokenizer.json") << root.dump();
    const std::string path = (dir / "tokenizer.json").string();
    const std::string msg = test::error_message([&] { load_tokenizer_json(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << root.dump() << ": " << msg;
  }
}

// Found by fuzzing (fuzz/corpus/tokenizer_json/crash-id-past-vocabulary.json): one id of ~2^30
// sized the vocabulary (a 32 GB allocation); and a negative added-token id indexed before the
// table. Both are refused, naming the file.
TEST(SpmTokenizerJson, IdsFarPastTheVocabularyOrNegativeAreRefused) {
  const fs::path dir = test::scratch_dir("spm-json-ids");
  const json model = {{"type", "BPE"},
                      {"vocab", {{"<unk>", 0}, {"a", 1}}},
                      {"merges", json::array()},
                      {"byte_fallback", true}};
  json byte_level = model;
  byte_level["byte_fallback"] = false;
  byte_level["vocab"]["b"] = 1 << 30;
  const std::pair<json, std::string> cases[] = {
      {json{{"model", byte_level}}, "far past the 3 tokens"},
      {json{{"model", model}, {"added_tokens", {{{"id", 1 << 30}, {"content", "<x>"}}}}},
       "far past the 3 tokens"},
      {json{{"model", model}, {"added_tokens", {{{"id", -1}, {"content", "<x>"}}}}}, "no valid id"},
  };
  for (const auto& [root, expected] : cases) {
    std::ofstream(dir / "tokenizer.json") << root.dump();
    const std::string msg =
        test::error_message([&] { load_tokenizer_json((dir / "tokenizer.json").string()); });
    EXPECT_NE(msg.find(expected), std::string::npos) << root.dump() << ": " << msg;
  }
}

}  // namespace
}  // namespace ember
