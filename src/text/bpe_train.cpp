// text::BpeTokenizer::train: learning byte-level BPE merges as tokenizers' BpeTrainer does, so that both give
// the same merges and ids on the same corpus (tests/text/test_bpe_train.cpp).
//
// The trainer counts the pre-tokenized pieces ("words") of every text, then repeatedly merges the most frequent
// adjacent pair (ties: the pair of smallest ids) in every word holding it, keeping the pair counts up to date
// from each merge's local changes (a max-heap with lazy updates: an entry whose count is stale is pushed back
// with the current count).
#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <unordered_set>

#include "kiln/error.hpp"
#include "text/bpe.hpp"
#include "text/unicode.hpp"

namespace kiln::text {

namespace {

using Pair = std::pair<int32_t, int32_t>;

struct Word {
  std::vector<int32_t> symbols;
  /// Replaces each non-overlapping (a, b), left to right, by `merged`; appends the pair count changes
  /// (-1 for a pair that disappears, +1 for a new one) beside the merged pair itself, as tokenizers' Word::merge.
  void merge(int32_t a, int32_t b, int32_t merged, std::vector<std::pair<Pair, int>>& changes) {
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (symbols[i] != a || i + 1 >= symbols.size() || symbols[i + 1] != b) continue;
      if (i > 0) {
        changes.push_back({{symbols[i - 1], a}, -1});
        changes.push_back({{symbols[i - 1], merged}, +1});
      }
      symbols[i] = merged;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      if (i + 1 < symbols.size()) {
        changes.push_back({{b, symbols[i + 1]}, -1});
        changes.push_back({{merged, symbols[i + 1]}, +1});
      }
    }
  }
};

struct Entry {
  int64_t count;
  Pair pair;
  // The heap's top: the highest count, then the smallest pair.
  bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

BpeTokenizer BpeTokenizer::train(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  const int64_t floor = static_cast<int64_t>(options.special_tokens.size()) + 256;
  if (options.vocab_size < floor)
    throw ValueError("text::BpeTokenizer::train: vocab_size " + std::to_string(options.vocab_size) + " is below the " +
                     std::to_string(options.special_tokens.size()) + " special tokens + 256 byte " +
                     "tokens; pass a vocab_size of at least " + std::to_string(floor));
  if (options.min_frequency < 0)
    throw ValueError("text::BpeTokenizer::train: min_frequency " + std::to_string(options.min_frequency) +
                     " is negative; pass 0 to merge every pair seen");

  // Words and their counts. Special tokens in the texts are not split out (tokenizers' trainer pre-tokenizes
  // the raw text too): they are learnt from as ordinary text.
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& t : texts)
    for (std::string& piece : pretokenize(t)) ++counts[std::move(piece)];

  auto impl = std::make_shared<Impl>();
  auto add_token = [&](const std::string& token) {
    auto [it, added] = impl->ids.emplace(token, static_cast<int32_t>(impl->tokens.size()));
    if (added) impl->tokens.push_back(token);
    return it->second;
  };
  for (const std::string& s : options.special_tokens) add_token(s);
  // The 256 byte tokens ordered by their character (tokenizers sorts its alphabet by code point).
  std::vector<std::pair<char32_t, int>> alphabet;
  for (int b = 0; b < 256; ++b) alphabet.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)), b);
  std::sort(alphabet.begin(), alphabet.end());
  std::array<int32_t, 256> byte_token{};
  for (const auto& [c, b] : alphabet) {
    std::string t;
    detail::append_utf8(t, c);
    byte_token[static_cast<size_t>(b)] = add_token(t);
  }

  // Words sorted by their bytes, so that the run is the same whatever the hash map's order.
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words(sorted.size());
  std::vector<int64_t> word_count(sorted.size());
  std::unordered_map<Pair, int64_t, PairHash> pair_count;
  std::unordered_map<Pair, std::set<size_t>, PairHash> where;
  for (size_t w = 0; w < sorted.size(); ++w) {
    word_count[w] = sorted[w].second;
    for (char c : sorted[w].first) words[w].symbols.push_back(byte_token[static_cast<uint8_t>(c)]);
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      pair_count[{s[i], s[i + 1]}] += word_count[w];
      where[{s[i], s[i + 1]}].insert(w);
    }
  }
  std::priority_queue<Entry> queue;
  for (const auto& [pair, count] : pair_count)
    if (count > 0) queue.push({count, pair});

  std::unordered_set<Pair, PairHash> merged;
  std::vector<std::pair<Pair, int>> changes;
  while (static_cast<int64_t>(impl->tokens.size()) < options.vocab_size && !queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    const int64_t current = pair_count[top.pair];
    if (top.count != current) {
      top.count = current;
      if (current > 0) queue.push(top);
      continue;
    }
    if (top.count < 1 || options.min_frequency > top.count) break;
    if (!merged.insert(top.pair).second) continue;  // a pair formed again by a token made twice: merged already
    const int32_t id = add_token(impl->tokens[static_cast<size_t>(top.pair.first)] +
                                 impl->tokens[static_cast<size_t>(top.pair.second)]);
    impl->merges.push_back(top.pair);
    std::set<Pair> touched;
    for (size_t w : where[top.pair]) {
      changes.clear();
      words[w].merge(top.pair.first, top.pair.second, id, changes);
      for (const auto& [pair, change] : changes) {
        pair_count[pair] += change * word_count[w];
        if (change > 0) {
          where[pair].insert(w);
          touched.insert(pair);
        }
      }
    }
    // The merged pair is gone from every word that held it (tokenizers keeps its count, which no entry reads
    // again unless the pair forms anew).
    pair_count[top.pair] = 0;
    for (const Pair& p : touched)
      if (pair_count[p] > 0) queue.push({pair_count[p], p});
  }
  impl->index("the trained tokenizer", options.special_tokens);
  return BpeTokenizer(std::move(impl));
}

BpeTokenizer BpeTokenizer::train_files(const std::vector<std::string>& paths, const BpeTrainOptions& options) {
  std::vector<std::string> lines;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ValueError("text::BpeTokenizer::train_files: cannot open '" + path + "'; pass text files (UTF-8)");
    std::string line;
    while (std::getline(in, line)) {
      if (!in.eof()) line += '\n';  // each line keeps its ending, as tokenizers reads files
      lines.push_back(std::move(line));
    }
  }
  return train(lines, options);
}

}  // namespace kiln::text
