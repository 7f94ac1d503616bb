// Text: GPT-2's byte-level BPE tokenizer (Hugging Face's vocab.json + merges.txt), training new merges, and
// token files (llm.c's .bin and raw uint16, memory-mapped) with random-window batches for language modelling.
//
//   auto tok = text::BpeTokenizer::load("vocab.json", "merges.txt");
//   std::vector<int32_t> ids = tok.encode("Hello world<|endoftext|>");
//   std::string back = tok.decode(ids);
//
//   text::write_tokens("train.bin", ids);                // llm.c's format: 256 int32 header, then uint16 tokens
//   text::TokenFile file("train.bin");                   // memory-mapped, read-only
//   random::Generator gen(0);
//   auto [x, y] = file.batch(8, 256, gen);               // (8, 256) int64 windows, y shifted by one
//
// Equal token ids to the `tokenizers` package (ByteLevelBPETokenizer) on the same files: tests/text and
// docs/text.md say what is checked and where the two differ.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/random.hpp"

namespace kiln::text {

/// GPT-2's end-of-text token, its one special token.
inline constexpr const char* kEndOfText = "<|endoftext|>";

/// How encode treats the special tokens that appear in its text.
enum class Special {
  allow,    ///< each becomes its own id (Hugging Face tokenizers; tiktoken's allowed_special="all")
  as_text,  ///< encoded as ordinary text (tiktoken's disallowed_special=())
  refuse,   ///< ValueError naming the token and its byte offset (tiktoken's default)
};

/// GPT-2's pre-tokenizer: the pieces that the regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
/// \s+(?!\S)|\s+ matches, in order (each piece is encoded on its own). Invalid UTF-8 is replaced by U+FFFD
/// first, one per maximal invalid subsequence (Python's errors="replace"). ValueError for text that is not
/// ASCII in a build without ICU.
std::vector<std::string> pretokenize(std::string_view text);

/// Replaces each maximal invalid UTF-8 subsequence of `bytes` by U+FFFD (Python's and Rust's rule).
std::string utf8_replace_invalid(std::string_view bytes);

/// GPT-2's byte-to-unicode map: the printable character that stands for byte b in vocab.json and merges.txt.
char32_t byte_to_unicode(uint8_t b);

struct BpeTrainOptions {
  int64_t vocab_size = 50257;  ///< special tokens + 256 byte tokens + merges, at most
  int64_t min_frequency = 2;   ///< a pair seen fewer times is not merged (ByteLevelBPETokenizer.train's default)
  std::vector<std::string> special_tokens{kEndOfText};  ///< given the first ids, in order
};

/// GPT-2's byte-level BPE: a vocabulary (token -> id) and a ranked list of merges, as Hugging Face ships them.
/// Immutable after construction except for its merge cache (thread-safe): share one across threads.
class BpeTokenizer {
 public:
  /// Reads vocab.json (a JSON object token -> id) and merges.txt ("#version" line, then "left right" per line).
  /// `special_tokens` found in the vocabulary are matched whole in encode. ValueError naming the file and line
  /// for a missing file, bad JSON, a duplicate id, a merge naming an unknown token or a merge whose result is not
  /// in the vocabulary, and a vocabulary missing one of the 256 byte tokens.
  static BpeTokenizer load(const std::string& vocab_json, const std::string& merges_txt,
                           const std::vector<std::string>& special_tokens = {kEndOfText});
  /// Learns merges on `texts` (each pre-tokenized on its own) as tokenizers' BpeTrainer does: the most frequent
  /// pair first, ties to the pair of smallest ids; ids: the special tokens, then the 256 byte tokens ordered by
  /// their character, then one per merge. ValueError for a vocab_size below the specials + 256.
  static BpeTokenizer train(const std::vector<std::string>& texts, const BpeTrainOptions& options = {});
  /// train() over the lines of files (each line with its line ending a text, as tokenizers reads files).
  static BpeTokenizer train_files(const std::vector<std::string>& paths, const BpeTrainOptions& options = {});
  /// Writes vocab.json (ordered by id) and merges.txt as tokenizers' save_model does (each atomically).
  void save(const std::string& vocab_json, const std::string& merges_txt) const;

