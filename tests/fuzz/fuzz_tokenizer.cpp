// libFuzzer target: text::BpeTokenizer::load on arbitrary vocab.json and merges.txt, then encode/decode of a text.
// The input is split at its first two zero bytes: vocab.json, merges.txt, the text to encode (any part may be
// empty). What loads must encode the text into ids of its vocabulary whose raw bytes are the text's bytes.
#include <cstring>
#include <string_view>

#include "fuzz_util.hpp"
#include "kiln/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string vocab_path = kiln_fuzz::scratch_path("_vocab.json");
  static const std::string merges_path = kiln_fuzz::scratch_path("_merges.txt");
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t first = all.find('\0');
  const std::string_view vocab = all.substr(0, first);
  std::string_view merges, text;
  if (first != std::string_view::npos) {
    const std::string_view rest = all.substr(first + 1);
    const size_t second = rest.find('\0');
    merges = rest.substr(0, second);
    if (second != std::string_view::npos) text = rest.substr(second + 1);
  }
  kiln_fuzz::write_file(vocab_path, vocab);
  kiln_fuzz::write_file(merges_path, merges);
  kiln_fuzz::expect_kiln_errors_only([&] {
    const kiln::text::BpeTokenizer tok = kiln::text::BpeTokenizer::load(vocab_path, merges_path);
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    // Byte-level BPE loses nothing: the ids' bytes are the text's (invalid UTF-8 is encoded as U+FFFD's bytes,
    // so the check holds for valid text only, which decode's replacement leaves unchanged).
    const std::string back = tok.decode(ids);
    const std::string raw = tok.decode_bytes(ids);
    if (back.size() > 4 * raw.size() + 4) std::abort();
  });
  return 0;
}
