// The CUDA prelude of every generated kernel, first part (device_prelude() in src/cuda/device_functions.hpp
// appends the op functions kd::op_<name> generated from src/core/ops_internal.def, then prelude_reductions.cuh).
// Self-contained (no includes; NVRTC provides the math library); in namespace kd:
// - fixed-width integer typedefs and the float16/bfloat16 storage structs with their float conversions,
//   rounding to nearest even exactly like kiln's CPU float_to_half / BFloat16 (include/kiln/dtype.hpp,
//   src/core/dtype.cpp), NaN payloads included;
// - cast<D>(v): kiln's dtype conversion (src/cpu/convert.cpp), with x86's answers where C++ leaves it undefined
//   (float -> small int goes through int32, out-of-range or NaN gives INT_MIN as cvttss2si does);
// - the helpers of the op list's cuda column (namespace kd::ops), mirroring src/cpu/kernels.hpp line by line
//   (Python floor_divide/remainder, integer division by zero -> 0, INT_MIN // -1 wraps, integer power with
//   negative exponents, NaN-propagating maximum/minimum, rint rounding, the stable sigmoid, ...). Integer
//   overflow wraps: arithmetic on int32/int64 goes through unsigned types.
// Kernels are compiled with --fmad=false so no a*b+c is contracted into an fma that the CPU would round twice.
namespace kd {
typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct half_t {
  u16 bits;
};
struct bf16_t {
  u16 bits;
};

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
template <class T>
constexpr bool is_fp = same<T, float> || same<T, double>;
template <class T>
constexpr bool is_bool = same<T, bool>;
template <class T>
constexpr bool is_signed_int = same<T, i8> || same<T, i16> || same<T, i32> || same<T, i64>;
template <class T>
constexpr bool is_int = is_signed_int<T> || same<T, u8>;  // bool excluded
// The unsigned type integer arithmetic on T wraps in (C++ promotes small types to int first).
template <class T>
struct wrap_t {
  typedef u32 type;
};
template <>
struct wrap_t<i64> {
  typedef u64 type;
};
template <class T>
using wrap = typename wrap_t<T>::type;
template <class T>
struct unsigned_t {
  typedef T type;
};
template <>
struct unsigned_t<i8> {
  typedef u8 type;
};
template <>
struct unsigned_t<i16> {
  typedef u16 type;
};
template <>
struct unsigned_t<i32> {
  typedef u32 type;
};
template <>
struct unsigned_t<i64> {
  typedef u64 type;
};

// ------------------------------------------------------------ 16-bit floats
__device__ __forceinline__ float half_bits_to_float(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u)  // NaN: keep the payload like the CPU
    f = __uint_as_float(((u32)(h & 0x8000u) << 16) | 0x7f800000u | ((u32)(h & 0x3ffu) << 13));
  return f;
}
__device__ __forceinline__ u16 float_to_half_bits(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));  // IEEE round to nearest even, subnormals kept
  u32 x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) h = (u16)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
  return h;
}
__device__ __forceinline__ u16 float_to_bf16_bits(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}

// ------------------------------------------------------------ conversions
__device__ __forceinline__ float widen(half_t v) { return half_bits_to_float(v.bits); }
__device__ __forceinline__ float widen(bf16_t v) { return __uint_as_float((u32)v.bits << 16); }
template <class T>
__device__ __forceinline__ T widen(T v) {
  return v;
}

// double -> float rounded to odd (truncate, then set the sticky bit when inexact), so a later
// rounding to half/bfloat16 is one correct rounding of the double, as on the CPU
// (kiln::double_to_float_round_odd); double -> float -> half would round twice.
__device__ __forceinline__ float to_float_round_odd(double d) {
  float f = __double2float_rz(d);
  if ((double)f != d && f == f) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}
template <class W>
__device__ __forceinline__ float narrow_to_float(W w) {
  if constexpr (same<W, double>)
    return to_float_round_odd(w);
  else
    return (float)w;
}

