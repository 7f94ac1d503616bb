// GPT-2's byte-level BPE against Hugging Face's `tokenizers` (golden files written by
// tests/golden/text/make_bpe_golden.py): ids of hard texts, decodes, invalid UTF-8, saved files, errors; and
// the pre-tokenizer against hand-split texts.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
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

const nlohmann::json& cases() {
  static const nlohmann::json data = nlohmann::json::parse(slurp(kData + "/cases.json"));
  return data;
}

const text::BpeTokenizer& golden_tokenizer() {
  static const text::BpeTokenizer tok = text::BpeTokenizer::load(kData + "/vocab.json", kData + "/merges.txt");
  return tok;
}

void write(const std::string& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

TEST(Tokenizer, hard_texts_encode_to_the_ids_tokenizers_gives) {
  KILN_SKIP_WITHOUT_ICU();
  const auto& tok = golden_tokenizer();
  for (const auto& c : cases()["cases"]) {
    const std::string t = c["text"].get<std::string>();
    EXPECT_EQ(tok.encode(t), c["ids"].get<std::vector<int32_t>>()) << "text: " << t;
  }
}

TEST(Tokenizer, special_token_as_text_matches_tokenizers_without_the_added_token) {
  KILN_SKIP_WITHOUT_ICU();
  const auto& tok = golden_tokenizer();
  for (const auto& c : cases()["cases"]) {
    const std::string t = c["text"].get<std::string>();
    EXPECT_EQ(tok.encode(t, text::Special::as_text), c["ids_as_text"].get<std::vector<int32_t>>()) << "text: " << t;
  }
}

TEST(Tokenizer, decode_round_trips_and_equals_tokenizers_decode) {
  KILN_SKIP_WITHOUT_ICU();
  const auto& tok = golden_tokenizer();
  for (const auto& c : cases()["cases"]) {
    const std::string t = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.decode(ids), t);
    EXPECT_EQ(tok.decode(ids), c["decode"].get<std::string>());
    EXPECT_EQ(tok.decode_bytes(ids), t);
  }
}

