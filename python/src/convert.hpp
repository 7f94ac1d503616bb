// Conversions between Python objects and kiln's C++ values, shared by the binding files: dtypes, devices,
// shapes, axes, scalars, array-likes (lists, NumPy arrays, anything with __dlpack__) and the export of an
// Array as a nanobind ndarray (the one object behind __array__ and the buffer protocol).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>

#include <kiln/kiln.hpp>

namespace kiln::python {

namespace nb = nanobind;
using namespace nb::literals;

/// kiln.dtype: a DType as a Python object (kiln.float32, x.dtype). Compares equal to its name and to
/// NumPy's dtype of the same name.
struct PyDType {
  DType type;
};

/// A dtype from kiln.dtype, a name ("float32", "f4"), a NumPy dtype or scalar type, or float/int/bool;
/// throws TypeError for anything else, kiln.DTypeError for an unknown name.
DType to_dtype(nb::handle obj);
std::optional<DType> to_optional_dtype(nb::handle obj);
/// A device from kiln.Device or a name ("cpu", "cuda:0"); None gives nullopt.
std::optional<Device> to_optional_device(nb::handle obj);
/// An integer from an int or an object with __index__ (TypeError otherwise).
int64_t to_index(nb::handle obj);
/// A shape from an int or a sequence of ints.
Shape to_shape(nb::handle obj);
/// Reduction axes: None (all), an int, or a sequence of ints.
Axes to_axes(nb::handle obj);
/// True for a Python bool, int or float, or a NumPy scalar of those kinds.
bool is_python_scalar(nb::handle obj);
Scalar to_scalar(nb::handle obj);
nb::object scalar_to_python(const Scalar& s);

/// The default floating dtype of creation functions, and of arrays made from Python floats (as PyTorch;
/// NumPy arrays keep theirs).
inline constexpr DType kDefaultFloat = DType::Float32;
/// The dtype of Python complex numbers (as torch's default complex dtype, the partner of kDefaultFloat).
inline constexpr DType kDefaultComplex = DType::Complex64;
/// The dtype a Python number becomes: kDefaultFloat for a float, kDefaultComplex for a complex, else its own.
inline DType python_default_dtype(const Scalar& s) {
  return s.is_complex() ? kDefaultComplex : s.is_floating() ? kDefaultFloat : s.default_dtype();
}

/// asarray: a kiln.Array is returned as it is (converted when dtype/device differ); a NumPy array, a buffer,
/// a nested list or a Python scalar is copied into a new array. Python floats give float32, ints int64.
Array to_array(nb::handle obj, std::optional<DType> dtype = {}, std::optional<Device> device = {});

/// An elementwise operand: an Array, or a Python scalar kept weak (NEP 50: `x + 1.5` keeps float32).
struct PyOperand {
  Array array;
  Scalar scalar;
  bool is_array = false;
  Operand operand() const { return is_array ? Operand(array) : Operand(scalar); }
};
/// Objects that are not kiln arrays (lists, NumPy arrays) are made on `device` (where the kiln operand they
/// meet lives), as assigning into or combining with a GPU array expects.
PyOperand to_operand(nb::handle obj, std::optional<Device> device = {});
/// As to_operand, but false (and no Python error) for an object that is not array-like, so a binary
/// operator can return NotImplemented.
bool try_operand(nb::handle obj, PyOperand& out, std::optional<Device> device = {});
/// to_array for an operand that meets `other`: a kiln array as it is, anything else made on other's device.
Array to_array_near(nb::handle obj, const Array& other);

/// A state dict as a Python dict {name: Array} in its order, and back (values: anything to_array takes).
nb::dict state_to_dict(const nn::StateDict& state);
nn::StateDict dict_to_state(nb::dict state);

/// The array as a nanobind ndarray object (framework array_api) sharing its memory (it keeps the array alive): NumPy views it
/// through the buffer protocol (DLPack consumers get kiln's own capsules: dlpack.hpp).
nb::object export_ndarray(const Array& a);

}  // namespace kiln::python
