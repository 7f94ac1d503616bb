// The complex formulas of the CUDA prelude (src/cuda/kernels/prelude_complex.cuh) compiled for the host, over the
// host's real math functions, against std::complex (the C library's cexp, clog, csqrt, ..., which the CPU kernels
// call): with the same real functions the formulas must give the same values, so a wrong branch, sign or special
// case shows here without a GPU. On a GPU, CUDA's real functions add their own few ulps (test_complex_gpu.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <limits>
#include <random>
#include <string>

// The parts of prelude.cuh that prelude_complex.cuh uses, over the host's <cmath>.
#define __device__
#define __forceinline__ inline
namespace kd {
typedef long long i64;
template <class A, class B>
struct same_t {
  static constexpr bool value = false;
};
template <class A>
struct same_t<A, A> {
  static constexpr bool value = true;
};
template <class A, class B>
constexpr bool same = same_t<A, B>::value;
#define KD_HOST1(name, f)                          \
  inline float name(float x) { return std::f(x); } \
  inline double name(double x) { return std::f(x); }
#define KD_HOST2(name, f)                                      \
  inline float name(float x, float y) { return std::f(x, y); } \
  inline double name(double x, double y) { return std::f(x, y); }
KD_HOST1(m_fabs, fabs)
KD_HOST1(m_exp, exp)
KD_HOST1(m_log, log)
KD_HOST1(m_log1p, log1p)
KD_HOST1(m_sqrt, sqrt)
KD_HOST1(m_sin, sin)
KD_HOST1(m_cos, cos)
KD_HOST1(m_tan, tan)
KD_HOST1(m_sinh, sinh)
KD_HOST1(m_cosh, cosh)
KD_HOST1(m_tanh, tanh)
KD_HOST1(m_trunc, trunc)
KD_HOST2(m_atan2, atan2)
KD_HOST2(m_copysign, copysign)
#undef KD_HOST1
#undef KD_HOST2
template <class T>
T infinity() {
  return std::numeric_limits<T>::infinity();
}
template <class T>
T max_finite() {
  return std::numeric_limits<T>::max();
}
template <class D, class W>
D from_wide(W w) {
  return static_cast<D>(w);
}
}  // namespace kd
#include "cuda/kernels/prelude_complex.cuh"
#undef __device__
#undef __forceinline__

