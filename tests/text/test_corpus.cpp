// The corpus path: read_text (plain and gzip), tokenize_to_file, and the Jargon File of Debian's jargon-text
// (skipped when the package is missing) encoded and decoded back to its exact bytes.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/text.hpp"
#include "test_util.hpp"
#include "text/text_test_util.hpp"

namespace kiln {
namespace {

const std::string kData = KILN_TEXT_DATA_DIR;

const text::BpeTokenizer& golden_tokenizer() {
  static const text::BpeTokenizer tok = text::BpeTokenizer::load(kData + "/vocab.json", kData + "/merges.txt");
  return tok;
}

TEST(TextCorpus, read_text_reads_plain_and_gzip_files) {
  kiln_test::TempDir dir;
  const std::string body = "line one\nline two \xE2\x9C\x93\n";
  std::ofstream(dir.str() + "/a.txt", std::ios::binary) << body;
  gzFile f = gzopen((dir.str() + "/a.txt.gz").c_str(), "wb");
  gzwrite(f, body.data(), static_cast<unsigned>(body.size()));
  gzclose(f);
  EXPECT_EQ(text::read_text(dir.str() + "/a.txt"), body);
  EXPECT_EQ(text::read_text(dir.str() + "/a.txt.gz"), body);
  EXPECT_THROW((void)text::read_text(dir.str() + "/missing.txt"), ValueError);
}

TEST(TextCorpus, tokenize_to_file_starts_with_end_of_text_and_decodes_back) {
  kiln_test::TempDir dir;
  const std::string s = "Hello world, the hacker's kluge.\n";
  const int64_t n = text::tokenize_to_file(golden_tokenizer(), s, dir.str() + "/t.bin");
  text::TokenFile file(dir.str() + "/t.bin");
  ASSERT_EQ(file.size(), n);
  EXPECT_EQ(file[0], *golden_tokenizer().special_id());
  std::vector<int32_t> ids(file.tokens().begin(), file.tokens().end());
  EXPECT_EQ(golden_tokenizer().decode(ids), std::string(text::kEndOfText) + s);
}

TEST(TextCorpus, the_jargon_file_round_trips_through_a_token_file) {
  KILN_SKIP_WITHOUT_ICU();
  if (!std::filesystem::exists(text::kJargonFile)) GTEST_SKIP() << "Debian's jargon-text is not installed";
  const std::string corpus = text::read_text(text::kJargonFile);
  EXPECT_GT(corpus.size(), 1000000u);
  kiln_test::TempDir dir;
  const int64_t n = text::tokenize_to_file(golden_tokenizer(), corpus, dir.str() + "/jargon.bin");
  text::TokenFile file(dir.str() + "/jargon.bin");
  EXPECT_EQ(file.size(), n);
  std::vector<int32_t> ids(file.tokens().begin() + 1, file.tokens().end());
  EXPECT_EQ(golden_tokenizer().decode(ids), corpus);
}

}  // namespace
}  // namespace kiln
