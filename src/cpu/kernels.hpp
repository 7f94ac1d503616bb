// Scalar definitions of every elementwise op for the CPU (internal): one
// function template, `apply<OP, T>`, evaluated in the compute type T (float for
// float16/bfloat16). The loops in elementwise.cpp call it on whole rows so the
// compiler can vectorise the simple ones.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/op_table.hpp"

namespace kiln::cpu_impl {

using detail::OpCode;

constexpr int arity_of(OpCode op) {
  return op < OpCode::Add ? 1 : op < OpCode::Where ? 2 : op < OpCode::Fill ? 3 : 0;
}

constexpr bool is_predicate_or_compare(OpCode op) {
  return op == OpCode::IsNan || op == OpCode::IsInf || op == OpCode::IsFinite || op == OpCode::Equal ||
         op == OpCode::NotEqual || op == OpCode::Less || op == OpCode::LessEqual || op == OpCode::Greater ||
         op == OpCode::GreaterEqual;
}

/// Result C++ type of OP computed in T.
template <OpCode OP, class T>
using result_t = std::conditional_t<is_predicate_or_compare(OP), bool, T>;

/// Whether OP has a CPU kernel for compute type T (the front-end never asks for the others).
template <OpCode OP, class T> constexpr bool has_kernel() {
  constexpr bool fp = std::is_floating_point_v<T>;
  constexpr bool is_bool = std::is_same_v<T, bool>;
  switch (OP) {
    case OpCode::Exp: case OpCode::Exp2: case OpCode::Log: case OpCode::Log2: case OpCode::Log10:
    case OpCode::Log1p: case OpCode::Expm1: case OpCode::Sqrt: case OpCode::Sin: case OpCode::Cos:
    case OpCode::Tan: case OpCode::Arcsin: case OpCode::Arccos: case OpCode::Arctan: case OpCode::Sinh:
    case OpCode::Cosh: case OpCode::Tanh: case OpCode::Sigmoid: case OpCode::Arctan2:
      return fp;
    case OpCode::BitwiseNot: case OpCode::BitwiseAnd: case OpCode::BitwiseOr: case OpCode::BitwiseXor:
      return !fp;
    case OpCode::LogicalNot: case OpCode::LogicalAnd: case OpCode::LogicalOr: case OpCode::LogicalXor:
      return is_bool;
    case OpCode::Negative: case OpCode::Sign: case OpCode::Square: case OpCode::Subtract:
    case OpCode::FloorDivide: case OpCode::Remainder: case OpCode::Power:
      return !is_bool;
    case OpCode::Fill: case OpCode::Arange: case OpCode::Linspace: case OpCode::Count:
      return false;
    default:
      return true;
  }
}

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

}  // namespace ops

