// Complex arrays on a GPU against the CPU: every elementwise op the op list allows on complex64/complex128 in
// contiguous, transposed, broadcast and scalar layouts (bit for bit where both sides compute the same rounded
// operations; for the transcendental functions, whose CUDA and C library implementations differ, within 4 to 32
// ulps of the result's magnitude, 128 for power with complex exponents, where exp(b log a) magnifies log's error
// by |b log a|), casts, real/imag/conj/angle/isclose, sum/prod/mean and matmul against
// complex128 references computed here, and the errors of the ops that stay CPU-only. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/complex.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;
using c64 = complex64_t;
using c128 = complex128_t;

double eps_of(DType t) { return real_dtype(t) == float32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -52); }

/// Complex values with parts drawn from N(0, scale^2), made on the CPU.
Array random_complex(const Shape& shape, DType t, double scale = 1.0) {
  return make_complex(random::normal(shape, 0.0, scale, float64), random::normal(shape, 0.0, scale, float64)).astype(t);
}

/// `got` (any device) equals `want` (CPU): bit for bit with ulps == 0 (NaN matching NaN), else each part within
/// ulps * eps * |want| (complex magnitude, at least the smallest normal number).
void expect_matches(const Array& got_any, const Array& want, double ulps, const std::string& what) {
  SCOPED_TRACE(what);
  const Array got = got_any.to(cpu());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  if (want.dtype() == bool_) {
    EXPECT_EQ(got.to_vector<bool>(), want.to_vector<bool>());
    return;
  }
  const std::vector<c128> g = got.astype(complex128).to_vector<c128>(), w = want.astype(complex128).to_vector<c128>();
  const double eps = eps_of(is_complex(want.dtype()) ? want.dtype() : promote_types(want.dtype(), complex64));
  int failures = 0;
  for (size_t i = 0; i < w.size() && failures < 8; ++i) {
    const double bound = ulps * eps * std::max(std::abs(w[i]), 2.2250738585072014e-308);
    for (int part = 0; part < 2; ++part) {
      const double a = part ? g[i].imag() : g[i].real(), b = part ? w[i].imag() : w[i].real();
      const bool same = (std::isnan(a) && std::isnan(b)) || a == b || (ulps > 0 && std::fabs(a - b) <= bound);
      if (!same) {
        ADD_FAILURE() << "element " << i << (part ? " imaginary" : " real") << " part: GPU " << a << ", CPU " << b
                      << " (bound " << bound << ")";
        ++failures;
      }
    }
  }
}

struct UnaryCase {
  const char* name;
  std::function<Array(const Array&)> fn;
  double ulps;  // 0: bit for bit; else CUDA's and the C library's real functions differ by up to a few ulps each
  double scale;
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"negative", [](const Array& a) { return negative(a); }, 0, 1},
      {"conj", [](const Array& a) { return conj(a); }, 0, 1},
      {"real", [](const Array& a) { return real(a).copy(); }, 0, 1},
      {"imag", [](const Array& a) { return imag(a).copy(); }, 0, 1},
      {"square", [](const Array& a) { return square(a); }, 0, 1},
      {"isnan", [](const Array& a) { return isnan(a); }, 0, 1},
      {"isinf", [](const Array& a) { return isinf(a); }, 0, 1},
      {"isfinite", [](const Array& a) { return isfinite(a); }, 0, 1},
      {"abs", [](const Array& a) { return abs(a); }, 4, 1},
      {"angle", [](const Array& a) { return angle(a); }, 6, 1},
      {"exp", [](const Array& a) { return exp(a); }, 16, 2},
      {"log", [](const Array& a) { return log(a); }, 16, 2},
      {"sqrt", [](const Array& a) { return sqrt(a); }, 8, 2},
      {"sin", [](const Array& a) { return sin(a); }, 16, 2},
      {"cos", [](const Array& a) { return cos(a); }, 16, 2},
      {"tan", [](const Array& a) { return tan(a); }, 32, 1},
      {"sinh", [](const Array& a) { return sinh(a); }, 16, 2},
      {"cosh", [](const Array& a) { return cosh(a); }, 16, 2},
      {"tanh", [](const Array& a) { return tanh(a); }, 32, 1},
      {"astype_float64", [](const Array& a) { return a.astype(float64); }, 0, 1},
      {"astype_float16", [](const Array& a) { return a.astype(float16); }, 0, 1},
      {"astype_int32", [](const Array& a) { return (a * 10.0).astype(int32); }, 0, 1},
      {"astype_bool", [](const Array& a) { return a.astype(bool_); }, 0, 1},
      {"astype_other_complex", [](const Array& a) { return a.astype(a.dtype() == complex64 ? complex128 : complex64); },
       0, 1},
  };
  return cases;
}

