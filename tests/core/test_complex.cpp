// complex64/complex128: dtype rules (hand-computed from NumPy 2's promotion table and NEP 50), the elementwise
// ops, reductions and products against NumPy golden data (tests/golden/complex_golden.py), views, printing,
// I/O, and the errors of the ops NumPy (or PyTorch, for orderings) does not define on complex numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/complex.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;
using c64 = complex64_t;
using c128 = complex128_t;

const std::string kDir = std::string(KILN_GOLDEN_DIR) + "/complex/";

// ---------------------------------------------------------------- dtype rules

TEST(ComplexDType, NamesSizesAndParsing) {
  EXPECT_EQ(itemsize(complex64), 8);
  EXPECT_EQ(itemsize(complex128), 16);
  EXPECT_EQ(dtype_name(complex64), "complex64");
  EXPECT_EQ(dtype_name(complex128), "complex128");
  for (const char* name : {"complex64", "c8", "<c8", "cfloat"}) EXPECT_EQ(parse_dtype(name), complex64) << name;
  for (const char* name : {"complex128", "c16", "<c16", "complex", "cdouble"})
    EXPECT_EQ(parse_dtype(name), complex128) << name;
  EXPECT_TRUE(is_complex(complex64));
  EXPECT_FALSE(is_complex(float64));
  EXPECT_FALSE(is_floating(complex64));
  EXPECT_TRUE(is_inexact(complex128));
  EXPECT_EQ(real_dtype(complex64), float32);
  EXPECT_EQ(real_dtype(complex128), float64);
  EXPECT_EQ(float_result_type(complex64), complex64);
  EXPECT_EQ(dtype_of<c64>(), complex64);
}

TEST(ComplexDType, PromotionFollowsNumPy2) {
  // np.promote_types, read off NumPy 2.
  EXPECT_EQ(promote_types(complex64, float64), complex128);
  EXPECT_EQ(promote_types(complex64, int64), complex128);
  EXPECT_EQ(promote_types(complex64, int32), complex128);
  EXPECT_EQ(promote_types(complex64, int16), complex64);
  EXPECT_EQ(promote_types(complex64, uint8), complex64);
  EXPECT_EQ(promote_types(complex64, bool_), complex64);
  EXPECT_EQ(promote_types(float16, complex64), complex64);
  EXPECT_EQ(promote_types(bfloat16, complex64), complex64);
  EXPECT_EQ(promote_types(float32, complex64), complex64);
  EXPECT_EQ(promote_types(complex64, complex128), complex128);
  for (int t = 0; t < kNumDTypes; ++t) EXPECT_EQ(promote_types(DType(t), complex128), complex128);
  EXPECT_TRUE(can_cast_same_kind(float64, complex64));
  EXPECT_FALSE(can_cast_same_kind(complex64, float64));
}

TEST(ComplexDType, WeakScalarsFollowNep50) {
  const Scalar z(c128(1, 2));
  EXPECT_EQ(z.kind(), Scalar::Kind::Complex);
  EXPECT_EQ(z.default_dtype(), complex128);
  EXPECT_EQ(promote_with_scalar(float32, z), complex64);  // float32 array + 1j -> complex64
  EXPECT_EQ(promote_with_scalar(float16, z), complex64);
  EXPECT_EQ(promote_with_scalar(float64, z), complex128);
  EXPECT_EQ(promote_with_scalar(int8, z), complex128);  // integer arrays take Python complex's dtype
  EXPECT_EQ(promote_with_scalar(complex64, Scalar(2.5)), complex64);
  EXPECT_EQ(promote_with_scalar(complex64, Scalar(3)), complex64);
  EXPECT_EQ(z.to<c64>(), c64(1, 2));
  EXPECT_EQ(z.to<double>(), 1.0);  // a complex value converted to a real type keeps its real part
  EXPECT_EQ(z.str(), "(1+2j)");
  EXPECT_EQ(Scalar(c128(1, -2)).str(), "(1-2j)");
}

// ---------------------------------------------------------------- golden cases

