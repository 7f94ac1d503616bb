// The state behind text::BpeTokenizer, shared by loading (bpe.cpp) and training (bpe_train.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/text.hpp"

namespace kiln::text {

struct PairHash {
  size_t operator()(const std::pair<int32_t, int32_t>& p) const {
    return std::hash<uint64_t>()((static_cast<uint64_t>(static_cast<uint32_t>(p.first)) << 32) |
                                 static_cast<uint32_t>(p.second));
  }
};

struct BpeTokenizer::Impl {
  std::vector<std::string> tokens;                  ///< id -> token as vocab.json spells it ("" for an id no token has)
  std::vector<std::string> bytes;                   ///< id -> the raw bytes it stands for
  std::unordered_map<std::string, int32_t> ids;     ///< vocab.json's token -> id
  std::vector<std::pair<int32_t, int32_t>> merges;  ///< in rank order
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::unordered_map<std::pair<int32_t, int32_t>, Merge, PairHash> merge_of;
  std::array<int32_t, 256> byte_id{};                     ///< the id of each single-byte token
  std::vector<std::pair<std::string, int32_t>> specials;  ///< special tokens (text, id), longest first

  /// Pieces seen before and their ids (HF's cache, bounded the same way: cleared when full).
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr size_t kCacheCapacity = 10000;

  /// Builds the derived tables (bytes, byte_id, merge_of, specials) from tokens, ids and merges. ValueError
  /// naming `source` for a missing byte token or a merge whose result is not a token.
  void index(const std::string& source, const std::vector<std::string>& special_tokens);
  /// BPE over one piece's bytes: the merges applied lowest rank first, leftmost first among equal ranks.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
};

}  // namespace kiln::text
