// Token files: llm.c's .bin layout byte by byte, raw uint16, the memory map's contents, errors for bad files,
// and random-window batches (x and y shifted by one, seeded).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/text.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int32_t int_at(const std::string& s, size_t i) {
  int32_t v;
  std::memcpy(&v, s.data() + 4 * i, 4);
  return v;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TokenFile, llmc_format_is_a_256_int_header_then_uint16_tokens) {
  kiln_test::TempDir dir;
  const std::string path = dir.str() + "/t.bin";
  text::write_tokens(path, std::vector<int32_t>{5, 65535, 0, 50256});
  const std::string s = bytes_of(path);
  ASSERT_EQ(s.size(), 1024u + 8u);
  EXPECT_EQ(int_at(s, 0), 20240520);
  EXPECT_EQ(int_at(s, 1), 1);
  EXPECT_EQ(int_at(s, 2), 4);
  for (size_t i = 3; i < 256; ++i) ASSERT_EQ(int_at(s, i), 0);
  const unsigned char expected[8] = {5, 0, 0xFF, 0xFF, 0, 0, 0x50, 0xC4};  // little-endian uint16
  EXPECT_EQ(std::memcmp(s.data() + 1024, expected, 8), 0);

  text::TokenFile file(path);
  ASSERT_EQ(file.size(), 4);
  EXPECT_EQ(file[1], 65535);
  EXPECT_EQ(file[3], 50256);
  EXPECT_EQ(file.window(1, 3).to_vector<int64_t>(), (std::vector<int64_t>{65535, 0, 50256}));
}

TEST(TokenFile, reads_a_file_laid_out_by_hand_as_llmc_writes_it) {
  kiln_test::TempDir dir;
  const std::string path = dir.str() + "/hand.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = 3;
  const uint16_t tokens[3] = {7, 8, 9};
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens), 6);
  }
  text::TokenFile file(path);
  EXPECT_EQ(std::vector<uint16_t>(file.tokens().begin(), file.tokens().end()), (std::vector<uint16_t>{7, 8, 9}));
}

TEST(TokenFile, raw_files_are_bare_uint16_and_can_be_empty) {
  kiln_test::TempDir dir;
  const std::string path = dir.str() + "/t.u16";
  text::write_tokens(path, std::vector<int32_t>{1, 2, 258}, text::TokenFormat::raw);
  EXPECT_EQ(bytes_of(path), std::string("\x01\x00\x02\x00\x02\x01", 6));
  text::TokenFile file(path);
  EXPECT_EQ(file.size(), 3);
  EXPECT_EQ(file[2], 258);
  text::write_tokens(dir.str() + "/empty.u16", std::vector<int32_t>{}, text::TokenFormat::raw);
  EXPECT_EQ(text::TokenFile(dir.str() + "/empty.u16").size(), 0);
  text::TokenFile moved = std::move(file);
  EXPECT_EQ(moved[0], 1);
}

TEST(TokenFile, bad_files_are_value_errors_naming_the_file_and_the_problem) {
  kiln_test::TempDir dir;
  const std::string bin = dir.str() + "/t.bin";
  text::write_tokens(bin, std::vector<int32_t>(100, 3));
  // truncated: the header promises 100 tokens
  std::filesystem::resize_file(bin, 1024 + 100);
  auto m = error_of([&] { text::TokenFile f(bin); });
  EXPECT_NE(m.find(bin), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  // odd size
  std::filesystem::resize_file(bin, 1024 + 99);
  m = error_of([&] { text::TokenFile f(bin); });
  EXPECT_NE(m.find("odd"), std::string::npos) << m;
  // bad magic: a raw file named .bin
  text::write_tokens(bin, std::vector<int32_t>(600, 3), text::TokenFormat::raw);
  m = error_of([&] { text::TokenFile f(bin); });
  EXPECT_NE(m.find("magic"), std::string::npos) << m;
  EXPECT_NO_THROW(text::TokenFile(bin, text::TokenFormat::raw));
  // shorter than the header
  text::write_tokens(bin, std::vector<int32_t>(10, 3), text::TokenFormat::raw);
  m = error_of([&] { text::TokenFile f(bin); });
  EXPECT_NE(m.find("1024-byte header"), std::string::npos) << m;
  m = error_of([&] { text::TokenFile f(dir.str() + "/missing.bin"); });
  EXPECT_NE(m.find("missing.bin"), std::string::npos) << m;
  EXPECT_THROW(text::write_tokens(bin, std::vector<int32_t>{70000}), ValueError);
  EXPECT_THROW(text::write_tokens(bin, std::vector<int32_t>{-1}), ValueError);
}

TEST(TokenFile, batches_are_seeded_windows_with_targets_shifted_by_one) {
  kiln_test::TempDir dir;
  const std::string path = dir.str() + "/seq.bin";
  std::vector<int32_t> tokens(5000);
  std::iota(tokens.begin(), tokens.end(), 0);  // token i at position i: a window's first token is its offset
  text::write_tokens(path, tokens);
  text::TokenFile file(path);
  random::Generator gen(42), again(42);
  auto [x, y] = file.batch(8, 64, gen);
  EXPECT_EQ(x.shape(), (Shape{8, 64}));
  EXPECT_EQ(y.shape(), (Shape{8, 64}));
  EXPECT_EQ(x.dtype(), int64);
  EXPECT_EQ(y.dtype(), int64);
  const auto xs = x.to_vector<int64_t>(), ys = y.to_vector<int64_t>();
  for (int64_t b = 0; b < 8; ++b) {
    const int64_t start = xs[static_cast<size_t>(b * 64)];
    EXPECT_GE(start, 0);
    EXPECT_LE(start + 64, 4999);
    for (int64_t t = 0; t < 64; ++t) {
      ASSERT_EQ(xs[static_cast<size_t>(b * 64 + t)], start + t);
      ASSERT_EQ(ys[static_cast<size_t>(b * 64 + t)], start + t + 1);
    }
  }
  auto [x2, y2] = file.batch(8, 64, again);
  EXPECT_EQ(x2.to_vector<int64_t>(), xs);
  auto [x3, y3] = file.batch(8, 64, gen);
  EXPECT_NE(x3.to_vector<int64_t>(), xs);
  // the last possible window is reachable: a file of exactly seq + 1 tokens
  text::write_tokens(path, std::vector<int32_t>{1, 2, 3});
  auto [xe, ye] = text::TokenFile(path).batch(2, 2, gen);
  EXPECT_EQ(xe.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(ye.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 2, 3}));
  EXPECT_THROW((void)text::TokenFile(path).batch(1, 3, gen), ValueError);
}

}  // namespace
}  // namespace kiln