template <OpCode OP, class T>
inline result_t<OP, T> apply(T a, [[maybe_unused]] T b = T(), [[maybe_unused]] T c = T()) {
  constexpr bool fp = std::is_floating_point_v<T>;
  if constexpr (OP == OpCode::Identity) return a;
  else if constexpr (OP == OpCode::Negative) return ops::wrap_neg(a);
  else if constexpr (OP == OpCode::Abs) {
    if constexpr (fp) return std::fabs(a);
    else if constexpr (std::is_signed_v<T>) return a < 0 ? ops::wrap_neg(a) : a;
    else return a;
  } else if constexpr (OP == OpCode::Sign) {
    if constexpr (fp) return a > 0 ? T(1) : a < 0 ? T(-1) : a == 0 ? T(0) : a;
    else return static_cast<T>((T(0) < a) - (a < T(0)));
  } else if constexpr (OP == OpCode::Square) return static_cast<T>(a * a);
  else if constexpr (OP == OpCode::Relu) return a < T(0) ? T(0) : a;
  else if constexpr (OP == OpCode::Floor) { if constexpr (fp) return std::floor(a); else return a; }
  else if constexpr (OP == OpCode::Ceil) { if constexpr (fp) return std::ceil(a); else return a; }
  else if constexpr (OP == OpCode::Trunc) { if constexpr (fp) return std::trunc(a); else return a; }
  else if constexpr (OP == OpCode::Round) { if constexpr (fp) return std::nearbyint(a); else return a; }
  else if constexpr (OP == OpCode::Exp) return std::exp(a);
  else if constexpr (OP == OpCode::Exp2) return std::exp2(a);
  else if constexpr (OP == OpCode::Log) return std::log(a);
  else if constexpr (OP == OpCode::Log2) return std::log2(a);
  else if constexpr (OP == OpCode::Log10) return std::log10(a);
  else if constexpr (OP == OpCode::Log1p) return std::log1p(a);
  else if constexpr (OP == OpCode::Expm1) return std::expm1(a);
  else if constexpr (OP == OpCode::Sqrt) return std::sqrt(a);
  else if constexpr (OP == OpCode::Sin) return std::sin(a);
  else if constexpr (OP == OpCode::Cos) return std::cos(a);
  else if constexpr (OP == OpCode::Tan) return std::tan(a);
  else if constexpr (OP == OpCode::Arcsin) return std::asin(a);
  else if constexpr (OP == OpCode::Arccos) return std::acos(a);
  else if constexpr (OP == OpCode::Arctan) return std::atan(a);
  else if constexpr (OP == OpCode::Sinh) return std::sinh(a);
  else if constexpr (OP == OpCode::Cosh) return std::cosh(a);
  else if constexpr (OP == OpCode::Tanh) return std::tanh(a);
  else if constexpr (OP == OpCode::Sigmoid) {
    if (a >= 0) return T(1) / (T(1) + std::exp(-a));
    T e = std::exp(a);
    return e / (T(1) + e);
  } else if constexpr (OP == OpCode::LogicalNot) return !a;
  else if constexpr (OP == OpCode::IsNan) { if constexpr (fp) return std::isnan(a); else return false; }
  else if constexpr (OP == OpCode::IsInf) { if constexpr (fp) return std::isinf(a); else return false; }
  else if constexpr (OP == OpCode::IsFinite) { if constexpr (fp) return std::isfinite(a); else return true; }
  else if constexpr (OP == OpCode::BitwiseNot) {
    if constexpr (std::is_same_v<T, bool>) return !a;
    else return static_cast<T>(~a);
  } else if constexpr (OP == OpCode::Add) {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else return static_cast<T>(a + b);
  } else if constexpr (OP == OpCode::Subtract) return static_cast<T>(a - b);
  else if constexpr (OP == OpCode::Multiply) {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else return static_cast<T>(a * b);
  } else if constexpr (OP == OpCode::Divide) return a / b;  // floats only (the front-end casts ints)
  else if constexpr (OP == OpCode::FloorDivide) {
    if constexpr (fp) return ops::float_floor_divide(a, b);
    else return ops::int_floor_divide(a, b);
  } else if constexpr (OP == OpCode::Remainder) {
    if constexpr (fp) return ops::float_remainder(a, b);
    else return ops::int_remainder(a, b);
  } else if constexpr (OP == OpCode::Power) {
    if constexpr (fp) return std::pow(a, b);
    else return ops::int_power(a, b);
  } else if constexpr (OP == OpCode::Maximum) return ops::maximum(a, b);
  else if constexpr (OP == OpCode::Minimum) return ops::minimum(a, b);
  else if constexpr (OP == OpCode::Arctan2) return std::atan2(a, b);
  else if constexpr (OP == OpCode::Equal) return a == b;
  else if constexpr (OP == OpCode::NotEqual) return a != b;
  else if constexpr (OP == OpCode::Less) return a < b;
  else if constexpr (OP == OpCode::LessEqual) return a <= b;
  else if constexpr (OP == OpCode::Greater) return a > b;
  else if constexpr (OP == OpCode::GreaterEqual) return a >= b;
  else if constexpr (OP == OpCode::LogicalAnd) return a && b;
  else if constexpr (OP == OpCode::LogicalOr) return a || b;
  else if constexpr (OP == OpCode::LogicalXor) return a != b;
  else if constexpr (OP == OpCode::BitwiseAnd) return static_cast<T>(a & b);
  else if constexpr (OP == OpCode::BitwiseOr) return static_cast<T>(a | b);
  else if constexpr (OP == OpCode::BitwiseXor) return static_cast<T>(a ^ b);
  else if constexpr (OP == OpCode::Clip) return ops::minimum(ops::maximum(a, b), c);
  else static_assert(OP == OpCode::Where, "op without a CPU definition");
  return a;
}

}  // namespace kiln::cpu_impl
