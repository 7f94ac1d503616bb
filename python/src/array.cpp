// kiln.Array: properties, Python operators, indexing, conversions (item, tolist, NumPy) and the exchange
// protocols (buffer, __array__, __dlpack__, __cuda_array_interface__).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <initializer_list>
#include <utility>

#include "bindings.hpp"
#include "convert.hpp"
#include "dlpack.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

nb::tuple shape_tuple(const Shape& s) {
  nb::list out;
  for (int64_t extent : s) out.append(extent);
  return nb::tuple(out);
}

// ---------------------------------------------------------------- indexing
// Array::index and index_put take an initializer_list, so a Python key of n entries is expanded into a braced
// list of n Index values by a template instantiated for every n up to kMaxIndexEntries.
constexpr size_t kMaxIndexEntries = 32;  // the Array API suite indexes arrays of up to 32 axes

template <class F, size_t... I>
decltype(auto) call_with_list(const std::vector<Index>& v, F&& f, std::index_sequence<I...>) {
  return f(std::initializer_list<Index>{v[I]...});
}
template <size_t N = 0, class F>
decltype(auto) with_index_list(const std::vector<Index>& v, F&& f) {
  if constexpr (N > kMaxIndexEntries) {
    throw nb::index_error(("kiln.Array: an index of " + std::to_string(v.size()) + " entries is more than " +
                           std::to_string(kMaxIndexEntries) + "; index in several steps")
                              .c_str());
    return f(std::initializer_list<Index>{});
  } else {
    if (v.size() == N) return call_with_list(v, f, std::make_index_sequence<N>{});
    return with_index_list<N + 1>(v, std::forward<F>(f));
  }
}

// The key's entries; array entries (masks, index arrays) are held in `keep`, which Index points into.
std::vector<Index> parse_key(nb::handle key, std::vector<Array>& keep, const Array& target) {
  std::vector<nb::handle> entries;
  if (nb::isinstance<nb::tuple>(key)) {
    for (nb::handle entry : key) entries.push_back(entry);
  } else {
    entries.push_back(key);
  }
  keep.reserve(entries.size());  // no reallocation: Index holds addresses into it
  std::vector<Index> out;
  for (nb::handle e : entries) {
    if (e.is_none()) {
      out.emplace_back(newaxis);
    } else if (e.is(nb::ellipsis())) {
      out.emplace_back(ellipsis);
    } else if (PySlice_Check(e.ptr())) {
      auto bound = [](nb::handle v) -> std::optional<int64_t> {
        if (v.is_none()) return std::nullopt;
        return to_index(v);
      };
      std::optional<int64_t> step = bound(e.attr("step"));
      if (step && *step == 0) throw nb::value_error("kiln.Array: slice step cannot be zero");
      out.emplace_back(Slice(bound(e.attr("start")), bound(e.attr("stop")), step ? *step : 1));
    } else if (nb::isinstance<Array>(e)) {
      out.emplace_back(nb::cast<const Array&>(e));
    } else if (PyBool_Check(e.ptr())) {  // NumPy: a bool is a 0-d mask, not the integer 0 or 1
      keep.push_back(scalar_array(Scalar(e.ptr() == Py_True)));
      out.emplace_back(keep.back());
    } else if (PyLong_Check(e.ptr()) || (PyIndex_Check(e.ptr()) && !nb::hasattr(e, "__len__"))) {
      // an int, or an integer scalar such as NumPy's (an array with __index__ has a length: it indexes as one)
      out.emplace_back(to_index(e));
    } else {
      keep.push_back(to_array_near(e, target));
      out.emplace_back(keep.back());
    }
  }
  return out;
}

// kiln reports an index out of range or a mask of the wrong shape as ShapeError (C++ has no IndexError):
// Python code expects IndexError there, as NumPy raises (and iteration over an array relies on it).
[[noreturn]] void rethrow_index_error() {
  try {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("out of bounds") != std::string::npos || what.find("out of range") != std::string::npos ||
        what.find("too many indices") != std::string::npos || what.find("boolean mask has shape") != std::string::npos)
      throw nb::index_error(what.c_str());
    throw;
  }
}

