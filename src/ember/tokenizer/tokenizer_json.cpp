#include "ember/tokenizer/tokenizer_json.h"

#include "ember/tokenizer/spm_tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/core/error.h"
#include "ember/core/json_depth.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/byte_level.h"
#include "ember/tokenizer/pretokenizer.h"

namespace ember {

namespace {

using nlohmann::json;

// Reads and parses a JSON file; every failure names the file.
json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error::in_file(ErrorKind::NotFound, path, "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (!byte_level::is_valid_utf8(text)) {
    throw Error::in_file(ErrorKind::InvalidFile, path, "file is not valid UTF-8");
  }
  check_json_depth(text, path, /*is_file=*/true);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error::in_file(ErrorKind::InvalidFile, path, std::string("invalid JSON: ") + e.what());
  }
}

// Path-aware accessors: `what` names the JSON location for messages ("model.vocab").
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error::in_file(ErrorKind::InvalidFile, path_, what);
  }

  const json& object(const json& parent, const char* key, const std::string& what) const {
    const auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) fail("missing \"" + what + "\"");
    if (!it->is_object()) fail("\"" + what + "\" is not an object");
    return *it;
  }
  std::string string(const json& v, const std::string& what) const {
    if (!v.is_string()) fail("\"" + what + "\" is not a string");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const char* key, bool fallback, const std::string& what) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail("\"" + what + "." + key + "\" is not a boolean");
    return it->get<bool>();
  }
  int32_t id(const json& v, const std::string& what) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      fail("\"" + what + "\" is not a valid token id");
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void parse_pretokenizer(const Reader& r, const json& node, const std::string& what,
                        Pretokenizer& pre) {
  if (node.is_null()) return;
  if (!node.is_object()) r.fail("\"" + what + "\" is not an object");
  const std::string type = r.string(node.value("type", json()), what + ".type");
  try {
    if (type == "Sequence") {
      const json& steps = node.value("pretokenizers", json());
      if (!steps.is_array()) r.fail("\"" + what + ".pretokenizers\" is not an array");
      for (size_t i = 0; i < steps.size(); ++i) {
        parse_pretokenizer(r, steps[i], what + ".pretokenizers[" + std::to_string(i) + "]", pre);
      }
    } else if (type == "Split") {
      const json& pattern = node.value("pattern", json());
      const bool is_regex = pattern.is_object() && pattern.contains("Regex");
      const bool is_string = pattern.is_object() && pattern.contains("String");
      if (!is_regex && !is_string) r.fail("\"" + what + ".pattern\" has no Regex or String");
      const std::string text = r.string(pattern[is_regex ? "Regex" : "String"], what + ".pattern");
      const std::string behavior_name =
          r.string(node.value("behavior", json()), what + ".behavior");
      const std::optional<SplitBehavior> behavior = parse_split_behavior(behavior_name);
      if (!behavior) r.fail("unsupported split behavior '" + behavior_name + "' in " + what);
      pre.add_split(text, *behavior, r.flag(node, "invert", false, what), !is_regex);
    } else if (type == "ByteLevel") {
      // HF's defaults: add_prefix_space true, use_regex true.
      pre.add_byte_level(r.flag(node, "add_prefix_space", true, what),
                         r.flag(node, "use_regex", true, what));
    } else if (type == "Digits") {
      pre.add_digits(r.flag(node, "individual_digits", false, what));
    } else if (type == "Punctuation") {
      const std::string name =
          node.contains("behavior") ? r.string(node["behavior"], what + ".behavior") : "Isolated";
      const std::optional<SplitBehavior> behavior = parse_split_behavior(name);
      if (!behavior) r.fail("unsupported split behavior '" + name + "' in " + what);
      pre.add_punctuation(*behavior);
    } else {
      r.fail("unsupported pre-tokenizer type '" + type + "' in " + what);
    }
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind(r.path() + ":", 0) == 0) throw;
    r.fail(message + " (" + what + ")");  // e.g. an invalid regex
  }
}

// The id of a named token: a vocabulary or added-token spelling.
std::optional<int32_t> lookup(const std::unordered_map<std::string, int32_t>& ids,
                              const std::string& name) {
  const auto it = ids.find(name);
  if (it == ids.end()) return std::nullopt;
  return it->second;
}

