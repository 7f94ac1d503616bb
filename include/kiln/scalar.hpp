// Scalar: a C++ number passed to an op. Scalars are "weak" (NEP 50): they take
// the dtype of the array they meet unless their kind is higher (a float scalar
// with an integer array gives float64; an int scalar with a bool array int64).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/dtype.hpp"

namespace kiln {

template <class T>
concept Arithmetic = std::is_arithmetic_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// A boolean, integer or floating-point value with its kind.
class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
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
  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return d_; }
  int64_t to_int64() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0; }
  /// The value converted to C++ type T (Half/BFloat16 included), with C++ conversion rules.
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return kind_ == Kind::Float ? static_cast<T>(d_) : static_cast<T>(i_);
    else if constexpr (std::is_same_v<T, double>) return kind_ == Kind::Float ? d_ : static_cast<double>(i_);
    else return T(static_cast<float>(kind_ == Kind::Float ? d_ : static_cast<double>(i_)));
  }
  /// The dtype this scalar would have as a NumPy array: bool, int64 or float64.
  DType default_dtype() const { return default_dtype(kind_); }
  /// The dtype NumPy gives a Python scalar of `kind`: bool, int64 or float64.
  static DType default_dtype(Kind kind) {
    return kind == Kind::Bool ? DType::Bool : kind == Kind::Int ? DType::Int64 : DType::Float64;
  }
  std::string str() const;

 private:
  Kind kind_ = Kind::Int;
  int64_t i_ = 0;
  double d_ = 0.0;
};

/// Result dtype of an operation between an array of dtype `a` and a weak scalar of `kind` (NEP 50):
/// only its kind matters, never its value.
DType promote_with_scalar(DType a, Scalar::Kind kind);
/// Result dtype of an operation between an array of dtype `a` and the weak scalar `s` (NEP 50).
inline DType promote_with_scalar(DType a, const Scalar& s) { return promote_with_scalar(a, s.kind()); }

}  // namespace kiln