template <class D, class W>
__device__ __forceinline__ D from_wide(W w) {
  if constexpr (same<D, bool>) {
    return w != W(0);
  } else if constexpr (same<D, half_t>) {
    half_t h;
    h.bits = float_to_half_bits(narrow_to_float(w));
    return h;
  } else if constexpr (same<D, bf16_t>) {
    bf16_t h;
    h.bits = float_to_bf16_bits(narrow_to_float(w));
    return h;
  } else if constexpr (is_int<D> && is_fp<W>) {
    if constexpr (same<D, i64>) {
      return (w >= W(-9223372036854775808.0) && w < W(9223372036854775808.0)) ? (i64)w
                                                                              : (i64)(-9223372036854775807LL - 1);
    } else {
      return (D)((w >= W(-2147483648.0) && w < W(2147483648.0)) ? (i32)w : (i32)(-2147483647 - 1));
    }
  } else {
    return (D)w;
  }
}
/// v converted to D with kiln's cast rules (16-bit floats through float).
template <class D, class S>
__device__ __forceinline__ D cast(S v) {
  return from_wide<D>(widen(v));
}

// ------------------------------------------------------------ math
// One line per group of math functions (the macros emit whole definitions):
// clang-format off
#define KD_MATH1(name, ff, df) \
  __device__ __forceinline__ float name(float x) { return ff(x); } \
  __device__ __forceinline__ double name(double x) { return df(x); }
#define KD_MATH2(name, ff, df) \
  __device__ __forceinline__ float name(float x, float y) { return ff(x, y); } \
  __device__ __forceinline__ double name(double x, double y) { return df(x, y); }
KD_MATH1(m_fabs, fabsf, fabs) KD_MATH1(m_floor, floorf, floor) KD_MATH1(m_ceil, ceilf, ceil)
KD_MATH1(m_trunc, truncf, trunc) KD_MATH1(m_rint, rintf, rint) KD_MATH1(m_exp, expf, exp)
KD_MATH1(m_exp2, exp2f, exp2) KD_MATH1(m_log, logf, log) KD_MATH1(m_log2, log2f, log2)
KD_MATH1(m_log10, log10f, log10) KD_MATH1(m_log1p, log1pf, log1p) KD_MATH1(m_expm1, expm1f, expm1)
KD_MATH1(m_sqrt, sqrtf, sqrt) KD_MATH1(m_sin, sinf, sin) KD_MATH1(m_cos, cosf, cos) KD_MATH1(m_tan, tanf, tan)
KD_MATH1(m_asin, asinf, asin) KD_MATH1(m_acos, acosf, acos) KD_MATH1(m_atan, atanf, atan)
KD_MATH1(m_erf, erff, erf) KD_MATH1(m_erfc, erfcf, erfc) KD_MATH1(m_sinh, sinhf, sinh) KD_MATH1(m_cosh, coshf, cosh) KD_MATH1(m_tanh, tanhf, tanh)
KD_MATH2(m_fmod, fmodf, fmod) KD_MATH2(m_pow, powf, pow) KD_MATH2(m_atan2, atan2f, atan2)
KD_MATH2(m_copysign, copysignf, copysign);  // the ; ends the list for clang-format
#undef KD_MATH1
#undef KD_MATH2
// clang-format on
template <class T>
__device__ __forceinline__ T infinity() {
  if constexpr (same<T, float>)
    return __int_as_float(0x7f800000);
  else
    return __longlong_as_double(0x7ff0000000000000LL);
}
template <class T>
__device__ __forceinline__ T max_finite() {
  if constexpr (same<T, float>)
    return __int_as_float(0x7f7fffff);
  else
    return __longlong_as_double(0x7fefffffffffffffLL);
}

