// UTF-8 decoding with replacement, the character classes of GPT-2's pre-tokenizer regex, and the byte <->
// character map of byte-level BPE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text::detail {

/// The classes the regex tells apart: \p{L}, \p{N}, \s (Unicode White_Space), and everything else.
enum class CharClass : uint8_t { letter, number, space, other };

CharClass char_class(char32_t c);

/// One decoded character: its code point and where its bytes sit in the (replaced) text.
struct Char {
  char32_t code;
  uint32_t offset;  ///< byte offset in the text the characters were decoded from
  uint32_t size;    ///< its UTF-8 length
};

/// Decodes valid UTF-8 (utf8_replace_invalid's output) into characters.
std::vector<Char> decode_utf8(std::string_view text);

/// Appends the UTF-8 encoding of c.
void append_utf8(std::string& out, char32_t c);

/// The byte-level map both ways: byte -> the character vocab.json uses for it, and back (-1: no byte).
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  ///< indexed by code point; the map's characters are all below 324
  ByteMap();
};
const ByteMap& byte_map();

/// A vocab.json token's raw bytes: each character mapped back to its byte; a token holding a character outside
/// the map (an added token) stands for its own UTF-8 bytes, as tokenizers' ByteLevel decoder does.
std::string token_bytes(std::string_view token);
/// Raw bytes as a vocab.json token (each byte as its character).
std::string bytes_to_token(std::string_view bytes);

}  // namespace kiln::text::detail
