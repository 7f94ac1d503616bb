// Scalar definitions of every elementwise op for the CPU (internal): `apply<OP, T>`, evaluated in the
// compute type T (float for float16/bfloat16), is the `cpu` column of src/core/ops_internal.def; the helpers
// that column calls are in namespace ops below (src/cuda/kernels/prelude.cuh mirrors them). The loops in
// elementwise.cpp call it on whole rows so the compiler can vectorise the simple ones.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/op_table.hpp"
#include "cpu/convert.hpp"

namespace kiln::cpu_impl {

using detail::OpCode;

constexpr int arity_of(OpCode op) { return detail::op_info(op).arity; }


/// Result C++ type of OP computed in T (a complex T's part type for abs).
template <OpCode OP, class T>
using result_t = std::conditional_t<detail::returns_bool(OP), bool,
                                    std::conditional_t<detail::returns_real(OP), typename real_of<T>::type, T>>;

/// Whether OP has a CPU kernel for compute type T: the table's one dtype rule (detail::op_supports).
template <OpCode OP, class T> constexpr bool has_kernel() { return detail::op_supports(OP, dtype_of<T>()); }

namespace ops {

template <class T> inline T wrap_neg(T a) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(0u - static_cast<std::make_unsigned_t<T>>(a));
  else return -a;
}

template <class T> inline T int_floor_divide(T a, T b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_neg(a);
    T q = static_cast<T>(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return static_cast<T>(a / b);
  }
}

template <class T> inline T int_remainder(T a, T b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
    T r = static_cast<T>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  } else {
    return static_cast<T>(a % b);
  }
}

template <class T> inline T int_power(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) return base == 1 ? T(1) : base == -1 ? ((exp & 1) ? T(-1) : T(1)) : T(0);
  }
  using U = std::make_unsigned_t<std::conditional_t<(sizeof(T) < 4), int32_t, T>>;
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<T>>(exp);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(result);
}

// Python/NumPy semantics for float floor division and modulo (npy_divmod).
template <class T> inline T float_remainder(T a, T b) {
  if (b == 0) return std::fmod(a, b);  // nan
  T mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(T(0), b);
  }
  return mod;
}

template <class T> inline T float_floor_divide(T a, T b) {
  if (b == 0) return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
  if (div != 0) {
    T floordiv = std::floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
  }
  return std::copysign(T(0), a / b);
}

// Complex products and quotients as NumPy writes them (numpy/_core/src/umath/loops.c.src): the textbook
// product, Smith's quotient. C++'s operator* and operator/ add C99 Annex G's recovery of infinite results,
// which NumPy does not do.
template <class F> inline std::complex<F> complex_multiply(std::complex<F> a, std::complex<F> b) {
  const F ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
  return {ar * br - ai * bi, ar * bi + ai * br};
}
template <class F> inline std::complex<F> complex_divide(std::complex<F> a, std::complex<F> b) {
  const F ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
  const F abs_br = std::fabs(br), abs_bi = std::fabs(bi);
  if (abs_br >= abs_bi) {
    if (abs_br == 0 && abs_bi == 0) return {ar / abs_br, ai / abs_br};  // divide by zero: inf/nan as NumPy
    const F rat = bi / br, scl = F(1) / (br + bi * rat);
    return {(ar + ai * rat) * scl, (ai - ar * rat) * scl};
  }
  const F rat = br / bi, scl = F(1) / (bi + br * rat);
  return {(ar * rat + ai) * scl, (ai * rat - ar) * scl};
}
// NumPy's complex power (nc_pow): exact cases for b = 0 and a = 0, repeated products for integer b with
// |b| < 100, else exp(b log a) (the C library's cpow).
template <class F> inline std::complex<F> complex_power(std::complex<F> a, std::complex<F> b) {
  const F br = b.real(), bi = b.imag();
  if (br == 0 && bi == 0) return {F(1), F(0)};
  if (a.real() == 0 && a.imag() == 0) {
    if (br > 0 && bi == 0) return {F(0), F(0)};
    return {std::numeric_limits<F>::quiet_NaN(), std::numeric_limits<F>::quiet_NaN()};
  }
  if (bi == 0 && br == std::trunc(br) && br > -100 && br < 100) {
    int64_t n = static_cast<int64_t>(br);
    if (n == 1) return a;
    if (n == 2) return complex_multiply(a, a);
    if (n == 3) return complex_multiply(a, complex_multiply(a, a));
    if (n < 0) n = -n;
    std::complex<F> result(F(1), F(0)), p = a;
    for (int64_t mask = 1;; mask <<= 1) {
      if (n & mask) result = complex_multiply(result, p);
      if (n < (mask << 1)) break;
      p = complex_multiply(p, p);
    }
    return br < 0 ? complex_divide(std::complex<F>(F(1), F(0)), result) : result;
  }
  return std::pow(a, b);
}

template <class T> inline T maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}
template <class T> inline T minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}