/// Compares one part (real or imaginary) of a result with NumPy's: NaN where NaN, equal infinities, else within
/// `tolerance` of max(1, |expected element|).
::testing::AssertionResult part_close(double got, double want, double tolerance, double scale) {
  if (std::isnan(want)) {
    if (std::isnan(got)) return ::testing::AssertionSuccess();
  } else if (std::isinf(want)) {
    if (got == want) return ::testing::AssertionSuccess();
  } else if (tolerance == 0 ? (got == want && std::signbit(got) == std::signbit(want))
                            : std::fabs(got - want) <= tolerance * std::max(1.0, scale)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << got << ", NumPy " << want;
}

double tolerance(const std::string& check, DType t) {
  if (check == "exact") return 0;
  const double eps = real_dtype(t) == float32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -52);
  return (check == "arith" ? 16 : 64) * eps;
}

using Fn = std::function<Array(const std::vector<Operand>&)>;

const std::map<std::string, Fn>& golden_ops() {
  static const std::map<std::string, Fn> ops = {
      {"negative", [](const auto& x) { return negative(x[0].array()); }},
      {"conj", [](const auto& x) { return conj(x[0].array()); }},
      {"real", [](const auto& x) { return real(x[0].array()).copy(); }},
      {"imag", [](const auto& x) { return imag(x[0].array()).copy(); }},
      {"isnan", [](const auto& x) { return isnan(x[0].array()); }},
      {"isinf", [](const auto& x) { return isinf(x[0].array()); }},
      {"isfinite", [](const auto& x) { return isfinite(x[0].array()); }},
      {"abs", [](const auto& x) { return abs(x[0].array()); }},
      {"angle", [](const auto& x) { return angle(x[0].array()); }},
      {"square", [](const auto& x) { return square(x[0].array()); }},
      {"exp", [](const auto& x) { return exp(x[0].array()); }},
      {"log", [](const auto& x) { return log(x[0].array()); }},
      {"sqrt", [](const auto& x) { return sqrt(x[0].array()); }},
      {"sin", [](const auto& x) { return sin(x[0].array()); }},
      {"cos", [](const auto& x) { return cos(x[0].array()); }},
      {"tan", [](const auto& x) { return tan(x[0].array()); }},
      {"sinh", [](const auto& x) { return sinh(x[0].array()); }},
      {"cosh", [](const auto& x) { return cosh(x[0].array()); }},
      {"tanh", [](const auto& x) { return tanh(x[0].array()); }},
      {"add", [](const auto& x) { return add(x[0], x[1]); }},
      {"subtract", [](const auto& x) { return subtract(x[0], x[1]); }},
      {"multiply", [](const auto& x) { return multiply(x[0], x[1]); }},
      {"divide", [](const auto& x) { return divide(x[0], x[1]); }},
      {"power", [](const auto& x) { return power(x[0], x[1]); }},
      {"equal", [](const auto& x) { return equal(x[0], x[1]); }},
      {"not_equal", [](const auto& x) { return not_equal(x[0], x[1]); }},
      {"sum", [](const auto& x) { return sum(x[0].array()); }},
      {"sum_axis0", [](const auto& x) { return sum(x[0].array(), 0); }},
      {"prod_axis1", [](const auto& x) { return prod(x[0].array(), 1); }},
      {"mean_axis1", [](const auto& x) { return mean(x[0].array(), 1); }},
      {"matmul", [](const auto& x) { return matmul(x[0].array(), x[1].array()); }},
      {"matmul_t", [](const auto& x) { return matmul(x[0].array().transpose(), x[1].array()); }},
      {"isclose", [](const auto& x) { return isclose(x[0].array(), x[1].array()); }},
      {"where", [](const auto& x) { return where(x[0], x[1], x[2]); }},
      {"astype_float64", [](const auto& x) { return x[0].array().astype(float64); }},
  };
  return ops;
}

struct GoldenCase {
  std::string name, op, check;
  int inputs = 0;
};

std::vector<GoldenCase> golden_cases() {
  std::ifstream listing(kDir + "cases.txt");
  std::vector<GoldenCase> cases;
  GoldenCase c;
  while (listing >> c.name >> c.op >> c.check >> c.inputs) cases.push_back(c);
  return cases;
}

