// Inputs that crashed, hung or misled kiln's file parsers (found by the libFuzzer targets of tests/fuzz and by
// reading the parsers for them; docs/reliability.md, "Fuzzing"), each refused with a ValueError naming the file
// and the fault. Every size a header claims is checked against the file before anything is allocated.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;

/// Writes `bytes` to a file in a fresh folder and gives its path (the folder is removed at scope exit).
class Bytes {
 public:
  Bytes(const std::string& name, const std::string& bytes) : path_((dir_.path() / name).string()) {
    std::ofstream(path_, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string& path() const { return path_; }

 private:
  kiln_test::TempDir dir_;
  std::string path_;
};

/// A .npy file around a header dict (padded to 64 bytes as np.save does) and `data`.
std::string npy(const std::string& dict, const std::string& data = "") {
  std::string text = dict;
  text.append(64 - (10 + text.size() + 1) % 64, ' ');
  text += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(text.size() & 0xff);
  out += static_cast<char>(text.size() >> 8);
  return out + text + data;
}

/// A safetensors file: the header's size (8 bytes, little-endian), the JSON header, the data.
std::string safetensors(const std::string& header, const std::string& data = "") {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(FuzzFindings, NpyShapeLargerThanTheFileIsRefusedBeforeAllocating) {
  // 10^18 float32 elements claimed by a 128-byte file: load allocated 4 EB (std::bad_alloc) before reading.
  const Bytes f("huge.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }"));
  expect_error<ValueError>([&] { load(f.path()); }, {"huge.npy", "truncated", "(1000000000, 1000000000)", "holds 0"});
}

TEST(FuzzFindings, NpyHeaderLengthPastTheEndIsRefusedBeforeAllocating) {
  // A format 2.0 header length of 2 GiB in a 16-byte file: load allocated the 2 GiB header first.
  const Bytes f("long.npy", std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f{'de", 16));
  expect_error<ValueError>([&] { load(f.path()); }, {"long.npy", "header promises 2147483647 bytes", "holds 16"});
}

TEST(FuzzFindings, IdxDimensionsWhoseProductOverflowsAreRefused) {
  // Four dimensions of 65536: their product, 2^64, wrapped to 0 and matched the empty data, and read_idx then
  // asked for an array of 2^64 elements.
  const Bytes f("wrap.idx", std::string("\0\0\x08\x04\0\x01\0\0\0\x01\0\0\0\x01\0\0\0\x01\0\0", 20));
  expect_error<ValueError>([&] { data::read_idx(f.path()); },
                           {"wrap.idx", "(65536, 65536, 65536, 65536)", "holds 0 data bytes", "needs more"});
}

TEST(FuzzFindings, IdxTypeCodeIsNamedInHex) {
  const Bytes f("code.idx", std::string("\0\0\x0a\x01\0\0\0\x01\x07", 9));
  expect_error<ValueError>([&] { data::read_idx(f.path()); }, {"code.idx", "type code 0x0A"});
}

TEST(FuzzFindings, SafetensorsZeroSizedEntriesLoadWhateverTheirOtherExtents) {
  // Shape (5, 0) in a file with no data bytes: the size check divided by each extent in turn and refused it.
  const Bytes f("empty.safetensors",
                safetensors(R"({"e":{"dtype":"F32","shape":[5,0],"data_offsets":[0,0]},)"
                            R"("z":{"dtype":"U8","shape":[0,4611686018427387904],"data_offsets":[0,0]}})"));
  const nn::StateDict state = nn::load_safetensors(f.path());
  EXPECT_EQ(state.at("e").shape(), (Shape{5, 0}));
  EXPECT_EQ(state.at("z").shape(), (Shape{0, int64_t{1} << 62}));
}

TEST(FuzzFindings, SafetensorsExtentBeyondInt64IsRefused) {
  // 2^63 elements along an axis next to a 0: the product passed (0 bytes) and the extent became negative.
  const Bytes f("neg.safetensors",
                safetensors(R"({"e":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}})"));
  expect_error<ValueError>([&] { nn::load_safetensors(f.path()); },
                           {"neg.safetensors", "entry \"e\"", "9223372036854775808", "beyond int64"});
}

TEST(FuzzFindings, SafetensorsBoolBytesOtherThanZeroAndOneReadAsTrue) {
  // A BOOL entry holding the byte 111 (fuzz_checkpoint): loaded as is, it was an invalid bool, undefined
  // behaviour in every kernel that read it (UBSan: "load of value 111 ... for type 'const bool'").
  const Bytes f("bool.safetensors",
                safetensors(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("o\0\1", 3)));
  const Array m = nn::load_safetensors(f.path()).at("m");
  EXPECT_EQ(m.dtype(), bool_);
  EXPECT_EQ(m.astype(int64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
}

}  // namespace
}  // namespace kiln
