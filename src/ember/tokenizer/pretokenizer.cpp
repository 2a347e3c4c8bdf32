#include "ember/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <initializer_list>

#include "ember/core/error.h"
#include "ember/tokenizer/byte_level.h"

namespace ember {

// One compiled pattern. The pattern itself is immutable, so steps (and copies of a Pretokenizer)
// share it; each run() brings its own match data, which keeps encoding thread-safe.
class CompiledRegex {
 public:
  CompiledRegex(std::string_view pattern, bool literal) {
    // UCP: \s, \w, \d and [[:classes:]] follow Unicode like the Rust/Oniguruma engines HF uses.
    // (PCRE2 rejects UCP together with LITERAL, where it would mean nothing anyway.)
    uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    options |= literal ? PCRE2_LITERAL : PCRE2_UCP;
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                          &error, &offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      throw Error("invalid regex '" + std::string(pattern) + "': " +
                  reinterpret_cast<const char*>(message) + " at offset " + std::to_string(offset));
    }
    // The JIT is several times faster; where it is unavailable the interpreter still works.
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~CompiledRegex() { pcre2_code_free(code_); }
  CompiledRegex(const CompiledRegex&) = delete;
  CompiledRegex& operator=(const CompiledRegex&) = delete;

  // Appends the non-empty, non-overlapping matches in `subject` as (begin, end) offsets.
  void find_all(std::string_view subject, pcre2_match_data* md,
                std::vector<std::pair<uint32_t, uint32_t>>& out) const {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    size_t start = 0;
    while (start < subject.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, s, subject.size(), start, 0, md, nullptr)
                    : pcre2_match(code_, s, subject.size(), start, 0, md, nullptr);
      // The JIT's fixed-size stack can run out on pathological runs; the interpreter keeps its
      // backtracking state on the heap and gives the same answer.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_, s, subject.size(), start, 0, md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        throw Error(std::string("pre-tokenizer regex match failed: ") +
                    reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t begin = ov[0];
      const size_t end = ov[1];
      if (end <= begin) {
        // An empty match splits nothing; step over one character and look again.
        start = begin + byte_level::utf8_char_len(subject, begin);
        continue;
      }
      out.emplace_back(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
      start = end;
    }
  }

  const pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

namespace {

// GPT-2's pre-tokenizer regex, as HF's ByteLevel uses it: contractions, letter runs, number runs
// and other-symbol runs (each with at most one leading space), then whitespace - where a run of
// spaces before a word leaves its last space to that word.
constexpr const char* kGpt2Regex =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

std::shared_ptr<const CompiledRegex> compile(std::string_view pattern, bool literal = false) {
  return std::make_shared<const CompiledRegex>(pattern, literal);
}

std::shared_ptr<const CompiledRegex> gpt2_regex() {
  static const std::shared_ptr<const CompiledRegex> regex = compile(kGpt2Regex);
  return regex;
}

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Turns the matches of one piece [0, length) into pieces according to `behavior`, appending them
// (offset by `base`) to `out`. `matches` are sorted, non-empty and non-overlapping.
void emit_pieces(const Ranges& matches, uint32_t base, uint32_t length, SplitBehavior behavior,
                 Ranges& out) {
  const auto emit = [&](uint32_t begin, uint32_t end) {
    if (end > begin) out.emplace_back(base + begin, end - begin);
  };
  uint32_t pos = 0;  // start of the text not yet emitted
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const auto& [b, e] : matches) {
        emit(pos, b);
        pos = e;
      }
      break;
    case SplitBehavior::Isolated:
      for (const auto& [b, e] : matches) {
        emit(pos, b);
        emit(b, e);
        pos = e;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& [b, e] : matches) {
        emit(pos, e);
        pos = e;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (const auto& [b, e] : matches) {
        emit(pos, b);
        pos = b;
      }
      break;
    case SplitBehavior::Contiguous: {
      bool last_is_match = false;
      for (const auto& [b, e] : matches) {
        if (last_is_match && b == pos) {
          out.back().second += e - b;  // touches the previous match: extend it
        } else {
          emit(pos, b);
          emit(b, e);
        }
        last_is_match = true;
        pos = e;
      }
      break;
    }
  }
  emit(pos, length);
}

// The complement of `matches` within [0, length), for inverted splits.
void invert_ranges(const Ranges& matches, uint32_t length, Ranges& out) {
  out.clear();
  uint32_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) out.emplace_back(pos, b);
    pos = e;
  }
  if (length > pos) out.emplace_back(pos, length);
}

}  // namespace