// A 0-d bool mask (NumPy's x[True], x[False]) adds an axis of extent 1 or 0; kiln's index takes masks of the
// indexed axes' shape only, so it is answered here.
std::optional<bool> zero_d_mask(nb::handle key) {
  if (!nb::isinstance<Array>(key)) return std::nullopt;
  const Array& k = nb::cast<const Array&>(key);
  if (k.ndim() != 0 || k.dtype() != DType::Bool) return std::nullopt;
  return k.item<bool>();
}

// An empty bool mask whose zero extents stand for any of a's (the Array API suite's x[mask] with mask.shape
// (0,) on an array of shape (3,)) selects nothing: the result's leading axis has extent 0.
bool selects_nothing(const Array& a, nb::handle key) {
  if (!nb::isinstance<Array>(key)) return false;
  const Array& k = nb::cast<const Array&>(key);
  if (k.dtype() != DType::Bool || k.ndim() == 0 || k.ndim() > a.ndim() || k.size() != 0) return false;
  for (int64_t d = 0; d < k.ndim(); ++d)
    if (k.shape(d) != 0 && k.shape(d) != a.shape(d)) return false;
  return true;
}

Array getitem(const Array& a, nb::handle key) {
  if (selects_nothing(a, key)) {
    std::vector<int64_t> shape{0};
    const Shape& rest = a.shape();
    shape.insert(shape.end(), rest.begin() + nb::cast<const Array&>(key).ndim(), rest.end());
    return kiln::empty(Shape(shape), a.dtype(), a.device());
  }
  if (std::optional<bool> mask = zero_d_mask(key)) {
    std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    shape.insert(shape.begin(), *mask ? 1 : 0);
    return *mask ? kiln::copy(a).reshape(Shape(shape)) : kiln::empty(Shape(shape), a.dtype(), a.device());
  }
  std::vector<Array> keep;
  std::vector<Index> idx = parse_key(key, keep, a);
  try {
    return with_index_list(idx, [&](std::initializer_list<Index> list) { return a.index(list); });
  } catch (const Error&) {
    rethrow_index_error();
  }
}

void setitem(Array& a, nb::handle key, nb::handle value) {
  if (selects_nothing(a, key)) return;
  if (std::optional<bool> mask = zero_d_mask(key)) {
    if (*mask) setitem(a, nb::ellipsis(), value);
    return;
  }
  std::vector<Array> keep;
  std::vector<Index> idx = parse_key(key, keep, a);
  try {
    if (is_python_scalar(value)) {
      Scalar s = to_scalar(value);
      with_index_list(idx, [&](std::initializer_list<Index> list) { a.index_put(list, s); });
    } else {
      Array v = to_array(value, std::nullopt, a.device());  // a value from another device is copied over
      with_index_list(idx, [&](std::initializer_list<Index> list) { a.index_put(list, v); });
    }
  } catch (const Error&) {
    rethrow_index_error();
  }
}

// ---------------------------------------------------------------- conversions

nb::object to_numpy(const Array& a, DTypeLike dtype, nb::handle copy) {
  if (a.dtype() == DType::BFloat16)
    throw nb::type_error("kiln.Array: NumPy has no bfloat16; convert first: x.astype(kiln.float32)");
  nb::object np = nb::module_::import_("numpy");
  nb::object out = np.attr("asarray")(export_ndarray(a));
  if (!dtype.is_none()) out = out.attr("astype")(dtype, "copy"_a = false);
  if (!copy.is_none() && nb::cast<bool>(copy)) out = out.attr("copy")();
  return out;
}

