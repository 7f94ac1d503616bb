// Python values to kiln's C++ values and back (see convert.hpp).
#include "convert.hpp"

#include "dlpack.hpp"

#include <nanobind/stl/complex.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

namespace kiln::python {

namespace {

// NumPy, imported once; the handle is never released, so nothing touches Python after finalisation.
nb::handle numpy() {
  static nb::handle np = nb::module_::import_("numpy").release();
  return np;
}

nb::dlpack::dtype dlpack_dtype(DType t) {
  using C = nb::dlpack::dtype_code;
  auto make = [](C code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (t) {
    case DType::Bool: return make(C::Bool, 8);
    case DType::Int8: return make(C::Int, 8);
    case DType::Int16: return make(C::Int, 16);
    case DType::Int32: return make(C::Int, 32);
    case DType::Int64: return make(C::Int, 64);
    case DType::UInt8: return make(C::UInt, 8);
    case DType::Float16: return make(C::Float, 16);
    case DType::BFloat16: return make(C::Bfloat, 16);
    case DType::Float32: return make(C::Float, 32);
    case DType::Complex64: return make(C::Complex, 64);
    case DType::Complex128: return make(C::Complex, 128);
    case DType::Float64: break;
  }
  return make(C::Float, 64);
}

bool is_array_like(nb::handle obj) {
  return nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj) || nb::hasattr(obj, "__array__") ||
         nb::hasattr(obj, "__array_interface__") || nb::hasattr(obj, "__dlpack__") || PyObject_CheckBuffer(obj.ptr());
}

// A NumPy array copied into a new kiln array. NumPy dtypes kiln lacks are widened where that keeps every value
// (uint16 -> int32, uint32 -> int64); others are refused.
Array from_numpy(nb::handle array, bool from_python_values, std::optional<DType> dtype, std::optional<Device> device) {
  nb::object arr = numpy().attr("asarray")(array, "order"_a = "C");  // ascontiguousarray makes 0-d arrays 1-d
  std::string name = nb::cast<std::string>(nb::str(arr.attr("dtype").attr("name")));
  if (name == "uint16" || name == "uint32") {
    arr = arr.attr("astype")(name == "uint16" ? "int32" : "int64");
    name = name == "uint16" ? "int32" : "int64";
  }
  std::optional<DType> source = find_dtype(name);
  if (!source || name == "object")
    throw nb::type_error(("kiln.asarray: NumPy dtype " + name +
                          " has no kiln dtype (kiln holds bool, int8-64, uint8, float16, bfloat16, float32, "
                          "float64); convert it first, e.g. np.asarray(x, dtype=np.float32)")
                             .c_str());
  auto nd = nb::cast<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>(arr);
  Shape shape;
  for (size_t i = 0; i < nd.ndim(); ++i) shape.push_back(static_cast<int64_t>(nd.shape(i)));
  Array out = from_data(nd.data(), shape, *source, device);
  DType target = dtype                                                     ? *dtype
                 : (from_python_values && *source == DType::Float64)    ? kDefaultFloat
                 : (from_python_values && *source == DType::Complex128) ? kDefaultComplex
                                                                        : *source;
  return target == out.dtype() ? out : out.astype(target);
}

}  // namespace

int64_t to_index(nb::handle obj) {
  PyObject* index = PyNumber_Index(obj.ptr());  // TypeError for anything but an integer
  if (!index) throw nb::python_error();
  return nb::cast<int64_t>(nb::steal(index));
}

DType to_dtype(nb::handle obj) {
  if (nb::isinstance<PyDType>(obj)) return nb::cast<const PyDType&>(obj).type;
  if (nb::isinstance<nb::str>(obj)) return parse_dtype(nb::cast<std::string>(obj));
  if (PyType_Check(obj.ptr())) return parse_dtype(nb::cast<std::string>(obj.attr("__name__")));
  if (nb::hasattr(obj, "name") && nb::hasattr(obj, "itemsize"))  // a NumPy dtype
    return parse_dtype(nb::cast<std::string>(nb::str(obj.attr("name"))));
  throw nb::type_error(("kiln: cannot read a dtype from " + nb::cast<std::string>(nb::repr(obj)) +
                        "; pass kiln.float32, a name such as 'float32', or a NumPy dtype")
                           .c_str());
}

std::optional<DType> to_optional_dtype(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return to_dtype(obj);
}

std::optional<Device> to_optional_device(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (nb::isinstance<Device>(obj)) return nb::cast<Device>(obj);
  if (nb::isinstance<nb::str>(obj)) return parse_device(nb::cast<std::string>(obj));
  throw nb::type_error(("kiln: cannot read a device from " + nb::cast<std::string>(nb::repr(obj)) +
                        "; pass kiln.cpu(), kiln.cuda(0) or a name such as 'cuda:0'")
                           .c_str());
}

Shape to_shape(nb::handle obj) {
  Shape shape;
  if (PyLong_Check(obj.ptr()) || (!nb::isinstance<nb::sequence>(obj) && nb::hasattr(obj, "__index__"))) {
    shape.push_back(to_index(obj));
    return shape;
  }
  if (!nb::isinstance<nb::sequence>(obj) || nb::isinstance<nb::str>(obj))
    throw nb::type_error(("kiln: a shape is an int or a sequence of ints, got " +
                          nb::cast<std::string>(nb::repr(obj)))
                             .c_str());
  for (nb::handle extent : obj) shape.push_back(to_index(extent));
  return shape;
}

Axes to_axes(nb::handle obj) {
  if (obj.is_none()) return Axes();
  if (nb::isinstance<nb::sequence>(obj)) {
    std::vector<int64_t> axes;
    for (nb::handle axis : obj) axes.push_back(to_index(axis));
    return Axes(axes);
  }
  return Axes(to_index(obj));
}

bool is_python_scalar(nb::handle obj) {
  return PyBool_Check(obj.ptr()) || PyLong_Check(obj.ptr()) || PyFloat_Check(obj.ptr()) || PyComplex_Check(obj.ptr());
}

Scalar to_scalar(nb::handle obj) {
  if (PyBool_Check(obj.ptr())) return Scalar(obj.ptr() == Py_True);
  if (PyLong_Check(obj.ptr())) return Scalar(nb::cast<int64_t>(obj));
  if (PyComplex_Check(obj.ptr()))  // a weak complex scalar (NEP 50), never its real part alone
    return Scalar(std::complex<double>(PyComplex_RealAsDouble(obj.ptr()), PyComplex_ImagAsDouble(obj.ptr())));
  return Scalar(nb::cast<double>(obj));
}

nb::object scalar_to_python(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return nb::bool_(s.to_bool());
    case Scalar::Kind::Int: return nb::int_(s.to_int64());
    case Scalar::Kind::Complex: return nb::cast(std::complex<double>(s.to_double(), s.imag()));
    case Scalar::Kind::Float: break;
  }
  return nb::float_(s.to_double());
}