  /// The token ids of `text` (UTF-8; invalid sequences are encoded as U+FFFD). ValueError under
  /// Special::refuse when a special token occurs.
  std::vector<int32_t> encode(std::string_view text, Special special = Special::allow) const;
  /// The bytes the ids stand for, as UTF-8: an invalid sequence (a multi-byte character cut between tokens)
  /// becomes U+FFFD, as tokenizers' decode. Special tokens are kept. ValueError for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
  /// The raw bytes the ids stand for (no replacement: concatenations of pieces decode exactly).
  std::string decode_bytes(std::span<const int32_t> ids) const;

  int64_t vocab_size() const;
  /// The id of a token as vocab.json spells it (byte-level characters: "Ġthe"), if any.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token of an id as vocab.json spells it. ValueError outside the vocabulary.
  const std::string& id_to_token(int32_t id) const;
  /// The merges in rank order, as merges.txt spells them.
  std::vector<std::pair<std::string, std::string>> merges() const;
  /// The id of a special token (kEndOfText by default), if it is one of this tokenizer's.
  std::optional<int32_t> special_id(std::string_view token = kEndOfText) const;

  struct Impl;

 private:
  explicit BpeTokenizer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

/// Where Debian's jargon-text package (`make deps` installs it) puts the Jargon File: 1.7 MB of English in the
/// public domain, kiln's corpus for examples and `kiln tokenize`.
inline constexpr const char* kJargonFile = "/usr/share/doc/jargon-text/jargon.txt.gz";

/// A text file's bytes, gunzipped when the name ends in .gz. ValueError naming the file (and, for kJargonFile,
/// the package that provides it).
std::string read_text(const std::string& path);

/// The on-disk layout of a token file.
enum class TokenFormat {
  llmc,  ///< llm.c's .bin: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens
  raw,   ///< uint16 tokens only (little-endian), as numpy's tofile
};

/// Writes uint16 tokens (atomically). ValueError for an id outside [0, 65535].
void write_tokens(const std::string& path, std::span<const int32_t> tokens, TokenFormat format = TokenFormat::llmc);

/// Encodes `text` (special tokens allowed) and writes its tokens to `path`, after one end-of-text token when the
/// tokenizer has it (llm.c starts each document with it). Returns the number of tokens written. ValueError for a
/// vocabulary past uint16 (more than 65536 ids).
int64_t tokenize_to_file(const BpeTokenizer& tokenizer, std::string_view text, const std::string& path,
                         TokenFormat format = TokenFormat::llmc);

/// A token file mapped read-only into memory (no copy: the OS pages it in as windows are read).
class TokenFile {
 public:
  /// Maps `path`. Format deduced from the name when not given: ".bin" is llm.c's format, else raw. ValueError
  /// naming the file for a missing file, a bad magic or version, a size that is not whole uint16 tokens, a
  /// header whose token count disagrees with the file's size (truncated).
  explicit TokenFile(const std::string& path, std::optional<TokenFormat> format = {});
  ~TokenFile();
  TokenFile(TokenFile&&) noexcept;
  TokenFile& operator=(TokenFile&&) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  std::span<const uint16_t> tokens() const { return tokens_; }
  uint16_t operator[](int64_t i) const { return tokens_[static_cast<size_t>(i)]; }
  const std::string& path() const { return path_; }

  /// Tokens [start, start + length) as an int64 host array (1-D). ValueError outside the file.
  Array window(int64_t start, int64_t length) const;
  /// `batch` windows of seq + 1 tokens at offsets drawn from `gen` (uniform in [0, size - seq - 1]): x the first
  /// seq tokens (batch, seq) int64, y the next seq (the targets cross_entropy takes). ValueError when the file
  /// holds fewer than seq + 1 tokens.
  std::pair<Array, Array> batch(int64_t batch, int64_t seq, random::Generator& gen) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::span<const uint16_t> tokens_;
};

}  // namespace kiln::text
