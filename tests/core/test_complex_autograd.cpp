// Complex autograd (PyTorch's convention: for a real loss L of z = x + iy, z.grad = dL/dx + i dL/dy): every
// complex-capable row of the op table, reductions, matmul, views, take, conversions and the complex functions
// gradchecked on complex128 inputs (real and imaginary parts perturbed separately), hand-computed gradients,
// and the engine's rules (a real input keeps the real part of a complex gradient; a complex root needs gradient=).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/kiln.hpp"
#include "autograd_test_util.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using autograd_test::kRows;
using autograd_test::OpRow;
using autograd_test::values;

using Fn = std::function<Array(const std::vector<Array>&)>;
using c128 = complex128_t;
using kiln_test::expect_error;

/// Complex128 values with real parts in [re_lo, re_hi] and imaginary parts in [im_lo, im_hi].
Array cvalues(const Shape& shape, double re_lo, double re_hi, double im_lo, double im_hi, uint64_t salt) {
  return make_complex(values(shape, re_lo, re_hi, salt), values(shape, im_lo, im_hi, salt + 17));
}

void expect_gradcheck(const Fn& f, const std::vector<Array>& inputs, const std::string& what,
                      GradcheckOptions options = {}) {
  const GradcheckResult r = gradcheck(f, inputs, options);
  EXPECT_TRUE(r.passed) << what << ": " << r.report;
}

void expect_complex_near(const Array& got, const std::vector<c128>& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": no gradient";
  ASSERT_TRUE(is_complex(got.dtype())) << what << ": dtype " << dtype_name(got.dtype());
  const std::vector<c128> v = got.astype(complex128).to_vector<c128>();
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(v[i].real(), want[i].real(), tol) << what << " element " << i << " (real part)";
    EXPECT_NEAR(v[i].imag(), want[i].imag(), tol) << what << " element " << i << " (imaginary part)";
  }
}

// ---------------------------------------------------------------- the op table

struct Box {
  double re_lo, re_hi, im_lo, im_hi;
};

/// Where a complex gradcheck draws operand `operand` of a row with input domain `domain`: a box of the complex
/// plane away from the branch cuts (the negative real axis for log, sqrt and power), the zeros of divisors and
/// abs's kink at 0, and the poles of tan.
Box complex_box(detail::InputDomain domain, int operand) {
  using D = detail::InputDomain;
  switch (domain) {
    case D::Any:
    case D::SmallInt:
    case D::Moderate:
    case D::Activation:
      return operand == 0 ? Box{-1.5, 1.5, 0.3, 1.2} : Box{-1.2, 1.7, -1.1, -0.2};
    case D::Unit:
      return {-0.7, 0.7, -0.6, 0.6};
    case D::Power:
      return operand == 0 ? Box{0.3, 1.8, -0.8, 0.8} : Box{-1.5, 2.5, -0.6, 0.6};
    case D::Positive:
    case D::NonNegative:
    case D::AboveMinusOne:
    case D::Halves:
    case D::Divisor:
    case D::IntDivisor:
      return operand == 0 ? Box{0.3, 1.8, -1.0, 1.0} : Box{0.4, 1.6, -0.7, 0.7};
    case D::Logical:
    case D::Compare:
    case D::Select:
    case D::Clip:
    case D::None:
      break;
  }
  ADD_FAILURE() << "no complex gradcheck box for input domain " << static_cast<int>(domain);
  return {0.5, 1, 0.5, 1};
}

Array box_values(const Shape& shape, const Box& b, uint64_t salt) {
  return cvalues(shape, b.re_lo, b.re_hi, b.im_lo, b.im_hi, salt);
}

bool takes_complex(const detail::OpInfo& info) {
  return info.dtypes == detail::OpDTypes::AnyComplex || info.dtypes == detail::OpDTypes::NoBoolComplex ||
         info.dtypes == detail::OpDTypes::FloatComplex;
}