/// Input k of a case: an array, or (files named *_scalar.npy) a weak scalar of the file's kind.
Array load_input(const GoldenCase& c, int k, bool& is_scalar) {
  const std::string base = kDir + c.name + "_in" + std::to_string(k);
  is_scalar = std::ifstream(base + "_scalar.npy").good();
  return load(base + (is_scalar ? "_scalar.npy" : ".npy"));
}

/// Every golden case computed on `device` (inputs moved there, weak scalars kept) against NumPy's result.
void expect_golden_cases_on(const Device& device) {
  const std::vector<GoldenCase> cases = golden_cases();
  ASSERT_GT(cases.size(), 50u) << "missing " << kDir << "cases.txt";
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto op = golden_ops().find(c.op);
    ASSERT_NE(op, golden_ops().end()) << "no kiln op for " << c.op;
    std::vector<Array> arrays(static_cast<size_t>(c.inputs));
    std::vector<Operand> operands;
    for (int k = 0; k < c.inputs; ++k) {
      bool is_scalar = false;
      arrays[static_cast<size_t>(k)] = load_input(c, k, is_scalar);
      if (!is_scalar) arrays[static_cast<size_t>(k)] = arrays[static_cast<size_t>(k)].to(device);
      operands.push_back(is_scalar ? Operand(arrays[static_cast<size_t>(k)].item_scalar())
                                   : Operand(arrays[static_cast<size_t>(k)]));
    }
    const Array want = load(kDir + c.name + "_out.npy");
    const Array result = op->second(operands);
    ASSERT_EQ(result.device(), device);
    const Array got = result.to(cpu());
    ASSERT_EQ(got.dtype(), want.dtype());
    ASSERT_EQ(got.shape(), want.shape());
    if (want.dtype() == bool_) {
      EXPECT_EQ(got.to_vector<bool>(), want.to_vector<bool>());
      continue;
    }
    const double tol = tolerance(c.check, want.dtype());
    const std::vector<c128> g = got.to_vector<c128>(), w = want.to_vector<c128>();
    for (size_t i = 0; i < w.size(); ++i) {
      const double scale = std::abs(w[i]);
      EXPECT_TRUE(part_close(g[i].real(), w[i].real(), tol, scale)) << "element " << i << " (real part)";
      EXPECT_TRUE(part_close(g[i].imag(), w[i].imag(), tol, scale)) << "element " << i << " (imaginary part)";
    }
  }
}

TEST(ComplexGolden, EveryCaseMatchesNumPyOnTheCpu) { expect_golden_cases_on(cpu()); }

TEST(ComplexGolden, EveryCaseMatchesNumPyOnEveryGpu) {
  KILN_REQUIRE_GPU();
  for (int i = 0; i < num_gpus(); ++i) {
    SCOPED_TRACE("gpu " + std::to_string(i));
    expect_golden_cases_on(gpu(i));
  }
}

// ---------------------------------------------------------------- creation, views, casts

TEST(ComplexArray, CreationAndReadBack) {
  Array z = from_data<c64>({{1, 2}, {3, -4}}, {2});
  EXPECT_EQ(z.dtype(), complex64);
  EXPECT_EQ(z.to_vector<c64>(), (std::vector<c64>{{1, 2}, {3, -4}}));
  EXPECT_EQ(zeros({2}, complex128).to_vector<c128>(), (std::vector<c128>{0, 0}));
  EXPECT_EQ(ones({2}, complex64).to_vector<c64>(), (std::vector<c64>{1, 1}));
  EXPECT_EQ(full({1}, c128(0.5, -1)).dtype(), complex64);  // a complex fill value defaults to complex64
  EXPECT_EQ(full({1}, c128(0.5, -1), complex128).item<c128>(), c128(0.5, -1));
  EXPECT_EQ(z[1].item_scalar().to<c128>(), c128(3, -4));
}

