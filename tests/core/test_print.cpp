// Tests of NumPy-style printing: every case in the golden listing (arrays saved by
// tests/golden/io_golden.py with NumPy's repr() of each) must print identically, plus
// hand-written expectations for views, bfloat16 (which NumPy lacks), options and GPU arrays.
//
// Known differences from NumPy (not covered by the golden cases): kiln has no
// suppress/sign/floatmode/formatter/legacy options; Dragon4's tie-breaking at exact
// rounding-interval boundaries of float16 values may in theory pick other shortest
// digits than kiln's round-trip search (all 65536 float16 values were checked to match);
// bfloat16, which NumPy lacks, prints by NumPy's float rules with ml_dtypes.finfo(bfloat16)
// precision 2 (ml_dtypes' own repr, e.g. `array([1, 0.100098], dtype=bfloat16)`, differs).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

const std::string kDir = std::string(KILN_GOLDEN_DIR) + "/io/";

/// Restores the default print options after each test.
class PrintTest : public ::testing::Test {
 protected:
  void TearDown() override { set_print_options(PrintOptions{}); }
};

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST_F(PrintTest, MatchesNumPyReprForEveryGoldenCase) {
  std::ifstream listing(kDir + "repr_cases.txt");
  ASSERT_TRUE(listing.good()) << "missing " << kDir << "repr_cases.txt";
  std::string name;
  PrintOptions options;
  int count = 0;
  while (listing >> name >> options.threshold >> options.edgeitems >> options.precision >> options.linewidth) {
    SCOPED_TRACE(name);
    set_print_options(options);
    Array a = load(kDir + "repr_" + name + ".npy");
    EXPECT_EQ(a.str(), read_text(kDir + "repr_" + name + ".txt"));
    ++count;
  }
  EXPECT_GE(count, 60);
}

TEST_F(PrintTest, StreamOperatorPrintsTheRepr) {
  std::vector<float> v = {1, 2, 3, 4};
  Array a = from_data(v.data(), Shape{2, 2}, float32, cpu());
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), "array([[1., 2.],\n       [3., 4.]], dtype=float32)");
  EXPECT_EQ(a.str(), os.str());
}

TEST_F(PrintTest, ViewsPrintInLogicalOrder) {
  std::vector<int64_t> v = {1, 2, 3, 4, 5, 6};
  Array a = from_data(v.data(), Shape{2, 3}, int64, cpu());
  EXPECT_EQ(a.transpose().str(), "array([[1, 4],\n       [2, 5],\n       [3, 6]])");
  EXPECT_EQ(a.slice(1, std::nullopt, std::nullopt, -2).str(), "array([[3, 1],\n       [6, 4]])");
  EXPECT_EQ(a[1].str(), "array([4, 5, 6])");
}

TEST_F(PrintTest, BFloat16PrintsShortestDigitsOfItsOwnPrecision) {
  // bfloat16(0.1) is 0.10009765625; "0.1" already identifies it among bfloat16 values.
  std::vector<BFloat16> v = {BFloat16(1.0f), BFloat16(0.1f), BFloat16(-2.5f)};
  Array a = from_data(v.data(), Shape{3}, bfloat16, cpu());
  EXPECT_EQ(a.str(), "array([ 1. ,  0.1, -2.5], dtype=bfloat16)");
  // finfo(bfloat16).precision is 2, so values from 100 up print in scientific notation.
  std::vector<BFloat16> w = {BFloat16(100.0f), BFloat16(1.0f)};
  EXPECT_EQ(from_data(w.data(), Shape{2}, bfloat16, cpu()).str(), "array([1.e+02, 1.e+00], dtype=bfloat16)");
}

TEST_F(PrintTest, Float16ShortestDigits) {
  // float16(0.1) = 0.0999755859375 prints as 0.1, as np.float16(0.1) does.
  std::vector<Half> v = {Half(0.1f), Half(0.2f), Half(0.3f)};
  EXPECT_EQ(from_data(v.data(), Shape{3}, float16, cpu()).str(), "array([0.1, 0.2, 0.3], dtype=float16)");
}

TEST_F(PrintTest, PrintOptionsRoundTripAndValidate) {
  PrintOptions o;
  o.threshold = 10;
  o.edgeitems = 2;
  o.precision = 4;
  o.linewidth = 60;
  set_print_options(o);
  PrintOptions got = get_print_options();
  EXPECT_EQ(got.threshold, 10);
  EXPECT_EQ(got.edgeitems, 2);
  EXPECT_EQ(got.precision, 4);
  EXPECT_EQ(got.linewidth, 60);
  std::vector<double> v = {0.123456789, 1.0};
  EXPECT_EQ(from_data(v.data(), Shape{2}, float64, cpu()).str(), "array([0.1235, 1.    ])");
  for (PrintOptions bad : {PrintOptions{-1, 3, 8, 75}, PrintOptions{1000, -1, 8, 75}, PrintOptions{1000, 3, -2, 75},
                           PrintOptions{1000, 3, 8, 0}, PrintOptions{1000, 3, 301, 75}}) {
    try {
      set_print_options(bad);
      ADD_FAILURE() << "no exception";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("set_print_options"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(get_print_options().threshold, 10);  // a rejected call leaves the options alone
}

TEST_F(PrintTest, UndefinedArrayPrintsAPlaceholder) { EXPECT_EQ(Array().str(), "array(<undefined>)"); }

TEST_F(PrintTest, GpuArrayShowsItsDevice) {
  if (num_gpus() == 0) GTEST_SKIP() << "no GPU";
  std::vector<float> v = {1, 2, 3, 4};
  Array a = from_data(v.data(), Shape{2, 2}, float32, gpu(0));
  EXPECT_EQ(a.str(), "array([[1., 2.],\n       [3., 4.]], dtype=float32, device='cuda:0')");
  std::vector<double> d = {1.5};
  EXPECT_EQ(from_data(d.data(), Shape{1}, float64, gpu(0)).str(), "array([1.5], device='cuda:0')");
}

}  // namespace
}  // namespace kiln
