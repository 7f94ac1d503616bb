// libFuzzer target: nn::load_safetensors on arbitrary bytes (the 8-byte header size, the JSON header, the data).
#include "fuzz_util.hpp"
#include "kiln/nn.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln_fuzz::scratch_path(".safetensors");
  kiln_fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  kiln_fuzz::expect_kiln_errors_only([&] {
    const kiln::nn::StateDict state = kiln::nn::load_safetensors(path);
    // Every entry's bytes lie in the file: their sum cannot exceed its size.
    size_t total = 0;
    for (const auto& entry : state) {
      kiln_fuzz::check_fits(entry.second, size);
      total += static_cast<size_t>(entry.second.nbytes());
    }
    if (total > size) std::abort();
  });
  return 0;
}
