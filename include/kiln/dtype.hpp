// Element types: the DType enum, the 16-bit float and complex storage types, and NumPy 2
// type promotion. dtype is data, not a template parameter.
#pragma once

#include <complex>
#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kiln {

/// Element type of an Array. The order is fixed (it indexes tables).
enum class DType : uint8_t {
  Bool, Int8, Int16, Int32, Int64, UInt8, Float16, BFloat16, Float32, Float64, Complex64, Complex128,
};
inline constexpr int kNumDTypes = 12;

inline constexpr DType bool_ = DType::Bool;
inline constexpr DType int8 = DType::Int8;
inline constexpr DType int16 = DType::Int16;
inline constexpr DType int32 = DType::Int32;
inline constexpr DType int64 = DType::Int64;
inline constexpr DType uint8 = DType::UInt8;
inline constexpr DType float16 = DType::Float16;
inline constexpr DType bfloat16 = DType::BFloat16;
inline constexpr DType float32 = DType::Float32;
inline constexpr DType float64 = DType::Float64;
inline constexpr DType complex64 = DType::Complex64;
inline constexpr DType complex128 = DType::Complex128;

/// Storage types of the complex dtypes: interleaved (real, imaginary), as NumPy, C and CUDA lay them out.
using complex64_t = std::complex<float>;
using complex128_t = std::complex<double>;

/// Size of one element in bytes.
constexpr int64_t itemsize(DType t) {
  constexpr int64_t sizes[] = {1, 1, 2, 4, 8, 1, 2, 2, 4, 8, 8, 16};
  return sizes[static_cast<int>(t)];
}
/// Canonical NumPy name ("float32", "bool", ...).
std::string_view dtype_name(DType t);
/// Writes dtype_name(t): "float32".
std::ostream& operator<<(std::ostream& os, DType t);
/// Parses "float32", "f4", "<f4", "int32", "i4", "bool", "?", "half", "bf16", "c8", "complex64"...; throws
/// DTypeError. Python type names mean what they mean in NumPy: "float" and "double" are float64, "int" and
/// "long" int64, "complex" complex128; PyTorch's "cfloat" is complex64 and "cdouble" complex128.
DType parse_dtype(std::string_view name);
/// The dtype parse_dtype reads from `name`, or nullopt for a name it does not know (never throws).
std::optional<DType> find_dtype(std::string_view name);

constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
constexpr bool is_integral(DType t) {  // bool excluded
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64 || t == DType::UInt8;
}
constexpr bool is_signed_integral(DType t) { return is_integral(t) && t != DType::UInt8; }
constexpr bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }
/// Floating or complex (NumPy's np.inexact).
constexpr bool is_inexact(DType t) { return is_floating(t) || is_complex(t); }
/// The dtype of a complex dtype's real and imaginary parts (complex64 -> float32); other dtypes map to themselves.
constexpr DType real_dtype(DType t) {
  return t == DType::Complex64 ? DType::Float32 : t == DType::Complex128 ? DType::Float64 : t;
}

/// NumPy 2 promotion of two array dtypes (np.promote_types). bfloat16 behaves like
/// ml_dtypes: bfloat16+float16 -> float32, bfloat16+int8/uint8/bool -> bfloat16.
DType promote_types(DType a, DType b);
/// Smallest float type that holds `t` exactly, as NumPy picks for exp/sin/sqrt...
/// (bool/int8/uint8 -> float16, int16 -> float32, int32/int64 -> float64; complex dtypes keep theirs).
DType float_result_type(DType t);
/// Smallest complex type that holds `t` exactly: float64, int32 and int64 -> complex128, other real dtypes
/// -> complex64 (np.promote_types(t, complex64)); complex dtypes keep theirs.
DType complex_result_type(DType t);
/// True when a value of `from` converts to `to` without leaving its kind order
/// (bool < integer < floating < complex), i.e. NumPy's "same_kind" casting.
bool can_cast_same_kind(DType from, DType to);

/// IEEE 754 binary16 storage type; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT: implicit like a builtin float type; rounds to nearest even
  operator float() const;  // NOLINT
  static Half from_bits(uint16_t b) { Half h; h.bits = b; return h; }
};
/// bfloat16 storage type (upper half of a float32); arithmetic happens in float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f);  // NOLINT: rounds to nearest even, NaN stays NaN
  operator float() const {  // NOLINT
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
};

float half_to_float(uint16_t bits);
uint16_t float_to_half(float f);
/// double -> float rounded to odd: a float that keeps the sticky bit, so a later rounding to
/// float16/bfloat16 equals a single correct rounding of the double (no double-rounding error).
float double_to_float_round_odd(double d);
/// double -> float16/bfloat16 with one correct rounding (to nearest even).
inline uint16_t double_to_half(double d) { return float_to_half(double_to_float_round_odd(d)); }
inline BFloat16::BFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
}
inline Half::Half(float f) : bits(float_to_half(f)) {}
inline Half::operator float() const { return half_to_float(bits); }

/// Maps a C++ element type to its DType: dtype_of<float>() == float32.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<int8_t>() { return DType::Int8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::Int16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<complex64_t>() { return DType::Complex64; }
template <> constexpr DType dtype_of<complex128_t>() { return DType::Complex128; }

namespace detail {
/// Throws DTypeError: `t` (complex) reached code written for real dtypes only.
[[noreturn]] void throw_no_complex(DType t);
}  // namespace detail

/// Calls f(T{}) with the C++ type of `t` (Half/BFloat16 for the 16-bit floats). Real dtypes only: a complex
/// `t` throws DTypeError (code that handles complex calls visit_any_dtype).
template <class F> decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Complex64:
    case DType::Complex128: detail::throw_no_complex(t);
    case DType::Bool: return f(bool{});
    case DType::Int8: return f(int8_t{});
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Float32: return f(float{});
    case DType::Float64: break;
  }
  return f(double{});
}

/// visit_dtype over every dtype, complex64_t/complex128_t included.
template <class F> decltype(auto) visit_any_dtype(DType t, F&& f) {
  if (t == DType::Complex64) return f(complex64_t{});
  if (t == DType::Complex128) return f(complex128_t{});
  return visit_dtype(t, std::forward<F>(f));
}

}  // namespace kiln
