#include "ember/tokenizer/byte_level.h"

#include <array>

namespace ember::byte_level {

namespace {

// Bytes that are already printable, non-space Latin-1 characters keep their own code point.
bool is_self_mapped(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> codepoint{};
  std::array<std::string, 256> utf8;
  // Every code point of the alphabet is below U+0100 + 68, so a flat inverse table suffices.
  std::array<int16_t, 0x200> inverse{};

  Tables() {
    inverse.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      codepoint[b] = is_self_mapped(b) ? static_cast<char32_t>(b) : next++;
      utf8_append(codepoint[b], utf8[b]);
      inverse[codepoint[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_codepoint(uint8_t b) {
  return tables().codepoint[b];
}

std::string_view byte_to_utf8(uint8_t b) {
  return tables().utf8[b];
}

int codepoint_to_byte(char32_t cp) {
  const Tables& t = tables();
  return cp < t.inverse.size() ? t.inverse[cp] : -1;
}

void encode_append(std::string_view raw, std::string& out) {
  const Tables& t = tables();
  for (char c : raw) out += t.utf8[static_cast<uint8_t>(c)];
}

std::string encode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  encode_append(raw, out);
  return out;
}

std::optional<std::string> decode(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  for (size_t pos = 0; pos < spelled.size();) {
    const size_t len = utf8_char_len(spelled, pos);
    const int b = codepoint_to_byte(utf8_decode(spelled, pos, len));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    pos += len;
  }
  return out;
}

size_t utf8_char_len(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t len;
  char32_t min;
  if ((lead & 0xE0) == 0xC0) {
    len = 2;
    min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3;
    min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    len = 4;
    min = 0x10000;
  } else {
    return 1;  // continuation byte or 0xF8..0xFF
  }
  if (pos + len > text.size()) return 1;
  char32_t cp = lead & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 1;
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and code points past Unicode are not valid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
  return len;
}

char32_t utf8_decode(std::string_view text, size_t pos, size_t len) {
  const uint8_t lead = static_cast<uint8_t>(text[pos]);
  if (len == 1) return lead < 0x80 ? lead : 0xFFFD;
  char32_t cp = lead & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  return cp;
}

void utf8_append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = utf8_char_len(text, pos);
    if (len == 1 && static_cast<uint8_t>(text[pos]) >= 0x80) return false;
    pos += len;
  }
  return true;
}

}  // namespace ember::byte_level
