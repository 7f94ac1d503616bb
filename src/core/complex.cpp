// The complex-number functions of kiln/complex.hpp, composed from views and public ops: real/imag are views
// of the interleaved (real, imaginary) storage, conj negates the imaginary view of a copy, angle is arctan2.
#include "kiln/complex.hpp"

#include <numbers>
#include <string>

#include "kiln/error.hpp"

namespace kiln {

namespace {

/// A view of part `part` (0: real, 1: imaginary) of complex `a`: the same storage read as the part dtype,
/// every stride doubled and the offset moved to the part.
Array part_view(const Array& a, int part) {
  Shape strides = a.strides();
  for (int64_t& s : strides) s *= 2;
  return Array(a.storage(), a.shape(), strides, a.offset() * 2 + part, real_dtype(a.dtype()));
}

void require(const Array& a, const char* op) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the array is undefined (default-constructed)");
}

}  // namespace

Array real(const Array& a) {
  require(a, "real");
  return is_complex(a.dtype()) ? part_view(a, 0) : a;
}

Array imag(const Array& a) {
  require(a, "imag");
  return is_complex(a.dtype()) ? part_view(a, 1) : zeros_like(a);
}

Array conj(const Array& a) {
  require(a, "conj");
  if (!is_complex(a.dtype())) return a.copy();
  Array out = a.copy();
  const Array im = part_view(out, 1);
  negative(im, im);  // same view in and out: an exact in-place update
  return out;
}

Array angle(const Array& a, bool deg) {
  require(a, "angle");
  Array result = is_complex(a.dtype()) ? arctan2(part_view(a, 1), part_view(a, 0)) : arctan2(0, a);
  return deg ? multiply(result, 180.0 / std::numbers::pi) : result;
}

Array make_complex(const Array& re, const Array& im) {
  require(re, "make_complex");
  require(im, "make_complex");
  const DType parts = promote_types(re.dtype(), im.dtype());
  if (is_complex(parts))
    throw DTypeError("make_complex: the parts must be real, got " + std::string(dtype_name(re.dtype())) + " and " +
                     std::string(dtype_name(im.dtype())) + "; pass real(z) and imag(z)");
  const DType part = is_floating(parts) && parts != DType::Float16 && parts != DType::BFloat16 ? parts
                     : is_floating(parts)                                                   ? DType::Float32
                                                                                            : DType::Float64;
  const DType type = part == DType::Float64 ? DType::Complex128 : DType::Complex64;
  const Shape shape = broadcast_shapes(re.shape(), im.shape(), "make_complex");
  Array out = zeros(shape, type, re.device());
  part_view(out, 0).assign(re);
  part_view(out, 1).assign(im);
  return out;
}

}  // namespace kiln