// ------------------------------------------------------------ integer and float helpers (src/cpu/kernels.hpp ops::)
template <class T>
__device__ __forceinline__ T wrap_neg(T a) {
  if constexpr (is_int<T>)
    return (T)((wrap<T>)0 - (wrap<T>)a);
  else
    return -a;
}
template <class T>
__device__ __forceinline__ T int_floor_divide(T a, T b) {
  if (b == 0) return 0;
  if constexpr (is_signed_int<T>) {
    if (b == -1) return wrap_neg(a);
    T q = (T)(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return (T)(a / b);
  }
}
template <class T>
__device__ __forceinline__ T int_remainder(T a, T b) {
  if (b == 0) return 0;
  if constexpr (is_signed_int<T>) {
    if (b == -1) return 0;
    T r = (T)(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);
    return r;
  } else {
    return (T)(a % b);
  }
}
template <class T>
__device__ __forceinline__ T int_power(T base, T exp) {
  if constexpr (is_signed_int<T>) {
    if (exp < 0) return base == 1 ? T(1) : base == -1 ? ((exp & 1) ? T(-1) : T(1)) : T(0);
  }
  wrap<T> result = 1, b = (wrap<T>)base;
  typename unsigned_t<T>::type e = (typename unsigned_t<T>::type)exp;
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return (T)result;
}
template <class T>
__device__ __forceinline__ T float_remainder(T a, T b) {
  if (b == 0) return m_fmod(a, b);
  T mod = m_fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = m_copysign(T(0), b);
  }
  return mod;
}
template <class T>
__device__ __forceinline__ T float_floor_divide(T a, T b) {
  if (b == 0) return a / b;
  T mod = m_fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
  if (div != 0) {
    T floordiv = m_floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
  }
  return m_copysign(T(0), a / b);
}
template <class T>
__device__ __forceinline__ T maximum(T a, T b) {
  if constexpr (is_fp<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}
template <class T>
__device__ __forceinline__ T minimum(T a, T b) {
  if constexpr (is_fp<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}

// ------------------------------------------------------------ helpers of the op list's cuda column
// (src/cpu/kernels.hpp ops::)
namespace ops {
template <class T>
__device__ __forceinline__ T abs(T a) {
  if constexpr (is_fp<T>)
    return m_fabs(a);
  else if constexpr (is_signed_int<T>)
    return a < 0 ? wrap_neg(a) : a;
  else
    return a;
}
template <class T>
__device__ __forceinline__ T sign(T a) {
  if constexpr (is_fp<T>)
    return a > 0 ? T(1) : a < 0 ? T(-1) : a == 0 ? T(0) : a;
  else
    return (T)((T(0) < a) - (a < T(0)));
}
template <class T>
__device__ __forceinline__ T square(T a) {
  if constexpr (is_int<T>)
    return (T)((wrap<T>)a * (wrap<T>)a);
  else
    return (T)(a * a);
}
template <class T>
__device__ __forceinline__ T floor(T a) {
  if constexpr (is_fp<T>)
    return m_floor(a);
  else
    return a;
}
template <class T>
__device__ __forceinline__ T ceil(T a) {
  if constexpr (is_fp<T>)
    return m_ceil(a);
  else
    return a;
}
template <class T>
__device__ __forceinline__ T trunc(T a) {
  if constexpr (is_fp<T>)
    return m_trunc(a);
  else
    return a;
}
template <class T>
__device__ __forceinline__ T round(T a) {
  if constexpr (is_fp<T>)
    return m_rint(a);
  else
    return a;
}
template <class T>
__device__ __forceinline__ bool isnan(T a) {
  if constexpr (is_fp<T>)
    return a != a;
  else
    return false;
}
template <class T>
__device__ __forceinline__ bool isinf(T a) {
  if constexpr (is_fp<T>)
    return m_fabs(a) == infinity<T>();
  else
    return false;
}
template <class T>
__device__ __forceinline__ bool isfinite(T a) {
  if constexpr (is_fp<T>)
    return m_fabs(a) <= max_finite<T>();
  else
    return true;
}
template <class T>
__device__ __forceinline__ bool signbit(T a) {
  if constexpr (is_fp<T>)
    return ::signbit(a);
  else if constexpr (is_signed_int<T>)
    return a < T(0);
  else
    return false;
}
template <class T>
__device__ __forceinline__ T bitwise_not(T a) {
  if constexpr (is_bool<T>)
    return !a;
  else
    return (T)(~a);
}
template <class T>
__device__ __forceinline__ T add(T a, T b) {
  if constexpr (is_bool<T>)
    return a || b;
  else if constexpr (is_int<T>)
    return (T)((wrap<T>)a + (wrap<T>)b);
  else
    return a + b;
}
template <class T>
__device__ __forceinline__ T subtract(T a, T b) {
  if constexpr (is_int<T>)
    return (T)((wrap<T>)a - (wrap<T>)b);
  else
    return (T)(a - b);
}
template <class T>
__device__ __forceinline__ T multiply(T a, T b) {
  if constexpr (is_bool<T>)
    return a && b;
  else if constexpr (is_int<T>)
    return (T)((wrap<T>)a * (wrap<T>)b);
  else
    return a * b;
}
template <class T>
__device__ __forceinline__ T floor_divide(T a, T b) {
  if constexpr (is_fp<T>)
    return float_floor_divide(a, b);
  else
    return int_floor_divide(a, b);
}
template <class T>
__device__ __forceinline__ T remainder(T a, T b) {
  if constexpr (is_fp<T>)
    return float_remainder(a, b);
  else
    return int_remainder(a, b);
}
template <class T>
__device__ __forceinline__ T power(T a, T b) {
  if constexpr (is_fp<T>)
    return m_pow(a, b);
  else
    return int_power(a, b);
}
template <class T>
__device__ __forceinline__ T sigmoid(T a) {
  if (a >= 0) return T(1) / (T(1) + m_exp(-a));
  T e = m_exp(a);
  return e / (T(1) + e);
}
template <class T>
__device__ __forceinline__ T softplus(T a) {
  return m_log1p(m_exp(-m_fabs(a))) + (a > T(0) ? a : T(0));
}
template <class T>
__device__ __forceinline__ T silu(T a) {
  const double x = a;
  return (T)(x / (1.0 + m_exp(-x)));
}
template <class T>
__device__ __forceinline__ T gelu(T a) {
  const double x = a, z = x * -0.7071067811865476;
  double dz = fma(x, -0.7071067811865476, -z) + x * 4.8336466567264565e-17;
  if (dz != dz) dz = 0;
  return (T)(0.5 * x * (m_erfc(z) - 1.1283791670955126 * m_exp(-z * z) * dz));
}
template <class T>
__device__ __forceinline__ T gelu_tanh(T a) {
  const double x = a;
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return (T)(x / (1.0 + m_exp(-2.0 * u)));
}
/// gelu_tanh of a float16/bfloat16 value x (widened to float), rounded to T (half_t or bf16_t) exactly as
/// cast<T>(gelu_tanh<float>(x)) rounds it, mostly in float arithmetic. For 1e-30 <= |x| <= 3 the float formula's
/// relative error stays below 53 * 2^-24 (about 7 roundings in u, amplified by |2u| <= 6.7 in exp; exp's 2 ulps;
/// the sum's and the quotient's roundings), so when r (1 - 2^-17) and r (1 + 2^-17) round to the same T, the double
/// formula's value, which lies between them, rounds to it too (rounding is monotonic). Elsewhere (the interval
/// holds a rounding boundary of T, |x| > 3, NaN, tiny values whose float result would be subnormal) the double
/// formula decides. tests/cuda/test_gpu_elementwise.cpp checks every float16 and bfloat16 value against the CPU.
template <class T>
__device__ __noinline__ T gelu_tanh_narrow_double(float x) {
  return cast<T>(gelu_tanh<float>(x));
}
template <class T>
__device__ __forceinline__ T gelu_tanh_narrow(float x) {
  const float ax = fabsf(x);
  if (ax <= 3.0f && (ax >= 1e-30f || ax == 0.0f)) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float r = x / (1.0f + expf(-2.0f * u));
    const float slack = fabsf(r) * 7.62939453125e-06f;  // 2^-17
    const T lo = cast<T>(r - slack), hi = cast<T>(r + slack);
    if (lo.bits == hi.bits) return lo;
  }
  return gelu_tanh_narrow_double<T>(x);  // out of line: the rare double path stays out of the unrolled loop
}
template <class T>
__device__ __forceinline__ T logaddexp(T a, T b) {
  if (a == b) return a + T(0.693147180559945309417232121458176568);
  const T d = a - b;
  if (d > 0) return a + m_log1p(m_exp(-d));
  if (d <= 0) return b + m_log1p(m_exp(d));
  return d;
}
}  // namespace ops
}  // namespace kd
