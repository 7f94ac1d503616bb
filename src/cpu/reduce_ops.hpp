// CPU reductions (internal to src/cpu): how an element is loaded (float16/bfloat16 widened with selects so loops
// vectorise) and the reduction ops, the `cpu` column of kiln/reductions.def's kernel rows. reduce.cpp runs the
// arithmetic, comparison and truth ops; reduce_arg.cpp the index ones (argmax/argmin).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/dtype.hpp"

namespace kiln::cpu_impl::reduce_ops {

template <class T>
constexpr bool kFloatInput = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// float16 bits to float with selects instead of branches, so loops over it vectorise.
inline float half_bits_to_float(uint16_t h) {
  constexpr uint32_t kExpMask = 0x7c00u << 13;
  uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  uint32_t exponent = shifted & kExpMask;
  uint32_t normal = shifted + ((127u - 15u) << 23);
  uint32_t inf_nan = normal + ((128u - 16u) << 23);
  // Zero and subnormals: renormalise through a float subtraction.
  float subnormal = std::bit_cast<float>(normal + (1u << 23)) - std::bit_cast<float>(113u << 23);
  uint32_t bits = exponent == kExpMask ? inf_nan : exponent == 0 ? std::bit_cast<uint32_t>(subnormal) : normal;
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

/// The type max/min/argmax compare in: the element's own type (float for float16/bfloat16, uint8 for bool),
/// so the compiler vectorises over the narrowest lanes; conversions to it are exact.
template <class T>
using NativeValue = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                                       std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;
template <class T>
inline NativeValue<T> load_native(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_bits_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16);
  else
    return static_cast<NativeValue<T>>(v);
}
template <class T>
inline double to_double(T v) {
  return static_cast<double>(load_native(v));
}

/// An element as accumulator type A: the value for arithmetic ops (integers wrap into uint64 for sums).
template <class A, class T>
inline A load_value(T v) {
  if constexpr (kFloatInput<T>)
    return static_cast<A>(to_double(v));
  else
    return static_cast<A>(v);
}
/// An element as a truth value (NaN is true, as in NumPy).
template <class T>
inline uint8_t load_truth(T v) {
  return load_native(v) != NativeValue<T>(0);
}

// ---------------------------------------------------------------- the reduction ops

template <class T>
constexpr bool kComplexInput = std::is_same_v<T, complex64_t> || std::is_same_v<T, complex128_t>;

/// Sums and products: double for floats, complex128 for complex inputs, uint64 (wrapping, read back as int64)
/// for bool and integers.
struct ArithmeticOp {
  template <class T>
  using Acc = std::conditional_t<kComplexInput<T>, complex128_t, std::conditional_t<kFloatInput<T>, double, uint64_t>>;
  template <class T>
  static constexpr DType acc_dtype() {
    return kComplexInput<T> ? DType::Complex128 : kFloatInput<T> ? DType::Float64 : DType::Int64;
  }
  template <class A, class T>
  static A load(T v) {
    if constexpr (kComplexInput<T>) return A(v.real(), v.imag());
    else return load_value<A>(v);
  }
};
struct SumOp : ArithmeticOp {
  template <class A>
  static A identity() {
    return A(0);
  }
  template <class A>
  static A apply(A a, A x) {
    return a + x;
  }
};
struct ProdOp : ArithmeticOp {
  template <class A>
  static A identity() {
    return A(1);
  }
  template <class A>
  static A apply(A a, A x) {
    if constexpr (std::is_same_v<A, complex128_t>)  // the textbook product, as NumPy (no Annex G recovery)
      return A(a.real() * x.real() - a.imag() * x.imag(), a.real() * x.imag() + a.imag() * x.real());
    else
      return a * x;
  }
};
/// A sum or product into a floating out (mean, var): double for every input, so integer sums round like
/// NumPy's float64 accumulation instead of wrapping (the Arith accumulator of kiln/reductions.def).
template <class Op>
struct FloatArith : Op {
  template <class T>
  using Acc = double;
  template <class T>
  static constexpr DType acc_dtype() {
    return DType::Float64;
  }
  template <class A, class T>
  static A load(T v) {
    return to_double(v);
  }
};

/// linalg::norm: squares summed in double (any input dtype), the square root taken by `finalize`.
struct NormOp : FloatArith<SumOp> {
  template <class A, class T>
  static A load(T v) {
    const double x = to_double(v);
    return x * x;
  }
  template <class A>
  static void finalize(A* acc, int64_t n) {
    for (int64_t i = 0; i < n; ++i) acc[i] = std::sqrt(acc[i]);
  }
};

template <class T>
constexpr DType native_dtype() {
  if constexpr (std::is_same_v<NativeValue<T>, float>)
    return DType::Float32;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::Bool;
  else
    return dtype_of<T>();
}

/// max/min compare in the element's own type.
struct CompareOp {
  template <class T>
  using Acc = NativeValue<T>;
  template <class T>
  static constexpr DType acc_dtype() {
    return native_dtype<T>();
  }
  template <class A, class T>
  static A load(T v) {
    return load_native(v);
  }
};
struct MaxOp : CompareOp {
  template <class A>
  static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  }
  // NaN propagates: once `a` is NaN no comparison replaces it; a NaN `x` always does. Two plain selects
  // (not `||`, which GCC turns into branches) so loops vectorise to max + masked move.
  template <class A>
  static A apply(A a, A x) {
    if constexpr (std::is_floating_point_v<A>) {
      A larger = x > a ? x : a;
      return x != x ? x : larger;
    } else {
      return x > a ? x : a;
    }
  }
};
struct MinOp : CompareOp {
  template <class A>
  static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::max();
  }
  template <class A>
  static A apply(A a, A x) {
    if constexpr (std::is_floating_point_v<A>) {
      A smaller = x < a ? x : a;
      return x != x ? x : smaller;
    } else {
      return x < a ? x : a;
    }
  }
};
/// all/any: truth values as uint8 (read back as bool).
struct TruthOp {
  template <class T>
  using Acc = uint8_t;
  template <class T>
  static constexpr DType acc_dtype() {
    return DType::Bool;
  }
  template <class A, class T>
  static A load(T v) {
    return load_truth(v);
  }
};
struct AllOp : TruthOp {
  template <class A>
  static A identity() {
    return 1;
  }
  template <class A>
  static A apply(A a, A x) {
    return a & x;
  }
};
struct AnyOp : TruthOp {
  template <class A>
  static A identity() {
    return 0;
  }
  template <class A>
  static A apply(A a, A x) {
    return a | x;
  }
};

/// argmax/argmin's CPU ops (the `cpu` column of their rows): they take the index path (arg_reduce).
template <bool kMax>
struct ArgOpOf {
  static constexpr bool kIsMax = kMax;
};
using ArgMaxOp = ArgOpOf<true>;
using ArgMinOp = ArgOpOf<false>;

}  // namespace kiln::cpu_impl::reduce_ops
