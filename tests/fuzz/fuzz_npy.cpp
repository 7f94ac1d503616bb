// libFuzzer target: kiln::load on arbitrary bytes as a .npy file (magic, version, header dict, data).
#include "fuzz_util.hpp"
#include "kiln/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln_fuzz::scratch_path(".npy");
  kiln_fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  kiln_fuzz::expect_kiln_errors_only([&] {
    kiln::Array a = kiln::load(path);
    // What loaded must be whole: its bytes are readable (ASan checks each) and within the file.
    kiln_fuzz::check_fits(a, size);
    volatile uint8_t sink = 0;
    const auto* p = static_cast<const uint8_t*>(a.data_ptr());
    for (int64_t i = 0; i < a.nbytes(); ++i) sink = sink ^ p[i];
  });
  return 0;
}
