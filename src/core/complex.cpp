// The complex-number functions of kiln/complex.hpp, composed from views and public ops: real/imag are views
// of the interleaved (real, imaginary) storage, conj negates the imaginary view of a copy, angle is arctan2.
// Gradients (z.grad = dL/dx + i dL/dy for z = x + iy): real(z) sends g back as g + 0i, imag(z) as 0 + gi,
// conj(z) as conj(g), make_complex(re, im) as (real(g), imag(g)); angle records through real, imag and arctan2.
#include "kiln/complex.hpp"

#include <numbers>
#include <string>

#include "core/autograd.hpp"
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

/// Records on `out` the node `name` of one input `a` whose backward is `backward(g)`.
template <class F>
void record_unary(Array& out, const Array& a, const char* name, F backward) {
  detail::record(out,
                 std::make_shared<detail::Node>(
                     name, [backward](const detail::Node&, const Array& g) { return std::vector<Array>{backward(g)}; }),
                 {&a});
}

}  // namespace

Array real(const Array& a) {
  require(a, "real");
  if (!is_complex(a.dtype())) return a;
  detail::GradRecorder record({&a});
  Array out = part_view(a, 0);
  // The engine turns the real gradient into a complex one (g + 0i) for the complex input.
  if (record) record_unary(out, a, "RealBackward", [](const Array& g) { return g; });
  return out;
}

Array imag(const Array& a) {
  require(a, "imag");
  if (!is_complex(a.dtype())) return zeros_like(a);
  detail::GradRecorder record({&a});
  Array out = part_view(a, 1);
  if (record) record_unary(out, a, "ImagBackward", [](const Array& g) { return make_complex(zeros_like(g), g); });
  return out;
}

Array conj(const Array& a) {
  require(a, "conj");
  if (!is_complex(a.dtype())) return a.copy();
  detail::GradRecorder record({&a});
  Array out = a.copy();
  const Array im = part_view(out, 1);
  negative(im, im);  // same view in and out: an exact in-place update
  if (record) record_unary(out, a, "ConjBackward", [](const Array& g) { return conj(g); });
  return out;
}

Array angle(const Array& a, bool deg) {
  require(a, "angle");
  Array result = is_complex(a.dtype()) ? arctan2(imag(a), real(a)) : arctan2(0, a);
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
  detail::GradRecorder record({&re, &im});
  Array out = zeros(shape, type, re.device());
  part_view(out, 0).assign(re);
  part_view(out, 1).assign(im);
  if (record) {
    auto backward = [](const detail::Node& node, const Array& g) {
      std::vector<Array> r(2);
      if (node.needs(0)) r[0] = part_view(g, 0);
      if (node.needs(1)) r[1] = part_view(g, 1);
      return r;
    };
    detail::record(out, std::make_shared<detail::Node>("MakeComplexBackward", backward), {&re, &im});
  }
  return out;
}

}  // namespace kiln