TEST(ComplexGpu, EveryUnaryOpMatchesTheCpuContiguousAndStrided) {
  KILN_REQUIRE_GPU();
  random::seed(7);
  for (DType t : {complex64, complex128}) {
    for (const UnaryCase& c : unary_cases()) {
      const Array x = random_complex({37, 29}, t, c.scale);
      const Array g = x.to(gpu(0));
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(t));
      expect_matches(c.fn(g), c.fn(x), c.ulps, what + " contiguous");
      expect_matches(c.fn(g.transpose()), c.fn(x.transpose()), c.ulps, what + " transposed");
      expect_matches(c.fn(g.slice(1, 1, 29, 3)), c.fn(x.slice(1, 1, 29, 3)), c.ulps, what + " strided");
    }
  }
}

struct BinaryCase {
  const char* name;
  std::function<Array(const Operand&, const Operand&)> fn;
  double ulps;
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Operand& a, const Operand& b) { return add(a, b); }, 0},
      {"subtract", [](const Operand& a, const Operand& b) { return subtract(a, b); }, 0},
      {"multiply", [](const Operand& a, const Operand& b) { return multiply(a, b); }, 0},
      {"divide", [](const Operand& a, const Operand& b) { return divide(a, b); }, 0},
      {"power", [](const Operand& a, const Operand& b) { return power(a, b); }, 128},
      {"equal", [](const Operand& a, const Operand& b) { return equal(a, b); }, 0},
      {"not_equal", [](const Operand& a, const Operand& b) { return not_equal(a, b); }, 0},
  };
  return cases;
}

// Without a GPU: the cases name every op the op list allows on complex numbers.
TEST(ComplexGpu, TheAgreementCasesCoverEveryComplexOp) {
  std::set<std::string> covered = {"identity", "where"};  // astype_* and WhereIscloseAndMakeComplex
  for (const UnaryCase& c : unary_cases()) covered.insert(c.name);
  for (const BinaryCase& c : binary_cases()) covered.insert(c.name);
  for (int i = 0; i < detail::kNumOps; ++i) {
    const auto op = static_cast<detail::OpCode>(i);
    if (detail::op_info(op).arity == 0 || !detail::op_supports(op, complex64)) continue;
    EXPECT_TRUE(covered.count(detail::op_info(op).name)) << detail::op_info(op).name << " has no GPU case";
  }
}

TEST(ComplexGpu, EveryBinaryOpMatchesTheCpuInEveryLayout) {
  KILN_REQUIRE_GPU();
  random::seed(11);
  for (DType t : {complex64, complex128}) {
    const Array a = random_complex({24, 40}, t), b = random_complex({24, 40}, t);
    const Array row = random_complex({1, 40}, t), column = random_complex({24, 1}, t);
    const Array ga = a.to(gpu(0)), gb = b.to(gpu(0)), grow = row.to(gpu(0)), gcolumn = column.to(gpu(0));
    const Array real_b = random::normal({24, 40}, 0.0, 1.0, real_dtype(t));
    for (const BinaryCase& c : binary_cases()) {
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(t));
      expect_matches(c.fn(ga, gb), c.fn(a, b), c.ulps, what + " contiguous");
      expect_matches(c.fn(ga.transpose(), gb.transpose()), c.fn(a.transpose(), b.transpose()), c.ulps,
                     what + " both transposed");
      expect_matches(c.fn(ga, grow), c.fn(a, row), c.ulps, what + " row broadcast");
      expect_matches(c.fn(gcolumn, ga), c.fn(column, a), c.ulps, what + " column broadcast");
      expect_matches(c.fn(ga, gcolumn.transpose().reshape({24, 1})), c.fn(a, column), c.ulps, what + " view");
      expect_matches(c.fn(ga, c64(0.5f, -2.0f)), c.fn(a, c64(0.5f, -2.0f)), c.ulps, what + " complex scalar");
      expect_matches(c.fn(3, ga), c.fn(3, a), c.ulps, what + " int scalar");
      expect_matches(c.fn(ga, real_b.to(gpu(0))), c.fn(a, real_b), c.ulps, what + " real array");
    }
    // power with integer exponents takes NumPy's repeated products: the same operations as the CPU
    for (int n : {-3, -1, 2, 3, 7}) expect_matches(power(ga, n), power(a, n), 0, "power by " + std::to_string(n));
  }
}