TEST(ComplexAutogradTable, EveryComplexRowPassesGradcheckOnComplex128) {
  int checked = 0;
  for (const OpRow& row : kRows) {
    const detail::OpInfo& info = detail::op_info(row.code);
    if (info.derivative == detail::Derivative::NotDifferentiable || !takes_complex(info)) continue;
    const Box b0 = complex_box(info.domain, 0), b1 = complex_box(info.domain, 1);
    if (row.arity == 1) {
      auto fn = row.unary;
      expect_gradcheck([fn](const std::vector<Array>& x) { return fn(x[0]); }, {box_values({2, 3}, b0, 1)}, row.name);
    } else {
      auto fn = row.binary;
      const Fn f = [fn](const std::vector<Array>& x) { return fn(x[0], x[1]); };
      expect_gradcheck(f, {box_values({2, 3}, b0, 1), box_values({3}, b1, 2)}, std::string(row.name) + " (2,3) (3,)");
      expect_gradcheck(f, {box_values({2, 1}, b0, 3), box_values({1, 3}, b1, 4)},
                       std::string(row.name) + " (2,1) (1,3)");
      // A real operand with a complex one: the real input's gradient is the real part (PyTorch's handle_r_to_c).
      expect_gradcheck(f, {values({2, 3}, b0.re_lo, b0.re_hi, 5), box_values({3}, b1, 6)},
                       std::string(row.name) + " real with complex");
      expect_gradcheck(f, {box_values({2, 3}, b0, 7), values({3}, b1.re_lo, b1.re_hi, 8)},
                       std::string(row.name) + " complex with real");
      // Weak scalars: a complex one with a complex array, a real one with a complex array.
      const std::complex<double> s(0.5 * (b1.re_lo + b1.re_hi) + 0.0123, 0.5 * (b1.im_lo + b1.im_hi) + 0.031);
      expect_gradcheck([fn, s](const std::vector<Array>& x) { return fn(x[0], Scalar(s)); }, {box_values({4}, b0, 9)},
                       std::string(row.name) + " with a complex scalar");
      const double t = 0.5 * (b0.re_lo + b0.re_hi) + 0.0321;
      expect_gradcheck([fn, t](const std::vector<Array>& x) { return fn(t, x[0]); }, {box_values({4}, b1, 10)},
                       std::string(row.name) + " of a real scalar");
    }
    ++checked;
  }
  // negative, abs, exp, log, sqrt, square, sin, cos, tan, sinh, cosh, tanh; add, subtract, multiply, divide,
  // power (identity is not a public function).
  EXPECT_EQ(checked, 17);
  const Array cond = values({2, 3}, -1, 1, 7) > 0;
  expect_gradcheck([cond](const std::vector<Array>& x) { return where(cond, x[0], x[1]); },
                   {cvalues({2, 3}, -1, 1, -1, 1, 1), cvalues({3}, -1, 1, -1, 1, 2)}, "where");
  expect_gradcheck([cond](const std::vector<Array>& x) { return where(cond, x[0], x[1]); },
                   {cvalues({2, 3}, -1, 1, -1, 1, 1), values({3}, -1, 1, 2)}, "where complex and real");
}

// ---------------------------------------------------------------- reductions, matmul, views, conversions

