// DType names, parsing, NumPy 2 promotion (complex included) and IEEE half conversion.
#include "kiln/dtype.hpp"

#include <cmath>
#include <ostream>
#include <string>

#include "kiln/error.hpp"

namespace kiln {

std::string_view dtype_name(DType t) {
  constexpr std::string_view names[] = {"bool",    "int8",     "int16",   "int32",   "int64",
                                        "uint8",   "float16",  "bfloat16", "float32", "float64",
                                        "complex64", "complex128"};
  return names[static_cast<int>(t)];
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::optional<DType> find_dtype(std::string_view name) {
  std::string n(name);
  if (!n.empty() && (n[0] == '<' || n[0] == '=' || n[0] == '|')) n.erase(0, 1);
  struct Alias { const char* text; DType type; };
  static constexpr Alias aliases[] = {
      {"bool", DType::Bool},       {"?", DType::Bool},        {"b1", DType::Bool},
      {"int8", DType::Int8},       {"i1", DType::Int8},       {"int16", DType::Int16},
      {"i2", DType::Int16},        {"short", DType::Int16},   {"int32", DType::Int32},
      {"i4", DType::Int32},        {"int", DType::Int64},     {"int64", DType::Int64},
      {"i8", DType::Int64},        {"long", DType::Int64},    {"uint8", DType::UInt8},
      {"u1", DType::UInt8},        {"float16", DType::Float16}, {"f2", DType::Float16},
      {"half", DType::Float16},    {"bfloat16", DType::BFloat16}, {"bf16", DType::BFloat16},
      {"float32", DType::Float32}, {"f4", DType::Float32},    {"float", DType::Float64},
      {"float64", DType::Float64}, {"f8", DType::Float64},    {"double", DType::Float64},
      {"complex64", DType::Complex64}, {"c8", DType::Complex64}, {"cfloat", DType::Complex64},
      {"complex128", DType::Complex128}, {"c16", DType::Complex128}, {"complex", DType::Complex128},
      {"cdouble", DType::Complex128},
  };
  for (const auto& a : aliases)
    if (n == a.text) return a.type;
  return std::nullopt;
}

DType parse_dtype(std::string_view name) {
  if (std::optional<DType> t = find_dtype(name)) return *t;
  throw DTypeError("parse_dtype: unknown dtype '" + std::string(name) +
                   "'; use one of bool, int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64, "
                   "complex64, complex128");
}

namespace {
// Promotion lattice of NumPy 2 (np.promote_types) over kiln's dtypes, with
// bfloat16 placed as ml_dtypes does (bfloat16 + complex64 -> complex64, as float16).
// Index order: b i1 i2 i4 i8 u1 f2 bf f4 f8 c8 c16.
constexpr DType B = DType::Bool, I1 = DType::Int8, I2 = DType::Int16, I4 = DType::Int32, I8 = DType::Int64,
                U1 = DType::UInt8, F2 = DType::Float16, BF = DType::BFloat16, F4 = DType::Float32,
                F8 = DType::Float64, C8 = DType::Complex64, C16 = DType::Complex128;
constexpr DType kPromote[kNumDTypes][kNumDTypes] = {
    /* b   */ {B, I1, I2, I4, I8, U1, F2, BF, F4, F8, C8, C16},
    /* i1  */ {I1, I1, I2, I4, I8, I2, F2, BF, F4, F8, C8, C16},
    /* i2  */ {I2, I2, I2, I4, I8, I2, F4, F4, F4, F8, C8, C16},
    /* i4  */ {I4, I4, I4, I4, I8, I4, F8, F8, F8, F8, C16, C16},
    /* i8  */ {I8, I8, I8, I8, I8, I8, F8, F8, F8, F8, C16, C16},
    /* u1  */ {U1, I2, I2, I4, I8, U1, F2, BF, F4, F8, C8, C16},
    /* f2  */ {F2, F2, F4, F8, F8, F2, F2, F4, F4, F8, C8, C16},
    /* bf  */ {BF, BF, F4, F8, F8, BF, F4, BF, F4, F8, C8, C16},
    /* f4  */ {F4, F4, F4, F8, F8, F4, F4, F4, F4, F8, C8, C16},
    /* f8  */ {F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, C16, C16},
    /* c8  */ {C8, C8, C8, C16, C16, C8, C8, C8, C8, C16, C8, C16},
    /* c16 */ {C16, C16, C16, C16, C16, C16, C16, C16, C16, C16, C16, C16},
};
int kind_rank(DType t) { return t == DType::Bool ? 0 : is_integral(t) ? 1 : is_floating(t) ? 2 : 3; }
}  // namespace

DType promote_types(DType a, DType b) { return kPromote[static_cast<int>(a)][static_cast<int>(b)]; }

DType float_result_type(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::Int8:
    case DType::UInt8: return DType::Float16;
    case DType::Int16: return DType::Float32;
    case DType::Int32:
    case DType::Int64: return DType::Float64;
    default: return t;
  }
}

DType complex_result_type(DType t) { return promote_types(t, DType::Complex64); }

bool can_cast_same_kind(DType from, DType to) { return kind_rank(from) <= kind_rank(to); }

namespace detail {
void throw_no_complex(DType t) {
  throw DTypeError("dtype " + std::string(dtype_name(t)) +
                   " is not supported by this operation; docs/numpy-users.md (Complex numbers) lists the ops that "
                   "take complex arrays (convert with real(a), imag(a) or abs(a) for the others)");
}
}  // namespace detail

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112u) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));  // NaN
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf (or is inf)
  if (absx < 0x38800000u) {  // result is subnormal or zero: round(|f| * 2^24) to nearest even
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);  // 14..24
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  r -= 0x38000000u;  // rebias exponent 127 -> 15
  return static_cast<uint16_t>(sign | (r >> 13));
}

float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || f != f || std::isinf(f)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate toward zero
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;  // sticky bit: the value was inexact
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace kiln
