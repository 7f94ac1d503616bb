// Tests of .npy save/load against files written by NumPy (tests/golden/io_golden.py):
// every dtype in C/Fortran order and both byte orders, 0-d, empty, format 1.0/2.0/3.0,
// byte-exact agreement of save with np.save, and every error load/save throws.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/debug.hpp"
#include "kiln/device.hpp"
#include "kiln/io.hpp"
#include "kiln/ops.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

const std::string kDir = std::string(KILN_GOLDEN_DIR) + "/io/";
const char* kDTypes[] = {"bool",    "int8",    "int16",   "int32",     "int64",     "uint8",
                         "float16", "float32", "float64", "complex64", "complex128"};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The elements of `a` as C-order bytes (read through to_vector's path, so views work too).
std::vector<uint8_t> element_bytes(const Array& a) {
  std::vector<uint8_t> out(static_cast<size_t>(a.nbytes()));
  if (!out.empty()) detail::read_elements(a, a.dtype(), out.data(), "to_vector()");
  return out;
}

/// A fresh scratch directory per test, removed after it.
class NpyTest : public ::testing::Test {
 protected:
  std::string scratch(const std::string& name) const { return (dir_.path() / name).string(); }
  kiln_test::TempDir dir_;
};

using kiln_test::expect_error;

/// np.arange(6).reshape(2, 3).astype(t) built from raw bytes (no kiln conversion involved).
Array arange6(DType t) {
  std::vector<uint8_t> bytes(static_cast<size_t>(6 * itemsize(t)));
  for (int i = 0; i < 6; ++i) {
    visit_any_dtype(t, [&](auto zero) {
      using T = decltype(zero);
      T v;
      if constexpr (std::is_same_v<T, complex64_t> || std::is_same_v<T, complex128_t>)
        v = T(static_cast<typename T::value_type>(i), 0);
      else if constexpr (std::is_same_v<T, bool>)
        v = i != 0;
      else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        v = T(static_cast<float>(i));
      else
        v = static_cast<T>(i);
      std::memcpy(bytes.data() + i * itemsize(t), &v, static_cast<size_t>(itemsize(t)));
    });
  }
  return from_data(bytes.data(), Shape{2, 3}, t, cpu());
}

TEST_F(NpyTest, LoadsNumPyFilesOfEveryDTypeAndLayout) {
  for (const char* dt : kDTypes) {
    for (const char* layout : {"c", "f", "be", "fbe"}) {
      std::string name = std::string(dt) + "_" + layout;
      SCOPED_TRACE(name);
      Array a = load(kDir + name + ".npy");
      EXPECT_EQ(a.dtype(), parse_dtype(dt));
      EXPECT_EQ(a.shape(), (Shape{2, 3, 4}));
      EXPECT_TRUE(a.device().is_cpu());
      EXPECT_EQ(element_bytes(a), read_bytes(kDir + name + ".raw"));
    }
  }
}

TEST_F(NpyTest, LoadedFloat64ValuesMatchTheGeneratingFormula) {
  // io_golden.py: v[i] = (i - n/2) * 0.37 + 1/(i + 3) for n = 24, shape (2, 3, 4).
  for (const char* layout : {"c", "f", "be", "fbe"}) {
    std::vector<double> v = load(kDir + "float64_" + layout + ".npy").to_vector<double>();
    ASSERT_EQ(v.size(), 24u);
    for (int i = 0; i < 24; ++i) EXPECT_DOUBLE_EQ(v[i], (i - 12.0) * 0.37 + 1.0 / (i + 3)) << layout << " " << i;
  }
}

TEST_F(NpyTest, FortranOrderFileIsReturnedInCOrder) {
  Array a = load(kDir + "fortran_2x3_i32.npy");
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST_F(NpyTest, LoadsZeroDimAndEmptyArrays) {
  Array s = load(kDir + "scalar_f64.npy");
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.dtype(), float64);
  EXPECT_EQ(s.item<double>(), 3.25);
  Array i = load(kDir + "scalar_i32.npy");
  EXPECT_EQ(i.dtype(), int32);
  EXPECT_EQ(i.item<int32_t>(), -7);
  Array e = load(kDir + "empty_f32.npy");
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_EQ(e.dtype(), float32);
  EXPECT_EQ(e.size(), 0);
  Array e1 = load(kDir + "empty_1d_i64.npy");
  EXPECT_EQ(e1.shape(), (Shape{0}));
  EXPECT_EQ(e1.dtype(), int64);
}

TEST_F(NpyTest, LoadsFormatVersions2And3AndNativeByteOrder) {
  struct Case {
    const char* name;
    DType dtype;
    Shape shape;
  };
  const Case cases[] = {{"v3_f32", float32, {3, 5}},
                        {"v2_f64", float64, {4, 2}},
                        {"v2_long_header_i16", int16, {7, 3}},
                        {"native_order_f64", float64, {5}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Array a = load(kDir + c.name + ".npy");
    EXPECT_EQ(a.dtype(), c.dtype);
    EXPECT_EQ(a.shape(), c.shape);
    EXPECT_EQ(element_bytes(a), read_bytes(kDir + c.name + ".raw"));
  }
}

TEST_F(NpyTest, SaveWritesTheSameBytesAsNumPy) {
  for (const char* dt : kDTypes) {
    SCOPED_TRACE(dt);
    std::string out = scratch(std::string(dt) + ".npy");
    save(out, arange6(parse_dtype(dt)));
    EXPECT_EQ(read_bytes(out), read_bytes(kDir + "save_" + dt + ".npy"));
  }
}

TEST_F(NpyTest, SaveWritesZeroDimEmptyAnd1dLikeNumPy) {
  double v = 2.5;
  save(scratch("a.npy"), from_data(&v, Shape{}, float64, cpu()));
  EXPECT_EQ(read_bytes(scratch("a.npy")), read_bytes(kDir + "save_0d_float64.npy"));
  save(scratch("b.npy"), from_data(nullptr, Shape{0, 3}, float32, cpu()));
  EXPECT_EQ(read_bytes(scratch("b.npy")), read_bytes(kDir + "save_empty_float32.npy"));
  std::vector<int32_t> r = {0, 1, 2, 3, 4};
  save(scratch("c.npy"), from_data(r.data(), Shape{5}, int32, cpu()));
  EXPECT_EQ(read_bytes(scratch("c.npy")), read_bytes(kDir + "save_1d_int32.npy"));
}

TEST_F(NpyTest, HeaderIsPaddedTo64BytesWithFormat1) {
  save(scratch("a.npy"), arange6(float32));
  std::vector<uint8_t> bytes = read_bytes(scratch("a.npy"));
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  size_t header_end = 10 + bytes[8] + 256 * bytes[9];
  EXPECT_EQ(header_end % 64, 0u);
  EXPECT_EQ(bytes[header_end - 1], '\n');
  EXPECT_EQ(bytes.size(), header_end + 6 * 4);
}

TEST_F(NpyTest, RoundTripsEveryDTypeAndViews) {
  for (const char* dt : kDTypes) {
    SCOPED_TRACE(dt);
    Array a = load(kDir + std::string(dt) + "_c.npy");
    save(scratch("rt.npy"), a);
    Array b = load(scratch("rt.npy"));
    EXPECT_EQ(b.dtype(), a.dtype());
    EXPECT_EQ(b.shape(), a.shape());
    EXPECT_EQ(element_bytes(b), read_bytes(kDir + std::string(dt) + "_c.raw"));
  }
  // A transposed (non-contiguous) view is written in its logical C order.
  save(scratch("t.npy"), arange6(int64).transpose());
  Array t = load(scratch("t.npy"));
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST_F(NpyTest, LongHeaderSwitchesToFormat2) {
  // 25000 axes of extent 1 make a header longer than format 1.0's 65535-byte limit.
  Shape shape(size_t{25000}, int64_t{1});
  float value = 1.5f;
  Array a = from_data(&value, shape, float32, cpu());
  save(scratch("long.npy"), a);
  std::vector<uint8_t> bytes = read_bytes(scratch("long.npy"));
  ASSERT_GE(bytes.size(), 12u);
  EXPECT_EQ(bytes[6], 2);
  size_t header_length = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<size_t>(bytes[11]) << 24);
  EXPECT_GT(header_length, 65535u);
  EXPECT_EQ((12 + header_length) % 64, 0u);
  Array b = load(scratch("long.npy"));
  EXPECT_EQ(b.shape(), shape);
  float back;
  std::memcpy(&back, b.data_ptr(), 4);
  EXPECT_EQ(back, 1.5f);
}

TEST_F(NpyTest, LoadOntoDevicePlacesTheResultThere) {
  Array a = load(kDir + "int32_c.npy", cpu());
  EXPECT_TRUE(a.device().is_cpu());
  if (num_gpus() == 0) GTEST_SKIP() << "no GPU: load(path, gpu(0)) not exercised";
  Array g = load(kDir + "int32_c.npy", gpu(0));
  EXPECT_EQ(g.device(), gpu(0));
  EXPECT_EQ(element_bytes(g), read_bytes(kDir + "int32_c.raw"));
}

TEST_F(NpyTest, LoadErrorsNameTheFileAndTheProblem) {
  const std::string missing = kDir + "no_such_file.npy";
  expect_error<ValueError>([&] { load(missing); }, {missing, "cannot open", "No such file"});
  expect_error<ValueError>([&] { load(kDir + "bad_magic.npy"); }, {"bad_magic.npy", "bad magic", "not a .npy"});
  expect_error<ValueError>([&] { load(kDir + "truncated.npy"); },
                           {"truncated.npy", "truncated", "(2, 3, 4)", "96 bytes", "holds 86"});
  expect_error<ValueError>([&] { load(kDir + "truncated_header.npy"); }, {"truncated_header.npy", "truncated"});
  expect_error<ValueError>([&] { load(kDir + "bad_version.npy"); }, {"bad_version.npy", "version 7.0"});
  expect_error<ValueError>([&] { load(kDir + "complex256.npy"); }, {"complex256.npy", "c32", "complex"});
  expect_error<ValueError>([&] { load(kDir + "object.npy"); }, {"object.npy", "|O", "Python objects"});
  expect_error<ValueError>([&] { load(kDir + "uint16.npy"); }, {"uint16.npy", "<u2", "astype"});
  expect_error<ValueError>([&] { load(kDir + "structured.npy"); }, {"structured.npy", "structured"});
}

TEST_F(NpyTest, MalformedHeaderIsAValueError) {
  std::string header = "{'descr': '<f4', 'shape': (2,), }";  // fortran_order missing
  header.append(64 - ((10 + header.size() + 1) % 64), ' ');
  header.push_back('\n');
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file.push_back(static_cast<char>(header.size() & 0xff));
  file.push_back(static_cast<char>(header.size() >> 8));
  file += header + std::string(8, '\0');
  std::ofstream(scratch("bad.npy"), std::ios::binary) << file;
  expect_error<ValueError>([&] { load(scratch("bad.npy")); }, {"bad.npy", "malformed", "fortran_order"});
}

TEST_F(NpyTest, SaveErrors) {
  std::vector<BFloat16> v = {BFloat16(1.0f)};
  Array bf = from_data(v.data(), Shape{1}, bfloat16, cpu());
  expect_error<DTypeError>([&] { save(scratch("bf.npy"), bf); }, {"bfloat16", "astype(float32)", "bf.npy"});
  EXPECT_FALSE(std::filesystem::exists(scratch("bf.npy")));
  std::string no_dir = scratch("missing_dir/a.npy");
  expect_error<ValueError>([&] { save(no_dir, arange6(float32)); }, {no_dir, "cannot open"});
  expect_error<ValueError>([&] { save(scratch("u.npy"), Array()); }, {"undefined"});
}

// save() of a GPU array copies it to the host: sync debugging reports that copy as save() (it was
// reported as to_vector(), an op the user never called).
TEST_F(NpyTest, SaveOfAGpuArrayIsReportedAsSaveBySyncDebugging) {
  KILN_REQUIRE_GPU();
  Array x = arange6(float32).to(gpu(0));
  {
    SyncDebugGuard guard(SyncDebugMode::error);
    expect_error<Error>([&] { save(scratch("g.npy"), x); }, {"implicit synchronisation in save()", "24 bytes D2H"});
  }
  save(scratch("g.npy"), x);
  EXPECT_EQ(read_bytes(scratch("g.npy")), read_bytes(kDir + "save_float32.npy"));
}

}  // namespace
}  // namespace kiln
