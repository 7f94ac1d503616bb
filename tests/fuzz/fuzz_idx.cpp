// libFuzzer target: data::read_idx on arbitrary bytes, as an IDX file (magic, dimensions, big-endian data),
// plain or gzip-compressed. The first byte picks how the rest is written:
//   0: as a plain IDX file;  1: as a .gz file as is (zlib's error paths);  2: gzip-compressed by zlib into a .gz
//   file (the IDX parser reached through the decompression).
#include <zlib.h>

#include "fuzz_util.hpp"
#include "kiln/data.hpp"

namespace {

std::string gzip(std::string_view bytes) {
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper, as the .gz files of MNIST and Fashion-MNIST have.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string plain = kiln_fuzz::scratch_path(".idx"), compressed = kiln_fuzz::scratch_path(".idx.gz");
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int mode = data[0] % 3;
  const std::string& path = mode == 0 ? plain : compressed;
  kiln_fuzz::write_file(path, mode == 2 ? gzip(rest) : std::string(rest));
  kiln_fuzz::expect_kiln_errors_only([&] {
    const kiln::Array a = kiln::data::read_idx(path);
    // The elements come from the file's (inflated) bytes: never more than the IDX data of a plain file, and
    // never a shape whose product overflows.
    kiln_fuzz::check_fits(a, mode == 0 ? rest.size() : SIZE_MAX);
  });
  return 0;
}