namespace {

template <class F>
using Fn = std::function<kd::complex_t<F>(kd::complex_t<F>)>;
template <class F>
using Ref = std::function<std::complex<F>(std::complex<F>)>;

template <class F>
struct Case {
  const char* name;
  Fn<F> ours;
  Ref<F> libc;
  double max_ulps;  // of |result|, over random finite values
};

template <class F>
std::vector<Case<F>> cases() {
  using C = std::complex<F>;
  using K = kd::complex_t<F>;
  const K b(F(0.7), F(-1.3));
  return {
      {"exp", [](K z) { return kd::complex_exp(z); }, [](C z) { return std::exp(z); }, 2},
      {"log", [](K z) { return kd::complex_log(z); }, [](C z) { return std::log(z); }, 3},
      {"sqrt", [](K z) { return kd::complex_sqrt(z); }, [](C z) { return std::sqrt(z); }, 1},
      {"sin", [](K z) { return kd::complex_sin(z); }, [](C z) { return std::sin(z); }, 1},
      {"cos", [](K z) { return kd::complex_cos(z); }, [](C z) { return std::cos(z); }, 1},
      {"tan", [](K z) { return kd::complex_tan(z); }, [](C z) { return std::tan(z); }, 1},
      {"sinh", [](K z) { return kd::complex_sinh(z); }, [](C z) { return std::sinh(z); }, 1},
      {"cosh", [](K z) { return kd::complex_cosh(z); }, [](C z) { return std::cosh(z); }, 1},
      {"tanh", [](K z) { return kd::complex_tanh(z); }, [](C z) { return std::tanh(z); }, 1},
      {"power", [b](K z) { return kd::complex_power(z, b); }, [](C z) { return std::pow(z, C(F(0.7), F(-1.3))); }, 6},
  };
}

template <class F>
void expect_formulas_match_the_c_library() {
  const double eps = std::numeric_limits<F>::epsilon();
  for (const Case<F>& c : cases<F>()) {
    for (double scale : {1e-3, 0.5, 2.0, 30.0, 1e30}) {
      if (scale > 40 && (std::string(c.name) != "sqrt" && std::string(c.name) != "log")) continue;
      std::mt19937_64 rng(7);
      std::normal_distribution<double> normal(0, scale);
      double worst = 0;
      std::complex<F> at;
      for (int i = 0; i < 20000; ++i) {
        const std::complex<F> z(static_cast<F>(normal(rng)), i % 10 == 0 ? F(0) : static_cast<F>(normal(rng)));
        const kd::complex_t<F> r = c.ours(kd::complex_t<F>(z.real(), z.imag()));
        const std::complex<F> w = c.libc(z);
        const double bound = eps * std::max(static_cast<double>(std::abs(w)), 1e-300);
        for (double d : {std::fabs(double(r.re) - double(w.real())), std::fabs(double(r.im) - double(w.imag()))})
          if (!(d / bound <= worst)) {
            worst = d / bound;
            at = z;
          }
      }
      EXPECT_LE(worst, c.max_ulps) << c.name << " at (" << at.real() << ", " << at.imag() << "), scale " << scale;
    }
  }
}

/// Zeros, infinities, NaN and extremes in every combination: the C library's answer, NaN for NaN, and an
/// infinity for an infinity, either zero for a zero (C99 Annex G leaves some of their signs unspecified).
template <class F>
void expect_special_values_match_the_c_library() {
  const F inf = std::numeric_limits<F>::infinity(), nan = std::numeric_limits<F>::quiet_NaN();
  const F values[] = {F(0),
                      -F(0),
                      F(1),
                      F(-1),
                      F(2.5),
                      F(-2.5),
                      inf,
                      -inf,
                      nan,
                      std::numeric_limits<F>::max(),
                      std::numeric_limits<F>::denorm_min()};
  const double eps = std::numeric_limits<F>::epsilon();
  for (const Case<F>& c : cases<F>()) {
    if (std::string(c.name) == "power") continue;  // NumPy's special cases, not the C library's
    for (F x : values) {
      for (F y : values) {
        const std::complex<F> z(x, y);
        const kd::complex_t<F> r = c.ours(kd::complex_t<F>(x, y));
        const std::complex<F> w = c.libc(z);
        for (int part = 0; part < 2; ++part) {
          const F a = part ? r.im : r.re, b = part ? w.imag() : w.real();
          const bool same = a == b || (std::isnan(a) && std::isnan(b)) || (std::isinf(a) && std::isinf(b)) ||
                            (std::isfinite(b) && std::fabs(a - b) <= 4 * eps * std::abs(w));
          EXPECT_TRUE(same) << c.name << "(" << x << ", " << y << ") " << (part ? "imaginary" : "real")
                            << " part: ours " << a << ", the C library's " << b;
        }
      }
    }
  }
}

TEST(ComplexPrelude, FormulasMatchTheCLibraryOverFiniteValues) {
  expect_formulas_match_the_c_library<float>();
  expect_formulas_match_the_c_library<double>();
}

TEST(ComplexPrelude, SpecialValuesMatchTheCLibrary) {
  expect_special_values_match_the_c_library<float>();
  expect_special_values_match_the_c_library<double>();
}

TEST(ComplexPrelude, ArithmeticIsNumPys) {
  using K = kd::complex_t<double>;
  const K a(1.5, -2.0), b(0.25, 4.0);
  const K p = a * b, q = a / b;
  EXPECT_EQ(p.re, 1.5 * 0.25 - (-2.0) * 4.0);
  EXPECT_EQ(p.im, 1.5 * 4.0 + (-2.0) * 0.25);
  const double rat = 0.25 / 4.0, scl = 1.0 / (4.0 + 0.25 * rat);  // Smith's: |b.im| > |b.re|
  EXPECT_EQ(q.re, (1.5 * rat + -2.0) * scl);
  EXPECT_EQ(q.im, (-2.0 * rat - 1.5) * scl);
  const K inf_quotient = K(1.0, 1.0) / K(0.0, 0.0);
  EXPECT_TRUE(std::isinf(inf_quotient.re) && std::isinf(inf_quotient.im));
  const K cube = kd::complex_power(a, K(3.0, 0.0));
  const K want = a * (a * a);
  EXPECT_EQ(cube.re, want.re);
  EXPECT_EQ(cube.im, want.im);
  EXPECT_TRUE(std::isnan(kd::complex_power(K(0.0, 0.0), K(-1.0, 0.0)).re));
  EXPECT_EQ(kd::complex_power(K(0.0, 0.0), K(0.0, 0.0)).re, 1.0);
}

}  // namespace
