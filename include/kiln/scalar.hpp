// Scalar: a C++ number passed to an op. Scalars are "weak" (NEP 50): they take
// the dtype of the array they meet unless their kind is higher (a float scalar
// with an integer array gives float64; an int scalar with a bool array int64; a complex scalar with a float32
// array complex64).
#pragma once

#include <complex>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/dtype.hpp"

namespace kiln {

template <class T>
concept Arithmetic = std::is_arithmetic_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// A boolean, integer, floating-point or complex value with its kind.
class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float, Complex };
  Scalar() = default;
  template <Arithmetic T>
  Scalar(T v) {  // NOLINT: implicit, so `a + 1` and `add(a, 2.5)` work
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::Bool; i_ = v ? 1 : 0; d_ = i_;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::Int; i_ = static_cast<int64_t>(v); d_ = static_cast<double>(v);
    } else {
      kind_ = Kind::Float;
      if constexpr (std::is_floating_point_v<T>) d_ = static_cast<double>(v);
      else d_ = static_cast<double>(static_cast<float>(v));
    }
  }
  /// A complex value (Kind::Complex), also when its imaginary part is zero, as Python's complex.
  template <std::floating_point F>
  Scalar(std::complex<F> v)  // NOLINT: implicit, so `a * std::complex<double>(0, 1)` works
      : kind_(Kind::Complex), d_(static_cast<double>(v.real())), imag_(static_cast<double>(v.imag())) {}
  Kind kind() const { return kind_; }
  /// True for float and complex values (not integral: converting them to an integer truncates).
  bool is_floating() const { return kind_ == Kind::Float || kind_ == Kind::Complex; }
  bool is_complex() const { return kind_ == Kind::Complex; }
  /// The value (a complex value's real part) as a double.
  double to_double() const { return d_; }
  /// The imaginary part (0 for other kinds).
  double imag() const { return imag_; }
  int64_t to_int64() const { return is_floating() ? static_cast<int64_t>(d_) : i_; }
  bool to_bool() const { return is_floating() ? (d_ != 0.0 || imag_ != 0.0) : i_ != 0; }
  /// The value converted to C++ type T (Half/BFloat16 and complex64_t/complex128_t included), with C++
  /// conversion rules: a complex value converted to a real type keeps its real part, as NumPy's astype.
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return is_floating() ? static_cast<T>(d_) : static_cast<T>(i_);
    else if constexpr (std::is_same_v<T, double>) return is_floating() ? d_ : static_cast<double>(i_);
    else if constexpr (std::is_same_v<T, std::complex<double>>) return T(to<double>(), imag_);
    else if constexpr (std::is_same_v<T, std::complex<float>>)
      return T(static_cast<float>(to<double>()), static_cast<float>(imag_));
    else return T(static_cast<float>(is_floating() ? d_ : static_cast<double>(i_)));
  }
  /// The dtype this scalar would have as a NumPy array: bool, int64, float64 or complex128.
  DType default_dtype() const { return default_dtype(kind_); }
  /// The dtype NumPy gives a Python scalar of `kind`: bool, int64, float64 or complex128.
  static DType default_dtype(Kind kind) {
    switch (kind) {
      case Kind::Bool: return DType::Bool;
      case Kind::Int: return DType::Int64;
      case Kind::Float: return DType::Float64;
      case Kind::Complex: return DType::Complex128;
    }
    return DType::Float64;
  }
  std::string str() const;

 private:
  Kind kind_ = Kind::Int;
  int64_t i_ = 0;
  double d_ = 0.0;
  double imag_ = 0.0;
};

/// Result dtype of an operation between an array of dtype `a` and a weak scalar of `kind` (NEP 50):
/// only its kind matters, never its value.
DType promote_with_scalar(DType a, Scalar::Kind kind);
/// Result dtype of an operation between an array of dtype `a` and the weak scalar `s` (NEP 50).
inline DType promote_with_scalar(DType a, const Scalar& s) { return promote_with_scalar(a, s.kind()); }

}  // namespace kiln
