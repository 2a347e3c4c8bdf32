#include "ember/tokenizer/gguf_tokenizer_metadata.h"

#include <string_view>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/gguf_writer.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/byte_level.h"
#include "ember/tokenizer/pretokenizer.h"
#include "ember/tokenizer/spm_tokenizer.h"

namespace ember {

namespace {

// Texts that tell the pre-tokenizer presets apart: contractions in both cases, digit runs of
// every length, punctuation and symbol runs, runs of spaces/tabs/newlines (with and without text
// after them), accented Latin, CJK, Hangul, emoji and code.
constexpr const char* kProbeTexts[] = {
    "Hello world, it's a test! I'm sure they've DONE it; WE'LL see, DON'T we?",
    "numbers: 1 12 123 1234 12345 1234567 3.14159 0.5e-3 +42 -7 1,000,000 2024-01-31",
    "  two leading spaces\n\n\ttab\r\nCRLF   three   spaces at the end   ",
    "\n\n\n   \n  x\n \n",
    "façade naïve Ünïcödé ÀÉÎ — em-dash… ellipsis «quotes» ¿qué? ¡sí!",
    "中文字符测试，标点。日本語のテキスト、カタカナ 한국어 텍스트입니다",
    "emoji 🦙🚀🎉 mixed123abc abc123 ABC'S x'y'z",
    "code: def f(x_1): return x**2 + y; // comment <tag attr=\"v\">$HOME ~/a|b^c`d`",
    "....!!!???***===---___\\\\///",
    "Привет мир! Ελληνικά κείμενα. עברית العربية हिन्दी ไทย",
};

// Canonical tokenizer.ggml.pre names, one per preset group in pretokenizer.cpp, most common
// models first; the first whose preset reproduces the tokenizer is written.
constexpr const char* kPreNames[] = {
    "llama-bpe",      "qwen2",        "smollm",      "gpt-2", "dbrx",   "falcon",
    "deepseek-coder", "deepseek-llm", "deepseek-v3", "bloom", "viking", "default",
};

// The pieces of `text`, each spelled in the byte-level alphabet.
std::vector<std::string> spelled_pieces(const Pretokenizer& p, std::string_view text) {
  PretokenizedText out;
  p.run(text, out);
  std::vector<std::string> pieces;
  pieces.reserve(out.pieces.size());
  for (size_t i = 0; i < out.pieces.size(); ++i) {
    pieces.push_back(out.needs_byte_level ? byte_level::encode(out.piece(i))
                                          : std::string(out.piece(i)));
  }
  return pieces;
}

bool splits_alike(const Pretokenizer& a, const Pretokenizer& b) {
  for (const char* text : kProbeTexts) {
    if (spelled_pieces(a, text) != spelled_pieces(b, text)) return false;
  }
  return true;
}

void check_vocab_size(size_t n_tokens, const TokenizerExportOptions& o) {
  if (o.vocab_size > 0 && static_cast<int64_t>(n_tokens) > o.vocab_size) {
    throw Error(ErrorKind::InvalidArgument, "the tokenizer has " + std::to_string(n_tokens) +
                                                " tokens but the model's embedding has only " +
                                                std::to_string(o.vocab_size) + " rows");
  }
}

// Special token ids; -1 (none) is left out.
void set_token_id(GgufWriter& w, const char* key, int32_t id) {
  if (id >= 0) w.set(key, gguf_value::u32(static_cast<uint32_t>(id)));
}

void add_common_keys(GgufWriter& w, const TokenizerExportOptions& o) {
  if (o.pad_id) set_token_id(w, "tokenizer.ggml.padding_token_id", *o.pad_id);
  if (!o.chat_template.empty()) {
    w.set("tokenizer.chat_template", gguf_value::string(o.chat_template));
  }
}

void add_spm(GgufWriter& w, const SpmTokenizer& spm, const TokenizerExportOptions& o) {
  const auto n = static_cast<size_t>(spm.vocab_size());
  check_vocab_size(n, o);
  const size_t total = o.vocab_size > 0 ? static_cast<size_t>(o.vocab_size) : n;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (size_t i = 0; i < total; ++i) {
    const auto id = static_cast<int32_t>(i);
    tokens.push_back(i < n ? spm.piece(id) : "[PAD" + std::to_string(i) + "]");
    scores.push_back(i < n ? spm.score(id) : -1000.0f);
    types.push_back(i < n ? static_cast<int32_t>(spm.token_type(id))
                          : static_cast<int32_t>(SpmTokenType::Unused));
  }
  w.set("tokenizer.ggml.model", gguf_value::string("llama"));
  w.set("tokenizer.ggml.tokens", gguf_value::string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf_value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf_value::i32_array(types));
  set_token_id(w, "tokenizer.ggml.unknown_token_id", spm.unk_id());
  set_token_id(w, "tokenizer.ggml.bos_token_id", spm.bos_id());
  set_token_id(w, "tokenizer.ggml.eos_token_id", spm.eos_id());
  // Readers default both to true; write them only when they differ.
  if (!spm.add_bos_default()) w.set("tokenizer.ggml.add_bos_token", gguf_value::boolean(false));
  if (!spm.add_space_prefix()) {
    w.set("tokenizer.ggml.add_space_prefix", gguf_value::boolean(false));
  }
  add_common_keys(w, o);
}

void add_bpe(GgufWriter& w, const BpeTokenizer& bpe, const TokenizerExportOptions& o) {
  const BpeVocab& v = bpe.vocab();
  const std::optional<std::string> pre = gguf_pretokenizer_name(v.pretokenizer, v.ignore_merges);
  if (!pre) {
    throw Error(ErrorKind::Unsupported,
                "the tokenizer's pre-tokenizer matches none of the presets GGUF names in "
                "tokenizer.ggml.pre, so a GGUF reader could not reproduce it");
  }
  const size_t n = v.tokens.size();
  check_vocab_size(n, o);
  const size_t total = o.vocab_size > 0 ? static_cast<size_t>(o.vocab_size) : n;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (size_t i = 0; i < total; ++i) {
    const BpeTokenKind kind =
        i < n ? bpe.token_kind(static_cast<int32_t>(i)) : BpeTokenKind::Unused;
    // Ids the tokenizer leaves unused (holes, rows past it) get a name no text can produce.
    const bool hole = i >= n || (kind == BpeTokenKind::Unused && v.tokens[i].empty());
    tokens.push_back(hole ? "[PAD" + std::to_string(i) + "]" : v.tokens[i]);
    types.push_back(static_cast<int32_t>(kind));
  }
  std::vector<std::string> merges;
  merges.reserve(v.merges.size());
  for (const auto& [left, right] : v.merges) merges.push_back(left + " " + right);
  w.set("tokenizer.ggml.model", gguf_value::string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf_value::string(*pre));
  w.set("tokenizer.ggml.tokens", gguf_value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf_value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf_value::string_array(merges));
  set_token_id(w, "tokenizer.ggml.bos_token_id", bpe.bos_id());
  set_token_id(w, "tokenizer.ggml.eos_token_id", bpe.eos_id());
  set_token_id(w, "tokenizer.ggml.unknown_token_id", bpe.unk_id());
  // The presets' own default differs between pre-tokenizers: always say it.
  w.set("tokenizer.ggml.add_bos_token", gguf_value::boolean(bpe.add_bos_default()));
  add_common_keys(w, o);
}

}  // namespace

std::optional<std::string> gguf_pretokenizer_name(const Pretokenizer& pretokenizer,
                                                  bool ignore_merges) {
  for (const char* name : kPreNames) {
    const std::optional<GgufPretokenizerPreset> preset = gguf_pretokenizer_preset(name);
    if (!preset || preset->ignore_merges != ignore_merges) continue;
    if (splits_alike(pretokenizer, preset->pretokenizer)) return std::string(name);
  }
  return std::nullopt;
}

void add_tokenizer_metadata(GgufWriter& writer, const Tokenizer& tokenizer,
                            const TokenizerExportOptions& options) {
  if (const auto* spm = dynamic_cast<const SpmTokenizer*>(&tokenizer)) {
    return add_spm(writer, *spm, options);
  }
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tokenizer)) {
    return add_bpe(writer, *bpe, options);
  }
  throw Error(ErrorKind::Unsupported, "this tokenizer has no GGUF form");
}

}  // namespace ember
