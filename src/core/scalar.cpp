// Scalar printing and NEP 50 weak-scalar promotion.
#include "kiln/scalar.hpp"

#include <sstream>

namespace kiln {

std::string Scalar::str() const {
  if (kind_ == Kind::Bool) return i_ ? "True" : "False";
  if (kind_ == Kind::Int) return std::to_string(i_);
  std::ostringstream os;
  os.precision(17);
  if (kind_ == Kind::Complex) {  // Python's repr: (1+2j)
    os << '(' << d_ << (imag_ >= 0 || imag_ != imag_ ? "+" : "") << imag_ << "j)";
    return os.str();
  }
  os << d_;
  return os.str();
}

DType promote_with_scalar(DType a, Scalar::Kind kind) {
  switch (kind) {
    case Scalar::Kind::Bool: return a;
    case Scalar::Kind::Int: return a == DType::Bool ? DType::Int64 : a;
    case Scalar::Kind::Float: return is_inexact(a) ? a : DType::Float64;
    // A complex scalar keeps a float array's precision (float32 + 1j -> complex64); integers take complex128.
    case Scalar::Kind::Complex: return complex_result_type(is_inexact(a) ? a : DType::Float64);
  }
  return a;
}

}  // namespace kiln