TEST(Tokenizer, decode_of_a_cut_character_gives_replacement_characters_as_tokenizers) {
  KILN_SKIP_WITHOUT_ICU();
  const auto& tok = golden_tokenizer();
  int checked = 0;
  for (const auto& c : cases()["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    for (const auto& p : c["prefix_decodes"]) {
      const auto count = p["count"].get<size_t>();
      EXPECT_EQ(tok.decode(std::span<const int32_t>(ids.data(), count)), p["text"].get<std::string>());
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(Tokenizer, invalid_utf8_is_replaced_as_python_errors_replace) {
  KILN_SKIP_WITHOUT_ICU();
  for (const auto& c : cases()["invalid_utf8"]) {
    const std::string hex = c["hex"].get<std::string>();
    std::string bytes;
    for (size_t i = 0; i < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    EXPECT_EQ(text::utf8_replace_invalid(bytes), c["text"].get<std::string>()) << hex;
    // encode treats the input as its replaced text
    EXPECT_EQ(golden_tokenizer().encode(bytes), golden_tokenizer().encode(c["text"].get<std::string>()));
  }
}

TEST(Tokenizer, pretokenize_splits_as_gpt2_regex) {
  KILN_SKIP_WITHOUT_ICU();
  using V = std::vector<std::string>;
  EXPECT_EQ(text::pretokenize("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(text::pretokenize("I'm here's 'RE"), (V{"I", "'m", " here", "'s", " '", "RE"}));
  EXPECT_EQ(text::pretokenize("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(text::pretokenize("x\n\n y   "), (V{"x", "\n\n", " y", "   "}));
  EXPECT_EQ(text::pretokenize("123abc 4.5!!"), (V{"123", "abc", " 4", ".", "5", "!!"}));
  EXPECT_EQ(text::pretokenize("caf\xC3\xA9 \xE2\x82\xAC"
                              "5"),
            (V{"caf\xC3\xA9", " \xE2\x82\xAC", "5"}));
  EXPECT_EQ(text::pretokenize("a\r\nb"), (V{"a", "\r", "\n", "b"}));  // the run less its last space, then \\s+
  EXPECT_EQ(text::pretokenize(""), V{});
}

TEST(Tokenizer, byte_map_is_gpt2s) {
  EXPECT_EQ(text::byte_to_unicode('!'), U'!');
  EXPECT_EQ(text::byte_to_unicode(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(text::byte_to_unicode('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(text::byte_to_unicode(0), U'\u0100');
  EXPECT_EQ(text::byte_to_unicode(0xAD), U'\u0143');  // the soft hyphen, the last byte outside the printable runs
}

TEST(Tokenizer, special_tokens_are_one_id_and_refusable) {
  const auto& tok = golden_tokenizer();
  const auto eot = tok.special_id();
  ASSERT_TRUE(eot.has_value());
  EXPECT_EQ(*eot, 0);  // trained with the special token first
  EXPECT_EQ(tok.encode(text::kEndOfText), std::vector<int32_t>{0});
  try {
    (void)tok.encode("abc<|endoftext|>", text::Special::refuse);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'<|endoftext|>' at byte 3"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)tok.encode("no special", text::Special::refuse));
}

TEST(Tokenizer, save_writes_the_files_tokenizers_wrote) {
  kiln_test::TempDir dir;
  golden_tokenizer().save(dir.str() + "/vocab.json", dir.str() + "/merges.txt");
  EXPECT_EQ(slurp(dir.str() + "/vocab.json"), slurp(kData + "/vocab.json"));
  EXPECT_EQ(slurp(dir.str() + "/merges.txt"), slurp(kData + "/merges.txt"));
}

TEST(Tokenizer, load_errors_name_the_file_the_line_and_the_fix) {
  kiln_test::TempDir dir;
  const std::string vocab = kData + "/vocab.json", merges = kData + "/merges.txt";
  auto message = [](auto&& fn) { return kiln_test::value_error_message(fn); };
  const std::string bad_json = dir.str() + "/bad.json";
  write(bad_json, "{\"a\": 0,\n \"b\" 1}");
  auto m = message([&] { text::BpeTokenizer::load(bad_json, merges); });
  EXPECT_NE(m.find(bad_json), std::string::npos) << m;
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;

  const std::string bad_merges = dir.str() + "/merges.txt";
  write(bad_merges, "#version: 0.2\nĠ t\nĠt zzz\n");
  m = message([&] { text::BpeTokenizer::load(vocab, bad_merges); });
  EXPECT_NE(m.find(bad_merges + "' line 3"), std::string::npos) << m;
  EXPECT_NE(m.find("'zzz'"), std::string::npos) << m;

  write(bad_merges, "#version: 0.2\nĠ t x\n");
  m = message([&] { text::BpeTokenizer::load(vocab, bad_merges); });
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;

  m = message([&] { text::BpeTokenizer::load(dir.str() + "/missing.json", merges); });
  EXPECT_NE(m.find("missing.json"), std::string::npos) << m;

  const std::string no_bytes = dir.str() + "/small.json";
  write(no_bytes, "{\"a\": 0}");
  write(bad_merges, "#version: 0.2\n");
  m = message([&] { text::BpeTokenizer::load(no_bytes, bad_merges); });
  EXPECT_NE(m.find("no token for byte"), std::string::npos) << m;

  // An id past the count is refused before anything is sized by it (the fuzzer's 999999999 asked for 32 GB).
  const std::string sparse = dir.str() + "/sparse.json";
  write(sparse, "{\"a\": 0, \"b\": 999999999}");
  m = message([&] { text::BpeTokenizer::load(sparse, bad_merges); });
  EXPECT_NE(m.find("'b' has the id 999999999 but the file holds 2 tokens"), std::string::npos) << m;

  EXPECT_THROW((void)golden_tokenizer().decode(std::vector<int32_t>{100000}), ValueError);
}

}  // namespace
}  // namespace kiln
