#include "ember/tokenizer/utf8_stream.h"

#include <cstdint>

namespace ember {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status { Valid, Invalid, Incomplete };

struct Utf8Step {
  Utf8Status status;
  size_t length;  // bytes consumed: the sequence, the invalid maximal subpart, or the partial tail
};

// Classifies the sequence starting at s[pos] following the Unicode "maximal subpart" practice:
// an invalid sequence consumes its lead byte plus every continuation byte that was still
// acceptable, so "\xE2\x82X" is one U+FFFD followed by 'X' (what browsers and Python do too).
// Overlong forms, surrogates and code points above U+10FFFF are rejected via the second-byte
// ranges below.
Utf8Step step_utf8(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  if (lead < 0x80) return {Utf8Status::Valid, 1};
  size_t need = 0;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;  // allowed range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return {Utf8Status::Invalid, 1};  // stray continuation byte, C0/C1, F5..FF
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {Utf8Status::Incomplete, k};
    const auto b = static_cast<uint8_t>(s[pos + k]);
    const uint8_t min = k == 1 ? lo : 0x80;
    const uint8_t max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Status::Invalid, k};
  }
  return {Utf8Status::Valid, need + 1};
}

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const Utf8Step st = step_utf8(s, pos);
    if (st.status == Utf8Status::Incomplete) break;
    pos += st.length;
  }
  return pos;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const Utf8Step st = step_utf8(s, pos);
    if (st.status == Utf8Status::Valid) {
      out.append(s.substr(pos, st.length));
    } else {
      out.append(kReplacement);  // invalid subpart, or a tail cut off by the end of `s`
    }
    pos += st.length;
  }
  return out;
}

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  // Only the last (at most 3) bytes can be held back: everything before an incomplete tail is
  // emitted now, so a character split across tokens appears as soon as its last byte arrives.
  const size_t n = utf8_complete_prefix(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace ember
