// Generated tokens -> the text a client sees: token bytes joined into complete UTF-8 characters,
// then stop strings matched across token boundaries (text that could still grow into a stop string
// is held back). One per sequence; the only place generated text is made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/engine/stop_matcher.h"
#include "ember/tokenizer/tokenizer.h"
#include "ember/tokenizer/utf8_stream.h"

namespace ember {

class Detokenizer {
 public:
  Detokenizer() = default;
  // tokenizer may be null (token ids only, no text: benchmarks).
  Detokenizer(const Tokenizer* tokenizer, std::vector<std::string> stops, bool strip_leading_space);

  // The text `token` adds that can be shown now; sets *stopped once a stop string appeared (the
  // stop string and everything after it are never shown).
  std::string push(int32_t token, bool* stopped);
  // End of generation: what was held back (unless a stop string ended it).
  std::string flush();
  bool stopped() const { return stop_.matched(); }

 private:
  const Tokenizer* tokenizer_ = nullptr;
  Utf8StreamDecoder utf8_;
  StopMatcher stop_;
  bool strip_leading_space_ = false;
};

}  // namespace ember
