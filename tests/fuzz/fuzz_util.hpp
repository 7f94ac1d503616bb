// What every libFuzzer target of tests/fuzz shares: the file a parser reads (kiln's parsers take a path), and the
// rule that a parser may refuse an input only with a kiln::Error. Anything else thrown (std::out_of_range,
// std::length_error, a JSON library's exception, std::bad_alloc) escapes the target, and libFuzzer reports it as
// a crash with the input that caused it, as it does for sanitizer reports.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "kiln/array.hpp"
#include "kiln/error.hpp"

namespace kiln_fuzz {

/// A path of this process under the temp folder (TMPDIR), ending in `suffix`: parallel fuzzing jobs
/// (-jobs=N) each write their own file.
inline std::string scratch_path(const std::string& suffix) {
  return (std::filesystem::temp_directory_path() / ("kiln_fuzz_" + std::to_string(::getpid()) + suffix)).string();
}

/// Writes `bytes` as the file `path` (replacing it); aborts when it cannot, since then nothing is fuzzed.
inline void write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(("kiln fuzz: cannot write " + path).c_str());
    std::abort();
  }
  std::fclose(f);
}

/// Aborts unless `a`'s elements fit in `file_size` bytes: the product of its extents, computed without
/// overflow, times its item size. (A shape whose product wraps around to a small number describes an array
/// larger than its memory.)
inline void check_fits(const kiln::Array& a, size_t file_size) {
  uint64_t count = 1, bytes = 0;
  bool empty = false;  // an extent of 0 makes the array empty, whatever the others
  for (int64_t extent : a.shape()) {
    if (extent < 0) std::abort();
    empty = empty || extent == 0;
  }
  for (int64_t extent : a.shape())
    if (!empty && __builtin_mul_overflow(count, static_cast<uint64_t>(extent), &count)) std::abort();
  if (empty) count = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(kiln::itemsize(a.dtype())), &bytes) || bytes > file_size)
    std::abort();
  if (static_cast<uint64_t>(a.size()) != count) std::abort();
}

/// Runs `parse`; a kiln::Error is a correct refusal, anything else propagates to libFuzzer.
template <class F>
void expect_kiln_errors_only(F&& parse) {
  try {
    parse();
  } catch (const kiln::Error&) {
  }
}

}  // namespace kiln_fuzz
