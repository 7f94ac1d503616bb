// .npy files: save and load arrays in NumPy's binary format (versions 1.0,
// 2.0 and 3.0), so data moves between kiln and NumPy without conversion code.
// Format: "\x93NUMPY", version bytes, header length, a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces
// and '\n' to a multiple of 64 bytes, then the raw elements.
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlign = 64;                // NumPy's ARRAY_ALIGN
constexpr size_t kGrowthAxisMaxDigits = 21;  // NumPy's spare room to grow the first axis in place
constexpr bool kHostLittleEndian = std::endian::native == std::endian::little;
static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big,
              "kiln's .npy code needs a little- or big-endian host");

/// Closes a FILE* when the scope ends.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::string quoted(const std::string& path) { return "'" + path + "'"; }

/// NumPy's descr string for a kiln dtype, little-endian ('|' for one-byte types).
std::string descr_for(DType t, const std::string& path) {
  switch (t) {
    case DType::Bool:
      return "|b1";
    case DType::Int8:
      return "|i1";
    case DType::UInt8:
      return "|u1";
    case DType::Int16:
      return "<i2";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::Float16:
      return "<f2";
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::Complex64:
      return "<c8";
    case DType::Complex128:
      return "<c16";
    case DType::BFloat16:
      break;
  }
  throw DTypeError("save: cannot write bfloat16 array to " + quoted(path) +
                   ": NumPy has no bfloat16 dtype; save a.astype(float32) instead (exact for every bfloat16 value)");
}

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

/// The whole header (magic, version, length, dict, padding) exactly as np.save writes it.
std::string make_header(DType t, const Shape& shape, const std::string& path) {
  std::string dict =
      "{'descr': '" + descr_for(t, path) + "', 'fortran_order': False, 'shape': " + shape_str(shape) + ", }";
  if (!shape.empty()) {
    size_t first_axis_digits = std::to_string(shape[0]).size();
    if (first_axis_digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - first_axis_digits, ' ');
  }
  // Try format 1.0 (2-byte header length); fall back to 2.0 (4-byte) when the header is too long.
  for (int major = 1; major <= 2; ++major) {
    size_t length_bytes = major == 1 ? 2 : 4;
    size_t dict_length = dict.size() + 1;  // + the final '\n'
    size_t padding = kAlign - ((kMagic.size() + 2 + length_bytes + dict_length) % kAlign);
    size_t header_length = dict_length + padding;
    if (major == 1 && header_length > 0xffffu) continue;
    std::string out(kMagic);
    out.push_back(static_cast<char>(major));
    out.push_back(0);
    put_little_endian(out, header_length, static_cast<int>(length_bytes));
    out += dict;
    out.append(padding, ' ');
    out.push_back('\n');
    return out;
  }
  throw ValueError("save: header for shape " + shape_str(shape) + " is too long to write to " + quoted(path));
}

// ---------------------------------------------------------------- header parsing

