// Training byte-level BPE merges against tokenizers' ByteLevelBPETokenizer.train on the same corpus (golden
// files of tests/golden/text/make_bpe_golden.py), and against a hand-worked corpus.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/text.hpp"
#include "test_util.hpp"
#include "text/text_test_util.hpp"

namespace kiln {
namespace {

using kiln_test::kData;
using kiln_test::slurp;

TEST(BpeTrain, merges_and_vocabulary_equal_tokenizers_training_on_the_same_corpus) {
  KILN_SKIP_WITHOUT_ICU();
  const auto trained = text::BpeTokenizer::train_files(
      {kData + "/corpus.txt"}, {.vocab_size = 1000, .min_frequency = 2, .special_tokens = {text::kEndOfText}});
  const auto golden = text::BpeTokenizer::load(kData + "/vocab.json", kData + "/merges.txt");
  EXPECT_EQ(trained.vocab_size(), golden.vocab_size());
  const auto a = trained.merges(), b = golden.merges();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "merge " << i;
  kiln_test::TempDir dir;
  trained.save(dir.str() + "/vocab.json", dir.str() + "/merges.txt");
  EXPECT_EQ(slurp(dir.str() + "/vocab.json"), slurp(kData + "/vocab.json"));
  EXPECT_EQ(slurp(dir.str() + "/merges.txt"), slurp(kData + "/merges.txt"));
}

TEST(BpeTrain, most_frequent_pair_first_ties_to_smallest_ids_and_min_frequency_stops) {
  // "aaab" x3, "ab" x1 -> pairs: (a,a) 6, (a,b) 4. First merge "a a"; then words "aa a b" -> pairs (aa,a) 3,
  // (a,b) 4 -> "a b"; then "aa ab" 3 -> "aa ab". min_frequency 4 stops after the second.
  const std::vector<std::string> texts{"aaab", "aaab", "aaab", "ab"};
  const auto t = text::BpeTokenizer::train(texts, {.vocab_size = 300, .min_frequency = 1, .special_tokens = {}});
  using M = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(t.merges(), (M{{"a", "a"}, {"a", "b"}, {"aa", "ab"}}));
  EXPECT_EQ(t.vocab_size(), 256 + 3);
  EXPECT_EQ(*t.token_to_id("!"), 0);  // the byte tokens ordered by character: '!' first
  EXPECT_EQ(t.encode("aaab"), std::vector<int32_t>{*t.token_to_id("aaab")});
  const auto stopped = text::BpeTokenizer::train(texts, {.vocab_size = 300, .min_frequency = 4, .special_tokens = {}});
  EXPECT_EQ(stopped.merges(), (M{{"a", "a"}, {"a", "b"}}));
  const auto small = text::BpeTokenizer::train(texts, {.vocab_size = 257, .min_frequency = 1, .special_tokens = {}});
  EXPECT_EQ(small.merges(), (M{{"a", "a"}}));
}

TEST(BpeTrain, round_trips_text_it_never_saw) {
  KILN_SKIP_WITHOUT_ICU();
  const auto t = text::BpeTokenizer::train_files({kData + "/corpus.txt"}, {.vocab_size = 600});
  const std::string s = "Zebras \xF0\x9F\xA6\x93 never appeared\r\n\tin the corpus<|endoftext|>!";
  EXPECT_EQ(t.decode(t.encode(s)), s);
  EXPECT_EQ(t.special_id(), 0);
}

TEST(BpeTrain, bad_options_are_value_errors) {
  EXPECT_THROW((void)text::BpeTokenizer::train({"x"}, {.vocab_size = 100}), ValueError);
  EXPECT_THROW((void)text::BpeTokenizer::train({"x"}, {.vocab_size = 300, .min_frequency = -1}), ValueError);
  EXPECT_THROW((void)text::BpeTokenizer::train_files({"/nonexistent/corpus.txt"}), ValueError);
}

}  // namespace
}  // namespace kiln