// Whether the post-processor prepends a special token to a single sequence, and which.
std::optional<std::string> post_processor_bos(const Reader& r, const json& node,
                                              const std::unordered_map<std::string, int32_t>& ids,
                                              int32_t& bos_id) {
  if (!node.is_object()) return std::nullopt;
  const std::string type = node.value("type", "");
  if (type == "Sequence" && node.contains("processors") && node["processors"].is_array()) {
    for (const json& p : node["processors"]) {
      if (auto found = post_processor_bos(r, p, ids, bos_id)) return found;
    }
  } else if (type == "TemplateProcessing") {
    const json& single = node.value("single", json());
    if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
      const std::string name = r.string(single[0]["SpecialToken"].value("id", json()),
                                        "post_processor.single[0].SpecialToken.id");
      // special_tokens maps the template's name to the ids it stands for.
      const json& special = node.value("special_tokens", json());
      if (special.is_object() && special.contains(name) && special[name].contains("ids") &&
          special[name]["ids"].is_array() && !special[name]["ids"].empty()) {
        bos_id = r.id(special[name]["ids"][0], "post_processor.special_tokens." + name + ".ids[0]");
      } else if (auto id = lookup(ids, name)) {
        bos_id = *id;
      }
      return name;
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    const json& cls = node.value("cls", json());
    if (cls.is_array() && cls.size() == 2) {
      bos_id = r.id(cls[1], "post_processor.cls");
      return r.string(cls[0], "post_processor.cls");
    }
  }
  return std::nullopt;
}

// bos_token / eos_token in tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<int32_t> config_id(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  const json& v = it->is_array() && !it->empty() ? (*it)[0] : *it;  // eos may be a list
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    return std::nullopt;
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

using TokenIds = std::unordered_map<std::string, int32_t>;

// Rejects BPE variants the tokenizer does not implement, before any table is read.
void check_supported_model(const Reader& r, const json& root, const json& model) {
  const std::string type =
      model.contains("type") ? r.string(model["type"], "model.type") : std::string("BPE");
  if (type != "BPE") r.fail("unsupported model type '" + type + "' (only BPE is supported)");
  if (r.flag(model, "byte_fallback", false, "model")) {
    r.fail("unsupported BPE with byte_fallback (SentencePiece-style BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      r.fail(std::string("unsupported model.") + key);
    }
  }
  const json& normalizer = root.value("normalizer", json());
  if (!normalizer.is_null()) {
    // NFC (Qwen2) leaves already-composed text alone; it is accepted and not applied.
    const std::string ntype = normalizer.value("type", "");
    if (ntype != "NFC") r.fail("unsupported normalizer type '" + ntype + "'");
  }
}

// model.vocab: spelling -> id. Raises `max_id` to the largest id seen.
TokenIds read_vocab(const Reader& r, const json& model, int32_t& max_id) {
  const json& vocab_json = r.object(model, "vocab", "model.vocab");
  TokenIds ids;
  ids.reserve(vocab_json.size());
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    const int32_t id = r.id(it.value(), "model.vocab[" + it.key() + "]");
    ids.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  return ids;
}

// added_tokens, in file order. Raises `max_id` to the largest id seen.
std::vector<AddedToken> read_added_tokens(const Reader& r, const json& root, int32_t& max_id) {
  std::vector<AddedToken> added;
  const json& added_json = root.value("added_tokens", json::array());
  if (!added_json.is_array()) r.fail("\"added_tokens\" is not an array");
  for (size_t i = 0; i < added_json.size(); ++i) {
    const json& a = added_json[i];
    const std::string what = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object()) r.fail("\"" + what + "\" is not an object");
    AddedToken t;
    t.id = r.id(a.value("id", json()), what + ".id");
    t.content = r.string(a.value("content", json()), what + ".content");
    if (t.content.empty()) r.fail("\"" + what + ".content\" is empty");
    t.special = r.flag(a, "special", false, what);
    t.lstrip = r.flag(a, "lstrip", false, what);
    t.rstrip = r.flag(a, "rstrip", false, what);
    t.single_word = r.flag(a, "single_word", false, what);
    t.normalized = r.flag(a, "normalized", !t.special, what);
    max_id = std::max(max_id, t.id);
    added.push_back(std::move(t));
  }
  return added;
}

// Lays the vocabulary and added tokens out by id (ids dense in [0, max_id]; holes are Unused) and
// adds the added tokens' spellings to `ids`.
void fill_tokens(const Reader& r, TokenIds& ids, std::vector<AddedToken> added, int32_t max_id,
                 BpeVocab& vocab) {
  check_dense_ids(max_id, ids.size() + added.size(), r.path());
  vocab.tokens.assign(static_cast<size_t>(max_id) + 1, std::string());
  vocab.kinds.assign(vocab.tokens.size(), BpeTokenKind::Unused);
  for (const auto& [spelling, id] : ids) {
    if (vocab.kinds[id] == BpeTokenKind::Normal) {
      r.fail("model.vocab gives id " + std::to_string(id) + " to both '" + vocab.tokens[id] +
             "' and '" + spelling + "'");
    }
    vocab.tokens[id] = spelling;
    vocab.kinds[id] = BpeTokenKind::Normal;
  }
  for (const AddedToken& t : added) {
    // An added token that is also a vocabulary entry spelled differently (in the byte alphabet)
    // stays a normal token for merging; otherwise its literal text is the entry.
    if (vocab.kinds[t.id] == BpeTokenKind::Normal && vocab.tokens[t.id] != t.content) continue;
    vocab.tokens[t.id] = t.content;
    vocab.kinds[t.id] = t.special ? BpeTokenKind::Control : BpeTokenKind::UserDefined;
    ids.emplace(t.content, t.id);
  }
  vocab.added_tokens = std::move(added);
}

