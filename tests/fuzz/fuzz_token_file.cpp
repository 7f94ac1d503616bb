// libFuzzer target: text::TokenFile on arbitrary bytes. The first byte picks the format (0: llm.c's .bin, 1: raw
// uint16, else deduced from the name, a .bin file); the rest is the file. What maps must hold whole tokens inside
// the file, and its windows and batches must read only them.
#include "fuzz_util.hpp"
#include "kiln/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln_fuzz::scratch_path(".bin");
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const size_t bytes = size - 1;
  kiln_fuzz::write_file(path, {reinterpret_cast<const char*>(data + 1), bytes});
  kiln_fuzz::expect_kiln_errors_only([&] {
    std::optional<kiln::text::TokenFormat> format;
    if (mode == 0) format = kiln::text::TokenFormat::llmc;
    if (mode == 1) format = kiln::text::TokenFormat::raw;
    const kiln::text::TokenFile file(path, format);
    if (static_cast<uint64_t>(file.size()) * 2 > bytes) std::abort();
    volatile uint32_t sink = 0;
    for (uint16_t t : file.tokens()) sink = sink + t;
    const int64_t n = std::min<int64_t>(file.size(), 16);
    const kiln::Array w = file.window(0, n);
    if (w.size() != n) std::abort();
    if (file.size() >= 3) {
      kiln::random::Generator gen(7);
      auto [x, y] = file.batch(2, std::min<int64_t>(file.size() - 1, 4), gen);
      if (x.shape() != y.shape()) std::abort();
    }
  });
  return 0;
}