TEST(ComplexAutograd, ReductionsMatmulViewsAndTakePassGradcheck) {
  const Array z = cvalues({2, 3, 4}, 0.3, 1.4, -0.9, 0.9, 1);
  const Array idx = from_data(std::vector<int64_t>{2, 0, 2, 1, 2}, Shape{5});
  struct Case {
    std::string name;
    Fn f;
  };
  const std::vector<Case> cases = {
      {"sum all", [](auto& v) { return sum(v[0]); }},
      {"sum axis 1 keepdims", [](auto& v) { return sum(v[0], 1, true); }},
      {"mean axes (0, 2)",
       [](auto& v) {
         return mean(v[0], {0, 2});
       }},
      {"prod axis -1", [](auto& v) { return prod(v[0], -1); }},
      {"prod axes (0, 1)",
       [](auto& v) {
         return prod(v[0], {0, 1});
       }},
      {"reshape and transpose",
       [](auto& v) {
         return v[0].reshape({4, 6}).T() * 2.0;
       }},
      {"slice with step", [](auto& v) { return v[0].slice(2, 0, 4, 2) * v[0].slice(2, 1, 4, 2); }},
      {"broadcast_to",
       [](auto& v) {
         return broadcast_to(v[0].slice(0, 0, 1), {3, 3, 4});
       }},
      {"concatenate",
       [](auto& v) {
         return concatenate({v[0], square(v[0])}, 1);
       }},
      {"take along axis 1", [idx](auto& v) { return take(v[0], idx, 1); }},
      {"take flat", [idx](auto& v) { return take(v[0], idx); }},
      {"copy", [](auto& v) { return v[0].copy() * v[0].slice(1, 0, 1); }},
      {"real", [](auto& v) { return real(v[0]) * real(v[0]); }},
      {"imag", [](auto& v) { return imag(v[0]) * 3.0 + real(v[0]); }},
      {"conj", [](auto& v) { return conj(v[0]) * v[0].slice(0, 0, 1); }},
      {"angle", [](auto& v) { return angle(v[0]); }},
      {"abs", [](auto& v) { return abs(v[0]); }},
      {"astype complex -> real keeps the real part", [](auto& v) { return square(v[0]).astype(float64); }},
  };
  for (const Case& c : cases) expect_gradcheck(c.f, {z}, c.name);

  for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{
           {{3, 4}, {4, 2}}, {{4}, {4, 2}}, {{3, 4}, {4}}, {{4}, {4}}, {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 4, 5}}}) {
    expect_gradcheck([](auto& v) { return matmul(v[0], v[1]); },
                     {cvalues(sa, -1, 1, -1, 1, 1), cvalues(sb, -1, 1, -1, 1, 2)},
                     "matmul " + shape_str(sa) + " @ " + shape_str(sb));
  }
  expect_gradcheck([](auto& v) { return matmul(v[0], v[1]); },
                   {values({3, 4}, -1, 1, 1), cvalues({4, 2}, -1, 1, -1, 1, 2)}, "matmul real @ complex");
  expect_gradcheck([](auto& v) { return dot(v[0], v[1]); },
                   {cvalues({4}, -1, 1, -1, 1, 1), cvalues({4}, -1, 1, -1, 1, 2)}, "dot");
  expect_gradcheck(
      [](auto& v) {
        return einsum("ij,jk->ik", {v[0], v[1]});
      },
      {cvalues({2, 3}, -1, 1, -1, 1, 1), cvalues({3, 2}, -1, 1, -1, 1, 2)}, "einsum");
  expect_gradcheck([](auto& v) { return tensordot(v[0], v[1], 1); },
                   {cvalues({2, 3}, -1, 1, -1, 1, 1), cvalues({3, 2}, -1, 1, -1, 1, 2)}, "tensordot");
  // Conversions between real and complex, and make_complex.
  expect_gradcheck([](auto& v) { return square(multiply(v[0].astype(complex128), Scalar(c128(0.5, 2)))); },
                   {values({5}, -1, 1, 3)}, "astype real -> complex");
  expect_gradcheck([](auto& v) { return exp(make_complex(v[0], v[1])); },
                   {values({2, 3}, -1, 1, 4), values({3}, -1, 1, 5)}, "make_complex");
}

// ---------------------------------------------------------------- hand-computed values (PyTorch's results)

