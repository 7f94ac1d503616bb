// UTF-8 with replacement, Unicode character classes (ICU's), GPT-2's byte map and its pre-tokenizer.
#include "text/unicode.hpp"

#include <string>

#include "kiln/error.hpp"
#include "kiln/text.hpp"

#if KILN_HAVE_ICU
#include <unicode/uchar.h>
#endif

namespace kiln::text {
namespace detail {

namespace {

// The length of the valid UTF-8 prefix of a character starting at s[i] (0: the lead byte itself is invalid),
// and whether the character is complete. Ranges from the Unicode standard's table 3-7 (no overlongs, no
// surrogates, nothing past U+10FFFF), so that an invalid sequence is replaced by one U+FFFD per maximal
// subpart, as Python's errors="replace" and Rust's from_utf8_lossy do.
struct Prefix {
  size_t valid;
  bool complete;
};

Prefix utf8_prefix(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return {1, true};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto c = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return {k, false};
  }
  return {need + 1, true};
}

}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::vector<Char> decode_utf8(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    char32_t c;
    uint32_t n;
    if (b < 0x80) {
      c = b, n = 1;
    } else if (b < 0xE0) {
      c = b & 0x1Fu, n = 2;
    } else if (b < 0xF0) {
      c = b & 0x0Fu, n = 3;
    } else {
      c = b & 0x07u, n = 4;
    }
    for (uint32_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3Fu);
    chars.push_back({c, static_cast<uint32_t>(i), n});
    i += n;
  }
  return chars;
}

CharClass char_class(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
    if (c >= '0' && c <= '9') return CharClass::number;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::space;
    return CharClass::other;
  }
#if KILN_HAVE_ICU
  const auto c32 = static_cast<UChar32>(c);
  if (u_isUWhiteSpace(c32)) return CharClass::space;
  const uint32_t mask = U_GET_GC_MASK(c32);
  if (mask & U_GC_L_MASK) return CharClass::letter;
  if (mask & U_GC_N_MASK) return CharClass::number;
  return CharClass::other;
#else
  throw ValueError("text::pretokenize: the character U+" + std::to_string(static_cast<uint32_t>(c)) +
                   " (decimal) is not ASCII, and this kiln was built without ICU, which gives the Unicode "
                   "categories: install libicu-dev (make deps does) and rebuild");
#endif
}

ByteMap::ByteMap() {
  to_byte.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
    to_char[static_cast<size_t>(b)] = c;
    to_byte[c] = static_cast<int16_t>(b);
  }
}

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

std::string token_bytes(std::string_view token) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(token.size());
  for (const Char& ch : decode_utf8(token)) {
    if (ch.code >= map.to_byte.size() || map.to_byte[ch.code] < 0) return std::string(token);
    out += static_cast<char>(map.to_byte[ch.code]);
  }
  return out;
}

std::string bytes_to_token(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, byte_map().to_char[static_cast<uint8_t>(b)]);
  return out;
}

}  // namespace detail

using detail::CharClass;

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const detail::Prefix p = detail::utf8_prefix(bytes, i);
    if (p.complete) {
      out.append(bytes.substr(i, p.valid));
      i += p.valid;
    } else {
      out += "\xEF\xBF\xBD";
      i += p.valid == 0 ? 1 : p.valid;
    }
  }
  return out;
}

char32_t byte_to_unicode(uint8_t b) { return detail::byte_map().to_char[b]; }

std::vector<std::string> pretokenize(std::string_view input) {
  const std::string text = utf8_replace_invalid(input);
  const std::vector<detail::Char> chars = detail::decode_utf8(text);
  const size_t n = chars.size();
  std::vector<CharClass> cls(n);
  for (size_t i = 0; i < n; ++i) cls[i] = detail::char_class(chars[i].code);
  auto code = [&](size_t i) { return i < n ? chars[i].code : char32_t{0}; };
  // A run of class k from i: the index past it.
  auto run = [&](size_t i, CharClass k) {
    while (i < n && cls[i] == k) ++i;
    return i;
  };
  auto run_other = [&](size_t i) {
    while (i < n && cls[i] == CharClass::other) ++i;
    return i;
  };

  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    // The alternatives in the regex's order; the first that matches at i wins (leftmost-first).
    if (code(i) == '\'') {
      const char32_t a = code(i + 1), b = code(i + 2);
      if (a == 's' || a == 't' || a == 'm' || a == 'd')
        end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        end = i + 3;
    }
    if (end == i) {
      const size_t j = code(i) == ' ' && i + 1 < n ? i + 1 : i;  // " ?" takes the space when a class follows
      const CharClass k = cls[j];
      if (k == CharClass::letter || k == CharClass::number) {
        end = run(j, k);
      } else if (k == CharClass::other) {
        end = run_other(j);
      } else {
        // \s+(?!\S): the whole run at the end of the text, else the run less its last space (which then
        // leads the next piece); a single space before a non-space falls through to \s+.
        const size_t stop = run(i, CharClass::space);
        end = stop == n ? stop : (stop - i >= 2 ? stop - 1 : stop);
      }
    }
    const size_t from = chars[i].offset;
    const size_t to = end < n ? chars[end].offset : text.size();
    pieces.emplace_back(text.substr(from, to - from));
    i = end;
  }
  return pieces;
}

}  // namespace kiln::text