template <class T> inline auto abs(T a) {
  if constexpr (is_complex_v<T>) return std::hypot(a.real(), a.imag());  // NumPy's npy_cabs
  else if constexpr (std::is_floating_point_v<T>) return std::fabs(a);
  else if constexpr (std::is_signed_v<T>) return a < 0 ? wrap_neg(a) : a;
  else return a;
}
template <class T> inline T sign(T a) {
  if constexpr (std::is_floating_point_v<T>) return a > 0 ? T(1) : a < 0 ? T(-1) : a == 0 ? T(0) : a;
  else return static_cast<T>((T(0) < a) - (a < T(0)));
}
template <class T> inline T floor(T a) { if constexpr (std::is_floating_point_v<T>) return std::floor(a); else return a; }
template <class T> inline T ceil(T a) { if constexpr (std::is_floating_point_v<T>) return std::ceil(a); else return a; }
template <class T> inline T trunc(T a) { if constexpr (std::is_floating_point_v<T>) return std::trunc(a); else return a; }
template <class T> inline T round(T a) { if constexpr (std::is_floating_point_v<T>) return std::nearbyint(a); else return a; }
template <class T> inline bool isnan(T a) {
  if constexpr (is_complex_v<T>) return std::isnan(a.real()) || std::isnan(a.imag());
  else if constexpr (std::is_floating_point_v<T>) return std::isnan(a);
  else return false;
}
template <class T> inline bool isinf(T a) {
  if constexpr (is_complex_v<T>) return std::isinf(a.real()) || std::isinf(a.imag());
  else if constexpr (std::is_floating_point_v<T>) return std::isinf(a);
  else return false;
}
template <class T> inline bool isfinite(T a) {
  if constexpr (is_complex_v<T>) return std::isfinite(a.real()) && std::isfinite(a.imag());
  else if constexpr (std::is_floating_point_v<T>) return std::isfinite(a);
  else return true;
}
// The sign bit itself, so -0.0 and -NaN count as negative (no comparison sees them); integers: a < 0 (NumPy).
template <class T> inline bool signbit(T a) {
  if constexpr (std::is_floating_point_v<T>) return std::signbit(a);
  else if constexpr (std::is_signed_v<T>) return a < T(0);
  else return false;
}
template <class T> inline T bitwise_not(T a) {
  if constexpr (std::is_same_v<T, bool>) return !a;
  else return static_cast<T>(~a);
}
template <class T> inline T add(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else return static_cast<T>(a + b);
}
template <class T> inline T multiply(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a && b;
  else if constexpr (is_complex_v<T>) return complex_multiply(a, b);
  else return static_cast<T>(a * b);
}
template <class T> inline T floor_divide(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return float_floor_divide(a, b);
  else return int_floor_divide(a, b);
}
template <class T> inline T remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return float_remainder(a, b);
  else return int_remainder(a, b);
}
template <class T> inline T power(T a, T b) {
  if constexpr (is_complex_v<T>) return complex_power(a, b);
  else if constexpr (std::is_floating_point_v<T>) return std::pow(a, b);
  else return int_power(a, b);
}
template <class T> inline T divide(T a, T b) {
  if constexpr (is_complex_v<T>) return complex_divide(a, b);
  else return a / b;
}
template <class T> inline T square(T a) {
  if constexpr (is_complex_v<T>) return complex_multiply(a, a);
  else return a * a;
}
template <class T> inline T sigmoid(T a) {
  if (a >= 0) return T(1) / (T(1) + std::exp(-a));
  T e = std::exp(a);
  return e / (T(1) + e);
}
// Activations of the nn layers, computed in double whatever T is (float32 results are then correctly
// rounded; silu's exp(-x) would overflow float before x / (1 + exp(-x)) reaches the subnormals).
template <class T> inline T softplus(T a) {  // log(1 + exp(a)) without overflow: log1p(exp(-|a|)) + max(a, 0)
  return std::log1p(std::exp(-std::fabs(a))) + (a > T(0) ? a : T(0));
}
template <class T> inline T silu(T a) {
  const double x = a;
  return static_cast<T>(x / (1.0 + std::exp(-x)));
}
// x * Phi(x) = x/2 * erfc(z), z = -x/sqrt(2): no cancellation for x < 0. erfc magnifies the rounding of z
// by 2z^2, so z's error dz (the product's rounding, by fma, and 1/sqrt(2)'s low part) is added back to first
// order: erfc(z + dz) = erfc(z) - 2/sqrt(pi) exp(-z^2) dz.
template <class T> inline T gelu(T a) {
  const double x = a, z = x * -0.7071067811865476;
  double dz = std::fma(x, -0.7071067811865476, -z) + x * 4.8336466567264565e-17;
  if (dz != dz) dz = 0;  // x = +-inf or NaN
  return static_cast<T>(0.5 * x * (std::erfc(z) - 1.1283791670955126 * std::exp(-z * z) * dz));
}
template <class T> inline T gelu_tanh(T a) {  // x/2 * (1 + tanh(u)) = x / (1 + exp(-2u)): no cancellation
  const double x = a;
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return static_cast<T>(x / (1.0 + std::exp(-2.0 * u)));
}
// NumPy's npy_logaddexp: equal arguments (infinities included) give x + log(2); NaN propagates.
template <class T> inline T logaddexp(T a, T b) {
  if (a == b) return a + T(0.693147180559945309417232121458176568);
  const T d = a - b;
  if (d > 0) return a + std::log1p(std::exp(-d));
  if (d <= 0) return b + std::log1p(std::exp(d));
  return d;
}

}  // namespace ops

/// The `cpu` column of each row of src/core/ops_internal.def, as Fn<OP>::run<T>(a, b, c).
template <OpCode OP> struct Fn;
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, domain, derivative, cpu, cuda) \
  template <> struct Fn<OpCode::Code> {                                                                     \
    template <class T>                                                                                         \
    static auto run([[maybe_unused]] T a, [[maybe_unused]] T b, [[maybe_unused]] T c) {                       \
      return cpu;                                                                                              \
    }                                                                                                          \
  };
#include "core/ops_internal.def"

template <OpCode OP, class T>
inline result_t<OP, T> apply(T a, T b = T(), T c = T()) {
  return static_cast<result_t<OP, T>>(Fn<OP>::template run<T>(a, b, c));
}

}  // namespace kiln::cpu_impl
