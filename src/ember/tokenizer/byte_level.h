// GPT-2's byte-level alphabet. Byte-level BPE vocabularies spell every token as a string of
// printable code points: each byte 0..255 maps to one code point (the printable Latin-1 bytes to
// themselves, the rest - controls, space, 0x7F..0xA0, 0xAD - to U+0100 onwards in byte order), so
// any byte string, valid UTF-8 or not, has a spelling in the vocabulary's alphabet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ember::byte_level {

// The code point byte `b` is spelled with ('Ġ' U+0120 for ' ', 'Ċ' U+010A for '\n').
char32_t byte_to_codepoint(uint8_t b);
// The same as UTF-8 (one or two bytes).
std::string_view byte_to_utf8(uint8_t b);
// The byte a code point of the alphabet stands for, or -1 if it is not part of the alphabet.
int codepoint_to_byte(char32_t cp);

// Spells raw bytes in the alphabet ("hi there" -> "hiĠthere").
std::string encode(std::string_view raw);
void encode_append(std::string_view raw, std::string& out);
// Raw bytes of a string spelled in the alphabet; nullopt if it holds any other character.
std::optional<std::string> decode(std::string_view spelled);

// Length of the UTF-8 sequence starting at text[pos] when it is well formed (shortest form, no
// surrogates, <= U+10FFFF); 1 for an invalid or truncated sequence, so callers can always step
// forward and treat a stray byte as a character of its own.
size_t utf8_char_len(std::string_view text, size_t pos);
// Decodes the sequence utf8_char_len() measured; invalid bytes decode to U+FFFD.
char32_t utf8_decode(std::string_view text, size_t pos, size_t len);
void utf8_append(char32_t cp, std::string& out);
bool is_valid_utf8(std::string_view text);

}  // namespace ember::byte_level
