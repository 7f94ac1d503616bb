// Module functions over arrays: creation, the elementwise ops (generated from kiln/ops.def), the reductions
// (from kiln/reductions.def), shape ops and linear algebra; and the Array methods that mirror them.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string_view>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "dlpack.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

std::vector<Array> to_arrays(nb::handle seq) {
  std::vector<Array> out;
  for (nb::handle item : seq) out.push_back(to_array(item));
  return out;
}

// A shape given as separate extents (x.reshape(2, 3)) or as one sequence (x.reshape((2, 3))).
Shape shape_from_args(const nb::args& args) {
  if (args.size() == 1) return to_shape(args[0]);
  return to_shape(args);
}

std::optional<int64_t> optional_axis(AxisLike axis) {
  if (axis.is_none()) return std::nullopt;
  return to_index(axis);
}

// A kiln array among the operands: its device, where the other array-likes are made.
std::optional<Device> operand_device(std::initializer_list<nb::handle> operands) {
  for (nb::handle h : operands)
    if (nb::isinstance<Array>(h)) return nb::cast<const Array&>(h).device();
  return std::nullopt;
}

// Two Python scalars (kiln.add(1, 2)): the first becomes a 0-d array, as NumPy does.
std::pair<PyOperand, PyOperand> binary_operands(ArrayLike a, ArrayLike b) {
  const std::optional<Device> device = operand_device({a, b});
  PyOperand x = to_operand(a, device), y = to_operand(b, device);
  if (!x.is_array && !y.is_array) {
    x.array = to_array(a);
    x.is_array = true;
  }
  return {std::move(x), std::move(y)};
}

Array transpose_axes(const Array& a, const nb::args& axes) {
  if (axes.size() == 0 || (axes.size() == 1 && axes[0].is_none())) return a.transpose();
  return a.permute(shape_from_args(axes));
}

}  // namespace

