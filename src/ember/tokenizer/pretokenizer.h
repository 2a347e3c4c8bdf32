// Pre-tokenization for byte-level BPE: the text is cut into pieces (words, number runs,
// punctuation runs, whitespace runs) that BPE then encodes independently, never merging across a
// piece boundary. A Pretokenizer is a sequence of steps mirroring HF tokenizers' pre-tokenizers:
// regex Split (with its delimiter behaviour), ByteLevel (GPT-2's own regex plus the byte-level
// alphabet), Digits and Punctuation. Regexes are compiled once with PCRE2 (UTF + Unicode
// properties, JIT); PCRE2_MATCH_INVALID_UTF lets invalid UTF-8 through unmatched, so malformed
// input ends up in pieces of its own instead of failing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember {

// What a Split does with the text its pattern matches (HF SplitDelimiterBehavior).
enum class SplitBehavior {
  Removed,             // matches are dropped
  Isolated,            // matches become pieces of their own
  MergedWithPrevious,  // each match ends the piece before it
  MergedWithNext,      // each match starts the piece after it
  Contiguous,          // adjacent matches form one piece
};
// "Isolated", "Removed", ... as tokenizer.json spells them; nullopt for other names.
std::optional<SplitBehavior> parse_split_behavior(std::string_view name);

class CompiledRegex;  // a PCRE2 pattern (pretokenizer.cpp)

// Pre-tokenizer output: pieces as (offset, length) ranges of `text`.
struct PretokenizedText {
  std::string text;
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  // The pieces are still raw bytes that the model must spell in the byte-level alphabet (a
  // ByteLevel step ran last, so the mapping was left to the model, which can do it per byte).
  bool needs_byte_level = false;

  std::string_view piece(size_t i) const {
    return std::string_view(text).substr(pieces[i].first, pieces[i].second);
  }
};

class Pretokenizer {
 public:
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&);
  Pretokenizer& operator=(const Pretokenizer&);
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // A regex (or, with `literal`, plain string) split. `invert`: the pattern matches the pieces to
  // keep and the text between them is the delimiter. Throws ember::Error("invalid regex ...").
  void add_split(std::string_view pattern, SplitBehavior behavior, bool invert = false,
                 bool literal = false);
  // HF ByteLevel: optionally a space before each piece not starting with one, optionally GPT-2's
  // regex split, then the byte-level alphabet for everything after it.
  void add_byte_level(bool add_prefix_space, bool use_regex);
  // HF Digits: every numeric character its own piece, or runs of them.
  void add_digits(bool individual_digits);
  // HF Punctuation: ASCII and Unicode punctuation.
  void add_punctuation(SplitBehavior behavior);

  size_t num_steps() const { return steps_.size(); }
  bool has_byte_level() const;

  // Splits `text` into `out` (its buffers are reused across calls).
  void run(std::string_view text, PretokenizedText& out) const;

 private:
  enum class Kind { Split, ByteLevel };
  struct Step {
    Kind kind = Kind::Split;
    std::shared_ptr<const CompiledRegex> regex;  // null for a ByteLevel step without regex
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  std::vector<Step> steps_;
};

// What llama.cpp does for a GGUF tokenizer.ggml.pre name: its regex list as isolated splits, then
// the byte-level alphabet; some presets also skip merges for whole-vocabulary words and add BOS.
struct GgufPretokenizerPreset {
  Pretokenizer pretokenizer;
  bool ignore_merges = false;
  bool add_bos = false;
};
// nullopt for a name with no preset here.
std::optional<GgufPretokenizerPreset> gguf_pretokenizer_preset(std::string_view pre);

}  // namespace ember