void require_cpu(const Array& a, const char* what) {
  if (!a.device().is_cpu())
    throw nb::type_error((std::string("kiln.Array: ") + what + " needs a CPU array, this one is on " +
                          a.device().str() + "; copy it first: x.to(kiln.cpu()) or x.numpy()")
                             .c_str());
}

// The buffer protocol (memoryview(x), np.asarray(x)): the nanobind ndarray over the same memory answers the
// request and stays referenced by the view until it is released.
int array_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  try {
    const nb::handle handle(self);
    const Array& a = nb::cast<const Array&>(handle);
    if (!a.device().is_cpu()) {
      PyErr_SetString(PyExc_BufferError, ("kiln.Array: only CPU arrays expose a buffer; this one is on " +
                                          a.device().str() + ": use x.to(kiln.cpu()) or __dlpack__")
                                             .c_str());
      return -1;
    }
    nb::object nd = export_ndarray(a);
    return PyObject_GetBuffer(nd.ptr(), view, flags);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
}

PyType_Slot array_slots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(array_getbuffer)}, {0, nullptr}};

const char* typestr(DType t) {
  switch (t) {
    case DType::Bool: return "|b1";
    case DType::Int8: return "|i1";
    case DType::Int16: return "<i2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::UInt8: return "|u1";
    case DType::Float16: return "<f2";
    case DType::BFloat16: return "<V2";  // no typestr for bfloat16: raw 2-byte values
    case DType::Float32: return "<f4";
    case DType::Complex64: return "<c8";
    case DType::Complex128: return "<c16";
    case DType::Float64: break;
  }
  return "<f8";
}

// ---------------------------------------------------------------- operators

using BinaryFn = Array (*)(const Operand&, const Operand&);
using BinaryOutFn = Array (*)(const Operand&, const Operand&, const Array&);

template <BinaryFn fn, bool reflected>
nb::object binary_operator(const Array& self, nb::handle other) {
  PyOperand o;
  if (!try_operand(other, o, self.device())) return nb::borrow(Py_NotImplemented);
  return nb::cast(reflected ? fn(o.operand(), Operand(self)) : fn(Operand(self), o.operand()));
}

template <BinaryOutFn fn>
nb::object inplace_operator(nb::handle self_handle, nb::handle other) {
  PyOperand o;
  Array& self = nb::cast<Array&>(self_handle);
  if (!try_operand(other, o, self.device())) return nb::borrow(Py_NotImplemented);
  fn(Operand(self), o.operand(), self);
  return nb::borrow(self_handle);
}

// NumPy's ufuncs on kiln arrays (np.add(x, 1), np.sin(x), ndarray + kiln.Array) run kiln's op of the same name
// and return a kiln.Array; ufuncs and methods kiln has no op for run in NumPy on the CPU arrays' memory.
nb::object array_ufunc(nb::handle, nb::handle ufunc, const std::string& method, nb::args inputs, nb::kwargs kwargs) {
  std::string name = nb::cast<std::string>(ufunc.attr("__name__"));
  if (name == "true_divide") name = "divide";
  if (name == "absolute") name = "abs";
  nb::module_ core = nb::module_::import_("kiln._kiln");
  const bool only_out = kwargs.size() == 0 || (kwargs.size() == 1 && kwargs.contains("out"));
  if (method == "__call__" && only_out && core.attr("_elementwise_ops").attr("__contains__")(name).is(Py_True)) {
    if (kwargs.size() == 0) return core.attr(name.c_str())(*inputs);
    nb::handle out = kwargs["out"];
    if (nb::len(out) != 1 || !nb::isinstance<Array>(out[0])) return nb::borrow(Py_NotImplemented);
    return core.attr(name.c_str())(*inputs, "out"_a = out[0]);
  }
  if (kwargs.contains("out")) return nb::borrow(Py_NotImplemented);
  nb::object np = nb::module_::import_("numpy");
  nb::list converted;
  for (nb::handle v : inputs) converted.append(nb::isinstance<Array>(v) ? np.attr("asarray")(v) : nb::borrow(v));
  return ufunc.attr(method.c_str())(*converted, **kwargs);
}

