// Byte-level BPE encode throughput with SmolLM2's real tokenizer.json on ~1 MB of generated
// English-like text (words drawn Zipf-like from a fixed list, with punctuation, numbers and
// newlines), single-threaded. Reports bytes/s; set EMBER_FIXTURES to the shared fixtures directory
// if it is not at ../shared.
#include <benchmark/benchmark.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/tokenizer_json.h"

namespace {

std::filesystem::path smollm_tokenizer() {
  const char* env = std::getenv("EMBER_FIXTURES");
  const std::filesystem::path root =
      env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                     : std::filesystem::path(EMBER_SOURCE_DIR) / ".." / "shared";
  return root / "models/smollm2-135m-instruct/tokenizer.json";
}

std::string english_like_text(size_t bytes) {
  static const char* const kWords[] = {"the",        "of",          "and",
                                       "to",         "a",           "in",
                                       "is",         "that",        "it",
                                       "was",        "for",         "on",
                                       "are",        "with",        "as",
                                       "they",       "be",          "at",
                                       "one",        "have",        "this",
                                       "from",       "by",          "hot",
                                       "word",       "but",         "what",
                                       "some",       "we",          "can",
                                       "out",        "other",       "were",
                                       "all",        "there",       "when",
                                       "up",         "use",         "your",
                                       "how",        "said",        "an",
                                       "each",       "she",         "which",
                                       "do",         "their",       "time",
                                       "if",         "will",        "way",
                                       "about",      "many",        "then",
                                       "them",       "write",       "would",
                                       "like",       "so",          "these",
                                       "her",        "long",        "make",
                                       "thing",      "see",         "him",
                                       "two",        "has",         "look",
                                       "more",       "day",         "could",
                                       "go",         "come",        "did",
                                       "number",     "sound",       "no",
                                       "most",       "people",      "my",
                                       "over",       "know",        "water",
                                       "than",       "call",        "first",
                                       "who",        "may",         "down",
                                       "side",       "been",        "now",
                                       "find",       "language",    "tokenizer",
                                       "inference",  "performance", "understanding",
                                       "Wednesday",  "Paris",       "London",
                                       "don't",      "it's",        "we'll",
                                       "government", "information", "development",
                                       "experience"};
  constexpr size_t kCount = sizeof(kWords) / sizeof(kWords[0]);
  std::mt19937 rng(42);
  // Zipf-like: low indices far more frequent, as in natural text.
  std::vector<double> weights(kCount);
  for (size_t i = 0; i < kCount; ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
  std::discrete_distribution<size_t> word(weights.begin(), weights.end());
  std::uniform_int_distribution<int> roll(0, 99);
  std::uniform_int_distribution<int> number(0, 99999);
  std::string text;
  text.reserve(bytes + 64);
  bool sentence_start = true;
  while (text.size() < bytes) {
    std::string w = kWords[word(rng)];
    if (sentence_start) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
    sentence_start = false;
    text += w;
    const int r = roll(rng);
    if (r < 6) {
      text += ". ";
      sentence_start = true;
    } else if (r < 10) {
      text += ", ";
    } else if (r < 11) {
      text += ".\n\n";
      sentence_start = true;
    } else if (r < 13) {
      text += ' ';
      text += std::to_string(number(rng));
      text += ' ';
    } else {
      text += ' ';
    }
  }
  return text;
}

void BM_EncodeSmolLM2(benchmark::State& state) {
  const std::filesystem::path path = smollm_tokenizer();
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("fixture not found: " + path.string()).c_str());
    return;
  }
  const std::unique_ptr<ember::BpeTokenizer> tok = ember::load_bpe_tokenizer_json(path.string());
  const std::string text = english_like_text(1 << 20);
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tok->encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / tokens;
}
BENCHMARK(BM_EncodeSmolLM2)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