/// A tiny reader for the Python dict literal in a .npy header.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError("load: " + quoted(path_) + " has a malformed .npy header (" + what +
                     "): " + std::string(text_.substr(0, 200)));
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool accept(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    size_t end = text_.find(q, ++pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  std::string word() {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  int64_t integer() {
    std::string w = word();
    if (!w.empty() && (w.back() == 'L' || w.back() == 'l')) w.pop_back();  // Python 2 longs
    if (w.empty() || w.size() > 18 || w.find_first_not_of("0123456789") != std::string::npos)
      fail("shape entry '" + w + "' is not a non-negative integer");
    return std::stoll(w);
  }

  struct Result {
    std::string descr;
    bool fortran_order = false;
    Shape shape;
  };

  Result parse() {
    Result r;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (!accept('}')) {
      std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        if (peek() == '[') fail("descr is a list: structured dtypes are not supported by kiln");
        r.descr = string_literal();
        has_descr = true;
      } else if (key == "fortran_order") {
        std::string w = word();
        if (w != "True" && w != "False") fail("fortran_order is '" + w + "', not True or False");
        r.fortran_order = w == "True";
        has_order = true;
      } else if (key == "shape") {
        expect('(');
        while (!accept(')')) {
          r.shape.push_back(integer());
          if (!accept(',')) {
            expect(')');
            break;
          }
        }
        has_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      if (!accept(',')) {
        expect('}');
        break;
      }
    }
    if (!has_descr || !has_order || !has_shape)
      fail(std::string("missing key '") + (!has_descr ? "descr" : !has_order ? "fortran_order" : "shape") + "'");
    return r;
  }

 private:
  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

/// A NumPy descr ('<f4', '>i8', '|b1', '=u1', 'f8') mapped to a kiln dtype and the file's byte order.
struct FileDType {
  DType dtype;
  bool swap_bytes;  ///< true when the file's byte order differs from the host's
};

FileDType parse_descr(const std::string& descr, const std::string& path) {
  std::string_view d = descr;
  char order = '=';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    d.remove_prefix(1);
  }
  struct Known {
    std::string_view code;
    DType dtype;
  };
  static constexpr Known known[] = {
      {"b1", DType::Bool},   {"?", DType::Bool},     {"i1", DType::Int8},   {"b", DType::Int8},
      {"i2", DType::Int16},  {"i4", DType::Int32},   {"i8", DType::Int64},  {"u1", DType::UInt8},
      {"B", DType::UInt8},   {"f2", DType::Float16}, {"e", DType::Float16}, {"f4", DType::Float32},
      {"f", DType::Float32}, {"f8", DType::Float64}, {"d", DType::Float64}, {"c8", DType::Complex64},
      {"F", DType::Complex64}, {"c16", DType::Complex128}, {"D", DType::Complex128},
  };
  for (const auto& k : known) {
    if (d != k.code) continue;
    bool file_little = order == '<' || ((order == '=' || order == '|') && kHostLittleEndian);
    bool swap = itemsize(k.dtype) > 1 && file_little != kHostLittleEndian;
    return {k.dtype, swap};
  }
  std::string what;
  char kind = d.empty() ? '\0' : d[0];
  if (kind == 'c' || kind == 'G')
    what = "complex numbers of an unsupported width";
  else if (kind == 'O')
    what = "Python objects";
  else if (kind == 'U' || kind == 'S' || kind == 'a')
    what = "strings";
  else if (kind == 'M' || kind == 'm')
    what = "datetimes";
  else if (kind == 'V')
    what = "raw void records";
  else if (kind == 'u')
    what = "unsigned integers wider than 8 bits";
  else if (kind == 'f')
    what = "floats of an unsupported width";
  else
    what = "an unknown type";
  throw ValueError("load: " + quoted(path) + " holds dtype '" + descr + "' (" + what +
                   "), which kiln does not support; kiln reads bool, int8, int16, int32, int64, uint8, float16, "
                   "float32, float64, complex64 and complex128, so convert the array in NumPy first (e.g. "
                   "arr.astype(np.float64))");
}

void swap_bytes_in_place(uint8_t* data, int64_t count, int64_t size) {
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* p = data + i * size;
    for (int64_t lo = 0, hi = size - 1; lo < hi; ++lo, --hi) std::swap(p[lo], p[hi]);
  }
}

/// Copies elements stored in Fortran (column-major) order at `src` into C (row-major) order at `dst`.
void fortran_to_c_order(const uint8_t* src, uint8_t* dst, const Shape& shape, int64_t size) {
  int64_t count = shape_numel(shape);
  if (count == 0) return;
  Shape c_strides = contiguous_strides(shape);
  Shape counter(shape.size(), 0);
  int64_t dst_index = 0;  // C-order index of the element at counter
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + dst_index * size, src + i * size, static_cast<size_t>(size));
    // Advance the odometer with axis 0 fastest (Fortran order).
    for (size_t axis = 0; axis < shape.size(); ++axis) {
      if (++counter[axis] < shape[axis]) {
        dst_index += c_strides[axis];
        break;
      }
      dst_index -= (shape[axis] - 1) * c_strides[axis];
      counter[axis] = 0;
    }
  }
}

/// Reads exactly `n` bytes or reports how many were there.
size_t read_bytes(std::FILE* f, void* dst, size_t n) { return n == 0 ? 0 : std::fread(dst, 1, n, f); }

}  // namespace

void save(const std::string& path, const Array& a) {
  if (!a.defined()) throw ValueError("save: cannot write an undefined Array (default-constructed) to " + quoted(path));
  std::string header = make_header(a.dtype(), a.shape(), path);
  // Elements in C order on the host: written straight from a contiguous CPU array, otherwise gathered.
  const void* data = nullptr;
  std::vector<uint8_t> gathered;
  if (a.device().is_cpu() && a.is_contiguous()) {
    data = a.data_ptr();
  } else {
    gathered.resize(static_cast<size_t>(a.nbytes()));
    if (!gathered.empty()) detail::read_elements(a, a.dtype(), gathered.data(), "save()");
    data = gathered.data();
  }
  std::vector<uint8_t> swapped;
  if (!kHostLittleEndian && itemsize(a.dtype()) > 1 && a.nbytes() > 0) {
    swapped.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + a.nbytes());
    swap_bytes_in_place(swapped.data(), a.size(), itemsize(a.dtype()));
    data = swapped.data();
  }
  write_file_atomically(path, {{header.data(), header.size()}, {data, static_cast<size_t>(a.nbytes())}}, "save");
}