std::optional<SplitBehavior> parse_split_behavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  return std::nullopt;
}

Pretokenizer::Pretokenizer() = default;
Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(const Pretokenizer&) = default;
Pretokenizer& Pretokenizer::operator=(const Pretokenizer&) = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

void Pretokenizer::add_split(std::string_view pattern, SplitBehavior behavior, bool invert,
                             bool literal) {
  steps_.push_back({Kind::Split, compile(pattern, literal), behavior, invert, false});
}

void Pretokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  steps_.push_back({Kind::ByteLevel, use_regex ? gpt2_regex() : nullptr, SplitBehavior::Isolated,
                    false, add_prefix_space});
}

void Pretokenizer::add_digits(bool individual_digits) {
  // Rust's char::is_numeric is the Unicode N categories, i.e. \p{N}.
  steps_.push_back({Kind::Split, compile(individual_digits ? R"(\p{N})" : R"(\p{N}+)"),
                    SplitBehavior::Isolated, false, false});
}

void Pretokenizer::add_punctuation(SplitBehavior behavior) {
  // HF counts ASCII punctuation (which includes symbols such as $ + < = > ^ ` | ~) as well as the
  // Unicode P categories.
  steps_.push_back({Kind::Split, compile(R"re([\p{P}!-/:-@\[-`{-~])re"), behavior, false, false});
}

bool Pretokenizer::has_byte_level() const {
  for (const Step& s : steps_) {
    if (s.kind == Kind::ByteLevel) return true;
  }
  return false;
}

void Pretokenizer::run(std::string_view text, PretokenizedText& out) const {
  out.text.assign(text.data(), text.size());
  out.pieces.clear();
  out.needs_byte_level = false;
  if (text.empty()) return;
  if (text.size() > UINT32_MAX / 2) throw Error("pre-tokenizer: text too long");
  out.pieces.emplace_back(0, static_cast<uint32_t>(text.size()));

  // A ByteLevel step spells the text in the byte alphabet. That is only done to the buffer when
  // a later step has to see the spelled text (as in HF); otherwise the model does it per piece.
  bool mapped = false;
  bool pending_map = false;
  Ranges next;
  Ranges matches;
  Ranges inverted;
  pcre2_match_data* md = nullptr;
  struct MatchDataFree {
    pcre2_match_data*& md;
    ~MatchDataFree() { pcre2_match_data_free(md); }
  } free_md{md};

  for (const Step& step : steps_) {
    if (pending_map) {
      std::string spelled;
      spelled.reserve(out.text.size() * 2);
      next.clear();
      for (const auto& [off, len] : out.pieces) {
        const size_t begin = spelled.size();
        byte_level::encode_append(std::string_view(out.text).substr(off, len), spelled);
        next.emplace_back(static_cast<uint32_t>(begin),
                          static_cast<uint32_t>(spelled.size() - begin));
      }
      out.text = std::move(spelled);
      out.pieces.swap(next);
      pending_map = false;
      mapped = true;
    }

    if (step.kind == Kind::ByteLevel && step.add_prefix_space) {
      // HF prepends the space to every piece that does not already start with one.
      const std::string_view space = mapped ? byte_level::byte_to_utf8(' ') : " ";
      std::string spaced;
      next.clear();
      for (const auto& [off, len] : out.pieces) {
        const std::string_view p = std::string_view(out.text).substr(off, len);
        const size_t begin = spaced.size();
        if (p.substr(0, space.size()) != space) spaced.append(space);
        spaced.append(p);
        next.emplace_back(static_cast<uint32_t>(begin),
                          static_cast<uint32_t>(spaced.size() - begin));
      }
      out.text = std::move(spaced);
      out.pieces.swap(next);
    }

    if (step.regex != nullptr) {
      if (md == nullptr) md = pcre2_match_data_create(1, nullptr);
      if (md == nullptr) throw Error("pre-tokenizer: out of memory");
      next.clear();
      for (const auto& [off, len] : out.pieces) {
        matches.clear();
        step.regex->find_all(std::string_view(out.text).substr(off, len), md, matches);
        if (step.invert) {
          invert_ranges(matches, len, inverted);
          emit_pieces(inverted, off, len, step.behavior, next);
        } else {
          emit_pieces(matches, off, len, step.behavior, next);
        }
      }
      out.pieces.swap(next);
    }

    if (step.kind == Kind::ByteLevel && !mapped) pending_map = true;
  }
  out.needs_byte_level = pending_map;
}