TEST(ComplexArray, RealAndImagAreViewsThatWriteThrough) {
  Array z = from_data<c128>({{1, 2}, {3, -4}, {5, 6}}, {3});
  Array re = real(z), im = imag(z);
  EXPECT_EQ(re.dtype(), float64);
  EXPECT_TRUE(re.shares_storage(z));
  EXPECT_EQ(re.to_vector<double>(), (std::vector<double>{1, 3, 5}));
  EXPECT_EQ(im.to_vector<double>(), (std::vector<double>{2, -4, 6}));
  im.fill(0.0);
  EXPECT_EQ(z.to_vector<c128>(), (std::vector<c128>{1, 3, 5}));
  // A strided view of a complex view.
  Array every_other = z.slice(0, {}, {}, 2);
  EXPECT_EQ(real(every_other).to_vector<double>(), (std::vector<double>{1, 5}));
  // Real arrays: real is the array, imag zeros.
  Array x = from_data<float>({1.5f, -2.f});
  EXPECT_TRUE(real(x).shares_storage(x));
  EXPECT_EQ(imag(x).to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(ComplexArray, ConjAngleAndMakeComplex) {
  Array z = from_data<c64>({{1, 2}, {-1, 0}});
  EXPECT_EQ(conj(z).to_vector<c64>(), (std::vector<c64>{{1, -2}, {-1, -0.f}}));
  EXPECT_EQ(z.to_vector<c64>()[0], c64(1, 2));  // conj copies
  EXPECT_EQ(angle(z).dtype(), float32);
  EXPECT_NEAR(angle(z, true).to_vector<float>()[1], 180.0f, 1e-4f);
  Array made = make_complex(from_data<double>({1, 2}), from_data<double>({-1, 0.5}));
  EXPECT_EQ(made.dtype(), complex128);
  EXPECT_EQ(made.to_vector<c128>(), (std::vector<c128>{{1, -1}, {2, 0.5}}));
  EXPECT_EQ(make_complex(from_data<float>({1}), from_data<int32_t>({2})).dtype(), complex128);
  EXPECT_EQ(make_complex(from_data<float>({1}), from_data<float>({2})).dtype(), complex64);
}

TEST(ComplexArray, CastsFollowNumPy) {
  Array x = from_data<double>({1.5, -2});
  EXPECT_EQ(x.astype(complex64).to_vector<c64>(), (std::vector<c64>{1.5f, -2.f}));
  Array z = from_data<c128>({{1.5, 2}, {0, -1}});
  EXPECT_EQ(z.astype(int32).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));  // the real part, as NumPy
  EXPECT_EQ(z.astype(bool_).to_vector<bool>(), (std::vector<bool>{true, true}));  // nonzero in either part
  EXPECT_EQ(z.astype(complex64).to_vector<c64>(), (std::vector<c64>{{1.5f, 2.f}, {0.f, -1.f}}));
  // In-place updates keep the array's dtype: a complex result cannot go into a float array.
  Array f = from_data<double>({1, 2});
  expect_error<DTypeError>([&] { f += z; }, {"add", "complex128", "float64"});
}

TEST(ComplexArray, ScalarOperandsAreWeak) {
  Array x = from_data<float>({1, 2});
  Array y = multiply(x, c128(0, 1));
  EXPECT_EQ(y.dtype(), complex64);
  EXPECT_EQ(y.to_vector<c64>(), (std::vector<c64>{{0, 1}, {0, 2}}));
  EXPECT_EQ(add(from_data<int64_t>({1}), c128(0, 1)).dtype(), complex128);
}

// ---------------------------------------------------------------- printing

TEST(ComplexPrint, MatchesNumPyRepr) {
  EXPECT_EQ(from_data<c64>({{1, 2}, {-0.f, -1}}).str(), "array([ 1.+2.j, -0.-1.j], dtype=complex64)");
  EXPECT_EQ(from_data<c128>({{1.5, 2}, {0.25, -3}}).str(), "array([1.5 +2.j, 0.25-3.j])");
  EXPECT_EQ(from_data<c128>({{-0.5, 0.25}}).reshape(Shape{}).str(), "array(-0.5+0.25j)");
}

// ---------------------------------------------------------------- I/O

TEST(ComplexIO, NpyAndSafetensorsRoundTrip) {
  kiln_test::TempDir dir;
  Array z = from_data<c64>({{1, 2}, {3, -4}, {0.5f, 0}}, {3});
  save((dir.path() / "z.npy").string(), z);
  EXPECT_EQ(load((dir.path() / "z.npy").string()).to_vector<c64>(), z.to_vector<c64>());
  nn::StateDict state;
  state.insert("z", z);
  nn::save_safetensors((dir.path() / "z.safetensors").string(), state);
  nn::StateDict back = nn::load_safetensors((dir.path() / "z.safetensors").string());
  EXPECT_EQ(back.at("z").dtype(), complex64);
  EXPECT_EQ(back.at("z").to_vector<c64>(), z.to_vector<c64>());
  nn::StateDict wide;
  wide.insert("w", z.astype(complex128));
  expect_error<DTypeError>([&] { nn::save_safetensors((dir.path() / "w.safetensors").string(), wide); },
                           {"complex128", "C64", "astype(complex64)"});
}

// ---------------------------------------------------------------- what throws

TEST(ComplexErrors, OpsNumPyDoesNotDefineNameTheOpAndTheDtype) {
  Array z = from_data<c64>({{1, 2}});
  expect_error<DTypeError>([&] { (void)less(z, z); }, {"less", "complex64", "real(a)"});
  expect_error<DTypeError>([&] { (void)maximum(z, z); }, {"maximum", "complex64"});
  expect_error<DTypeError>([&] { (void)floor(z); }, {"floor", "complex64"});
  expect_error<DTypeError>([&] { (void)remainder(z, z); }, {"remainder", "complex64"});
  expect_error<DTypeError>([&] { (void)sign(z); }, {"sign", "complex64"});
  expect_error<DTypeError>([&] { (void)arctan2(z, z); }, {"arctan2", "complex64"});
  expect_error<DTypeError>([&] { (void)bitwise_and(z, z); }, {"bitwise_and", "complex64"});
  expect_error<DTypeError>([&] { (void)max(z); }, {"max", "complex64", "sum, prod and mean"});
  expect_error<DTypeError>([&] { (void)var(z); }, {"var", "complex64"});
  expect_error<DTypeError>([&] { (void)argmax(z); }, {"argmax", "complex64"});
  expect_error<DTypeError>([&] { (void)cumsum(z, 0); }, {"complex64"});
  expect_error<DTypeError>([&] { (void)sort(z); }, {"complex64", "Complex numbers"});
  expect_error<DTypeError>([&] { (void)quantile(z, 0.5); }, {"complex64"});
  expect_error<DTypeError>([&] { (void)linalg::inv(z.reshape({1, 1})); }, {"linalg::inv", "complex64"});
  expect_error<DTypeError>([&] { (void)linalg::norm(z); }, {"norm", "complex64", "abs(a)"});
}

// ---------------------------------------------------------------- GPU (run on a device)

TEST(ComplexGpu, TransfersKeepTheBytesAndViewsNeedNoKernel) {
  KILN_REQUIRE_GPU();
  Array z = from_data<c128>({{1, 2}, {3, -4}});
  Array g = z.to(gpu(0));
  EXPECT_EQ(g.dtype(), complex128);
  EXPECT_EQ(g.to(cpu()).to_vector<c128>(), z.to_vector<c128>());
  EXPECT_EQ(g.to_vector<c128>(), z.to_vector<c128>());
  EXPECT_EQ(real(g).to_vector<double>(), (std::vector<double>{1, 3}));
  EXPECT_EQ(imag(g).to_vector<double>(), (std::vector<double>{2, -4}));
}

TEST(ComplexGpu, OpsWithoutComplexKernelsNameTheOpAndTheFix) {
  KILN_REQUIRE_GPU();
  Array g = from_data<c64>({{1, 2}, {3, 4}}).to(gpu(0));
  expect_error<DTypeError>([&] { (void)less(g, g); }, {"less", "complex64", "real(a)"});
  expect_error<DTypeError>([&] { (void)max(g); }, {"max", "complex64", "sum, prod and mean"});
  expect_error<DTypeError>([&] { (void)cumsum(g, 0); }, {"complex64"});
  expect_error<DTypeError>([&] { (void)sort(g); }, {"complex64"});
}

}  // namespace
}  // namespace kiln