Array to_array(nb::handle obj, std::optional<DType> dtype, std::optional<Device> device) {
  if (nb::isinstance<Array>(obj)) {
    Array a = nb::cast<Array>(obj);
    if (dtype && *dtype != a.dtype()) a = a.astype(*dtype);
    if (device && *device != a.device()) a = a.to(*device);
    return a;
  }
  if (is_python_scalar(obj)) {
    Scalar s = to_scalar(obj);
    return scalar_array(s, dtype ? *dtype : python_default_dtype(s), device);
  }
  nb::handle np = numpy();
  const bool is_numpy = nb::isinstance(obj, np.attr("ndarray")) || nb::isinstance(obj, np.attr("generic"));
  if (!is_numpy && !nb::hasattr(obj, "__array__") && nb::hasattr(obj, "__dlpack__")) {
    // A GPU tensor of another library (a CPU one has __array__ or a buffer): viewed, then copied.
    return to_array(nb::cast(array_from_dlpack(obj).copy()), dtype, device);
  }
  // A value inside a function kiln.fuse traces: the function's FusionValue overload (registered after the Array
  // one, so arrays never pay for the check) takes it.
  if (nb::isinstance<FusionValue>(obj)) throw nb::next_overload();
  if (!is_array_like(obj) && !is_numpy)
    throw nb::type_error(("kiln.asarray: cannot make an array from " +
                          nb::cast<std::string>(nb::repr(nb::type_name(obj.type()))) +
                          "; pass a kiln.Array, a NumPy array, a (nested) list or a Python number")
                             .c_str());
  const bool python_values = nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj);
  return from_numpy(np.attr("asarray")(obj), python_values, dtype, device);
}

PyOperand to_operand(nb::handle obj, std::optional<Device> device) {
  PyOperand op;
  if (is_python_scalar(obj)) {
    op.scalar = to_scalar(obj);
  } else {
    op.array = nb::isinstance<Array>(obj) ? nb::cast<Array>(obj) : to_array(obj, std::nullopt, device);
    op.is_array = true;
  }
  return op;
}

Array to_array_near(nb::handle obj, const Array& other) {
  return nb::isinstance<Array>(obj) ? nb::cast<Array>(obj) : to_array(obj, std::nullopt, other.device());
}

bool try_operand(nb::handle obj, PyOperand& out, std::optional<Device> device) {
  if (!nb::isinstance<Array>(obj) && !is_python_scalar(obj) && !is_array_like(obj) &&
      !nb::isinstance(obj, numpy().attr("generic")))
    return false;
  out = to_operand(obj, device);
  return true;
}

nb::object export_ndarray(const Array& a) {
  std::vector<size_t> shape(a.shape().begin(), a.shape().end());
  std::vector<int64_t> strides(a.strides().begin(), a.strides().end());
  nb::capsule owner(new Array(a), [](void* p) noexcept { delete static_cast<Array*>(p); });
  const Device d = a.device();
  nb::ndarray<nb::array_api> nd(a.data_ptr(), shape.size(), shape.data(), owner, strides.data(), dlpack_dtype(a.dtype()),
                   d.is_cuda() ? nb::device::cuda::value : nb::device::cpu::value, d.is_cuda() ? d.index : 0);
  return nb::cast(nd);
}

nb::dict state_to_dict(const nn::StateDict& state) {
  nb::dict out;
  for (const auto& [name, value] : state) out[name.c_str()] = value;
  return out;
}

nn::StateDict dict_to_state(nb::dict state) {
  nn::StateDict out;
  for (auto [name, value] : state) out.insert(nb::cast<std::string>(name), to_array(value));
  return out;
}

}  // namespace kiln::python