nb::object array_iter(const Array& a) {
  if (a.ndim() == 0) throw nb::type_error("iteration over a 0-d kiln.Array");
  nb::list rows;
  for (int64_t i = 0; i < a.shape(0); ++i) rows.append(a[i]);
  return nb::iter(rows);
}

// float(z) / int(z) of a complex array: TypeError, as Python's float(1j) and the Array API standard (the imaginary
// part would be dropped silently).
void refuse_complex(const Array& a, const char* to) {
  if (is_complex(a.dtype()))
    throw nb::type_error((std::string(to) + "() of a " + std::string(dtype_name(a.dtype())) +
                          " array would drop the imaginary part; take complex(x), or real(x) / abs(x) first")
                             .c_str());
}

}  // namespace

#define KILN_PY_BINARY(cls, dunder, fn)                                                          \
  cls.def("__" dunder "__", &binary_operator<static_cast<BinaryFn>(&kiln::fn), false>,           \
          nb::is_operator());                                                                    \
  cls.def("__r" dunder "__", &binary_operator<static_cast<BinaryFn>(&kiln::fn), true>,           \
          nb::is_operator());                                                                    \
  cls.def("__i" dunder "__", &inplace_operator<static_cast<BinaryOutFn>(&kiln::fn)>, nb::is_operator());
#define KILN_PY_COMPARE(cls, dunder, fn) \
  cls.def("__" dunder "__", &binary_operator<static_cast<BinaryFn>(&kiln::fn), false>, nb::is_operator());