// ---------------------------------------------------------------------------------------------
// GGUF presets. The patterns are the models' own pre-tokenizer regexes (from their
// tokenizer.json files); PCRE2 runs them as written, so no engine-specific rewrites are needed.

namespace {

// Contractions (any case), letters with one optional non-letter lead, numbers in runs of 1-3,
// symbols with trailing newlines, newline runs, then whitespace (Llama 3, also DBRX, ChatGLM4).
constexpr const char* kLlama3Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)re"
    R"re( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Llama 3's with single digits (Qwen2, StableLM2, Hunyuan, Grok-2).
constexpr const char* kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)re"
    R"re(\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kCjkRun = R"re([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
constexpr const char* kBloomRegex =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)re";

struct PresetDef {
  std::initializer_list<std::string_view> names;
  std::initializer_list<const char*> regexes;
  bool ignore_merges;
  bool add_bos;
};

const PresetDef kPresets[] = {
    {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es",
      "jina-v2-de", "jina-v2-code", "roberta-bpe", "gigachat", "a.x-4.0", "mellum", "exaone4",
      "trillion", "granite-docling"},
     {kGpt2Regex},
     false,
     false},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
     {R"(\p{N})", kGpt2Regex},
     false,
     false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
     {kLlama3Regex},
     true,
     true},
    {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {kLlama3Regex}, false, false},
    {{"qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan", "grok-2"},
     {kQwen2Regex},
     false,
     false},
    {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2Regex, "[0-9][0-9][0-9]"}, false, false},
    {{"default"},
     {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"},
     false,
     false},
    {{"deepseek-coder"},
     {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkRun, R"(\p{N})"},
     false,
     false},
    // DeepSeek LLM's letter class (cased letters of many scripts) is written with escapes so that
    // no editor's Unicode normalisation can silently change a range end such as U+1FD3.
    {{"deepseek-llm"},
     {"[\r\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-"
      "\\x{293}"
      "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-"
      "\\x{38A}"
      "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{"
      "556}"
      "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{"
      "1CBF}"
      "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{"
      "1F1D}"
      "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
      "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
      "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{"
      "1FF4}"
      "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{"
      "2124}"
      "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
      "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
      "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{"
      "A76F}"
      "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{"
      "FB17}"
      "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
      "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
      "\\x{1E900}-\\x{1E943}]+",
      R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
      R"(\s+$)", kCjkRun, R"(\p{N}+)"},
     false,
     false},
    {{"deepseek-v3", "hunyuan-dense"},
     {R"(\p{N}{1,3})", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
      R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)re"
      R"re( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
     false,
     false},
    {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloomRegex}, false, false},
    {{"viking"}, {kBloomRegex, R"(\p{N})"}, false, false},
    {{"tekken"},
     {R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)re"
      R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)re"
      R"re(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
     true,
     true},
    {{"gpt-4o", "llama4", "minimax-m2"},
     {R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|)re"
      R"re('t|'re|'ve|'m|'ll|'d)?|)re"
      R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|)re"
      R"re('t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|)re"
      R"re(\s*[\r\n]+|\s+(?!\S)|\s+)re"},
     false,
     false},
    {{"seed-coder"},
     {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}|)re"
      R"re( ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
     false,
     false},
    {{"bailingmoe", "bailingmoe2", "llada-moe"},
     {R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|)re"
      R"re(\s*[\r\n]|\s+(?!\S)|\s+)re"},
     false,
     false},
};

}  // namespace

std::optional<GgufPretokenizerPreset> gguf_pretokenizer_preset(std::string_view pre) {
  for (const PresetDef& def : kPresets) {
    for (std::string_view name : def.names) {
      if (name != pre) continue;
      GgufPretokenizerPreset preset;
      for (const char* regex : def.regexes)
        preset.pretokenizer.add_split(regex, SplitBehavior::Isolated);
      preset.pretokenizer.add_byte_level(/*add_prefix_space=*/false, /*use_regex=*/false);
      preset.ignore_merges = def.ignore_merges;
      preset.add_bos = def.add_bos;
      return preset;
    }
  }
  return std::nullopt;
}

}  // namespace ember