void bind_ops(nb::module_& m) {
  // ---------------------------------------------------------------- creation
  const auto shape_dtype_device = [](const char* name, Array (*fn)(const Shape&, DType, std::optional<Device>,
                                                                   ArrayOptions)) {
    return std::make_pair(name, fn);
  };
  for (auto [name, fn] : {shape_dtype_device("zeros", &kiln::zeros), shape_dtype_device("ones", &kiln::ones),
                          shape_dtype_device("empty", &kiln::empty)}) {
    m.def(name, [fn](ShapeLike shape, DTypeLike dtype, DeviceLike device) {
      auto t = to_optional_dtype(dtype);
      return fn(to_shape(shape), t ? *t : kDefaultFloat, to_optional_device(device), ArrayOptions{});
    }, "shape"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  }
  m.def("full", [](ShapeLike shape, ScalarLike value, DTypeLike dtype, DeviceLike device) {
    Scalar v = to_scalar(value);
    auto t = to_optional_dtype(dtype);
    if (!t) t = python_default_dtype(v);
    return kiln::full(to_shape(shape), v, t, to_optional_device(device));
  }, "shape"_a, "fill_value"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("zeros_like", [](ArrayLike a, DTypeLike dtype, DeviceLike device) {
    return kiln::zeros_like(to_array(a), to_optional_dtype(dtype), to_optional_device(device));
  }, "a"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("ones_like", [](ArrayLike a, DTypeLike dtype, DeviceLike device) {
    return kiln::ones_like(to_array(a), to_optional_dtype(dtype), to_optional_device(device));
  }, "a"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("empty_like", [](ArrayLike a, DTypeLike dtype, DeviceLike device) {
    return kiln::empty_like(to_array(a), to_optional_dtype(dtype), to_optional_device(device));
  }, "a"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("full_like", [](ArrayLike a, ScalarLike value, DTypeLike dtype, DeviceLike device) {
    return kiln::full_like(to_array(a), to_scalar(value), to_optional_dtype(dtype), to_optional_device(device));
  }, "a"_a, "fill_value"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("arange", [](nb::handle start, nb::handle stop, nb::handle step, DTypeLike dtype, DeviceLike device) {
    auto t = to_optional_dtype(dtype);
    auto d = to_optional_device(device);
    if (stop.is_none() && step.is_none()) return kiln::arange(to_scalar(start), t, d);
    if (stop.is_none()) return kiln::arange(Scalar(int64_t{0}), to_scalar(start), to_scalar(step), t, d);
    return kiln::arange(to_scalar(start), to_scalar(stop), step.is_none() ? Scalar(int64_t{1}) : to_scalar(step), t, d);
  }, "start"_a, "stop"_a = nb::none(), "step"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("linspace", [](double start, double stop, int64_t num, bool endpoint, DTypeLike dtype, DeviceLike device) {
    auto t = to_optional_dtype(dtype);
    return kiln::linspace(start, stop, num, endpoint, t ? *t : kDefaultFloat, to_optional_device(device));
  }, "start"_a, "stop"_a, "num"_a = 50, "endpoint"_a = true, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("eye", [](int64_t n, std::optional<int64_t> cols, int64_t k, DTypeLike dtype, DeviceLike device) {
    auto t = to_optional_dtype(dtype);
    return kiln::eye(n, cols, k, t ? *t : kDefaultFloat, to_optional_device(device));
  }, "N"_a, "M"_a = nb::none(), "k"_a = 0, "dtype"_a = nb::none(), "device"_a = nb::none());
  m.def("asarray", [](ArrayLike obj, DTypeLike dtype, DeviceLike device) {
    return to_array(obj, to_optional_dtype(dtype), to_optional_device(device));
  }, "obj"_a, "dtype"_a = nb::none(), "device"_a = nb::none(),
     "A kiln.Array from obj: an Array as it is (converted if dtype/device differ), else a copy.");
  m.def("array", [](ArrayLike obj, DTypeLike dtype, DeviceLike device, bool copy) {
    Array a = to_array(obj, to_optional_dtype(dtype), to_optional_device(device));
    if (copy && nb::isinstance<Array>(obj) && a.shares_storage(nb::cast<const Array&>(obj))) a = a.copy();
    return a;
  }, "obj"_a, "dtype"_a = nb::none(), "device"_a = nb::none(), "copy"_a = true);
  m.def("from_dlpack", [](ArrayLike obj, DeviceLike device) {
    Array a = array_from_dlpack(obj);
    auto d = to_optional_device(device);
    return d && *d != a.device() ? a.to(*d) : a;
  }, "x"_a, "device"_a = nb::none(),
     "A kiln.Array sharing the memory of a DLPack producer (NumPy, PyTorch, CuPy...) on the CPU or a GPU.");

  // ---------------------------------------------------------------- elementwise (kiln/ops.def)
#define KILN_PY_Fn1(name)                                                                  \
  m.def(#name, [](ArrayLike x, std::optional<Array> out) {                               \
    return out ? kiln::name(to_array(x), *out) : kiln::name(to_array(x));                  \
  }, "x"_a, "out"_a = nb::none());
#define KILN_PY_Fn2(name)                                                                  \
  m.def(#name, [](ArrayLike x1, ArrayLike x2, std::optional<Array> out) {               \
    auto [a, b] = binary_operands(x1, x2);                                                 \
    return out ? kiln::name(a.operand(), b.operand(), *out) : kiln::name(a.operand(), b.operand()); \
  }, "x1"_a, "x2"_a, "out"_a = nb::none());
#define KILN_PY_Own3(name)
#define KILN_PY_None0(name)
#define KILN_PY_None1(name)
#define KILN_OP(Code, name, arity, api) KILN_PY_##api##arity(name)
#include <kiln/ops.def>
  nb::list elementwise;  // the names bound above: NumPy's ufuncs of the same name dispatch to them
#define KILN_OP(Code, name, arity, api) if (std::string_view(#api) == "Fn") elementwise.append(#name);
#include <kiln/ops.def>
  m.attr("_elementwise_ops") = nb::frozenset(elementwise);
#undef KILN_PY_Fn1
#undef KILN_PY_Fn2
#undef KILN_PY_Own3
#undef KILN_PY_None0
#undef KILN_PY_None1
  m.def("where", [](ArrayLike cond, ArrayLike x, ArrayLike y) {
    const std::optional<Device> device = operand_device({cond, x, y});
    Array c = nb::isinstance<Array>(cond) ? nb::cast<Array>(cond) : to_array(cond, std::nullopt, device);
    PyOperand a = to_operand(x, device), b = to_operand(y, device);
    return kiln::where(c, a.operand(), b.operand());
  }, "condition"_a, "x"_a, "y"_a);
  // kiln/complex.hpp: real/imag are views of a complex array (the array itself / zeros for a real one).
  m.def("real", [](ArrayLike a) { return kiln::real(to_array(a)); }, "a"_a,
        "The real part: a view of a complex array (writing it writes a), the array itself for a real one.");
  m.def("imag", [](ArrayLike a) { return kiln::imag(to_array(a)); }, "a"_a,
        "The imaginary part: a view of a complex array, zeros for a real one.");
  m.def("conj", [](ArrayLike a) { return kiln::conj(to_array(a)); }, "a"_a,
        "The complex conjugate (a new array; a copy of a real one).");
  m.def("angle", [](ArrayLike a, bool deg) { return kiln::angle(to_array(a), deg); }, "a"_a, "deg"_a = false,
        "The argument arctan2(imag, real), in radians (degrees with deg=True).");
  m.def("make_complex", [](ArrayLike re, ArrayLike im) { return kiln::make_complex(to_array(re), to_array(im)); },
        "real"_a, "imag"_a, "real + imag * 1j from two real arrays, without the product's NaNs at infinities.");
  m.def("clip", [](ArrayLike a, ArrayLike lo, ArrayLike hi) {
    Array x = to_array(a);
    PyOperand l = to_operand(lo, x.device()), h = to_operand(hi, x.device());
    return kiln::clip(x, l.operand(), h.operand());
  }, "a"_a, "a_min"_a, "a_max"_a);

  // ---------------------------------------------------------------- reductions (kiln/reductions.def)
#define KILN_REDUCTION_Axes(name)                                                          \
  m.def(#name, [](ArrayLike a, AxisLike axis, bool keepdims) {                          \
    return kiln::name(to_array(a), to_axes(axis), keepdims);                               \
  }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false);
#define KILN_REDUCTION_Own(name)
#define KILN_REDUCTION_None(name)
#define KILN_REDUCTION(Code, name, api) KILN_REDUCTION_##api(name)
#include <kiln/reductions.def>
#undef KILN_REDUCTION_Axes
#undef KILN_REDUCTION_Own
#undef KILN_REDUCTION_None
  m.def("argmax", [](ArrayLike a, AxisLike axis, bool keepdims) {
    return kiln::argmax(to_array(a), optional_axis(axis), keepdims);
  }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false);
  m.def("argmin", [](ArrayLike a, AxisLike axis, bool keepdims) {
    return kiln::argmin(to_array(a), optional_axis(axis), keepdims);
  }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false);
  m.def("var", [](ArrayLike a, AxisLike axis, int64_t ddof, bool keepdims) {
    return kiln::var(to_array(a), to_axes(axis), ddof, keepdims);
  }, "a"_a, "axis"_a = nb::none(), "ddof"_a = 0, "keepdims"_a = false);
  m.def("std", [](ArrayLike a, AxisLike axis, int64_t ddof, bool keepdims) {
    return kiln::std(to_array(a), to_axes(axis), ddof, keepdims);
  }, "a"_a, "axis"_a = nb::none(), "ddof"_a = 0, "keepdims"_a = false);
  m.def("cumsum", [](ArrayLike a, AxisLike axis) { return kiln::cumsum(to_array(a), optional_axis(axis)); },
        "a"_a, "axis"_a = nb::none());
  m.def("cumprod", [](ArrayLike a, AxisLike axis) { return kiln::cumprod(to_array(a), optional_axis(axis)); },
        "a"_a, "axis"_a = nb::none());

  // ---------------------------------------------------------------- shape ops
  m.def("reshape", [](ArrayLike a, ShapeLike shape) { return kiln::reshape(to_array(a), to_shape(shape)); },
        "a"_a, "shape"_a);
  m.def("transpose", [](ArrayLike a, nb::handle axes) {
    Array x = to_array(a);
    return axes.is_none() ? x.transpose() : x.permute(to_shape(axes));
  }, "a"_a, "axes"_a = nb::none());
  m.def("permute_dims", [](ArrayLike a, nb::handle axes) { return kiln::permute(to_array(a), to_shape(axes)); },
        "a"_a, "axes"_a);
  m.def("swapaxes", [](ArrayLike a, int64_t x, int64_t y) { return kiln::swapaxes(to_array(a), x, y); },
        "a"_a, "axis1"_a, "axis2"_a);
  m.def("moveaxis", [](ArrayLike a, int64_t s, int64_t d) { return kiln::moveaxis(to_array(a), s, d); },
        "a"_a, "source"_a, "destination"_a);
  m.def("squeeze", [](ArrayLike a, AxisLike axis) { return kiln::squeeze(to_array(a), to_axes(axis)); },
        "a"_a, "axis"_a = nb::none());
  m.def("expand_dims", [](ArrayLike a, int64_t axis) { return kiln::expand_dims(to_array(a), axis); },
        "a"_a, "axis"_a);
  m.def("broadcast_to", [](ArrayLike a, ShapeLike shape) { return kiln::broadcast_to(to_array(a), to_shape(shape)); },
        "a"_a, "shape"_a);
  m.def("broadcast_arrays", [](nb::args arrays) { return kiln::broadcast_arrays(to_arrays(arrays)); });
  m.def("ravel", [](ArrayLike a) { return kiln::ravel(to_array(a)); }, "a"_a);
  m.def("concatenate", [](nb::handle arrays, int64_t axis) { return kiln::concatenate(to_arrays(arrays), axis); },
        "arrays"_a, "axis"_a = 0);
  m.def("stack", [](nb::handle arrays, int64_t axis) { return kiln::stack(to_arrays(arrays), axis); },
        "arrays"_a, "axis"_a = 0);
  m.def("split", [](ArrayLike a, nb::handle sections, int64_t axis) {
    Array x = to_array(a);
    if (nb::isinstance<nb::sequence>(sections)) return kiln::split(x, nb::cast<std::vector<int64_t>>(sections), axis);
    return kiln::split(x, nb::cast<int64_t>(sections), axis);
  }, "a"_a, "indices_or_sections"_a, "axis"_a = 0);
  m.def("copy", [](ArrayLike a) { return kiln::copy(to_array(a)); }, "a"_a);
  m.def("astype", [](ArrayLike a, DTypeLike dtype) { return to_array(a).astype(to_dtype(dtype)); },
        "x"_a, "dtype"_a);

  // ---------------------------------------------------------------- linear algebra
  m.def("matmul", [](ArrayLike a, ArrayLike b) {
    auto device = operand_device({a, b});
    return kiln::matmul(to_array(a, std::nullopt, nb::isinstance<Array>(a) ? std::nullopt : device),
                        to_array(b, std::nullopt, nb::isinstance<Array>(b) ? std::nullopt : device));
  }, "x1"_a, "x2"_a);
  m.def("dot", [](ArrayLike a, ArrayLike b) {
    auto device = operand_device({a, b});
    return kiln::dot(to_array(a, std::nullopt, nb::isinstance<Array>(a) ? std::nullopt : device),
                     to_array(b, std::nullopt, nb::isinstance<Array>(b) ? std::nullopt : device));
  }, "a"_a, "b"_a);
  m.def_submodule("linalg", "Linear algebra (kiln::linalg): numpy.linalg's functions for real dtypes.");
}

void bind_array_methods(nb::class_<Array>& cls) {
#define KILN_REDUCTION_Axes(name)                                                          \
  cls.def(#name, [](const Array& a, AxisLike axis, bool keepdims) {                      \
    return kiln::name(a, to_axes(axis), keepdims);                                         \
  }, "axis"_a = nb::none(), "keepdims"_a = false);
#define KILN_REDUCTION_Own(name)
#define KILN_REDUCTION_None(name)
#define KILN_REDUCTION(Code, name, api) KILN_REDUCTION_##api(name)
#include <kiln/reductions.def>
#undef KILN_REDUCTION_Axes
#undef KILN_REDUCTION_Own
#undef KILN_REDUCTION_None
  cls.def("argmax", [](const Array& a, AxisLike axis, bool keepdims) { return a.argmax(optional_axis(axis), keepdims); },
          "axis"_a = nb::none(), "keepdims"_a = false)
      .def("argmin", [](const Array& a, AxisLike axis, bool keepdims) { return a.argmin(optional_axis(axis), keepdims); },
           "axis"_a = nb::none(), "keepdims"_a = false)
      .def("var", [](const Array& a, AxisLike axis, int64_t ddof, bool keepdims) {
        return a.var(to_axes(axis), ddof, keepdims);
      }, "axis"_a = nb::none(), "ddof"_a = 0, "keepdims"_a = false)
      .def("std", [](const Array& a, AxisLike axis, int64_t ddof, bool keepdims) {
        return a.std(to_axes(axis), ddof, keepdims);
      }, "axis"_a = nb::none(), "ddof"_a = 0, "keepdims"_a = false)
      .def("cumsum", [](const Array& a, AxisLike axis) { return kiln::cumsum(a, optional_axis(axis)); },
           "axis"_a = nb::none())
      .def("cumprod", [](const Array& a, AxisLike axis) { return kiln::cumprod(a, optional_axis(axis)); },
           "axis"_a = nb::none())
      .def("reshape", [](const Array& a, nb::args shape) { return a.reshape(shape_from_args(shape)); })
      .def("transpose", &transpose_axes)
      .def("squeeze", [](const Array& a, AxisLike axis) { return a.squeeze(to_axes(axis)); }, "axis"_a = nb::none())
      .def("swapaxes", [](const Array& a, int64_t x, int64_t y) { return kiln::swapaxes(a, x, y); }, "axis1"_a, "axis2"_a)
      .def("flatten", &Array::flatten)
      .def("ravel", [](const Array& a) { return kiln::ravel(a); })
      .def("clip", [](const Array& a, ArrayLike lo, ArrayLike hi) {
        PyOperand l = to_operand(lo, a.device()), h = to_operand(hi, a.device());
        return kiln::clip(a, l.operand(), h.operand());
      }, "a_min"_a, "a_max"_a)
      .def("dot", [](const Array& a, ArrayLike b) { return kiln::dot(a, to_array_near(b, a)); }, "b"_a);
}

}  // namespace kiln::python