void bind_array(nb::module_& m) {
  nb::class_<Array> cls(m, "Array", nb::type_slots(array_slots),
                        "An n-d array on one device, with NumPy's semantics (kiln::Array).");
  cls.def("__init__", [](Array* self, nb::handle obj, DTypeLike dtype, DeviceLike device) {
        new (self) Array(to_array(obj, to_optional_dtype(dtype), to_optional_device(device)));
      }, "obj"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  cls.def_prop_ro("shape", [](const Array& a) { return shape_tuple(a.shape()); })
      .def_prop_ro("dtype", [](const Array& a) { return PyDType{a.dtype()}; })
      .def_prop_ro("ndim", &Array::ndim)
      .def_prop_ro("size", &Array::size)
      .def_prop_ro("nbytes", &Array::nbytes)
      .def_prop_ro("itemsize", [](const Array& a) { return itemsize(a.dtype()); })
      .def_prop_ro("strides", [](const Array& a) {  // in bytes, as NumPy's
        Shape s = a.strides();
        for (auto& v : s) v *= itemsize(a.dtype());
        return shape_tuple(s);
      })
      .def_prop_ro("device", &Array::device)
      .def_prop_ro("is_contiguous", &Array::is_contiguous)
      .def_prop_ro("data_ptr", [](const Array& a) { return reinterpret_cast<uintptr_t>(a.data_ptr()); })
      .def_prop_ro("T", [](const Array& a) { return a.T(); })
      .def_prop_ro("mT", [](const Array& a) { return kiln::swapaxes(a, -2, -1); },
                   "The transpose of the last two axes (a view), as the Array API's x.mT.")
      // The shifts are composed in kiln.array_api (a multiply or floor division by a power of two): kiln has
      // no shift op of its own.
      .def("__lshift__", [](nb::handle self, nb::handle other) {
        return nb::module_::import_("kiln.array_api").attr("bitwise_left_shift")(self, other);
      }, nb::is_operator())
      .def("__rshift__", [](nb::handle self, nb::handle other) {
        return nb::module_::import_("kiln.array_api").attr("bitwise_right_shift")(self, other);
      }, nb::is_operator())
      .def("__ilshift__", [](nb::handle self, nb::handle other) {
        self[nb::ellipsis()] = nb::module_::import_("kiln.array_api").attr("bitwise_left_shift")(self, other);
        return nb::borrow(self);
      }, nb::is_operator())
      .def("__irshift__", [](nb::handle self, nb::handle other) {
        self[nb::ellipsis()] = nb::module_::import_("kiln.array_api").attr("bitwise_right_shift")(self, other);
        return nb::borrow(self);
      }, nb::is_operator())
      .def("__array_namespace__", [](const Array&, nb::handle api_version) {
        if (!api_version.is_none() && !nb::cast<std::string>(api_version).starts_with("202"))
          throw nb::value_error("__array_namespace__: kiln implements the Array API 2023.12 (api_version=None)");
        return nb::module_::import_("kiln.array_api");
      }, nb::kw_only(), "api_version"_a = nb::none(), "kiln.array_api, the Array API namespace of kiln's arrays.")
      .def("__len__", [](const Array& a) {
        if (a.ndim() == 0) throw nb::type_error("len() of unsized object (a 0-d kiln.Array)");
        return a.shape(0);
      })
      .def("__repr__", &Array::str)
      .def("__str__", &Array::str)
      .def("__bool__", [](const Array& a) {
        if (a.size() != 1)
          throw nb::value_error(("The truth value of an array with " + std::to_string(a.size()) +
                                 " elements is ambiguous; use x.any() or x.all()")
                                    .c_str());
        return a.item_scalar().to_bool();
      })
      .def("__float__", [](const Array& a) {
        refuse_complex(a, "float");
        return a.item<double>();
      })
      .def("__complex__", [](const Array& a) {
        const Scalar s = a.item_scalar();
        return nb::steal(PyComplex_FromDoubles(s.to_double(), s.is_complex() ? s.imag() : 0.0));
      })
      .def("__int__", [](const Array& a) {
        refuse_complex(a, "int");
        return a.item<int64_t>();
      })
      .def("__index__", [](const Array& a) {
        if (!is_integral(a.dtype()))
          throw nb::type_error(("only integer arrays can be used as an index, not " +
                                std::string(dtype_name(a.dtype())))
                                   .c_str());
        return a.item<int64_t>();
      })
      .def("item", [](const Array& a) { return scalar_to_python(a.item_scalar()); })
      .def("tolist", [](const Array& a) {
        Array host = a.to(cpu());
        if (host.dtype() == DType::BFloat16) host = host.astype(DType::Float32);
        return to_numpy(host, nb::none(), nb::none()).attr("tolist")();
      })
      .def("numpy", [](const Array& a) { return to_numpy(a.to(cpu()), nb::none(), nb::none()); },
           "A NumPy array: a view of a CPU array's memory, a copy of a GPU array's (synchronises).")
      .def("__array__", [](const Array& a, DTypeLike dtype, nb::handle copy) {
        require_cpu(a, "np.asarray");
        return to_numpy(a, dtype, copy);
      }, "dtype"_a = nb::none(), "copy"_a = nb::none())
      .def("__dlpack_device__", &dlpack_device)
      .def("__dlpack__", &dlpack_capsule, nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(),
           "dl_device"_a = nb::none(), "copy"_a = nb::none())
      .def_prop_ro("__cuda_array_interface__", [](const Array& a) {
        if (!a.device().is_cuda())
          throw nb::attribute_error("__cuda_array_interface__: a CPU array has none (it exists for GPU arrays)");
        synchronize(a.device());  // the consumer's stream is not known: the data is ready when it reads
        Shape s = a.strides();
        for (auto& v : s) v *= itemsize(a.dtype());
        nb::dict d;
        d["shape"] = shape_tuple(a.shape());
        d["typestr"] = typestr(a.dtype());
        d["data"] = nb::make_tuple(reinterpret_cast<uintptr_t>(a.data_ptr()), false);
        d["strides"] = a.is_contiguous() ? nb::object(nb::none()) : nb::object(shape_tuple(s));
        d["version"] = 3;
        return d;
      })
      .def("__array_ufunc__", &array_ufunc, "ufunc"_a, "method"_a, "inputs"_a, "kwargs"_a)
      .def("__iter__", &array_iter)
      .def("to_device", [](const Array& a, DeviceLike device) { return a.to(*to_optional_device(device)); }, "device"_a)
      .def("__copy__", [](const Array& a) { return a.copy(); })
      .def("__deepcopy__", [](const Array& a, nb::handle) { return a.copy(); }, "memo"_a)
      // Pickling (multiprocessing, checkpoints of Python objects): the values on the host, the dtype and the device.
      .def("__getstate__", [](const Array& a) {
        Array host = a.to(cpu());
        if (host.dtype() == DType::BFloat16) host = host.astype(DType::Float32);
        return nb::make_tuple(to_numpy(host, nb::none(), nb::handle(Py_True)), std::string(dtype_name(a.dtype())),
                              a.device().str());
      })
      .def("__setstate__", [](Array& self, const nb::tuple& state) {
        new (&self) Array(to_array(state[0], parse_dtype(nb::cast<std::string>(state[1])),
                                   parse_device(nb::cast<std::string>(state[2]))));
      })
      .def("__getitem__", &getitem, "key"_a.none())
      .def("__setitem__", &setitem, "key"_a.none(), "value"_a)
      .def("copy", [](const Array& a) { return a.copy(); })
      .def("astype", [](const Array& a, DTypeLike dtype, bool copy) {
        DType t = to_dtype(dtype);
        if (t == a.dtype()) return copy ? a.copy() : a;
        return a.astype(t);
      }, "dtype"_a, "copy"_a = true)
      .def("to", [](const Array& a, DeviceLike device, bool non_blocking) {
        return a.to(*to_optional_device(device), TransferOptions{non_blocking});
      }, "device"_a, "non_blocking"_a = false)
      .def("fill", [](Array& a, nb::handle v) { a.fill(to_scalar(v)); }, "value"_a)
      .def("contiguous", &Array::contiguous)
      .def("__neg__", [](const Array& a) { return kiln::negative(a); })
      .def("__pos__", [](const Array& a) { return a; })
      .def("__abs__", [](const Array& a) { return kiln::abs(a); })
      .def("__invert__", [](const Array& a) { return a.dtype() == DType::Bool ? kiln::logical_not(a) : kiln::bitwise_not(a); })
      .def("__matmul__", [](const Array& a, nb::handle b) { return kiln::matmul(a, to_array_near(b, a)); }, nb::is_operator())
      .def("__rmatmul__", [](const Array& a, nb::handle b) { return kiln::matmul(to_array_near(b, a), a); }, nb::is_operator());
  KILN_PY_BINARY(cls, "add", add)
  KILN_PY_BINARY(cls, "sub", subtract)
  KILN_PY_BINARY(cls, "mul", multiply)
  KILN_PY_BINARY(cls, "truediv", divide)
  KILN_PY_BINARY(cls, "floordiv", floor_divide)
  KILN_PY_BINARY(cls, "mod", remainder)
  KILN_PY_BINARY(cls, "pow", power)
  KILN_PY_BINARY(cls, "and", bitwise_and)
  KILN_PY_BINARY(cls, "or", bitwise_or)
  KILN_PY_BINARY(cls, "xor", bitwise_xor)
  KILN_PY_COMPARE(cls, "eq", equal)
  KILN_PY_COMPARE(cls, "ne", not_equal)
  KILN_PY_COMPARE(cls, "lt", less)
  KILN_PY_COMPARE(cls, "le", less_equal)
  KILN_PY_COMPARE(cls, "gt", greater)
  KILN_PY_COMPARE(cls, "ge", greater_equal)
  bind_array_methods(cls);
  bind_autograd_methods(cls);
  bind_pinned_methods(cls);
}

}  // namespace kiln::python