TEST(ComplexGpu, SpecialValuesAgreeWithTheCpu) {
  KILN_REQUIRE_GPU();
  const double inf = INFINITY, nan = NAN;
  const std::vector<c128> values = {{0, 0},   {-0.0, 0}, {1, 0},   {0, -1},        {inf, 0}, {-inf, 1},
                                    {1, inf}, {nan, 0},  {0, nan}, {1e300, 1e300}, {-2, 0},  {1e-310, 0}};
  for (DType t : {complex64, complex128}) {
    const Array z = from_data<c128>(values).astype(t);
    const Array zero = zeros({static_cast<int64_t>(values.size())}, t);
    const Array g = z.to(gpu(0)), gzero = zero.to(gpu(0));
    for (const UnaryCase& c : unary_cases()) {
      if (c.ulps == 0) expect_matches(c.fn(g), c.fn(z), 0, std::string(c.name) + " special values");
    }
    expect_matches(divide(g, gzero), divide(z, zero), 0, "divide by zero");
    expect_matches(sqrt(g), sqrt(z), 8, "sqrt special values");
    expect_matches(log(g.slice(0, 0, 4)), log(z.slice(0, 0, 4)), 16, "log of zeros and units");
  }
}

TEST(ComplexGpu, WhereIscloseAndMakeComplex) {
  KILN_REQUIRE_GPU();
  random::seed(3);
  for (DType t : {complex64, complex128}) {
    const Array a = random_complex({50}, t), b = random_complex({50}, t);
    const Array mask = random::normal({50}, float32) > 0.0f;
    const Array ga = a.to(gpu(0)), gb = b.to(gpu(0)), gmask = mask.to(gpu(0));
    expect_matches(where(gmask, ga, gb), where(mask, a, b), 0, "where");
    expect_matches(where(gmask, ga, c64(1, 1)), where(mask, a, c64(1, 1)), 0, "where scalar");
    const Array near = add(a, c64(1e-7f, 0.0f));
    expect_matches(isclose(ga, near.to(gpu(0))), isclose(a, near), 0, "isclose");
    expect_matches(isclose(ga, gb), isclose(a, b), 0, "isclose far");
    const Array re = random::normal({50}, float64), im = random::normal({50}, float64);
    expect_matches(make_complex(re.to(gpu(0)), im.to(gpu(0))), make_complex(re, im), 0, "make_complex");
    expect_matches(zeros({5}, t, gpu(0)), zeros({5}, t), 0, "zeros");
    expect_matches(full({5}, c64(1, 2), t, gpu(0)), full({5}, c64(1, 2), t), 0, "full");
  }
}

/// Sum, product and mean of rows and columns against complex128 loops over the same values.
TEST(ComplexGpu, SumProdAndMeanMatchComplex128References) {
  KILN_REQUIRE_GPU();
  random::seed(5);
  for (DType t : {complex64, complex128}) {
    for (const Shape& shape : {Shape{3, 100000}, Shape{257, 33}, Shape{1, 7}}) {
      const Array x = random_complex(shape, t);
      const Array unit = x / abs(x).astype(t);  // |z| = 1: products stay finite
      const std::vector<c128> v = x.astype(complex128).to_vector<c128>(), u = unit.astype(complex128).to_vector<c128>();
      const int64_t rows = shape[0], cols = shape[1];
      std::vector<c128> row_sum(static_cast<size_t>(rows)), row_prod(static_cast<size_t>(rows), c128(1, 0));
      std::vector<c128> col_sum(static_cast<size_t>(cols));
      c128 total = 0;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const c128 z = v[static_cast<size_t>(i * cols + j)], w = u[static_cast<size_t>(i * cols + j)];
          row_sum[static_cast<size_t>(i)] += z;
          col_sum[static_cast<size_t>(j)] += z;
          total += z;
          const c128 p = row_prod[static_cast<size_t>(i)];
          row_prod[static_cast<size_t>(i)] = {p.real() * w.real() - p.imag() * w.imag(),
                                              p.real() * w.imag() + p.imag() * w.real()};
        }
      }
      std::vector<c128> row_mean = row_sum;
      for (c128& m : row_mean) m /= static_cast<double>(cols);
      const Array g = x.to(gpu(0)), gu = unit.to(gpu(0));
      const double tolerance = (t == complex64 ? 1e-5 : 1e-12) * std::sqrt(static_cast<double>(cols));
      const auto close = [&](const Array& got, const std::vector<c128>& want, const char* what) {
        SCOPED_TRACE(what);
        EXPECT_EQ(got.device(), gpu(0));
        EXPECT_EQ(got.dtype(), t);
        const std::vector<c128> r = got.to(cpu()).astype(complex128).to_vector<c128>();
        ASSERT_EQ(r.size(), want.size());
        for (size_t i = 0; i < r.size(); ++i)
          EXPECT_LE(std::abs(r[i] - want[i]), tolerance * std::max(1.0, std::abs(want[i]))) << "element " << i;
      };
      close(sum(g, 1), row_sum, "sum of rows");
      close(sum(g, 0), col_sum, "sum of columns");
      close(sum(g).reshape({1}), {total}, "sum of all");
      close(mean(g, 1), row_mean, "mean of rows");
      close(prod(gu, 1), row_prod, "prod of rows");
      close(sum(g.transpose(), 0), row_sum, "sum of a transposed view");
    }
  }
}