Array load(const std::string& path, std::optional<Device> device) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw ValueError("load: cannot open " + quoted(path) + ": " + std::strerror(errno));
  // The file's size bounds every size its header claims: nothing larger is allocated. (A pipe has no size:
  // there the reads below find the end.)
  uint64_t file_size = std::numeric_limits<uint64_t>::max();
  if (std::fseek(f.get(), 0, SEEK_END) == 0) {
    const long end = std::ftell(f.get());
    if (end >= 0) file_size = static_cast<uint64_t>(end);
    if (std::fseek(f.get(), 0, SEEK_SET) != 0)
      throw ValueError("load: cannot read " + quoted(path) + ": " + std::strerror(errno));
  }

  char prefix[8];
  size_t got = read_bytes(f.get(), prefix, sizeof(prefix));
  if (got < kMagic.size() || std::string_view(prefix, kMagic.size()) != kMagic)
    throw ValueError("load: " + quoted(path) + " is not a .npy file: bad magic (it does not start with \\x93NUMPY)");
  if (got < sizeof(prefix))
    throw ValueError("load: " + quoted(path) + " is truncated: it ends inside the .npy version bytes");
  int major = static_cast<uint8_t>(prefix[6]), minor = static_cast<uint8_t>(prefix[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    throw ValueError("load: " + quoted(path) + " has .npy format version " + std::to_string(major) + "." +
                     std::to_string(minor) + "; kiln reads versions 1.0, 2.0 and 3.0");

  size_t length_bytes = major == 1 ? 2 : 4;
  uint8_t length_raw[4] = {};
  if (read_bytes(f.get(), length_raw, length_bytes) != length_bytes)
    throw ValueError("load: " + quoted(path) + " is truncated: it ends inside the header length");
  size_t header_length = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_length |= static_cast<size_t>(length_raw[i]) << (8 * i);
  const uint64_t header_end = sizeof(prefix) + length_bytes + uint64_t{header_length};
  if (header_end > file_size)
    throw ValueError("load: " + quoted(path) + " is truncated or corrupt: the header promises " +
                     std::to_string(header_length) + " bytes but the file holds " + std::to_string(file_size) +
                     " bytes in all");
  std::string header_text(header_length, '\0');
  if (read_bytes(f.get(), header_text.data(), header_length) != header_length)
    throw ValueError("load: " + quoted(path) + " is truncated: the header promises " + std::to_string(header_length) +
                     " bytes but the file ends before them");

  HeaderParser::Result header = HeaderParser(header_text, path).parse();
  FileDType file_dtype = parse_descr(header.descr, path);
  int64_t size = itemsize(file_dtype.dtype);
  int64_t count = 1;
  for (int64_t extent : header.shape) {
    if (extent != 0 && count > (int64_t{1} << 62) / size / extent)
      throw ValueError("load: " + quoted(path) + " has shape " + shape_str(header.shape) + ", too large to load");
    count *= extent;
  }
  size_t nbytes = static_cast<size_t>(count * size);
  if (nbytes > file_size - header_end)
    throw ValueError("load: " + quoted(path) + " is truncated: shape " + shape_str(header.shape) + " of dtype '" +
                     header.descr + "' needs " + std::to_string(nbytes) + " bytes of data but the file holds " +
                     std::to_string(file_size - header_end) + " after its header");

  Array out = empty(header.shape, file_dtype.dtype, cpu());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  std::vector<uint8_t> fortran_data;
  uint8_t* read_target = dst;
  if (header.fortran_order && header.shape.size() > 1) {
    fortran_data.resize(nbytes);
    read_target = fortran_data.data();
  }
  size_t data_got = read_bytes(f.get(), read_target, nbytes);
  if (data_got != nbytes)
    throw ValueError("load: " + quoted(path) + " is truncated: shape " + shape_str(header.shape) + " of dtype '" +
                     header.descr + "' needs " + std::to_string(nbytes) + " bytes of data but the file holds " +
                     std::to_string(data_got));
  if (file_dtype.swap_bytes) {  // a complex element is two floats, each swapped on its own
    const int64_t parts = is_complex(file_dtype.dtype) ? 2 : 1;
    swap_bytes_in_place(read_target, count * parts, size / parts);
  }
  if (read_target != dst) fortran_to_c_order(read_target, dst, header.shape, size);
  if (file_dtype.dtype == DType::Bool) {
    // NumPy bools are 0/1 bytes; normalise anything else so kiln's kernels see canonical values.
    for (size_t i = 0; i < nbytes; ++i) dst[i] = dst[i] != 0;
  }
  if (device && *device != cpu()) return out.to(*device);
  return out;
}

}  // namespace kiln
