// Element types: the DType enum, the 16-bit float storage types, and NumPy 2
// type promotion. dtype is data, not a template parameter.
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

/// Element type of an Array. The order is fixed (it indexes tables).
enum class DType : uint8_t {
  Bool, Int8, Int16, Int32, Int64, UInt8, Float16, BFloat16, Float32, Float64,
};
inline constexpr int kNumDTypes = 10;

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

/// Size of one element in bytes.
constexpr int64_t itemsize(DType t) {
  constexpr int64_t sizes[] = {1, 1, 2, 4, 8, 1, 2, 2, 4, 8};
  return sizes[static_cast<int>(t)];
}
/// Canonical NumPy name ("float32", "bool", ...).
std::string_view dtype_name(DType t);
/// Writes dtype_name(t): "float32".
std::ostream& operator<<(std::ostream& os, DType t);
/// Parses "float32", "f4", "<f4", "int32", "i4", "bool", "?", "half", "bf16"...; throws DTypeError.
/// Python type names mean what they mean in NumPy: "float" and "double" are float64, "int" and "long" int64.
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

/// NumPy 2 promotion of two array dtypes (np.promote_types). bfloat16 behaves like
/// ml_dtypes: bfloat16+float16 -> float32, bfloat16+int8/uint8/bool -> bfloat16.
DType promote_types(DType a, DType b);
/// Smallest float type that holds `t` exactly, as NumPy picks for exp/sin/sqrt...
/// (bool/int8/uint8 -> float16, int16 -> float32, int32/int64 -> float64).
DType float_result_type(DType t);
/// True when a value of `from` converts to `to` without leaving its kind order
/// (bool < integer < floating), i.e. NumPy's "same_kind" casting.
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

/// Calls f(T{}) with the C++ type of `t` (Half/BFloat16 for the 16-bit floats).
template <class F> decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
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

}  // namespace kiln