TEST(ComplexAutograd, HandComputedGradientsMatchPyTorchsConvention) {
  const Array z0 = from_data(std::vector<c128>{{1, 2}, {-3, 0.5}}, Shape{2});
  const Array w = from_data(std::vector<c128>{{0.5, -1}, {2, 3}}, Shape{2});
  {
    // |z|^2 = x^2 + y^2: gradient 2x + 2iy = 2z.
    Array z = z0.copy().set_requires_grad();
    sum(square(abs(z))).backward();
    expect_complex_near(z.grad(), {{2, 4}, {-6, 1}}, 1e-14, "d|z|^2");
  }
  {
    // L = real(z * w) = x re(w) - y im(w): gradient re(w) - i im(w) = conj(w).
    Array z = z0.copy().set_requires_grad();
    sum(real(z * w)).backward();
    expect_complex_near(z.grad(), {{0.5, 1}, {2, -3}}, 0, "d real(z * w)");
  }
  {
    // L = imag(z) summed: gradient i.
    Array z = z0.copy().set_requires_grad();
    sum(imag(z)).backward();
    expect_complex_near(z.grad(), {{0, 1}, {0, 1}}, 0, "d imag(z)");
  }
  {
    // L = sum(abs(z)): z / |z| (torch.sgn), 0 at 0.
    Array z = from_data(std::vector<c128>{{3, 4}, {0, 0}}, Shape{2}).set_requires_grad();
    sum(abs(z)).backward();
    expect_complex_near(z.grad(), {{0.6, 0.8}, {0, 0}}, 1e-15, "d|z|");
  }
  {
    // L = sum(angle(z)) at 1 + i: (-y + ix) / |z|^2 = (-1 + i) / 2.
    Array z = from_data(std::vector<c128>{{1, 1}}, Shape{1}).set_requires_grad();
    sum(angle(z)).backward();
    expect_complex_near(z.grad(), {{-0.5, 0.5}}, 1e-15, "d angle(z)");
  }
  {
    // backward(v) of exp(z): v * conj(exp(z)) (torch: exp(z).backward(v)).
    Array z = z0.copy().set_requires_grad();
    exp(z).backward(w);
    const std::vector<c128> zs = z0.to_vector<c128>(), ws = w.to_vector<c128>();
    expect_complex_near(z.grad(), {ws[0] * std::conj(std::exp(zs[0])), ws[1] * std::conj(std::exp(zs[1]))}, 1e-12,
                        "exp backward(v)");
  }
  {
    // A real input multiplied by a complex constant: the real part of g * conj(w).
    Array x = from_data(std::vector<double>{1, 2}, Shape{2}).set_requires_grad();
    Array y = x * w;
    y.backward(from_data(std::vector<c128>{{1, 1}, {0, 2}}, Shape{2}));
    EXPECT_EQ(x.grad().dtype(), float64);
    // (1 + i)(0.5 + i) = -0.5 + 1.5i -> -0.5; 2i (2 - 3i) = 6 + 4i -> 6.
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{-0.5, 6}));
  }
  {
    // make_complex(re, im): (real(g), imag(g)).
    Array re = from_data(std::vector<double>{1, 2}, Shape{2}).set_requires_grad();
    Array im = from_data(std::vector<double>{3, 4}, Shape{2}).set_requires_grad();
    make_complex(re, im).backward(from_data(std::vector<c128>{{5, 6}, {7, 8}}, Shape{2}));
    EXPECT_EQ(re.grad().to_vector<double>(), (std::vector<double>{5, 7}));
    EXPECT_EQ(im.grad().to_vector<double>(), (std::vector<double>{6, 8}));
  }
  {
    // matmul: g @ B^H. 1x1 case: a * b with a = 1 + 2i, b = 3 - i, g = 1: grad a = conj(b) = 3 + i.
    Array a = from_data(std::vector<c128>{{1, 2}}, Shape{1, 1}).set_requires_grad();
    Array b = from_data(std::vector<c128>{{3, -1}}, Shape{1, 1}).set_requires_grad();
    sum(real(matmul(a, b))).backward();
    expect_complex_near(a.grad(), {{3, 1}}, 0, "matmul a");
    expect_complex_near(b.grad(), {{1, -2}}, 0, "matmul b");
  }
  {
    // complex64 leaves get complex64 gradients; astype complex -> real sends g back as complex.
    Array z = from_data(std::vector<complex64_t>{{1, 2}}, Shape{1}).set_requires_grad();
    sum(z.astype(float32) * 3.0f).backward();
    EXPECT_EQ(z.grad().dtype(), complex64);
    expect_complex_near(z.grad(), {{3, 0}}, 0, "astype complex64 -> float32");
  }
}

TEST(ComplexAutograd, EngineRules) {
  Array z = from_data(std::vector<c128>{{1, 2}}, Shape{1}).set_requires_grad();
  EXPECT_TRUE(z.requires_grad());
  // A complex root needs gradient=, as PyTorch's "grad can be implicitly created only for real scalar outputs".
  expect_error<ValueError>([&] { sum(z * z).backward(); }, {"backward", "complex128", "real", "gradient="});
  // Integers still cannot require grad.
  expect_error<DTypeError>([] { (void)arange(3).set_requires_grad(); }, {"set_requires_grad", "int64"});
  // gradcheck catches a wrong complex gradient: conj(z) recorded as if it were z.
  AutogradFunction wrong;
  wrong.name = "wrong_conj";
  wrong.forward = [](const std::vector<Array>& in, std::vector<Array>&) { return conj(in[0]); };
  wrong.backward = [](const Array& g, const std::vector<Array>&, const std::vector<bool>&) {
    return std::vector<Array>{g};
  };
  const GradcheckResult r = gradcheck([&](auto& v) { return wrong.apply(v); }, {cvalues({3}, -1, 1, -1, 1, 1)});
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.report.find("imaginary part"), std::string::npos) << r.report;
}

}  // namespace
}  // namespace kiln
