// Scalar printing and NEP 50 weak-scalar promotion.
#include "kiln/scalar.hpp"

#include <sstream>

namespace kiln {

std::string Scalar::str() const {
  if (kind_ == Kind::Bool) return i_ ? "True" : "False";
  if (kind_ == Kind::Int) return std::to_string(i_);
  std::ostringstream os;
  os.precision(17);
  os << d_;
  return os.str();
}

DType promote_with_scalar(DType a, Scalar::Kind kind) {
  switch (kind) {
    case Scalar::Kind::Bool: return a;
    case Scalar::Kind::Int: return a == DType::Bool ? DType::Int64 : a;
    case Scalar::Kind::Float: return is_floating(a) ? a : DType::Float64;
  }
  return a;
}

}  // namespace kiln