TEST(ComplexGpu, MatmulMatchesComplex128References) {
  KILN_REQUIRE_GPU();
  random::seed(9);
  for (DType t : {complex64, complex128}) {
    const int64_t batch = 3, m = 17, k = 40, n = 9;
    const Array a = random_complex({batch, m, k}, t), b = random_complex({batch, k, n}, t);
    const std::vector<c128> va = a.astype(complex128).to_vector<c128>(), vb = b.astype(complex128).to_vector<c128>();
    std::vector<c128> want(static_cast<size_t>(batch * m * n));
    for (int64_t p = 0; p < batch; ++p)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          c128 acc = 0;
          for (int64_t q = 0; q < k; ++q)
            acc += va[static_cast<size_t>((p * m + i) * k + q)] * vb[static_cast<size_t>((p * k + q) * n + j)];
          want[static_cast<size_t>((p * m + i) * n + j)] = acc;
        }
    const double tolerance = t == complex64 ? 1e-5 : 1e-13;
    const auto close = [&](const Array& got, const char* what) {
      SCOPED_TRACE(what);
      EXPECT_EQ(got.device(), gpu(0));
      EXPECT_EQ(got.dtype(), t);
      const std::vector<c128> r = got.to(cpu()).astype(complex128).to_vector<c128>();
      ASSERT_LE(r.size(), want.size());
      for (size_t i = 0; i < r.size(); ++i)  // a 2-d product: the first batch's results
        EXPECT_LE(std::abs(r[i] - want[i]), tolerance * std::sqrt(static_cast<double>(k)) * 4) << "element " << i;
    };
    const Array ga = a.to(gpu(0)), gb = b.to(gpu(0));
    close(matmul(ga, gb), "batched");
    close(matmul(ga.permute({0, 2, 1}).copy().permute({0, 2, 1}), gb), "a transposed in memory");
    close(matmul(ga, gb.permute({0, 2, 1}).copy().permute({0, 2, 1})), "b transposed in memory");
    close(matmul(ga.slice(0, 0, 1).reshape({m, k}), gb.slice(0, 0, 1).reshape({k, n})), "2-d");
    close(dot(ga.slice(0, 0, 1).reshape({m, k}), gb.slice(0, 0, 1).reshape({k, n})), "dot");
    close(einsum("bik,bkj->bij", {ga, gb}), "einsum");
    // a layout cuBLAS cannot take (both strides of a above 1): every other row and column of a larger array
    const Array big = random_complex({batch, 2 * m, 2 * k}, t);
    const Array sparse = big.slice(1, 0, 2 * m, 2).slice(2, 0, 2 * k, 2);
    const Array on_cpu = matmul(sparse, b).to(cpu());
    const Array on_gpu = matmul(big.to(gpu(0)).slice(1, 0, 2 * m, 2).slice(2, 0, 2 * k, 2), gb).to(cpu());
    EXPECT_LE(max(abs(on_gpu - on_cpu)).item<double>(), tolerance * std::sqrt(static_cast<double>(k)) * 4)
        << "strided operand";
  }
}

TEST(ComplexGpu, OpsWithoutComplexKernelsStayRefusedNamingTheOp) {
  KILN_REQUIRE_GPU();
  const Array g = from_data<c64>({{1, 2}, {3, 4}}).to(gpu(0));
  expect_error<DTypeError>([&] { (void)less(g, g); }, {"less", "complex64"});
  expect_error<DTypeError>([&] { (void)max(g); }, {"max", "complex64"});
  expect_error<DTypeError>([&] { (void)argmax(g); }, {"argmax", "complex64"});
  expect_error<DTypeError>([&] { (void)cumsum(g, 0); }, {"complex64"});
  expect_error<DTypeError>([&] { (void)sort(g); }, {"complex64"});
  expect_error<DTypeError>([&] { (void)floor(g); }, {"floor", "complex64"});
}

}  // namespace
}  // namespace kiln
