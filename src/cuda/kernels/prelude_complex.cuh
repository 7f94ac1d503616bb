// The CUDA prelude's complex numbers (device_prelude() in src/cuda/device_functions.hpp places this file after
// prelude.cuh and before the generated op functions kd::op_<name>). In namespace kd:
// - complex_t<F> (c64 = complex_t<float>, c128 = complex_t<double>): the layout of std::complex<F> (real part,
//   imaginary part, aligned to their pair), trivially default-constructible so it can sit in unions and shared
//   memory;
// - cast<D>(z): kiln's conversions (src/cpu/convert.cpp): complex -> bool is z != 0, complex -> real keeps the
//   real part, complex -> complex converts each part; real -> complex goes through the generic cast;
// - the operators and functions the CPU computes on complex (src/cpu/kernels.hpp, std::complex through the C
//   library): NumPy's textbook product and Smith's quotient, abs as hypot, NumPy's power, and the elementary
//   functions by their usual formulas (exp(x)(cos y + i sin y), log|z| + i arg z, Kahan's square root, ...),
//   with the C library's answers at zeros and infinities where the formula alone would give NaN.
namespace kd {

template <class F>
struct alignas(2 * sizeof(F)) complex_t {
  F re, im;
  complex_t() = default;
  __device__ __forceinline__ constexpr complex_t(F r, F i = F(0)) : re(r), im(i) {}
  template <class G>  // (c128)z of a c64 z: each part converted
  __device__ __forceinline__ explicit constexpr complex_t(complex_t<G> z) : re((F)z.re), im((F)z.im) {}
};
typedef complex_t<float> c64;
typedef complex_t<double> c128;

template <class T>
struct real_of_t {
  typedef T type;
};
template <class F>
struct real_of_t<complex_t<F>> {
  typedef F type;
};
/// A complex type's part type (float for c64); any other type itself.
template <class T>
using real_of = typename real_of_t<T>::type;
template <class T>
constexpr bool is_cx = !same<real_of<T>, T>;

template <class D, class F>
__device__ __forceinline__ D cast(complex_t<F> v) {
  if constexpr (same<D, bool>)
    return v.re != F(0) || v.im != F(0);
  else if constexpr (is_cx<D>)
    return D((real_of<D>)v.re, (real_of<D>)v.im);
  else
    return from_wide<D>(v.re);
}

// ------------------------------------------------------------ arithmetic (src/cpu/kernels.hpp complex_*)
template <class F>
__device__ __forceinline__ complex_t<F> operator-(complex_t<F> a) {
  return complex_t<F>(-a.re, -a.im);
}
template <class F>
__device__ __forceinline__ complex_t<F> operator+(complex_t<F> a, complex_t<F> b) {
  return complex_t<F>(a.re + b.re, a.im + b.im);
}
template <class F>
__device__ __forceinline__ complex_t<F> operator-(complex_t<F> a, complex_t<F> b) {
  return complex_t<F>(a.re - b.re, a.im - b.im);
}
template <class F>
__device__ __forceinline__ complex_t<F> operator*(complex_t<F> a, complex_t<F> b) {
  return complex_t<F>(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
// Smith's quotient, as NumPy: the smaller of |b.re|, |b.im| is scaled by the larger, so no square overflows.
template <class F>
__device__ __forceinline__ complex_t<F> operator/(complex_t<F> a, complex_t<F> b) {
  const F abs_br = m_fabs(b.re), abs_bi = m_fabs(b.im);
  if (abs_br >= abs_bi) {
    if (abs_br == 0 && abs_bi == 0) return complex_t<F>(a.re / abs_br, a.im / abs_br);
    const F rat = b.im / b.re, scl = F(1) / (b.re + b.im * rat);
    return complex_t<F>((a.re + a.im * rat) * scl, (a.im - a.re * rat) * scl);
  }
  const F rat = b.re / b.im, scl = F(1) / (b.im + b.re * rat);
  return complex_t<F>((a.re * rat + a.im) * scl, (a.im * rat - a.re) * scl);
}
template <class F>
__device__ __forceinline__ bool operator==(complex_t<F> a, complex_t<F> b) {
  return a.re == b.re && a.im == b.im;
}
template <class F>
__device__ __forceinline__ bool operator!=(complex_t<F> a, complex_t<F> b) {
  return !(a == b);
}

// ------------------------------------------------------------ elementary functions
__device__ __forceinline__ float m_hypot(float x, float y) { return hypotf(x, y); }
__device__ __forceinline__ double m_hypot(double x, double y) { return hypot(x, y); }
template <class F>
__device__ __forceinline__ bool finite(F x) {
  return m_fabs(x) <= max_finite<F>();
}
template <class F>
__device__ __forceinline__ F quiet_nan() {
  return infinity<F>() - infinity<F>();
}

// exp(x) (cos y + i sin y); above the overflow threshold of exp(x), exp(x/2) is applied twice so a product
// with a small cosine or sine stays finite.
template <class F>
__device__ __forceinline__ complex_t<F> complex_exp(complex_t<F> z) {
  const F x = z.re, y = z.im;
  if (y == 0) return complex_t<F>(m_exp(x), y);
  if (!finite(y)) {
    if (x == -infinity<F>()) return complex_t<F>(F(0), F(0));
    if (x == infinity<F>()) return complex_t<F>(x, quiet_nan<F>());
    return complex_t<F>(quiet_nan<F>(), quiet_nan<F>());
  }
  const F c = m_cos(y), s = m_sin(y);
  const F threshold = same<F, float> ? F(88) : F(709);
  if (x > threshold) {
    const F half = m_exp(x / 2);
    return complex_t<F>(c * half * half, s * half * half);
  }
  const F e = m_exp(x);
  return complex_t<F>(e * c, e * s);
}

// log|z| + i arg z; near |z| = 1, log|z| = log1p((a - 1)(a + 1) + b^2) / 2 with a >= b the parts' magnitudes
// (a - 1 is exact there), which keeps the relative accuracy of a result near zero.
template <class F>
__device__ __forceinline__ complex_t<F> complex_log(complex_t<F> z) {
  const F x = z.re, y = z.im, ax = m_fabs(x), ay = m_fabs(y);
  const F arg = m_atan2(y, x);
  if (ax == infinity<F>() || ay == infinity<F>()) return complex_t<F>(infinity<F>(), arg);
  if (x != x || y != y) return complex_t<F>(quiet_nan<F>(), quiet_nan<F>());
  const F a = ax > ay ? ax : ay, b = ax > ay ? ay : ax;
  if (a == 0) return complex_t<F>(-infinity<F>(), arg);
  if (a > F(0.5) && a < F(2) && b < F(0.75)) {
    const F t = (a - F(1)) * (a + F(1)) + b * b;
    if (t > F(-0.5) && t < F(1)) return complex_t<F>(m_log1p(t) / 2, arg);
  }
  const F ln2 = F(0.693147180559945309417232121458176568);
  if (a > max_finite<F>() / 4) return complex_t<F>(m_log(m_hypot(x / 4, y / 4)) + 2 * ln2, arg);  // |z| overflows
  const F tiny = same<F, float> ? F(1.1754943508222875e-38) : F(2.2250738585072014e-308);
  if (a < tiny) {  // subnormal parts: |z| scaled up by 2^48 (float) or 2^106 (double) first
    const F up = same<F, float> ? F(281474976710656.0) : F(8.1129638414606682e31);
    return complex_t<F>(m_log(m_hypot(x * up, y * up)) - (same<F, float> ? 48 : 106) * ln2, arg);
  }
  return complex_t<F>(m_log(m_hypot(x, y)), arg);
}

// Kahan's square root: t = sqrt((|x| + |z|) / 2) is the larger part, y / 2t the smaller; parts above a quarter
// of the largest float are scaled by 1/4 first (the result by 2) so |x| + |z| cannot overflow.
template <class F>
__device__ __forceinline__ complex_t<F> complex_sqrt(complex_t<F> z) {
  F x = z.re, y = z.im;
  if (m_fabs(y) == infinity<F>()) return complex_t<F>(infinity<F>(), y);
  if (x == -infinity<F>()) return complex_t<F>(y != y ? y : F(0), m_copysign(infinity<F>(), y));
  if (x == infinity<F>()) return complex_t<F>(x, y != y ? y : m_copysign(F(0), y));
  if (x != x || y != y) return complex_t<F>(quiet_nan<F>(), quiet_nan<F>());
  if (x == 0 && y == 0) return complex_t<F>(F(0), y);
  F scale = F(1);
  if (m_fabs(x) > max_finite<F>() / 4 || m_fabs(y) > max_finite<F>() / 4) {
    x /= 4;
    y /= 4;
    scale = F(2);
  }
  if (x == 0) {  // both parts sqrt(|y| / 2), as sqrt(2|y|) / 2 below 1 (|y| / 2 may be a subnormal's half)
    const F t = m_fabs(y) < F(1) ? m_sqrt(2 * m_fabs(y)) / 2 : m_sqrt(m_fabs(y) / 2);
    return complex_t<F>(t * scale, m_copysign(t, y) * scale);
  }
  // Parts below the smallest normal number: scaled up by 4^k (the result by 2^-k), so |z| keeps its precision.
  const F tiny = same<F, float> ? F(1.1754943508222875e-38) : F(2.2250738585072014e-308);
  if (m_fabs(x) < tiny && m_fabs(y) < tiny) {
    const F up = same<F, float> ? F(281474976710656.0) : F(8.1129638414606682e31);  // 2^48, 2^106
    x *= up;
    y *= up;
    scale = same<F, float> ? F(5.9604644775390625e-8) : F(1.1102230246251565e-16);  // 2^-24, 2^-53
  }
  const F d = m_hypot(x, y);
  if (x >= 0) {
    const F t = m_sqrt((d + x) / 2);
    return complex_t<F>(t * scale, y / (2 * t) * scale);
  }
  const F t = m_sqrt((d - x) / 2);
  return complex_t<F>(m_fabs(y) / (2 * t) * scale, m_copysign(t, y) * scale);
}

// sinh x cos y + i cosh x sin y and cosh x cos y + i sinh x sin y; an infinite or NaN y gives C99 Annex G's
// answers (x = 0 keeps its zero, x = +-inf its infinity, the rest is NaN).
template <class F>
__device__ __forceinline__ complex_t<F> complex_sinh(complex_t<F> z) {
  const F x = z.re, y = z.im;
  if (y == 0) return complex_t<F>(m_sinh(x), y);
  if (!finite(y)) return complex_t<F>(x == 0 || m_fabs(x) == infinity<F>() ? x : quiet_nan<F>(), quiet_nan<F>());
  return complex_t<F>(m_sinh(x) * m_cos(y), m_cosh(x) * m_sin(y));
}
template <class F>
__device__ __forceinline__ complex_t<F> complex_cosh(complex_t<F> z) {
  const F x = z.re, y = z.im;
  if (y == 0) return complex_t<F>(m_cosh(x), y * m_copysign(F(1), x));
  if (!finite(y)) {
    if (x == 0) return complex_t<F>(quiet_nan<F>(), F(0));
    return complex_t<F>(m_fabs(x) == infinity<F>() ? infinity<F>() : quiet_nan<F>(), quiet_nan<F>());
  }
  return complex_t<F>(m_cosh(x) * m_cos(y), m_sinh(x) * m_sin(y));
}
// (sinh x cosh x + i sin y cos y) / (sinh^2 x + cos^2 y), for y = 0 too (as the C library); sinh^2 x is left out
// of the denominator where it is below an ulp of cos^2 y, and where it would overflow (|x| above half the
// largest exponent times log 2), tanh x is +-1 and the imaginary part 4 sin y cos y exp(-2|x|).
template <class F>
__device__ __forceinline__ complex_t<F> complex_tanh(complex_t<F> z) {
  const F x = z.re, y = z.im;
  if (m_fabs(x) == infinity<F>())
    return complex_t<F>(m_copysign(F(1), x), finite(y) ? m_copysign(F(0), m_sin(y) * m_cos(y)) : F(0));
  if (x != x) return complex_t<F>(x, y == 0 ? y : quiet_nan<F>());
  if (!finite(y)) return complex_t<F>(x == 0 ? x : quiet_nan<F>(), quiet_nan<F>());
  const F s = m_sin(y), c = m_cos(y);
  const F large = same<F, float> ? F(44) : F(354);
  if (m_fabs(x) > large) return complex_t<F>(m_copysign(F(1), x), 4 * s * c * m_exp(-2 * m_fabs(x)));
  const F sh = m_sinh(x), ch = m_cosh(x);
  const F epsilon = same<F, float> ? F(1.1920928955078125e-7) : F(2.220446049250313e-16);
  const F den = m_fabs(sh) > m_fabs(c) * epsilon ? sh * sh + c * c : c * c;
  return complex_t<F>(sh * ch / den, s * c / den);
}
// sin z = -i sinh(iz), cos z = cosh(iz), tan z = -i tanh(iz), with iz = -y + ix.
template <class F>
__device__ __forceinline__ complex_t<F> complex_sin(complex_t<F> z) {
  const complex_t<F> r = complex_sinh(complex_t<F>(-z.im, z.re));
  return complex_t<F>(r.im, -r.re);
}
template <class F>
__device__ __forceinline__ complex_t<F> complex_cos(complex_t<F> z) {
  return complex_cosh(complex_t<F>(-z.im, z.re));
}
template <class F>
__device__ __forceinline__ complex_t<F> complex_tan(complex_t<F> z) {
  const complex_t<F> r = complex_tanh(complex_t<F>(-z.im, z.re));
  return complex_t<F>(r.im, -r.re);
}

// NumPy's power (nc_pow): exact cases for b = 0 and a = 0, repeated products for integer b with |b| < 100,
// else exp(b log a).
template <class F>
__device__ __forceinline__ complex_t<F> complex_power(complex_t<F> a, complex_t<F> b) {
  const F br = b.re, bi = b.im;
  if (br == 0 && bi == 0) return complex_t<F>(F(1), F(0));
  if (a.re == 0 && a.im == 0) {
    if (br > 0 && bi == 0) return complex_t<F>(F(0), F(0));
    return complex_t<F>(quiet_nan<F>(), quiet_nan<F>());
  }
  if (bi == 0 && br == m_trunc(br) && br > -100 && br < 100) {
    i64 n = (i64)br;
    if (n == 1) return a;
    if (n == 2) return a * a;
    if (n == 3) return a * (a * a);
    if (n < 0) n = -n;
    complex_t<F> result(F(1), F(0)), p = a;
    for (i64 mask = 1;; mask <<= 1) {
      if (n & mask) result = result * p;
      if (n < (mask << 1)) break;
      p = p * p;
    }
    return br < 0 ? complex_t<F>(F(1), F(0)) / result : result;
  }
  return complex_exp(b * complex_log(a));
}

// clang-format off
#define KD_COMPLEX1(name, impl) \
  __device__ __forceinline__ c64 name(c64 z) { return impl(z); } \
  __device__ __forceinline__ c128 name(c128 z) { return impl(z); }
KD_COMPLEX1(m_exp, complex_exp) KD_COMPLEX1(m_log, complex_log) KD_COMPLEX1(m_sqrt, complex_sqrt)
KD_COMPLEX1(m_sin, complex_sin) KD_COMPLEX1(m_cos, complex_cos) KD_COMPLEX1(m_tan, complex_tan)
KD_COMPLEX1(m_sinh, complex_sinh) KD_COMPLEX1(m_cosh, complex_cosh) KD_COMPLEX1(m_tanh, complex_tanh);
#undef KD_COMPLEX1
// clang-format on

// ------------------------------------------------------------ helpers of the op list's cuda column
namespace ops {
template <class F>
__device__ __forceinline__ F abs(complex_t<F> a) {
  return m_hypot(a.re, a.im);  // NumPy's npy_cabs
}
template <class F>
__device__ __forceinline__ bool isnan(complex_t<F> a) {
  return a.re != a.re || a.im != a.im;
}
template <class F>
__device__ __forceinline__ bool isinf(complex_t<F> a) {
  return m_fabs(a.re) == infinity<F>() || m_fabs(a.im) == infinity<F>();
}
template <class F>
__device__ __forceinline__ bool isfinite(complex_t<F> a) {
  return finite(a.re) && finite(a.im);
}
template <class F>
__device__ __forceinline__ complex_t<F> power(complex_t<F> a, complex_t<F> b) {
  return complex_power(a, b);
}
}  // namespace ops
}  // namespace kd