// model.merges in rank order, as "left right" strings (older files) or [left, right] pairs.
void read_merges(const Reader& r, const json& model, BpeVocab& vocab) {
  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) r.fail("\"model.merges\" is not an array");
  vocab.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string what = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      // Byte-alphabet spellings never contain a plain space.
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        r.fail("\"" + what + "\" ('" + s + "') is not of the form 'left right'");
      }
      vocab.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      vocab.merges.emplace_back(r.string(m[0], what), r.string(m[1], what));
    } else {
      r.fail("\"" + what + "\" is neither 'left right' nor [left, right]");
    }
  }
}

// The files beside tokenizer.json: tokenizer_config.json (transformers) overrides bos/eos and
// add_bos_token; config.json only fills in ids still missing.
void apply_beside_configs(const std::string& path, const TokenIds& ids, BpeVocab& vocab) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::filesystem::path tok_config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(tok_config)) {
    const json config = read_json(tok_config.string());
    if (config.is_object()) {
      if (auto name = config_token(config, "bos_token")) {
        if (auto id = lookup(ids, *name)) vocab.bos_id = *id;
      }
      if (auto name = config_token(config, "eos_token")) {
        if (auto id = lookup(ids, *name)) vocab.eos_id = *id;
      }
      if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
        vocab.add_bos = config["add_bos_token"].get<bool>();
      }
    }
  }
  const std::filesystem::path model_config = dir / "config.json";
  if ((vocab.bos_id < 0 || vocab.eos_id < 0) && std::filesystem::exists(model_config)) {
    const json config = read_json(model_config.string());
    if (config.is_object()) {
      if (vocab.bos_id < 0) vocab.bos_id = config_id(config, "bos_token_id").value_or(-1);
      if (vocab.eos_id < 0) vocab.eos_id = config_id(config, "eos_token_id").value_or(-1);
    }
  }
}

}  // namespace

namespace {

// What the readers above do not check field by field (a section that is null where an object
// belongs, a number where a string does) surfaces as nlohmann's exception: one error naming the
// file instead.
template <typename Load>
auto with_json_errors_named(const std::string& path, Load&& load) {
  try {
    return load();
  } catch (const json::exception& e) {
    throw Error(ErrorKind::InvalidFile,
                path + ": unexpected tokenizer.json structure: " + e.what());
  }
}

std::unique_ptr<BpeTokenizer> load_bpe_tokenizer_json_unchecked(const std::string& path) {
  const Reader r(path);
  const json root = read_json(path);
  if (!root.is_object()) r.fail("top level is not a JSON object");
  const json& model = r.object(root, "model", "model");
  check_supported_model(r, root, model);

  int32_t max_id = -1;
  TokenIds ids = read_vocab(r, model, max_id);
  std::vector<AddedToken> added = read_added_tokens(r, root, max_id);
  if (max_id < 0) r.fail("empty vocabulary");

  BpeVocab vocab;
  vocab.source = path;
  vocab.strict_merges = true;
  fill_tokens(r, ids, std::move(added), max_id, vocab);
  read_merges(r, model, vocab);
  vocab.ignore_merges = r.flag(model, "ignore_merges", false, "model");
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    if (auto id = lookup(ids, model["unk_token"].get<std::string>())) vocab.unk_id = *id;
  }

  parse_pretokenizer(r, root.value("pre_tokenizer", json()), "pre_tokenizer", vocab.pretokenizer);

  int32_t bos_id = -1;
  vocab.add_bos =
      post_processor_bos(r, root.value("post_processor", json()), ids, bos_id).has_value();
  vocab.bos_id = bos_id;
  apply_beside_configs(path, ids, vocab);
  if (vocab.add_bos && vocab.bos_id < 0) vocab.add_bos = false;

  return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_bpe_tokenizer_json(const std::string& path) {
  return with_json_errors_named(path, [&] { return load_bpe_tokenizer_json_unchecked(path); });
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  // SentencePiece-style BPE (byte_fallback: Llama 2, Mistral, Phi-3, Gemma) runs on the
  // SentencePiece tokenizer; everything else is byte-level BPE.
  return with_json_errors_named(path, [&]() -> std::unique_ptr<Tokenizer> {
    const json root = read_json(path);
    if (is_sentencepiece_style_json(root)) return load_spm_tokenizer_json(root, path);
    return load_bpe_tokenizer_json_unchecked(path);
  });
}

}  // namespace ember
