#include "ember/tokenizer/spm_tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>

#include "ember/core/error.h"

namespace ember {

namespace {

using json = nlohmann::json;

const char* const kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error::in_file(ErrorKind::InvalidFile, path, what);
}

// How the text's spaces become '▁': returns add_space_prefix. Accepts what HF's converters write:
// normalizer Sequence[Prepend '▁', Replace ' ' -> '▁'] (Llama 2), Replace alone (Gemma), or no
// normalizer and a Metaspace pre-tokenizer that does not split (newer Llama 2 conversions).
bool space_handling(const json& root, const std::string& path) {
  const json& normalizer = root.value("normalizer", json());
  const json& pre = root.value("pre_tokenizer", json());
  auto is_space_replace = [](const json& n) {
    return n.value("type", "") == "Replace" && n.value("content", "") == kSpace &&
           n.contains("pattern") && n["pattern"].value("String", "") == " ";
  };
  if (!normalizer.is_null()) {
    if (!pre.is_null()) fail(path, "unsupported pre_tokenizer with a SentencePiece normalizer");
    if (is_space_replace(normalizer)) return false;
    if (normalizer.value("type", "") == "Sequence" && normalizer.contains("normalizers")) {
      bool prepend = false, replace = false;
      for (const json& n : normalizer["normalizers"]) {
        if (n.value("type", "") == "Prepend" && n.value("prepend", "") == kSpace) {
          prepend = true;
        } else if (is_space_replace(n)) {
          replace = true;
        } else {
          fail(path, "unsupported normalizer step '" + n.value("type", "?") + "'");
        }
      }
      if (replace) return prepend;
    }
    fail(path, "unsupported normalizer for SentencePiece-style BPE");
  }
  if (pre.value("type", "") == "Metaspace" && pre.value("replacement", "") == kSpace &&
      !pre.value("split", false)) {
    return pre.value("prepend_scheme", "always") != "never";
  }
  fail(path,
       "SentencePiece-style BPE needs a normalizer or a Metaspace pre-tokenizer that turns "
       "spaces into U+2581");
}

bool is_byte_piece(const std::string& p) {
  return p.size() == 6 && p.rfind("<0x", 0) == 0 && p[5] == '>';
}

}  // namespace

bool is_sentencepiece_style_json(const json& root) {
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) return false;
  const json& model = root["model"];
  return model.value("type", "BPE") == "BPE" && model.value("byte_fallback", false) == true;
}

void check_dense_ids(int32_t max_id, size_t entries, const std::string& path) {
  if (static_cast<uint64_t>(max_id) >= 2 * static_cast<uint64_t>(entries) + 1024) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "token id " + std::to_string(max_id) + " is far past the " +
                             std::to_string(entries) +
                             " tokens the file has (ids must number the vocabulary densely)");
  }
}

std::unique_ptr<SpmTokenizer> load_spm_tokenizer_json(const json& root, const std::string& path) {
  const json& model = root["model"];
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail(path, "missing \"model.vocab\"");
  std::unordered_map<std::string, int32_t> ids;
  int32_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      fail(path, "\"model.vocab[" + it.key() + "]\" is not a valid token id");
    }
    ids[it.key()] = it.value().get<int32_t>();
    max_id = std::max(max_id, it.value().get<int32_t>());
  }
  const json& added = root.value("added_tokens", json::array());
  if (!added.is_array()) fail(path, "\"added_tokens\" is not an array");
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      fail(path, "an \"added_tokens\" entry has no valid id");
    }
    max_id = std::max(max_id, a["id"].get<int32_t>());
  }
  if (max_id < 0) fail(path, "empty vocabulary");
  check_dense_ids(max_id, ids.size() + added.size(), path);

  SpmVocab v;
  v.pieces.assign(static_cast<size_t>(max_id) + 1, std::string());
  v.scores.assign(v.pieces.size(), -std::numeric_limits<float>::max());
  v.types.assign(v.pieces.size(), SpmTokenType::Unused);
  for (const auto& [piece, id] : ids) {
    v.pieces[id] = piece;
    v.types[id] = is_byte_piece(piece) ? SpmTokenType::Byte : SpmTokenType::Normal;
  }
  for (const json& a : added) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string()) {
      fail(path, "malformed \"added_tokens\" entry");
    }
    const auto id = a["id"].get<int32_t>();
    v.pieces[id] = a["content"].get<std::string>();
    v.types[id] = a.value("special", false) ? SpmTokenType::Control : SpmTokenType::UserDefined;
    ids[v.pieces[id]] = id;
  }
  // Scores: -(rank of the first merge that makes the piece); single characters and pieces no
  // merge makes keep the lowest score (they are never a merge's result).
  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) fail(path, "\"model.merges\" is not an array");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string merged;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) fail(path, "merge '" + s + "' is not 'left right'");
      merged = s.substr(0, space) + s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merged = m[0].get<std::string>() + m[1].get<std::string>();
    } else {
      fail(path,
           "\"model.merges[" + std::to_string(rank) + "]\" is neither 'left right' nor a pair");
    }
    const auto it = ids.find(merged);
    if (it == ids.end())
      fail(path,
           "merge " + std::to_string(rank) + " makes '" + merged + "', not in the vocabulary");
    float& score = v.scores[static_cast<size_t>(it->second)];
    score = std::max(score, -static_cast<float>(rank));
  }
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.scores[i] == -std::numeric_limits<float>::max()) v.scores[i] = -1e9f;
  }
  v.unk_id = -1;
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    if (auto it = ids.find(model["unk_token"].get<std::string>()); it != ids.end()) {
      v.unk_id = it->second;
      v.types[it->second] = SpmTokenType::Unknown;
    }
  }
  v.add_space_prefix = space_handling(root, path);

  // bos / eos / add_bos: tokenizer_config.json beside the file, else the usual spellings.
  auto id_of = [&](const std::string& s) {
    const auto it = ids.find(s);
    return it == ids.end() ? -1 : it->second;
  };
  v.bos_id = id_of("<s>") >= 0 ? id_of("<s>") : id_of("<bos>");
  v.eos_id = id_of("</s>") >= 0 ? id_of("</s>") : id_of("<eos>");
  v.add_bos = true;
  const std::filesystem::path config =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    std::ifstream in(config);
    const json c = json::parse(in, nullptr, /*allow_exceptions=*/false);
    auto token = [&](const char* key) -> std::string {
      if (!c.is_object() || !c.contains(key)) return "";
      const json& t = c[key];
      if (t.is_string()) return t.get<std::string>();
      return t.is_object() ? t.value("content", "") : "";
    };
    if (const int32_t id = id_of(token("bos_token")); id >= 0) v.bos_id = id;
    if (const int32_t id = id_of(token("eos_token")); id >= 0) v.eos_id = id;
    if (c.is_object() && c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) {
      v.add_bos = c["add_bos_token"].get<bool>();
    }
  }
  if (v.bos_id < 0) v.add_bos = false;
  return std::make_unique<SpmTokenizer>(std::move(v));
}

}  // namespace ember
